"""The attention table of docs/performance.md: fused (the attention rule) vs the 3-dispatch plan, tuned.

``python -m compiler.tuning.bench_attention [--arch gfx942] [--seqs 128,1024,4096] [--dims 64,128]
[--heads 12] [--budget 12]`` tunes both plans of ``attention:heads=H,seq=S,dim=D`` and
prints one markdown row per shape: dispatches, predicted time of each (simulated, launch
overhead included; for the fused plan its best FMA and its best MFMA schedule, the faster
being the plan's time), the bytes each moves across dispatch boundaries and the simulated
HBM bytes, and the winner with the counter that explains it. The fused dispatch's space
is pinned to ``q_in=registers, row_stats=registers`` (the scan's winners; the other
values are in the space the search samples) and scored in full, FMA and MFMA points
alike (or, with ``--fused-budget N``, N sampled points, for sizes where scoring every
point takes too long); the split plan's dispatches get ``--budget`` sampled candidates
each. Every
figure is a gpusim prediction, not a measurement.
"""
from __future__ import annotations

import argparse
import json
import time

from gpusim.hw import ARCHES, DEFAULT_ARCH, Arch, get_arch

from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.tuning.search import attention_decisions, tune_dispatches

PINS = {"q_in": "registers", "row_stats": "registers", "lds_pad": 4}


def row(heads: int, seq: int, dim: int, arch: Arch, budget: int,
        fused_budget: int | None = None) -> dict:
    g = load_model(f"attention:heads={heads},seq={seq},dim={dim}")
    fused, split = fuse(g), fuse(g, attention=False)
    t0 = time.time()
    f = tune_dispatches(g, fused.dispatches, arch, fixed=PINS, budget=fused_budget)
    s = tune_dispatches(g, split.dispatches, arch, budget=budget)
    [dec] = attention_decisions(g, f, s)
    best = {}
    for c in f[0].candidates:   # the fused plan's best point of each micro-kernel
        mma = c.knobs.get("mma", "fma")
        if c.ok and (mma not in best or c.time_us < best[mma].time_us):
            best[mma] = c
    return {"heads": heads, "seq": seq, "dim": dim, "arch": arch.name, **dec.cost,
            **{f"fused_{m}_us": round(c.time_us, 3) for m, c in best.items()},
            **{f"fused_{m}_schedule": c.knobs for m, c in best.items()},
            "fused_plan_bytes": fused.bytes_fused, "split_plan_bytes": split.bytes_fused,
            "fused_schedule": f[0].best.knobs, "fused_wins": dec.fused,
            "reason": dec.reason, "seconds": round(time.time() - t0, 1),
            "fused_points": "all" if fused_budget is None else f"{fused_budget} sampled"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=sorted(ARCHES), default=DEFAULT_ARCH)
    p.add_argument("--seqs", default="128,1024,4096")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--fused-budget", type=int, default=None,
                   help="sample this many points of the fused space (default: all)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not a.json:
        print("| seq | head dim | dispatches fused / split | fused us (FMA / MFMA) | split us | "
              "boundary MiB fused / split | HBM MiB fused / split | winner |")
        print("|---|---|---|---|---|---|---|---|")
    for dim in (int(x) for x in a.dims.split(",")):
        for seq in (int(x) for x in a.seqs.split(",")):
            r = row(a.heads, seq, dim, get_arch(a.arch), a.budget, a.fused_budget)
            if a.json:
                print(json.dumps(r), flush=True)
                continue
            mib = 1 << 20
            mf = f"{r['fused_mfma_us']:.1f}" if "fused_mfma_us" in r else "-"
            print(f"| {seq} | {dim} | 1 / {r['split_dispatches']} | "
                  f"{r['fused_fma_us']:.1f} / {mf} | "
                  f"{r['split_us']:.1f} | {r['fused_plan_bytes'] / mib:.1f} / "
                  f"{r['split_plan_bytes'] / mib:.1f} | {r['fused_hbm_bytes'] / mib:.1f} / "
                  f"{r['split_hbm_bytes'] / mib:.1f} | "
                  f"{'fused' if r['fused_wins'] else 'split'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
