"""`wavefuse demo`: the project's story on a built-in default, told step by step.

The layer-norm graph as primitive ops, its fusion from one dispatch per op to one
dispatch, then the simulator-driven tuning of the fused and unfused plans on gfx942 with
the gain split into launches and kernel time. Each step gets the shared state dict and
returns its JSON part; later steps (views) read what earlier ones left in the state.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import gpusim
from codegen_hip import emit_kernel
from gpusim.hw import DEFAULT_ARCH, get_arch
from gpusim.program import kernels_of

from compiler.fusion import fuse
from compiler.fusion.plan import render_plan
from compiler.tuning.search import tune
from compiler.cli.views import (candidates_data, candidates_view, source_view, timeline_data, timeline_view)
from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options, store_of
from compiler.cli.commands.show import render_graph
from compiler.cli.commands.tune import render_tune

DEFAULT_MODEL = "layernorm:rows=4096,cols=1024"


def step_graph(state: dict, con) -> dict:
    """The graph as written: primitives only, no "layernorm" node to pattern-match."""
    graph = state["graph"]
    data = common.graph_dict(graph)
    kinds = Counter(op["op"] for op in data["ops"] if op["op"] not in ("input", "constant"))
    reductions = sum(n for k, n in kinds.items() if k.startswith("reduce_"))
    if con is not None:
        render_graph(graph, con)
        con.print(f"{state['model']} is {data['primitive_ops']} primitive ops "
                  f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
                  f"its {reductions} reductions each need every element of a row, which is "
                  f"why an unfused compiler splits it into several dispatches.")
    return {"primitive_ops": data["primitive_ops"], "op_counts": dict(kinds),
            "reductions": reductions, "graph": data}


def step_fusion(state: dict, con) -> dict:
    """Unfused: one dispatch per primitive op. Fused: the three fusion steps of IREE's
    layer-norm study bring it to one dispatch that reads the input once."""
    graph = state["graph"]
    plans = {m: fuse(graph, aggressive=(m == "aggressive"))
             for m in ("aggressive", "conservative")}
    state["plans"] = plans
    agg = plans["aggressive"]
    if con is not None:
        render_plan(agg, con)
        con.print(f"unfused: {agg.num_dispatches_unfused} dispatches moving "
                  f"{agg.bytes_unfused:,} B; conservative fusion: "
                  f"{plans['conservative'].num_dispatches} dispatches, "
                  f"{plans['conservative'].bytes_fused:,} B; aggressive fusion: "
                  f"{agg.num_dispatches} dispatch(es), {agg.bytes_fused:,} B "
                  f"({agg.bytes_unfused / max(agg.bytes_fused, 1):.1f}x less traffic).")
    return {m: {"num_dispatches": p.num_dispatches, "bytes_fused": p.bytes_fused,
                "num_dispatches_unfused": p.num_dispatches_unfused,
                "bytes_unfused": p.bytes_unfused} for m, p in plans.items()}


def step_tune(state: dict, con) -> dict:
    """Both plans and the unfused baseline tuned on gfx942; times are simulated."""
    result = tune(state["graph"], DEMO_ARCH, budget=DEMO_BUDGET, seed=0,
                  store=state.get("store"))
    state["tune"] = result
    if con is not None:
        render_tune(result, con)
    return result.to_json()


def step_candidates(state: dict, con) -> dict:
    """Why this schedule: the scored candidates of the fused dispatch, fastest first."""
    d = state["tune"].dispatches[0]
    if con is not None:
        con.print(candidates_view(d, limit=10))
    data = candidates_data(d)
    return {"dispatch": d.name, "simulated": len(data.rows), "illegal": len(d.illegal),
            "best": d.best.knobs, "roofline_us": data.roofline_us}


def step_timeline(state: dict, con) -> dict:
    """What the winner's waves do over simulated cycles on one CU."""
    d = state["tune"].dispatches[0]
    # a split dispatch (several kernels): its first kernel, where the K loop runs
    res = gpusim.simulate(kernels_of(d.kernel)[0], DEMO_ARCH, functional=False, trace=True)
    state["winner_sim"] = res
    if con is not None:
        con.print(timeline_view(res, max_rows=16))
    data = timeline_data(res)
    return {"cycles": res.cycles, "method": res.method, "waves_shown": len(data.rows),
            "trace_events": data.events}


def step_source(state: dict, con) -> dict:
    """The winner as HIP, with the simulator's per-line counters in the margin."""
    d = state["tune"].dispatches[0]
    k = kernels_of(d.kernel)[0]  # a split dispatch: the kernel the timeline showed
    if con is not None:
        con.print(source_view(k, state.get("winner_sim"), DEMO_ARCH))
        con.print(f"export it: wavefuse export {state['model']} -o out/ ; then "
                  f"wavefuse check out/ (hipcc for gfx90a and gfx940)")
    return {"kernel": k.name, "hip_lines": emit_kernel(k, DEMO_ARCH).count("\n")}


DEMO_ARCH = get_arch(DEFAULT_ARCH)  # the demo command's arch, resolved once
DEMO_BUDGET = 24

STEPS: list[tuple[str, Callable]] = [("graph", step_graph), ("fusion", step_fusion),
                                     ("tune", step_tune), ("candidates", step_candidates),
                                     ("timeline", step_timeline), ("source", step_source)]


def run(args) -> int:
    state = {"model": args.model, "graph": common.load(args)}
    con = None if args.json else common.console()
    result = {"model": args.model}
    with store_of(args) as state["store"]:
        for name, step in STEPS:
            if con is not None:
                con.rule(f"[bold]{name}")
            result[name] = step(state, con)
    if args.json:
        common.emit_json(result)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="the end-to-end story on a built-in model")
    common.add_model(p, default=DEFAULT_MODEL)
    add_cache_options(p)
    common.add_json(p)
    p.set_defaults(func=run)
