"""The per-model table for real exported models: ops, dispatches and (with ``--tune``)
predicted time and tune wall time.

For each ``.onnx`` file (default: every fixture in ``tests/data``): the import time, the
primitive ops, the dispatches of the aggressive and conservative fusion plans and of the
unfused graph; with ``--tune N``, ``compiler.search.tune`` with a budget of N candidates
per dispatch on gfx942 (both plans, the unfused baseline, and the check of the chosen
kernels against numpy), its wall time, and the predicted times fused vs unfused. Times
are simulated predictions; wall times depend on the machine's load::

    python tools/model_report.py                      # counts only, seconds
    python tools/model_report.py --tune 4 tests/data/bert_2layer.onnx
    python tools/model_report.py --json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from compiler.commands.common import arch_value  # noqa: E402  (needs the path above)
from gpusim.hw import DEFAULT_ARCH, Arch  # noqa: E402


def report(path: str, budget: int | None, arch: Arch) -> dict:
    from compiler.graph import GraphError
    from compiler.models import ModelError
    from compiler.passes import fuse
    from compiler.frontends.onnx import load_onnx
    row = {"model": os.path.basename(path)[:-len(".onnx")]}
    t0 = time.perf_counter()
    try:
        g = load_onnx(path)
    except (GraphError, ModelError) as exc:
        row["error"] = str(exc)
        return row
    row["import_s"] = round(time.perf_counter() - t0, 3)
    row["ops"] = sum(1 for op in g.ops if op.kind not in ("input", "constant"))
    aggressive, conservative = fuse(g, True), fuse(g, False)
    row["dispatches"] = {"aggressive": aggressive.num_dispatches,
                         "conservative": conservative.num_dispatches,
                         "unfused": aggressive.num_dispatches_unfused}
    if budget:
        from compiler.search import tune
        t0 = time.perf_counter()
        try:
            res = tune(g, arch, budget=budget, seed=0, baseline=True, verify=True)
        except GraphError as exc:
            row["tune_error"] = str(exc).split(" (")[0]
        else:
            row["tune_wall_s"] = round(time.perf_counter() - t0, 1)
            row["tuned_plan"] = res.mode
            row["predicted_us"] = round(res.total_time_us, 2)
            row["unfused_predicted_us"] = round(res.unfused_time_us, 2)
            row["kernels_match_numpy"] = not res.mismatches
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=".onnx files (default: tests/data/*.onnx)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="also tune with N candidates per dispatch")
    ap.add_argument("--arch", type=arch_value, default=DEFAULT_ARCH)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = args.files or sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.onnx")))
    rows = [report(f, args.tune, args.arch) for f in files]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = f"{'model':20s} {'import':>7s} {'ops':>5s} {'aggr':>5s} {'cons':>5s} {'unfused':>7s}"
    if args.tune:
        head += f" {'tune wall':>9s} {'fused us':>9s} {'unfused us':>10s}  kernels"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['model']:20s} import error: {r['error']}")
            continue
        d = r["dispatches"]
        line = (f"{r['model']:20s} {r['import_s']:6.2f}s {r['ops']:5d} {d['aggressive']:5d} "
                f"{d['conservative']:5d} {d['unfused']:7d}")
        if args.tune:
            if "tune_error" in r:
                line += f"  tune: {r['tune_error']}"
            else:
                line += (f" {r['tune_wall_s']:8.1f}s {r['predicted_us']:9.2f} "
                         f"{r['unfused_predicted_us']:10.2f}  "
                         f"{'match numpy' if r['kernels_match_numpy'] else 'MISMATCH'}"
                         f" ({r['tuned_plan']})")
        print(line)
    print("(times in us are gpusim predictions for", args.arch.name + "; wall times depend on load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
