"""`wavefuse demo`: the project's story on a built-in default, told step by step.

For now it shows the layer-norm graph as primitive ops: the 3-4 dispatches an unfused
compiler would launch. Later stages append steps (fusion plan, schedules, simulation,
HIP) to ``STEPS``; each step gets the shared state dict and returns its JSON part.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from ..models import load_model
from . import common
from .show import render_graph

DEFAULT_MODEL = "layernorm"


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


STEPS: list[tuple[str, Callable]] = [("graph", step_graph)]


def run(args) -> int:
    state = {"model": args.model, "graph": load_model(args.model)}
    con = None if args.json else common.console()
    result = {"model": args.model}
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
    common.add_json(p)
    p.set_defaults(func=run)
