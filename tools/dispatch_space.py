"""One dispatch of a model against its whole schedule space: what the search picks at the
default budget, the best point of the space (every legal point scored), and both as
multiples of the dispatch's roofline (``compiler.tuning.search.roofline_us``, one launch
included). Times are gpusim predictions on the arch's model, never measurements.

The plan is the search's aggressive one (sibling GEMMs merged, ``horizontal_gemms``), or
the conservative one with ``--conservative`` (where a refused merge's ``_partN``
dispatches come from); dispatches are picked by a regular expression on their names::

    python tools/dispatch_space.py /tmp/wf-models/full/vit_b16.onnx 'd4_.*'
    python tools/dispatch_space.py /tmp/wf-models/full/gpt2_small.onnx 'd145_.*' --conservative
    python tools/dispatch_space.py encoder_layer 'd2_.*' --top 5 --no-space

Issue 27, item 7 (docs/kernels.md, "Transformers' worst dispatches"): the tables there
were made with it on the full exports of ``tools/export_models.py --full``.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a built-in model spec or an .onnx path")
    ap.add_argument("dispatch", help="regular expression matching whole dispatch names")
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--conservative", action="store_true",
                    help="the conservative plan (IREE's default fusion) instead")
    ap.add_argument("--top", type=int, default=3, help="best points of the space to print")
    ap.add_argument("--no-space", action="store_true",
                    help="only the search's pick, not every point")
    args = ap.parse_args(argv)

    from compiler.fusion import fuse
    from compiler.ir.models import load_model
    from compiler.lower import dispatch_kind
    from compiler.schedule import schedule_space
    from compiler.tuning import search
    from gpusim.hw import get_arch
    arch = get_arch(args.arch)
    try:
        graph = load_model(args.model)
        pattern = re.compile(args.dispatch)
    except Exception as e:  # noqa: BLE001  (bad input: one line, non-zero exit)
        print(f"dispatch_space: {e}", file=sys.stderr)
        return 2
    plan = fuse(graph, aggressive=not args.conservative,
                horizontal_gemms=not args.conservative)
    graph = plan.graph
    chosen = [d for d in plan.dispatches if pattern.fullmatch(d.name)]
    if not chosen:
        print(f"dispatch_space: no dispatch matches {args.dispatch!r} "
              f"({len(plan.dispatches)} dispatches, e.g. {plan.dispatches[0].name})",
              file=sys.stderr)
        return 2
    for d in chosen:
        legal, _ = search.legal_candidates(schedule_space(graph, d, arch), {}, d.name)
        roof = search.roofline_us(search.dispatch_bytes(graph, d),
                                  search.dispatch_flops(graph, d), arch)
        t0 = time.perf_counter()
        picked = search.tune_dispatches(graph, [d], arch, budget=search.DEFAULT, seed=0)[0].best
        wall = time.perf_counter() - t0
        print(f"{d.name} ({dispatch_kind(graph, d)}): {len(legal)} legal points, default "
              f"budget {search.default_budget(len(legal))}, roofline {roof:.2f} us")
        print(f"  picked      {picked.time_us:8.2f} us {picked.time_us / roof:5.2f}x  "
              f"({wall:.0f} s) {picked.knobs}")
        if args.no_space:
            continue
        rows = []
        for c in legal:
            s = search.score(graph, d, c.knobs, arch)
            if s.ok:
                rows.append((s.time_us, c.knobs))
        rows.sort(key=lambda r: r[0])
        for i, (t, k) in enumerate(rows[:args.top]):
            print(f"  {'space best' if i == 0 else '':11s} {t:8.2f} us {t / roof:5.2f}x  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
