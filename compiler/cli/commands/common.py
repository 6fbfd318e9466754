"""Options and output helpers shared by every wavefuse command.

A command that prints results takes ``--json`` and then writes exactly one JSON object on
stdout; otherwise it draws with a rich Console (which honours NO_COLOR and the terminal
width, and falls back to plain text when stdout is not a terminal).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
from rich.console import Console

from gpusim.hw import ALIASES, ARCHES, Arch

from compiler.ir import limits
from compiler.ir.graph import Graph, GraphError
from compiler.ir.models import load_model
from compiler.schedule import check_pins

MODEL_HELP = ("a built-in model, optionally with parameters (NAME or NAME:key=value,...; "
              "see `wavefuse models`), or a path to an .onnx file")


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one machine-readable JSON object on stdout")


# ------------------------------------------------------------------ values checked at the boundary
# argparse ``type=`` functions: a bad value becomes one "argument --x: ..." line (exit 2)
# before any work, instead of a ValueError deep inside the search.
MAX_SEED = 2**63 - 1
MAX_WORKERS = 256


def _int_in(text: str, what: str, low: int, high: int) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip(), re.ASCII):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give {what}")
    value = int(text)
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{value} is out of range; give {what}")
    return value


def seed_value(text: str) -> int:
    return _int_in(text, f"a seed from 0 to {MAX_SEED}", 0, MAX_SEED)


def count_value(text: str) -> int:
    return _int_in(text, "a count of at least 1", 1, 2**31 - 1)


def budget_value(text: str):
    """``--budget``: N simulations per dispatch, or ``Nx``: N times the default budget of
    each dispatch (``compiler.tuning.search.DefaultTimes``)."""
    if text.strip().lower().endswith("x"):
        from compiler.tuning.search import DefaultTimes
        return DefaultTimes(_int_in(text.strip()[:-1], "Nx, N times the default budget "
                                    "(N a count of at least 1)", 1, 1000))
    return count_value(text)


def workers_value(text: str) -> int:
    return _int_in(text, f"1 to {MAX_WORKERS} processes", 1, MAX_WORKERS)


def dim_value(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` of ``--dim``: a symbolic ONNX dimension pinned to a size >= 1."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. batch=1)")
    return name.strip(), _int_in(value, "a dimension size of at least 1", 1, 2**31 - 1)


def width_value(text: str) -> int:
    return _int_in(text, "a width of at least 20 columns", 20, 10_000)


def index_value(text: str) -> int:
    return _int_in(text, "a statement index of 0 or more", 0, 2**31 - 1)


def cycle_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value == value and 0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a cycle; give a number of 0 or more")
    return value


def arch_value(text: str) -> Arch:
    """The ``Arch`` an ``--arch`` names, by its LLVM target name (what hipcc's
    --offload-arch takes, so an export's build script always names a real target). The
    command resolves it here, once; everything below takes the ``Arch``."""
    name = text.strip()
    if name in ARCHES:
        return ARCHES[name]
    hint = ALIASES.get(name.lower())
    hint = f" ({name} is {hint})" if hint in ARCHES else ""
    raise argparse.ArgumentTypeError(f"unknown arch {text!r}{hint}; known arches: "
                                     f"{', '.join(sorted(ARCHES))}")


def size_value(text: str) -> int:
    try:
        return limits.parse_size(text)
    except limits.ResourceError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


_KNOB = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_KNOB_VALUE = re.compile(r"-?[0-9]+|[A-Za-z_][A-Za-z0-9_.]*", re.ASCII)


def fix_value(text: str) -> tuple[str, object]:
    """``KNOB=VALUE`` -> (knob, int or name); which values a knob has is the search's call."""
    key, eq, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not key or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KNOB=VALUE, e.g. --fix vector=4")
    if not _KNOB.fullmatch(key):
        raise argparse.ArgumentTypeError(f"{text!r}: {key!r} is not a knob name (letters, "
                                         f"digits and _)")
    if not _KNOB_VALUE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a knob value (a whole "
                                         f"number or a name such as before_fusion)")
    return key, int(value) if value[0] in "-0123456789" else value


def fixed_knobs(pairs) -> dict:
    """The --fix pairs as a dict; pinning one knob twice is an error, not "last one wins",
    and so is a knob no dispatch kind declares (``schedule.check_pins``)."""
    out = {}
    for key, value in pairs or ():
        if key in out:
            raise GraphError(f"--fix {key} is given twice ({key}={out[key]} and {key}={value}); "
                             f"pin each knob once")
        out[key] = value
    check_pins(out)
    return out


def add_model(parser, default: str | None = None) -> None:
    if default is None:
        parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    else:
        parser.add_argument("model", metavar="MODEL", nargs="?", default=default,
                            help=f"{MODEL_HELP} (default: {default})")
    parser.add_argument("--max-memory", type=size_value, default=None, metavar="SIZE",
                        help="refuse models whose estimated working set passes SIZE (e.g. "
                             f"16G; default ${limits.ENV_VAR} or "
                             f"{limits.DEFAULT_MAX_MEMORY >> 30}G)")
    parser.add_argument("--dim", type=dim_value, action="append", default=[],
                        metavar="NAME=VALUE",
                        help="pin a symbolic dimension of an .onnx model's inputs (repeatable)")


def add_seed(parser) -> None:
    parser.add_argument("--seed", type=seed_value, default=0,
                        help="seed of the random inputs (default: 0)")


def load(args, compute: bool = True, whole: bool = True) -> Graph:
    """The graph named by ``args.model`` (built-in spec or .onnx path).

    ``compute``: the command evaluates or simulates the model, so a model with nothing to
    compute is refused, and so is one whose estimated memory passes ``--max-memory``; both
    before anything is allocated (built-in weights are checked before they are drawn).
    ``whole``: the command computes the whole numpy reference (``tune`` without
    ``--check-all`` computes the sampled rows only; ``limits.working_set_bytes``).
    """
    limit = limits.max_memory(getattr(args, "max_memory", None))
    dims = {}
    for name, value in getattr(args, "dim", None) or []:
        if name in dims and dims[name] != value:
            raise GraphError(f"--dim {name} is given twice ({name}={dims[name]} and "
                             f"{name}={value}); pin each dimension once")
        dims[name] = value
    graph = load_model(args.model, max_memory=limit, dims=dims)
    if compute:
        limits.check_graph(graph, limit, args.model, whole)
        if not any(op.kind not in ("input", "constant") for op in graph.ops):
            raise GraphError(f"{args.model}: nothing to compute, the model has no operations "
                             f"(its outputs are its inputs or constants)")
    return graph


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


def writable_file(path: str, option: str, example: str) -> Path:
    """The file an output option names, checked writable before any tuning starts (fail
    fast, write nothing): a file name, in a folder that exists, that this user may write."""
    p = Path(path)
    if not path.strip() or p.is_dir() or path.endswith(("/", os.sep)):
        raise GraphError(f"{option} {path!r}: give a file name, e.g. {option} {example}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise GraphError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise GraphError(f"{option} {path}: not writable")
    return p
