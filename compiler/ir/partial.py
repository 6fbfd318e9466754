"""The numpy reference on some rows of some tensors: what a sampled value check compares.

A sampled check (``compiler.tuning.sampling``) compares only the output elements its workgroups
wrote: a few thousand rows of a score-sized tensor at attention's sequence 4096, where
the whole reference holds several 512 MiB intermediates. So the check asks for *rows*:
index tuples over a tensor's leading ``r`` axes (``r = 0``: the whole tensor). The rows a
tensor needs are pushed back through the ops that have a row rule:
- elementwise ops and broadcasts: the operand's axes aligned numpy-style with the row
  axes (a broadcast size-1 axis at index 0); an operand aligned with none is read whole;
- reductions over axes after the row axes (softmax's row max and sum);
- transposes and reshapes that leave the row axes in place;
- matmul: A's rows are the output's (batch and M), B's only the batch part (K x N
  whole per batch).
Any other op (slice, gather, pad, concat, conv2d, a reduction over a row axis) is
evaluated whole, and so is everything it reads. Values come from the same ``eval_op``
on the gathered rows, in the same float32, so they equal the whole reference on those
rows; a matmul over fewer rows may round its dot products in another order inside the
BLAS (tests/test_sampling.py bounds the difference far below the check's tolerance).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from compiler.ir.graph import DTYPES, Graph, TensorType
from compiler.ir.reference import eval_op


@dataclass
class Rows:
    """Some rows of a tensor: ``ids`` (sorted) number index tuples over the leading ``r``
    axes row-major; ``values[i]`` is row ``ids[i]`` (shape ``shape[r:]``)."""
    r: int
    ids: np.ndarray
    values: np.ndarray | None = None


def _unravel(ids: np.ndarray, shape: tuple) -> np.ndarray:
    """(n, len(shape)) index tuples of row-major ids."""
    if not shape:
        return np.zeros((len(ids), 0), np.int64)
    return np.stack(np.unravel_index(ids, shape), axis=1).astype(np.int64)


def _ravel(idx: np.ndarray, shape: tuple) -> np.ndarray:
    if not shape:
        return np.zeros(len(idx), np.int64)
    return np.ravel_multi_index(tuple(idx.T), shape).astype(np.int64)


# ----------------------------------------------------------------------------- row rules
def _aligned(x_shape: tuple, out_shape: tuple, r: int) -> list:
    """Row sources of an operand aligned numpy-style (trailing axes) with the output:
    one entry per leading operand axis that lines up with an output row axis, the output
    column it copies, or None for a broadcast (size 1) axis (index 0)."""
    lead = len(out_shape) - len(x_shape)
    return [None if x_shape[j] == 1 else j + lead for j in range(max(0, r - lead))]


def _operand_sources(graph: Graph, op, r: int) -> list | None:
    """For each operand, its row sources (see ``_aligned``) when the op computes ``r``
    row axes of its result from rows of its operands; None when it cannot."""
    out = op.type.shape
    shapes = [graph.op(i).type.shape for i in op.inputs]
    k = op.kind
    if r == 0:
        return [[] for _ in op.inputs]
    if op.is_elementwise or k == "broadcast":
        return [_aligned(s, out, r) for s in shapes]
    if op.is_reduction:
        axes = op.attrs["axes"]
        axes = range(len(shapes[0])) if axes is None else axes
        axes = [a % len(shapes[0]) for a in np.atleast_1d(axes)]
        return [list(range(r))] if min(axes) >= r else None
    if k == "transpose":
        return [list(range(r))] if tuple(op.attrs["perm"][:r]) == tuple(range(r)) else None
    if k == "reshape":
        return [list(range(r))] if shapes[0][:r] == out[:r] else None
    if k == "matmul" and len(shapes[0]) >= 2 and len(shapes[1]) >= 2 and r < len(out):
        a = _aligned(shapes[0], out, r)
        b = _aligned(shapes[1], out, min(r, len(out) - 2))
        return [a, b]
    return None


def _request(ids: np.ndarray, shape: tuple, r: int, sources: list) -> np.ndarray:
    """The operand rows (ids over its leading len(sources) axes) ``ids`` need."""
    idx = _unravel(ids, shape[:r])
    cols = [idx[:, c] if c is not None else np.zeros(len(ids), np.int64) for c in sources]
    return np.stack(cols, axis=1) if cols else np.zeros((len(ids), 0), np.int64)


def demands(graph: Graph, wanted: dict) -> dict:
    """{tensor: Rows (no values)} every tensor the ``wanted`` rows ({tensor: (r, ids)})
    depend on, pushed back through the row rules (the whole tensor where none applies)."""
    asks: dict = {}
    for name, (r, ids) in wanted.items():
        asks.setdefault(name, []).append((r, np.asarray(ids, np.int64)))
    out = {}
    for name in reversed(graph.topo_order()):
        if name not in asks:
            continue
        op = graph.op(name)
        shape = op.type.shape
        r = min(rr for rr, _ in asks[name])
        ids = np.unique(np.concatenate([
            _ravel(_unravel(i, shape[:rr])[:, :r], shape[:r]) for rr, i in asks[name]]))
        sources = None
        while sources is None:  # the widest row split the op allows (r = 0 always does)
            sources = (_operand_sources(graph, op, r)
                       if op.kind not in ("input", "constant") else [])
            if sources is None:
                ids = np.unique(_ravel(_unravel(ids, shape[:r])[:, :r - 1], shape[:r - 1]))
                r -= 1
        out[name] = Rows(r, ids)
        for x, src in zip(op.inputs, sources):
            xs = graph.op(x).type.shape
            asks.setdefault(x, []).append(
                (len(src), np.unique(_ravel(_request(ids, shape, r, src), xs[:len(src)]))))
    return out


# ----------------------------------------------------------------------------- values
def gather(rows: Rows, shape: tuple, idx: np.ndarray):
    """Values of the rows ``idx`` ((n, q) index tuples, q >= rows.r) as an (n, ...)
    array; the whole tensor (no row axis) when q == 0."""
    if idx.shape[1] == 0:
        return rows.values[0]
    pos = np.searchsorted(rows.ids, _ravel(idx[:, :rows.r], shape[:rows.r]))
    if rows.r:
        pos = np.minimum(pos, len(rows.ids) - 1)
        if not np.array_equal(rows.ids[pos], _ravel(idx[:, :rows.r], shape[:rows.r])):
            raise KeyError("a row the demand did not compute")
    return rows.values[(pos,) + tuple(idx[:, j] for j in range(rows.r, idx.shape[1]))]


def _renamed(op, new_shape, **attrs):
    """The op on gathered rows: its result shape (rows first) and row-relative attrs."""
    return dataclasses.replace(op, type=TensorType(new_shape, op.type.dtype),
                               attrs={**op.attrs, **attrs})


def evaluate_rows(graph: Graph, inputs: dict, wanted: dict) -> dict:
    """{tensor: Rows with values} for every tensor ``wanted`` ({tensor: (r, ids)}) needs."""
    need = demands(graph, wanted)
    for name in graph.topo_order():
        if name not in need:
            continue
        op, rows = graph.op(name), need[name]
        shape, r = op.type.shape, rows.r
        if op.kind in ("input", "constant"):
            full = np.asarray(inputs[name] if op.kind == "input" else op.attrs["value"])
            full = full.astype(DTYPES[op.type.dtype], copy=False).reshape(shape)
            rows.values = full[None] if r == 0 else full[tuple(_unravel(rows.ids, shape[:r]).T)]
            continue
        sources = _operand_sources(graph, op, r)
        if r == 0:
            rows.values = eval_op(op, [need[x].values[0] for x in op.inputs])[None]
            continue
        n = len(rows.ids)
        inner = tuple(shape[r:])
        if op.kind == "matmul" and r == len(shape) - 1:
            rows.values = _matmul_rows(graph, op, need, sources, rows.ids, r)
            continue
        args = [gather(need[x], graph.op(x).type.shape, _request(rows.ids, shape, r, src))
                for x, src in zip(op.inputs, sources)]
        attrs = {}
        if op.is_reduction:
            attrs["axes"] = tuple(a % len(graph.op(op.inputs[0]).type.shape) - r + 1
                                  for a in np.atleast_1d(op.attrs["axes"]))
        elif op.kind == "transpose":
            attrs["perm"] = (0,) + tuple(p - r + 1 for p in op.attrs["perm"][r:])
        elif op.kind in ("reshape", "broadcast"):
            attrs["shape"] = (n,) + inner
        rows.values = eval_op(_renamed(op, (n,) + inner, **attrs), args)
    return need


def _matmul_rows(graph, op, need, sources, ids, r):
    """Output rows that include M: each is A's row times the K x N matrix of B for its
    batch; rows are grouped by that matrix (one BLAS call per batch, and B is never
    copied per row)."""
    shape = op.type.shape
    (xa, xb), (sa, sb) = op.inputs, sources
    a = gather(need[xa], graph.op(xa).type.shape, _request(ids, shape, r, sa))
    bshape = graph.op(xb).type.shape
    breq = _request(ids, shape, r, sb)
    if not sb:  # a 2-D B, the same for every row
        return eval_op(_renamed(op, (len(ids), shape[-1])), [a, need[xb].values[0]])
    out = np.empty((len(ids), shape[-1]), DTYPES[op.type.dtype])
    groups, first, inv = np.unique(_ravel(breq, bshape[:len(sb)]), return_index=True,
                                   return_inverse=True)
    for g, at0 in enumerate(first):
        at = np.nonzero(inv.reshape(-1) == g)[0]
        bmat = gather(need[xb], bshape, breq[at0:at0 + 1])[0]
        out[at] = eval_op(_renamed(op, (len(at), shape[-1])), [a[at], bmat])
    return out


# ----------------------------------------------------------------------------- memory
def logical_index(ttype, offsets: np.ndarray) -> np.ndarray:
    """(n, rank) logical indices of flat memory offsets of a tensor in its layout."""
    order = ttype.order
    m = np.unravel_index(offsets, tuple(ttype.shape[d] for d in order))
    idx = np.empty((len(offsets), ttype.rank), np.int64)
    for j, d in enumerate(order):
        idx[:, d] = m[j]
    return idx


def memory_offsets(ttype, rows: Rows) -> np.ndarray:
    """Flat memory offsets of every element of ``rows``, in ``rows.values`` order."""
    strides = np.asarray(ttype.strides, np.int64)
    r = rows.r
    base = _unravel(rows.ids, ttype.shape[:r]) @ strides[:r]
    inner = np.zeros(1, np.int64)
    for n, s in zip(ttype.shape[r:], strides[r:]):
        inner = (inner[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).reshape(-1)
    return (base[:, None] + inner[None, :]).reshape(-1)


def row_ids(ttype, offsets: np.ndarray) -> tuple:
    """(r, ids): the rows (all axes but the last) holding these memory offsets."""
    if ttype.rank < 2:
        return 0, np.zeros(1, np.int64)
    r = ttype.rank - 1
    idx = logical_index(ttype, offsets)
    return r, np.unique(_ravel(idx[:, :r], ttype.shape[:r]))


def values_at(ttype, rows: Rows, offsets: np.ndarray) -> np.ndarray:
    """The reference values at flat memory offsets (every offset in a computed row)."""
    idx = logical_index(ttype, offsets)
    return np.asarray(gather(rows, ttype.shape, idx)) if rows.r else \
        np.asarray(rows.values[0])[tuple(idx.T)]


def size_of(rows: Rows, ttype) -> int:
    return len(rows.ids) * math.prod(ttype.shape[rows.r:])
