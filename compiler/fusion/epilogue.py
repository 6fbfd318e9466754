"""Contraction epilogues: a matmul/conv root absorbs its elementwise consumers.

Bias add, residual add, activation (relu, GELU) run on each output element right after
the contraction's accumulator is final, so the result is written once, post-epilogue.
The consumer dispatch must have exactly the root's parallel space (one epilogue
evaluation per output element). The epilogue may read the result through views (the
exporter's Reshape (128, 256) -> (1, 128, 256) after a 2-D Gemm, a squeeze, the Transpose
NCHW -> NHWC after an ONNX Conv): a tensor holding the result's elements one-to-one in
another shape or order is written by the tile in that order (``passes.layout`` decides
it exactly; IREE's layout propagation). For every extra tensor the epilogue reads, the plan
records whether its memory layout matches the written output's layout: that is
the fact rocMLIR's output-swizzle placement turns on — swizzling the output through LDS
*before* the epilogue makes the epilogue's reads coalesced only when those tensors are
laid out like the output (conv+add+relu NHWC: 0.0541 ms -> 0.0464 ms on MI300), and can
regress when they are not.

Limits (``condition``, checked for every merge, whichever rule tries it): only elementwise
consumers join a contraction; two contractions never share a dispatch; reductions over the
contraction result (softmax of attention scores) stay separate dispatches, since the
epilogue runs once per output element of the tile; producers of the operands are never
fused (a GEMM reads its operands from memory, as in IREE); every tensor of the epilogue
that leaves the dispatch holds the contraction's elements, in its shape or one-to-one
through a view (``passes.layout``), the only tensors its tiles write.

Through a reshape that splits or merges dims (the attention head split (B, S, H*D) ->
(B, S, H, D) after a projection, then its transpose and a scale or rotary multiply) the
consumer's loops are no projection of the contraction's, so the shared pairing refuses
it; ``reindex`` pairs the two spaces itself when the root tables prove every epilogue
element one-to-one with an accumulator: the loops that do correspond are paired, the
split ones (h, d against n) are re-indexed by the tile (``lower.layout``: n -> (n // D,
n % D)), as IREE propagates expand_shape through elementwise consumers.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.fusion import indexing as ix
from compiler.fusion.core import Attempt, FusionState, Pairing, RootKind
from compiler.fusion.layout import (as_array, epilogue_shape_reason, is_permutation, root_tables, written_dims)

NAME = "epilogue"
C = RootKind.CONTRACTION


def apply(state: FusionState) -> bool:
    g = state.graph
    for grp in state.sorted_groups():
        if grp.kind(g) == C and state.fuse_into_consumers(NAME, grp):
            return True
    return False


def condition(state: FusionState, attempt: Attempt) -> str | None:
    """Why a merge touching a contraction is refused, or None."""
    g = state.graph
    for e in attempt.edges:
        if g.op(e.dst).is_contraction:
            return (f"{e.src} is an operand of the contraction {e.dst}: "
                    f"contractions read their operands from memory (producer "
                    f"fusion into a GEMM/conv tile is not done, as in IREE)")
    pr, cr = attempt.kinds(g)
    if pr == C and cr == C:
        return "two contractions never share a dispatch"
    if C in (pr, cr) and RootKind.REDUCTION in (pr, cr):
        return ("a reduction and a contraction do not share a dispatch: the "
                "epilogue runs once per output element of the contraction tile")
    if pr == C and not state.elementwise_only(attempt.cons):
        return "only elementwise ops join a contraction epilogue"
    if C in (pr, cr):
        # the GEMM writes tile by tile: every tensor of the epilogue that leaves the
        # dispatch holds the result's elements in its shape or one-to-one through a view
        # (then the tile writes in the view's order: layout propagation)
        gemm, other = (attempt.prod, attempt.cons) if pr == C else (attempt.cons, attempt.prod)
        key = (NAME, gemm.root, frozenset(gemm.ops), frozenset(other.ops))
        why = state.memo.get(key)
        if why is None:   # the tables are as large as the result: ask once per pair
            why = state.memo[key] = epilogue_shape_reason(g, gemm.root, gemm.ops, other.ops,
                                                       state.order.__getitem__)
        if why:
            return why
    return None


def reindex(state: FusionState, attempt: Attempt):
    """A Pairing for a contraction and an elementwise consumer that reads it through
    reshape/transpose views the loops cannot project (a split or merged dim), when the
    consumer's elements are the result's one-to-one; a reason when they are not; None
    when this is not such a merge."""
    g = state.graph
    keeper, joiner = attempt.prod, attempt.cons
    if attempt.sibling or keeper.kind(g) != C or joiner.kind(g) != RootKind.ELEMENTWISE or \
            not state.elementwise_only(joiner):
        return None
    for e in attempt.edges:
        if e.opaque and (not g.op(e.dst).is_elementwise or not e.views or
                         any(g.op(v).kind not in ("reshape", "transpose") for v in e.views)):
            return None
    if math.prod(joiner.psizes) != math.prod(keeper.psizes):
        return (f"{joiner.root} iterates {math.prod(joiner.psizes)} points, the contraction "
                f"{math.prod(keeper.psizes)}: not one epilogue evaluation per accumulator")
    root_t = g.op(keeper.root).type
    tab = root_tables(g, keeper.root, set(keeper.ops) | set(joiner.ops)).get(joiner.root)
    if not is_permutation(tab, root_t.size):
        return (f"{joiner.root} does not hold the contraction's elements one-to-one through "
                f"the views, so the tile cannot compute it")
    coords = np.unravel_index(as_array(tab), root_t.shape)
    o_shape = g.op(joiner.root).type.shape
    keeper_partners = {}
    for kr, loop in enumerate(keeper.pmap[keeper.root]):
        dr = ix.result_map(g.op(keeper.root), g).index(loop)
        for ko, lo in enumerate(joiner.pmap[joiner.root]):
            if lo is None or o_shape[lo] != root_t.shape[dr]:
                continue
            along = np.arange(o_shape[lo]).reshape([-1 if i == lo else 1
                                                    for i in range(len(o_shape))])
            if np.array_equal(coords[dr], np.broadcast_to(along, o_shape)):
                keeper_partners[kr] = ko
                break
    return Pairing(keeper, joiner, keeper_partners, False,
                   ["written through the reshape's re-indexing (split/merged dims)"], 1)


def layout_facts(state: FusionState, grp, ops: set) -> list[tuple]:
    """(tensor, reader, memory order, matches output) for each tensor the epilogue
    reads from global memory."""
    g = state.graph
    root = g.op(grp.root)
    ploops = ix.parallel_loops(root, g)
    # compared with the tensor the tile writes (a transposed view of the result is
    # written in its own order: layout propagation, see passes.layout)
    written = written_dims(g, grp.root, ops, state.order.__getitem__)
    out_dim_of_loop = {l: written[d] for d, l in enumerate(ix.result_map(root, g))
                       if l is not None}
    facts, seen = [], set()
    for o in sorted(ops, key=state.order.__getitem__):
        op = g.op(o)
        if o == grp.root or not ix.is_compute(op):
            continue
        for k in range(len(op.inputs)):
            src, _, links, _ = ix.trace_operand(g, o, k)
            if src in ops or (src, o) in seen:
                continue
            seen.add((src, o))
            order = g.op(src).type.order
            pm = grp.pmap.get(o, ())
            dims = []
            for d in order:
                loop = links.get(d)
                if loop is None or loop not in pm:
                    continue
                dims.append(out_dim_of_loop[ploops[pm.index(loop)]])
            facts.append((src, o, order, dims == sorted(dims)))
    return facts
