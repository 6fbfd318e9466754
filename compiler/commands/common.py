"""Options and output helpers shared by every wavefuse command.

A command that prints results takes ``--json`` and then writes exactly one JSON object on
stdout; otherwise it draws with a rich Console (which honours NO_COLOR and the terminal
width, and falls back to plain text when stdout is not a terminal).
"""
from __future__ import annotations

import json
import sys

import numpy as np
from rich.console import Console

from ..graph import Graph
from ..models import load_model

MODEL_HELP = ("a built-in model, optionally with parameters (NAME or NAME:key=value,...; "
              "see `wavefuse models`), or a path to an .onnx file")


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one machine-readable JSON object on stdout")


def add_model(parser, default: str | None = None) -> None:
    if default is None:
        parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    else:
        parser.add_argument("model", metavar="MODEL", nargs="?", default=default,
                            help=f"{MODEL_HELP} (default: {default})")


def add_seed(parser) -> None:
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random inputs (default: 0)")


def load(args) -> Graph:
    """The graph named by ``args.model`` (built-in spec or .onnx path)."""
    return load_model(args.model)


def console() -> Console:
    return Console(highlight=False)


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    return str(x)


def emit_json(obj: dict) -> None:
    """Writes one JSON object (numpy values converted) and a newline to stdout."""
    sys.stdout.write(json.dumps(obj, default=_jsonable, allow_nan=True) + "\n")
    sys.stdout.flush()


def op_attrs(op) -> dict:
    """An op's attributes for display: constants show a summary instead of their data."""
    out = {}
    for k, v in op.attrs.items():
        if isinstance(v, np.ndarray):
            out[k] = f"<{v.size} values>" if v.size > 4 else v.reshape(-1).tolist()
        else:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


def graph_dict(graph: Graph) -> dict:
    """A graph as plain data, ops in topological order: what `show --json` prints."""
    ops = []
    for op in graph.ops:
        t = op.type
        ops.append({"name": op.name, "op": op.kind, "inputs": list(op.inputs),
                    "shape": list(t.shape), "dtype": t.dtype, "layout": list(t.order),
                    "strides": list(t.strides), "attrs": op_attrs(op)})
    compute = [o for o in ops if o["op"] not in ("input", "constant")]
    return {"name": graph.name, "inputs": graph.inputs, "outputs": list(graph.outputs),
            "primitive_ops": len(compute), "ops": ops}
