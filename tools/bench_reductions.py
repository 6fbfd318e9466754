"""Benchmark of issue 27's reductions over strided axes, horizontal GEMMs and launches:
simulated predictions of ``tune`` (gpusim, not measurements), printed as tables.

    python tools/bench_reductions.py reductions     # strided rows: before / after
    python tools/bench_reductions.py models [SPEC ...] [--budget N]
    python tools/bench_reductions.py two-stage      # few long rows: one kernel / two
    python tools/bench_reductions.py two-stage-columns  # the same for strided rows

``reductions`` tunes, for each case, the dispatch as it was lowered before
``mapping=columns`` existed (pinned to the serial fallback, ``--fix lowering=generic``:
a thread per row, each reducing its strided row alone) and as the search now chooses,
and prints each dispatch's time, roofline and x-roofline, and the ratio. ``models`` tunes
each model spec with a stream launch per dispatch and with one HIP graph launch, and
prints the totals, the roofline, the dispatch count and the plan the search chose (the
aggressive plan now holds the wide GEMMs of ``compiler.fusion.horizontal`` and passes the
fusion guard). ``two-stage`` compares, on few-long-row cases, the search pinned to one kernel
(``row_splits=1``: a workgroup per row) with the best of that and the two-stage
candidates (``row_splits`` > 1), and shows what the free search picks at the budget;
``two-stage-columns`` does the same on strided rows (``mapping=columns``: channel norms
of NCHW, global pools of NHWC) whose blocks of rows do not fill the GPU. Every number is deterministic (the seeded search), so one run is the
median of any number of runs.
"""
from __future__ import annotations

import argparse
import sys
import time

from compiler.ir import builders
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.tuning.search import tune

ARCH = "gfx942"


def layernorm_nchw(n=1, c=96, h=56, w=56) -> Graph:
    """ConvNeXt's channels-first LayerNorm: a norm over C of NCHW (strided rows)."""
    g = Graph("layernorm_nchw")
    x = g.input("x", (n, c, h, w))
    g.output(builders.layer_norm(g, x, g.input("gamma", (1, c, 1, 1)), g.input("beta", (1, c, 1, 1)),
                          axis=1))
    return g


def pool_nchw(n=1, c=2048, h=7, w=7) -> Graph:
    """ResNet-50's global average pool, NCHW: a mean over H and W (contiguous rows of 49)."""
    g = Graph("global_pool_nchw")
    g.output(g.reduce_mean(g.input("x", (n, c, h, w)), (2, 3), keepdims=True))
    return g


def pool_nhwc(n=1, h=7, w=7, c=2048) -> Graph:
    """The same pool on NHWC: a mean over H and W whose rows (channels) are strided."""
    g = Graph("global_pool_nhwc")
    g.output(g.reduce_mean(g.input("x", (n, h, w, c)), (1, 2), keepdims=True))
    return g


def softmax_channels(n=1, c=64, h=32, w=32) -> Graph:
    """A softmax over the channels of NCHW (strided rows)."""
    g = Graph("softmax_channels")
    g.output(builders.softmax(g, g.input("x", (n, c, h, w)), axis=1))
    return g


CASES = (layernorm_nchw, pool_nchw, pool_nhwc, softmax_channels)


def pool_large(n=1, c=64, h=112, w=112) -> Graph:
    """A global average pool of an early, wide feature map: 64 rows of 12544."""
    g = Graph("global_pool_64x112x112")
    g.output(g.reduce_mean(g.input("x", (n, c, h, w)), (2, 3), keepdims=True))
    return g


#: few long rows: one workgroup per row leaves most CUs idle
TWO_STAGE_CASES = (lambda: load_model("layernorm:rows=8,cols=65536"),
                   lambda: load_model("softmax:rows=16,cols=32000"),
                   lambda: load_model("rmsnorm:rows=4,cols=16384"),
                   pool_large)


#: strided rows whose column blocks do not fill the GPU: ConvNeXt-T's channel LayerNorms
#: (NCHW, a norm over C) at its four stages, and the global average pools of ResNet-50
#: and ConvNeXt-T on NHWC (a mean over H and W, rows strided by the channels)
COLUMN_TWO_STAGE_CASES = (lambda: layernorm_nchw(c=96, h=56, w=56),
                          lambda: layernorm_nchw(c=192, h=28, w=28),
                          lambda: layernorm_nchw(c=384, h=14, w=14),
                          lambda: layernorm_nchw(c=768, h=7, w=7),
                          lambda: pool_nhwc(c=2048),
                          lambda: pool_nhwc(c=768))


