"""The contraction dispatches of one spatial stage of a CNN (ResNet-50's 7x7 stage by
default: every conv whose output is H x W = 7 x 7), each tuned alone: predicted time, its
multiple of the dispatch's roofline, and the chosen split (simulated predictions, gpusim's
model of the arch, not measurements). Also the best ``split_reduce=last_wg`` point among
the split points the search samples, scored as the search scores one, when the space has
that knob::

    python tools/stage_bench.py --onnx /tmp/wf-models/full/resnet50.onnx
    python tools/stage_bench.py --onnx M.onnx --hw 14 --budget 16

The roofline is the search's (``compiler.tuning.search.roofline_us``: max(bytes across
the dispatch's boundary / achievable bandwidth, flops / FP32 vector peak) plus one launch).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpusim.hw import get_arch  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--onnx", required=True, help="the model (an ONNX file)")
    p.add_argument("--hw", type=int, default=7, help="output height = width of the stage (7)")
    p.add_argument("--budget", type=int, default=8, help="candidates per dispatch (8)")
    p.add_argument("--arch", default="gfx942")
    args = p.parse_args(argv)
    from compiler.frontends.onnx import load_onnx
    from compiler.fusion import fuse
    from compiler.lower import dispatch_kind
    from compiler.schedule import schedule_space
    from compiler.tuning.search import (dispatch_bytes, dispatch_flops, roofline_us, score,
                                        tune_dispatches)
    arch = get_arch(args.arch)
    if not os.path.isfile(args.onnx):
        print(f"stage_bench: no file {args.onnx!r}", file=sys.stderr)
        return 2
    g = load_onnx(args.onnx)
    picked = []
    for d in fuse(g).dispatches:
        if dispatch_kind(g, d) != "contraction":
            continue
        shape = g.op(d.root).type.shape
        if len(shape) == 4 and shape[2] == shape[3] == args.hw:
            picked.append(d)
    print(f"{'dispatch':24} {'roof us':>7} {'best us':>8} {'x':>5} {'last_wg us':>10} "
          f"{'x':>5}  chosen  (simulated predictions, {arch.name}, budget {args.budget}, "
          f"{len(picked)} dispatches with {args.hw}x{args.hw} outputs)")
    for d in picked:
        t0 = time.perf_counter()
        roof = roofline_us(dispatch_bytes(g, d), dispatch_flops(g, d), arch)
        best = tune_dispatches(g, [d], arch, budget=args.budget, seed=0)[0].best
        space = schedule_space(g, d, arch)
        last = [c for c in space if c.legal and not c.opt_in
                and c.knobs.get("split_reduce") == "last_wg"]
        lw = None
        for c in sorted(last, key=lambda c: not c.always)[:args.budget]:
            sc = score(g, d, c.knobs, arch)
            if sc.ok and (lw is None or sc.time_us < lw.time_us):
                lw = sc
        k = best.knobs
        chosen = {n: k[n] for n in ("mma", "split_k", "split_reduce", "stream_k", "prefetch",
                                    "tap_mask") if n in k}
        if "BM" in k:
            chosen["tile"] = f"{k['BM']}x{k['BN']}x{k['BK']} KW{k.get('KW', 1)}"
        lw_txt = f"{lw.time_us:10.2f} {lw.time_us / roof:5.2f}" if lw else f"{'-':>10} {'-':>5}"
        print(f"{d.name[-24:]:24} {roof:7.2f} {best.time_us:8.2f} {best.time_us / roof:5.2f} "
              f"{lw_txt}  {chosen}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
