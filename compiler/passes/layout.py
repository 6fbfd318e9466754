"""Layout propagation for contraction epilogues: which epilogue tensors hold the
contraction's elements one-to-one, in another shape or order (not a rule itself).

A GEMM/conv tile writes each output element once, right after its accumulator is final.
An epilogue tensor that is a *view* of the result (the exporter's Reshape (128, 256) ->
(1, 128, 256) after a 2-D Gemm, a squeeze/unsqueeze, the Transpose NCHW -> NHWC after an
ONNX Conv) still holds every result element exactly once, only at another index, so the
tile can write it directly in the view's order: IREE's layout propagation of the
transposes around convolutions. The fact is decided exactly, with numpy: every tensor of
the candidate dispatch gets a *root table*, the contraction element (row-major number)
each of its elements holds, pushed forward through views and elementwise ops the way the
values are. A tensor whose table is a permutation of the root's elements may leave the
dispatch; one whose table mixes two different root elements (``y + y.T``) may not even
be computed there, because an epilogue sees one accumulator at a time.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph import Graph, is_identity_view, slice_windows

CONFLICT = "conflict"


def root_tables(graph: Graph, root: str, members: set) -> dict:
    """{tensor: table | None | CONFLICT} for the root and every tensor computed from it
    inside ``members`` (views are followed wherever they sit): None means the tensor does
    not depend on the root; CONFLICT that one element needs two different root elements."""
    rt = graph.op(root).type
    memo = {root: np.arange(rt.size, dtype=np.int64).reshape(rt.shape)}

    def table(t):
        if t in memo:
            return memo[t]
        op = graph.op(t)
        res = None
        if op.is_view:
            src = table(op.inputs[0])
            if src is None or isinstance(src, str):
                res = src
            elif op.kind == "transpose":
                res = np.transpose(src, op.attrs["perm"])
            elif op.kind == "reshape":
                res = np.ascontiguousarray(src).reshape(op.type.shape)
            elif op.kind == "slice":
                res = src[slice_windows(op.attrs)]
            else:
                res = np.broadcast_to(src, op.type.shape)
        elif t in members and op.is_elementwise:
            for i in op.inputs:
                ti = table(i)
                if ti is None:
                    continue
                if isinstance(ti, str):
                    res = ti
                    break
                ti = np.broadcast_to(ti, op.type.shape)
                if res is not None and not np.array_equal(res, ti):
                    res = CONFLICT
                    break
                res = ti
        memo[t] = res
        return res

    for m in members:
        table(m)
    return memo


def is_permutation(table, size: int) -> bool:
    """Every root element exactly once. Counting (linear) instead of sorting: the check
    runs on every merge attempt touching a contraction, on tables of up to ~10^6
    elements (BERT-base's FFN output), and a sort there dominated ``fuse``."""
    if table is None or isinstance(table, str) or table.size != size:
        return False
    flat = table.reshape(-1)
    if size == 0:
        return True
    if flat.min() < 0:
        return False
    counts = np.bincount(flat, minlength=size)
    return counts.size == size and bool((counts == 1).all())


def epilogue_shape_reason(graph: Graph, gemm_root: str, gemm_ops: set, other_ops: set,
                          order) -> str:
    """'' when every tensor of the epilogue ``other_ops`` can be written by the
    contraction's tile (a one-to-one view of the result, or not needed outside); else why
    not. ``order`` sorts op names (graph order) so the reason names the first culprit."""
    shape = graph.op(gemm_root).type.shape
    size = math.prod(shape)
    members = set(gemm_ops) | set(other_ops)
    tables = root_tables(graph, gemm_root, members)
    for n in sorted(other_ops, key=order):
        op = graph.op(n)
        t = op.type
        if op.is_view:
            continue
        tab = tables.get(n)
        if isinstance(tab, str):
            return (f"{n} combines the contraction's elements at two different positions "
                    f"(e.g. y + transpose(y)); the epilogue sees one accumulator at a time")
        if t.shape == shape and (tab is None or is_permutation(tab, size)):
            continue
        if t.size == size:
            if is_permutation(tab, size):
                continue  # a view of the result: the tile writes it in the view's order
            return (f"{n} holds {t.size} elements in shape {t.shape} that are not the "
                    f"contraction's {shape} elements one-to-one (through a view), so the "
                    f"tile cannot write it")
        if n in graph.outputs or any(u not in members for u in graph.users(n)):
            return (f"{n} (shape {t.shape}) is also needed outside the epilogue, and the "
                    f"GEMM writes only the contraction's elements (in its shape or a view "
                    f"of it, {shape})")
    return ""


def written_dims(graph: Graph, root: str, ops: set, order=None) -> dict:
    """{root result dim: dim of the tensor the dispatch writes} for a contraction group:
    the written tensor is the first (graph order) one-to-one view of the result that
    leaves the group; the identity when none does or the root itself leaves. ``order``
    sorts op names in graph order (a caller that has the positions saves a topological
    sort of the whole graph per call)."""
    rt = graph.op(root).type
    tables = root_tables(graph, root, ops)
    ident = {d: d for d in range(rt.rank)}
    out = None
    if order is None:
        order = {n: i for i, n in enumerate(graph.topo_order())}.__getitem__
    for n in sorted(ops, key=order):
        leaves = n in graph.outputs or any(u not in ops for u in graph.users(n))
        if leaves and is_permutation(tables.get(n), rt.size):
            out = n
            break
    if out is None or out == root:
        return ident
    tab = tables[out]
    base = np.unravel_index(int(tab.reshape(-1)[0]), rt.shape)
    res = {}
    for j, s in enumerate(tab.shape):
        if s == 1:
            continue
        step = [0] * tab.ndim
        step[j] = 1
        moved = np.unravel_index(int(tab[tuple(step)]), rt.shape)
        changed = [d for d in range(rt.rank) if moved[d] != base[d]]
        if len(changed) == 1:
            res[changed[0]] = j
    return {d: res.get(d, d) for d in range(rt.rank)}


def tile_writes_view(graph: Graph, root: str, members: set, chain: list) -> bool:
    """Can the contraction tile of ``root`` (a group of ``members``) write the graph
    output ``chain[0]``, a view chain (output first) over a member, in the view's order?
    Yes when the output holds the result's elements one-to-one and every view is one the
    lowering maps an index through (``compiler.lower.layout.forward_index``): a
    transpose, a reshape that only adds or drops unit dims, or a view that moves nothing.
    Otherwise the view needs a copy dispatch (a slice picks, a merging reshape would need
    a division in the tile's store address)."""
    for v in chain:
        op = graph.op(v)
        src = graph.op(op.inputs[0]).type.shape
        if op.kind == "transpose":
            continue
        if op.kind == "reshape" and [s for s in op.type.shape if s != 1] == \
                [s for s in src if s != 1]:
            continue
        if is_identity_view(op, graph):
            continue
        return False
    tables = root_tables(graph, root, set(members) | set(chain))
    return is_permutation(tables.get(chain[0]), graph.op(root).type.size)
