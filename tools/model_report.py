"""The per-model table for real exported models: ops, dispatches and (with ``--tune``)
predicted time and tune wall time.

For each ``.onnx`` file (default: every fixture in ``tests/data``): the import time, the
primitive ops, the dispatches of the aggressive and conservative fusion plans and of the
unfused graph; with ``--tune N``, ``compiler.tuning.search.tune`` with a budget of N candidates
per dispatch on gfx942 (every plan, the unfused baseline, and the check of the chosen
kernels against numpy), its wall time, and the predicted times fused vs unfused. The
tune runs twice on one tuning store: the first run simulates each distinct dispatch once
(identical ones share a fingerprint), the second finds every score cached, so its wall
time is what a re-run costs (fusion, lookups, the check). Times in us are simulated
predictions; wall times depend on the machine's load::

    python tools/model_report.py                      # counts only, seconds
    python tools/model_report.py --tune 4 tests/data/bert_2layer.onnx
    python tools/model_report.py --tune 4 --markdown /tmp/models_bert_base.onnx
    python tools/model_report.py --json

The full-size models (BERT-base, GPT-2 small, ViT-B/16, ResNet-50; hundreds of MB, not
committed) are written by ``tools/export_models.py --full DIR``.
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

from compiler.cli.commands.common import arch_value  # noqa: E402  (needs the path above)
from gpusim.hw import DEFAULT_ARCH, Arch  # noqa: E402


def report(path: str, budget: int | None, arch: Arch, cache: str | None = None) -> dict:
    from compiler.ir.graph import GraphError
    from compiler.ir.models import ModelError
    from compiler.fusion import fuse
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
        from compiler.tuning import tunedb
        from compiler.tuning.search import tune
        # a tuning database file when given (verify/export --cache reuse it), else memory
        store = tunedb.open_store(cache, False) if cache else tunedb.MemoryStore()
        walls = []
        try:
            for _ in range(2):   # first: every distinct dispatch simulated; second: cached
                t0 = time.perf_counter()
                res = tune(g, arch, budget=budget, seed=0, baseline=True, verify=True,
                           store=store)
                walls.append(time.perf_counter() - t0)
        except GraphError as exc:
            row["tune_error"] = str(exc).split(" (")[0]
            return row
        finally:
            if hasattr(store, "close"):
                store.close()
        row["tune_wall_s"] = round(walls[0], 1)
        row["tune_cached_wall_s"] = round(walls[1], 1)
        row["tuned_plan"] = res.mode
        row["tuned_dispatches"] = len(res.dispatches)
        row["distinct_dispatches"] = len({tunedb.dispatch_fingerprint(g, d.dispatch)
                                          for d in res.dispatches})
        row["predicted_us"] = round(res.total_time_us, 2)
        row["roofline_us"] = round(res.roofline_time_us, 2)
        # the dispatches furthest over their own roofline (where the time goes)
        worst = sorted(res.dispatches, key=lambda d: -d.best.time_us / max(d.roofline_us, 1e-9))
        row["worst_vs_roofline"] = [
            {"name": d.name, "time_us": round(d.best.time_us, 2),
             "x_roofline": round(d.best.time_us / max(d.roofline_us, 1e-9), 1)}
            for d in worst[:3]]
        row["unfused_predicted_us"] = round(res.unfused_time_us, 2)
        row["kernels_match_numpy"] = not res.mismatches
    return row


def markdown(rows: list, arch: str) -> str:
    """docs/models.md's table: model, ops, dispatches aggressive / conservative / unfused,
    predicted time fused vs unfused, tune wall time first and cached."""
    out = ["| model | ops | dispatches aggressive / conservative / unfused | predicted "
           f"fused vs unfused (us, gpusim {arch}) | tuned plan: dispatches (distinct) | tune wall "
           "first / cached |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | import error: {r['error']} | | | | |")
            continue
        d = r["dispatches"]
        line = f"| {r['model']} | {r['ops']} | {d['aggressive']} / {d['conservative']} / " \
               f"{d['unfused']} |"
        if "tune_error" in r:
            line += f" tune: {r['tune_error']} | | |"
        elif "predicted_us" in r:
            plan = "" if r["tuned_plan"] == "aggressive" else f" ({r['tuned_plan']} chosen)"
            check = "" if r["kernels_match_numpy"] else "; a kernel DIFFERS from numpy"
            line += (f" {r['predicted_us']:.1f} vs {r['unfused_predicted_us']:.1f}{plan}"
                     f"{check} | {r['tuned_dispatches']} ({r['distinct_dispatches']}) | "
                     f"{_dur(r['tune_wall_s'])} / {_dur(r['tune_cached_wall_s'])} |")
        else:
            line += " | | |"
        out.append(line)
    return "\n".join(out)


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=".onnx files (default: tests/data/*.onnx)")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="also tune with N candidates per dispatch")
    ap.add_argument("--arch", type=arch_value, default=DEFAULT_ARCH)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print docs/models.md's table")
    ap.add_argument("--cache", metavar="PATH",
                    help="tune on this tuning database file (else in memory); pass a fresh "
                         "path for a first-run wall time")
    args = ap.parse_args(argv)
    files = args.files or sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.onnx")))
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f"model_report: no such file: {', '.join(missing)} (pass .onnx paths; "
              f"tools/export_models.py writes them)", file=sys.stderr)
        return 2
    rows = []
    for f in files:
        rows.append(report(f, args.tune, args.arch, args.cache))
        if args.json or args.markdown:   # long runs: one line per model as it finishes
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if args.markdown:
        print(markdown(rows, args.arch.name))
        return 0
    head = f"{'model':20s} {'import':>7s} {'ops':>5s} {'aggr':>5s} {'cons':>5s} {'unfused':>7s}"
    if args.tune:
        head += f" {'tune wall':>9s} {'cached':>7s} {'fused us':>9s} {'unfused us':>10s}  kernels"
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
                line += (f" {r['tune_wall_s']:8.1f}s {r['tune_cached_wall_s']:6.1f}s "
                         f"{r['predicted_us']:9.2f} "
                         f"{r['unfused_predicted_us']:10.2f}  "
                         f"{'match numpy' if r['kernels_match_numpy'] else 'MISMATCH'}"
                         f" ({r['tuned_plan']})")
        print(line)
    print("(times in us are gpusim predictions for", args.arch.name + "; wall times depend on load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
