"""Integer value ranges: the interval a graph value's elements lie in, when it is known.

Used to decide whether an integer GEMM may use the int8 matrix cores: an
``v_mfma_i32_*_i8`` reads one signed byte per operand element, so each operand must lie in
[-128, 127] (a uint8 tensor less a constant zero point of 128 does; one less a zero
point of 0 does not). The rules are interval arithmetic over the ops the quantization
importer (``compiler.frontends.onnx_quant``) writes: graph inputs with a recorded range
(``graph.meta["int_ranges"]``: uint8 [0, 255], int8 [-128, 127]), constants (their min
and max), add/sub/neg, min/max/clip against a range, mul by a constant, round and casts
(monotone, so ends map to ends), views and transposes (the same elements). Anything else
is unknown (an infinite end): the caller then keeps the general path.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.ir.graph import Graph

#: ops whose result holds only (some of) the input's elements, unchanged
_SAME_ELEMENTS = {"reshape", "transpose", "squeeze", "unsqueeze", "flatten", "slice",
                  "broadcast", "expand", "identity", "view", "permute", "gather"}


_ANY = (-math.inf, math.inf)


def value_range(graph: Graph, name: str, _memo=None) -> tuple:
    """(lo, hi) bounding every element of ``name``; an end not known is -inf / inf (so
    ``min(max(x, 0), 255)`` of an unknown float x is still [0, 255])."""
    memo = {} if _memo is None else _memo
    if name in memo:
        return memo[name]
    memo[name] = _ANY  # a cycle (none in a DAG) stays unknown
    out = _range(graph, name, memo)
    out = _ANY if out is None else (float(out[0]), float(out[1]))
    if math.isnan(out[0]) or math.isnan(out[1]):
        out = _ANY
    memo[name] = out
    return out


def _range(g: Graph, name: str, memo) -> tuple | None:
    op = g.op(name)
    kind = op.kind
    rng = lambda i: value_range(g, op.inputs[i], memo)  # noqa: E731
    if kind == "input":
        r = g.meta.get("int_ranges", {}).get(name)
        return tuple(r) if r is not None else None
    if kind == "constant":
        v = np.asarray(op.attrs["value"])
        if v.size == 0 or not np.all(np.isfinite(v)):
            return None
        return float(v.min()), float(v.max())
    if kind in _SAME_ELEMENTS and op.inputs:
        return rng(0)
    ins = [rng(i) for i in range(len(op.inputs))]
    if kind == "add" and len(ins) == 2:
        return ins[0][0] + ins[1][0], ins[0][1] + ins[1][1]
    if kind == "sub" and len(ins) == 2:
        return ins[0][0] - ins[1][1], ins[0][1] - ins[1][0]
    if kind == "neg":
        return -ins[0][1], -ins[0][0]
    if kind == "mul" and len(ins) == 2:
        if any(math.isinf(x) for r in ins for x in r):
            return None
        ends = [a * b for a in ins[0] for b in ins[1]]
        return min(ends), max(ends)
    if kind == "max" and len(ins) == 2:
        return max(ins[0][0], ins[1][0]), max(ins[0][1], ins[1][1])
    if kind == "min" and len(ins) == 2:
        return min(ins[0][0], ins[1][0]), min(ins[0][1], ins[1][1])
    if kind in ("round", "cast"):  # monotone: ends map to ends
        lo, hi = ins[0]
        if kind == "round" or op.type.dtype == "i32":  # cast to int truncates toward zero
            f = np.round if kind == "round" else math.trunc
            lo = lo if math.isinf(lo) else float(f(lo))
            hi = hi if math.isinf(hi) else float(f(hi))
        return lo, hi
    return None


def fits_int8(graph: Graph, name: str) -> tuple[bool, tuple]:
    """(every element of ``name`` is a whole number in [-128, 127], its range)."""
    r = value_range(graph, name)
    return (graph.op(name).type.dtype == "i32" and r[0] >= -128 and r[1] <= 127), r


def byte_range(graph: Graph, name: str, _memo=None) -> str | None:
    """"i8" or "u8" when every element of the i32 tensor ``name`` is a whole number that
    fits a signed (preferred when negative values occur) or unsigned byte, else None: such
    a tensor can live in memory one byte per element (``Graph.set_byte_storage``; e.g.
    a uint8 activation less its zero point of 128, what a QLinearMatMul's GEMM reads)."""
    if graph.op(name).type.dtype != "i32":
        return None
    lo, hi = value_range(graph, name, _memo)
    if lo >= 0 and hi <= 255:
        return "u8"
    if lo >= -128 and hi <= 127:
        return "i8"
    return None
