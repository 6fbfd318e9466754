"""Where a contraction tile writes each output: the root's index pushed forward to the
output's index, and the GEMM dimension the output is contiguous along.

Fusion (``compiler.fusion.layout``) lets a contraction's epilogue write a one-to-one view
of the result: the exporter's Reshape (128, 256) -> (1, 128, 256), a squeeze, or the
Transpose NCHW -> NHWC after an ONNX Conv. The tile still computes accumulator (b, m, n);
this module finds, for each dispatch output, the chain of ops from the root to it and
maps the root's logical index forward through it (a transpose permutes the index, a
reshape re-indexes within each group of dims it splits or merges: the attention head
split (S, H*D) -> (S, H, D) writes n at (n // D, n % D), unit dims are zeros; an
elementwise op or a broadcast aligns it numpy-style). The maps work on numbers, numpy
arrays or IR alike.

The output's memory then decides the swizzle direction (layout propagation): the tile is
written in vectors along the GEMM dimension (m or n) that is contiguous in *every* output,
with the widest width all of them allow, decided exactly from numpy offset tables. A conv
in NCHW whose result is transposed to NHWC is so written along n (the channels), as an
NHWC conv is; the swizzle knob keeps its meaning on it.
"""
from __future__ import annotations

import numpy as np

from gpusim import program

from compiler.lower.common import LoweringError
from compiler.lower.emitter import iadd, idiv, imod, imul


def _zero(like):
    """A zero index of the same kind (IR or numbers) as ``like``."""
    return program.i32(0) if isinstance(like, program.Expr) else 0


def _ir(*xs) -> bool:
    return any(isinstance(x, program.Expr) for x in xs)


def _add(a, b):
    return iadd(a, b) if _ir(a, b) else a + b


def _mul(a, s: int):
    return a if s == 1 else imul(a, s) if _ir(a) else a * s


def _div(a, s: int):
    return a if s == 1 else idiv(a, s) if _ir(a) else a // s


def _mod(a, s: int):
    return imod(a, s) if _ir(a) else a % s


def reshape_groups(in_shape, out_shape) -> list | None:
    """The reassociation of a reshape, unit dims left out: [(input dims, output dims)],
    consecutive runs whose extents have the same product (IREE's expand/collapse_shape
    reassociation); None when no such grouping exists (never for a valid reshape of
    row-major data, kept for safety)."""
    ins = [i for i, s in enumerate(in_shape) if s != 1]
    outs = [j for j, s in enumerate(out_shape) if s != 1]
    groups, i, j = [], 0, 0
    while i < len(ins) and j < len(outs):
        gi, gj = [ins[i]], [outs[j]]
        pi, pj = in_shape[ins[i]], out_shape[outs[j]]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj and i < len(ins):
                gi.append(ins[i])
                pi, i = pi * in_shape[ins[i]], i + 1
            elif pj < pi and j < len(outs):
                gj.append(outs[j])
                pj, j = pj * out_shape[outs[j]], j + 1
            else:
                return None
        groups.append((gi, gj))
    if i < len(ins) or j < len(outs):
        return None
    return groups


def _reshape_index(op, in_shape, out_shape, idx) -> tuple:
    """A reshape's index map, forward: within each reassociation group the input index
    is linearised (row-major) and unravelled in the output extents. A split of the N
    dimension into (H, D), the attention head split, is (n // D, n % D); a merge is
    h * D + d; unit dims are zeros. Numbers, numpy arrays or IR alike."""
    groups = reshape_groups(in_shape, out_shape)
    if groups is None:
        raise LoweringError(f"node {op.name!r}: reshape {tuple(in_shape)} -> "
                            f"{tuple(out_shape)} has no reassociation of its dimensions")
    z = _zero(idx[0]) if idx else 0
    res = [z] * len(out_shape)
    for gi, gj in groups:
        lin = None
        for i in gi:
            lin = idx[i] if lin is None else _add(_mul(lin, in_shape[i]), idx[i])
        if len(gj) == 1:
            res[gj[0]] = lin
            continue
        rest = lin
        for k, j in enumerate(reversed(gj)):
            s = out_shape[j]
            res[j] = rest if k == len(gj) - 1 else _mod(rest, s)
            rest = _div(rest, s)
    return tuple(res)