def two_stage(budget, cases=TWO_STAGE_CASES) -> None:
    """Per row dispatch: "one kernel" is the search pinned to ``row_splits=1``; "two-stage"
    the best of that and of up to ``budget`` two-stage candidates of the same space (the
    always-tried one first, then a seeded sample), scored as the search scores them (as
    tools/fill_bench.py measures the splits of contractions); "free search" is ``tune``
    with nothing pinned, at the same budget."""
    import random

    from compiler.fusion import fuse
    from compiler.schedule import schedule_space
    from compiler.tuning.search import (dispatch_bytes, dispatch_flops, roofline_us, score,
                                        tune_dispatches)
    from gpusim.hw import get_arch
    arch = get_arch(ARCH)
    print(f"few long rows on {arch.name}, budget {budget} (simulated us; x roof = time / "
          f"(bytes at the achievable bandwidth + one launch))")
    print(f"{'case':<32} {'roof':>6} {'one kernel':>10} {'x':>5} {'two-stage':>9} {'x':>5} "
          f"{'gain':>6} {'free search':>11}  two-stage chosen")
    for case in cases:
        g = case()
        shape = "x".join(str(n) for n in g.op(g.inputs[0]).type.shape)
        for d in fuse(g).dispatches:
            space = schedule_space(g, d, arch)
            if not any(c.knobs.get("row_splits", 1) > 1 for c in space):
                continue
            roof = roofline_us(dispatch_bytes(g, d), dispatch_flops(g, d), arch)
            before = tune_dispatches(g, [d], arch, budget=budget, seed=0,
                                     fixed={"row_splits": 1})[0].best
            free = tune_dispatches(g, [d], arch, budget=budget, seed=0)[0].best
            cands = [c for c in space if c.legal and c.knobs.get("row_splits", 1) > 1]
            first = [c for c in cands if c.always]
            rest = [c for c in cands if not c.always]
            random.Random(0).shuffle(rest)
            best, chosen = before, "one kernel"
            for c in (first + rest)[:budget]:
                sc = score(g, d, c.knobs, arch)
                if sc.ok and sc.time_us < best.time_us:
                    best = sc
                    chosen = " ".join(f"{k}={c.knobs[k]}" for k in
                                      ("mapping", "workgroup", "vector", "row_lanes",
                                       "passes", "row_splits") if k in c.knobs)
            name = f"{g.name} {shape}"
            print(f"{name[:32]:<32} {roof:>6.2f} {before.time_us:>10.2f} "
                  f"{before.time_us / roof:>5.2f} {best.time_us:>9.2f} {best.time_us / roof:>5.2f} "
                  f"{before.time_us / best.time_us:>5.2f}x {free.time_us:>11.2f}  {chosen}")
            sys.stdout.flush()


def _tuned(graph, budget, fixed=None, launch="stream"):
    return tune(graph, ARCH, budget=budget, fixed=fixed or {}, baseline=False, launch=launch)


def reductions(budget) -> None:
    print(f"strided reductions on {ARCH} (simulated us; x roofline = time / (bytes at the "
          f"achievable bandwidth + one launch))")
    print("(kernel x roof: the same without the launch on either side)")
    print(f"{'case':<20} {'before us':>10} {'x roof':>7} {'kernel x':>9} {'after us':>9} "
          f"{'x roof':>7} {'kernel x':>9} {'speedup':>8}  after: mapping")
    for case in CASES:
        g = case()
        before = _tuned(g, budget, {"lowering": "generic"})
        after = _tuned(g, budget)
        b, a = before.total_time_us, after.total_time_us
        roof = after.roofline_time_us
        lo = after.arch.launch_overhead_us
        kroof = roof - lo
        kb, ka = b - len(before.dispatches) * lo, a - len(after.dispatches) * lo
        knobs = "; ".join(" ".join(f"{k}={v}" for k, v in d.best.knobs.items()
                                   if k in ("mapping", "workgroup", "row_lanes", "lowering"))
                          for d in after.dispatches)
        print(f"{g.name:<20} {b:>10.2f} {b / roof:>7.2f} {kb / kroof:>9.1f} {a:>9.2f} "
              f"{a / roof:>7.2f} {ka / kroof:>9.1f} {b / a:>7.2f}x  {knobs} "
              f"({len(before.dispatches)} -> "
              f"{len(after.dispatches)} dispatches, {after.mode} plan)")
        sys.stdout.flush()


def models(specs, budget) -> None:
    print(f"models on {ARCH}, budget {budget} (simulated us)")
    print(f"{'model':<34} {'launch':<7} {'total us':>9} {'roofline':>9} {'x roof':>7} "
          f"{'disp':>5}  plan (predicted totals)")
    for spec in specs:
        g = load_model(spec)
        for launch in ("stream", "graph"):
            t0 = time.perf_counter()
            r = _tuned(g, budget, launch=launch)
            worst = max(r.dispatches, key=lambda d: d.best.time_us / d.roofline_us)
            print(f"{spec:<34} {launch:<7} {r.total_time_us:>9.2f} {r.roofline_time_us:>9.2f} "
                  f"{r.total_time_us / r.roofline_time_us:>7.2f} {len(r.dispatches):>5}  "
                  f"{r.mode}: " + ", ".join(f"{m} {v:.1f}" for m, v in
                                           r.plan_choice["predicted_us"].items())
                  + f"; worst dispatch {worst.name} x{worst.best.time_us / worst.roofline_us:.1f}"
                  f" [{time.perf_counter() - t0:.0f} s]")
            sys.stdout.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("reductions", "models", "two-stage", "two-stage-columns"))
    p.add_argument("specs", nargs="*", default=["encoder_layer"])
    p.add_argument("--budget", type=int, default=4)
    a = p.parse_args(argv)
    if a.what == "reductions":
        reductions(a.budget)
    elif a.what == "two-stage":
        two_stage(a.budget)
    elif a.what == "two-stage-columns":
        two_stage(a.budget, COLUMN_TWO_STAGE_CASES)
    else:
        models(a.specs, a.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
