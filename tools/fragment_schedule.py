"""Where hipcc puts a K loop's LDS fragment reads, per target.

For each exported kernel (``.hip``) and each target, compile with hipcc as ``wavefuse
check`` does and print the VGPR count, how many of the loop's ``ds_read`` instructions
come before its first FMA, and the loop's read/FMA order (``R`` one read, ``F5`` five
FMAs). This is the evidence behind ``gpusim.occupancy``'s fragment-cap rule: run it on a
kernel the rule covers to see whether hipcc interleaves the reads with the FMAs on that
target. The loop shown is the basic block inside a loop (hipcc's ``in Loop`` comment)
with the most ``ds_read`` instructions.

    python tools/fragment_schedule.py EXPORT_DIR/d108_..._gemm.hip [--targets gfx90a gfx940]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from codegen_hip.check import compile_to_asm, hipcc_path, parse_asm

_FMA = re.compile(r"v_(pk_)?fma")


def loop_schedule(asm: str) -> tuple[int, int, str] | None:
    """(reads before the first FMA, reads, read/FMA order) of the loop block with the
    most LDS reads in one kernel's assembly, or None when no loop has one."""
    blocks, cur = [], None
    for line in asm.splitlines():
        if re.match(r"^\.LBB\d+_\d+:", line):
            cur = [] if "Loop" in line else None
            if cur is not None:
                blocks.append(cur)
        elif cur is not None:
            cur.append(line.strip())
    blocks = [b for b in blocks if any(x.startswith("ds_read") for x in b)]
    if not blocks:
        return None
    body = max(blocks, key=lambda b: sum(x.startswith("ds_read") for x in b))
    events = ["R" if x.startswith("ds_read") else "F" for x in body
              if x.startswith("ds_read") or _FMA.match(x)]
    up = next((i for i, e in enumerate(events) if e == "F"), len(events))
    order = re.sub(r"F+", lambda m: f"F{len(m.group())}", "".join(events))
    return up, events.count("R"), order


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", type=Path, help="exported .hip files")
    ap.add_argument("--targets", nargs="+", default=["gfx90a", "gfx940"])
    args = ap.parse_args(argv)
    missing = [str(s) for s in args.sources if not s.is_file()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}; pass the .hip files an export "
              f"wrote", file=sys.stderr)
        return 2
    if hipcc_path() is None:
        print("error: hipcc not found on PATH; install the Debian package 'hipcc'",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="wavefuse_fragsched_") as tmp:
        for src in args.sources:
            for target in args.targets:
                out = Path(tmp) / f"{src.stem}.{target}.s"
                r = compile_to_asm(src, target, out)
                if r["rc"] != 0:
                    print(f"error: hipcc failed on {src} for {target}: "
                          f"{r['stderr'].splitlines()[-1] if r['stderr'] else r['rc']}",
                          file=sys.stderr)
                    return 2
                text = out.read_text()
                sched = loop_schedule(text)
                where = (f"{sched[0]:2d}/{sched[1]} reads before the first FMA  {sched[2]}"
                         if sched else "no loop with LDS reads")
                print(f"{src.stem[:56]:56s} {target:7s} {parse_asm(text)['vgprs']:4d} VGPRs  "
                      f"{where}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
