"""Contraction epilogues: a matmul/conv root absorbs its elementwise consumers.

Bias add, residual add, activation (relu, GELU) run on each output element right after
the contraction's accumulator is final, so the result is written once, post-epilogue.
The consumer dispatch must have exactly the root's parallel space (one epilogue
evaluation per output element). For every extra tensor the epilogue reads, the plan
records whether its memory layout matches the root's output layout (row-major): that is
the fact rocMLIR's output-swizzle placement turns on — swizzling the output through LDS
*before* the epilogue makes the epilogue's reads coalesced only when those tensors are
laid out like the output (conv+add+relu NHWC: 0.0541 ms -> 0.0464 ms on MI300), and can
regress when they are not.

Limits (``condition``, checked for every merge, whichever rule tries it): only elementwise
consumers join a contraction; two contractions never share a dispatch; reductions over the
contraction result (softmax of attention scores) stay separate dispatches, since the
epilogue runs once per output element of the tile; producers of the operands are never
fused (a GEMM reads its operands from memory, as in IREE); every tensor of the epilogue
that leaves the dispatch has the contraction's own shape, the only one its tiles write.
"""
from __future__ import annotations

import math

from . import indexing as ix
from .core import Attempt, FusionState, RootKind

NAME = "epilogue"
C = RootKind.CONTRACTION


def apply(st: FusionState) -> bool:
    g = st.graph
    for grp in st.sorted_groups():
        if grp.kind(g) == C and st.fuse_into_consumers(NAME, grp):
            return True
    return False


def condition(st: FusionState, at: Attempt) -> str | None:
    """Why a merge touching a contraction is refused, or None."""
    g = st.graph
    for e in at.edges:
        if g.op(e.dst).is_contraction:
            return (f"{e.src} is an operand of the contraction {e.dst}: "
                    f"contractions read their operands from memory (producer "
                    f"fusion into a GEMM/conv tile is not done, as in IREE)")
    pr, cr = at.kinds(g)
    if pr == C and cr == C:
        return "two contractions never share a dispatch"
    if C in (pr, cr) and RootKind.REDUCTION in (pr, cr):
        return ("a reduction and a contraction do not share a dispatch: the "
                "epilogue runs once per output element of the contraction tile")
    if pr == C and not st.elementwise_only(at.cons):
        return "only elementwise ops join a contraction epilogue"
    if C in (pr, cr):
        # the GEMM writes tile by tile in its own shape: every tensor of the epilogue
        # that leaves the dispatch must have that shape
        gemm, other = (at.prod, at.cons) if pr == C else (at.cons, at.prod)
        shape = g.op(gemm.root).type.shape
        for n in sorted(other.ops, key=st.order.__getitem__):
            t = g.op(n).type
            if t.shape == shape or g.op(n).is_view:
                continue
            if t.size == math.prod(shape):
                return (f"{n} holds the contraction's elements in shape {t.shape}, "
                        f"not {shape}: the epilogue writes the result tile in "
                        f"the contraction's own shape")
            if n in g.outputs or any(u not in other.ops and u not in gemm.ops
                                     for u in g.users(n)):
                return (f"{n} (shape {t.shape}) is also needed outside the "
                        f"epilogue, and the GEMM writes only tensors of its own "
                        f"shape {shape}")
    return None


def layout_facts(st: FusionState, grp, ops: set) -> list[tuple]:
    """(tensor, reader, memory order, matches output) for each tensor the epilogue
    reads from global memory."""
    g = st.graph
    root = g.op(grp.root)
    ploops = ix.parallel_loops(root, g)
    out_dim_of_loop = {l: d for d, l in enumerate(ix.result_map(root, g)) if l is not None}
    facts, seen = [], set()
    for o in sorted(ops, key=st.order.__getitem__):
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
