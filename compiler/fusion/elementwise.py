"""Elementwise producer-consumer fusion, through broadcasts and views.

An elementwise producer whose value is read by exactly one op fuses into the dispatch of
that op when the indexing maps on the edge put producer and consumer at the same parallel
point. Injective producers (gather, pad, concat: one chosen element per output element)
fuse the same way; the dimensions they gather, pad or concatenate are not projections, so
their own producers stay boundaries across those dimensions. Views between them
(transpose, reshape, broadcast, slice) are not dispatches: they become the consumer's
index map into the producer, so ``exp(x).T + y`` is one loop nest. A
producer read through a broadcast is recomputed along the broadcast loops (cheap for
elementwise ops; IREE and XLA do the same), and the decision says so.

Limits: a reshape that splits or merges dimensions is not a projection of the loops, so a
producer behind one stays a boundary; a producer that feeds a contraction's operand is
never fused (the epilogue rule covers the contraction's *consumers* instead); producers
with several readers are the multi-use rule's business. Views are placed at the end
(``place_views``): each view is copied into every dispatch that reads through it (free: an index map), and only a view
that is itself a graph output of an input/constant needs a copy dispatch of its own.
"""
from __future__ import annotations

from compiler.fusion import indexing as ix
from compiler.fusion.core import FusionState

NAME = "elementwise"


def apply(state: FusionState) -> bool:
    g = state.graph
    for grp in state.sorted_groups():
        if not state.injective_only(grp):
            continue
        u = state.sole_user(grp)
        if u is None:
            continue
        if g.op(u).is_reduction:
            continue  # the reduction-producer rule's
        if state.merge_or_record(NAME, grp, state.group_of(u)):
            return True
    return False


def place_views(state: FusionState, members: dict) -> dict:
    """Adds every view to each dispatch that reads through it; returns {view output that
    is a graph output: (writer group id or None for a copy, chain)}."""
    g = state.graph
    for gid, ops in members.items():
        for n in list(ops):
            op = g.op(n)
            if op.is_view:
                continue
            for k in range(len(op.inputs)):
                _, views, _, _ = ix.trace_operand(g, n, k)
                ops.update(views)
    materialise = {}
    for o in g.outputs:
        if not g.op(o).is_view:
            continue
        n, chain = g.view_chain(o)
        writer = state.owner.get(n) if ix.is_compute(g.op(n)) else None
        materialise[o] = (writer, chain)
    return materialise
