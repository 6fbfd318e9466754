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

Tables are carried in closed form (``compiler.lower.affine.Affine``: shape, strides,
base) while the views keep them affine, which transposes, broadcasts, slices and most
reshapes do; only a reshape the strides cannot express materialises the table (with
numpy, as before). Materialised, attention's score-sized table at sequence 4096 is 134 M
int64 (1 GiB) per tensor, and counting it took most of ``fuse``; in closed form every
question here has an exact O(rank) answer.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.ir.graph import Graph, is_identity_view, slice_windows, writes_view_in_place
from compiler.lower.affine import Affine

CONFLICT = "conflict"


def root_tables(graph: Graph, root: str, members: set) -> dict:
    """{tensor: table | None | CONFLICT} for the root and every tensor computed from it
    inside ``members`` (views are followed wherever they sit): None means the tensor does
    not depend on the root; CONFLICT that one element needs two different root elements.
    A table is an ``Affine`` (closed form) or, after a reshape strides cannot express, a
    numpy array of root element numbers."""
    rt = graph.op(root).type
    row_major = [math.prod(rt.shape[d + 1:]) for d in range(len(rt.shape))]
    memo = {root: Affine(tuple(rt.shape), tuple(row_major), 0)}

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
                res = (src.transpose(op.attrs["perm"]) if isinstance(src, Affine)
                       else np.transpose(src, op.attrs["perm"]))
            elif op.kind == "reshape":
                shape = tuple(op.type.shape)
                res = (src.reshape(shape) if isinstance(src, Affine) and math.prod(shape)
                       else None)
                if res is None:  # not expressible on strides: the table itself
                    res = np.ascontiguousarray(as_array(src)).reshape(shape)
            elif op.kind == "slice":
                res = (src.slice(slice_windows(op.attrs)) if isinstance(src, Affine)
                       else src[slice_windows(op.attrs)])
            else:
                res = (src.broadcast(tuple(op.type.shape)) if isinstance(src, Affine)
                       else np.broadcast_to(src, op.type.shape))
        elif t in members and op.is_elementwise:
            for i in op.inputs:
                ti = table(i)
                if ti is None:
                    continue
                if isinstance(ti, str):
                    res = ti
                    break
                ti = (ti.broadcast(tuple(op.type.shape)) if isinstance(ti, Affine)
                      else np.broadcast_to(ti, op.type.shape))
                if res is not None and not _same(res, ti):
                    res = CONFLICT
                    break
                res = ti
        memo[t] = res
        return res

    for m in members:
        table(m)
    return memo


def as_array(table) -> np.ndarray:
    """A table as numpy root element numbers (a closed form materialised)."""
    return table.table() if isinstance(table, Affine) else table


def _same(a, b) -> bool:
    """Equal tables (exact: equal closed forms are equal tables and vice versa)."""
    if isinstance(a, Affine) and isinstance(b, Affine):
        return a.key() == b.key()
    return np.array_equal(as_array(a), as_array(b))


def _at(table, index) -> int:
    """The root element number at ``index`` of a table."""
    if isinstance(table, Affine):
        return int(table.base + sum(i * s for i, s in zip(index, table.strides)))
    return int(table[tuple(index)])


def is_permutation(table, size: int) -> bool:
    """Every root element exactly once. In closed form: base 0 and the strides, sorted,
    a mixed radix (each the previous one times its extent). Materialised: counting
    (linear) instead of sorting, on tables of up to ~10^6 elements (BERT-base's FFN
    output), where a sort dominated ``fuse``."""
    if table is None or isinstance(table, str) or math.prod(table.shape) != size:
        return False
    if size == 0:
        return True
    if isinstance(table, Affine):  # a reversed dim (negative step) runs up from its end
        base = table.base + sum(s * (n - 1) for s, n in zip(table.strides, table.shape)
                                if s < 0)
        dims = sorted((abs(s), n) for s, n in zip(table.strides, table.shape) if n > 1)
        reach = 1
        for s, n in dims:
            if s != reach:
                return False
            reach *= n
        return base == 0 and reach == size
    flat = table.reshape(-1)
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
    rank = len(tab.shape)
    base = np.unravel_index(_at(tab, [0] * rank), rt.shape)
    res = {}
    for j, s in enumerate(tab.shape):
        if s == 1:
            continue
        step = [0] * rank
        step[j] = 1
        moved = np.unravel_index(_at(tab, step), rt.shape)
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


def group_writes_view(graph: Graph, root: str, members: set, chain: list) -> bool:
    """Does the dispatch of ``root``'s group write the graph output ``chain[0]``, a view
    chain over one of its ``members``? Any dispatch writes a view as an index map, except
    a contraction's tile: it writes its result, views of it that move nothing, and
    one-to-one views it maps its index through (:func:`tile_writes_view`); any other view
    of it gets a copy dispatch (``multi_result``). An elementwise dispatch writes it
    when its producer's walk covers it (``graph.writes_view_in_place``: not a slice or
    a repeating broadcast; the merge check then asks the same of the merged walk)."""
    rop = graph.op(root)
    if rop.is_reduction:
        return True
    if not rop.is_contraction:
        return writes_view_in_place(graph, graph.op(chain[-1]).inputs[0], chain[0])
    return all(is_identity_view(graph.op(v), graph) for v in chain) or \
        tile_writes_view(graph, root, members, chain)