def unit_only_reshape(graph, op) -> bool:
    """A reshape that only adds or drops unit dims (no dim split or merged)."""
    src = graph.op(op.inputs[0]).type.shape
    return [s for s in op.type.shape if s != 1] == [s for s in src if s != 1]


def is_identity(graph, path: list) -> bool:
    """The path only applies shape-preserving elementwise ops: same index."""
    return all(op.kind != "transpose" and op.kind != "reshape"
               and op.type.shape == graph.op(op.inputs[k]).type.shape for op, k in path)


def forward_path(graph, dispatch, root: str, out: str) -> list | None:
    """[(op, operand position)] from the root to ``out`` inside the dispatch, each op
    reading the previous tensor; None when ``out`` does not depend on the root."""
    ops = set(dispatch.ops)
    prev = {root: None}
    frontier = [root]
    while frontier:
        nxt = []
        for t in frontier:
            for u in graph.users(t):
                if u in ops and u not in prev:
                    prev[u] = t
                    nxt.append(u)
        frontier = nxt
    if out not in prev:
        return None
    path = []
    t = out
    while t != root:
        p = prev[t]
        path.append((graph.op(t), graph.op(t).inputs.index(p)))
        t = p
    return list(reversed(path))


def forward_index(graph, path: list, idx: tuple) -> tuple:
    """The index of the path's last tensor that holds the root element at ``idx``."""
    for op, k in path:
        in_shape = graph.op(op.inputs[k]).type.shape
        out_shape = op.type.shape
        if op.kind == "transpose":
            idx = tuple(idx[p] for p in op.attrs["perm"])
        elif op.kind == "reshape":
            idx = _reshape_index(op, in_shape, out_shape, idx)
        elif op.kind == "slice" or op.is_injective:
            raise LoweringError(f"node {op.name!r}: a {op.kind} of a contraction result "
                                f"picks elements, it is not written by the tile")
        elif tuple(in_shape) == tuple(out_shape):
            continue   # elementwise, same shape: the same index (an Unraveled one stays)
        else:  # broadcast or elementwise: numpy alignment (leading unit dims)
            lead = len(out_shape) - len(in_shape)
            z = _zero(idx[0]) if idx else 0
            idx = tuple(z for _ in range(lead)) + tuple(
                z if s == 1 else i for i, s in zip(idx, in_shape))
    return idx


def output_maps(graph, dispatch, root: str) -> dict:
    """{output: path} for every dispatch output (the root itself: an empty path)."""
    maps = {}
    for o in dispatch.outputs:
        path = [] if o == root else forward_path(graph, dispatch, root, o)
        if path is None and graph.op(o).type.shape == graph.op(root).type.shape:
            path = []  # computed beside the result (not from it), element for element
        if path is None:
            raise LoweringError(f"dispatch {dispatch.name!r}: output {o!r} does not depend "
                                f"on the contraction {root!r}; the tile writes only its "
                                f"result and views of it")
        maps[o] = path
    return maps


def output_vectors(gemm, graph, maps: dict) -> dict:
    """{"m": w, "n": w}: the widest vector (1, 2 or 4) along each GEMM dimension that
    is consecutive and aligned in the memory of every output, from numpy tables."""
    b = np.arange(gemm.batch).reshape(-1, 1, 1)
    m = np.arange(gemm.M).reshape(1, -1, 1)
    n = np.arange(gemm.N).reshape(1, 1, -1)
    root_idx = gemm.root_index(b, m, n)
    best = {"m": 4, "n": 4}
    for o, path in maps.items():
        t = graph.op(o).type
        oi = forward_index(graph, path, root_idx)
        off = np.zeros((gemm.batch, gemm.M, gemm.N), np.int64)
        for i, s, size in zip(oi, t.strides, t.shape):
            if size > 1:
                off = off + np.asarray(i, np.int64) * s
        for dim, tab in (("n", off), ("m", off.transpose(0, 2, 1))):
            w_ok = 1
            for w in (2, 4):
                if w > best[dim] or tab.shape[-1] % w:
                    break
                g = tab.reshape(-1, w)
                if np.all(g - g[:, :1] == np.arange(w)) and np.all(g[:, 0] % w == 0):
                    w_ok = w
                else:
                    break
            best[dim] = min(best[dim], w_ok)
    return best
