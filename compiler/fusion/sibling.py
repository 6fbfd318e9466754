"""Sibling (horizontal) fusion of reductions that read the same tensor.

``mean(x)`` and ``mean(x * x)`` do not depend on each other, so no producer-consumer rule
joins them, yet both stream the same rows of ``x``. When two reduction-rooted dispatches
read one tensor through maps that pair their parallel loops one-to-one (the same rows),
they become one dispatch that reads the tensor once and produces both results (a
multi-result dispatch).

Limits: both sides must be reductions over the same parallel space; the shared tensor
must be read through projected maps; neither may reach the other through a third
dispatch (that would be a cycle). Applies in both modes: it never lowers parallelism.
"""
from __future__ import annotations

from compiler.fusion import indexing as ix
from compiler.fusion.core import FusionState, RootKind

NAME = "sibling"


def _reads(state: FusionState, grp) -> dict:
    """{tensor read from outside: [(reader op, {tensor dim: reader loop})]}."""
    g = state.graph
    out = {}
    for o in grp.ops:
        for k in range(len(g.op(o).inputs)):
            src, _, links, opaque = ix.trace_operand(g, o, k)
            if src in grp.ops or opaque:
                continue
            out.setdefault(src, []).append((o, links))
    return out


def apply(state: FusionState) -> bool:
    g = state.graph
    reds = [grp for grp in state.sorted_groups() if grp.kind(g) == RootKind.REDUCTION]
    # once per group, not per pair: the pairs are quadratic in the reductions (a
    # 12-layer BERT has ~50) and nothing changes before the first merge returns
    reads = [_reads(state, grp) for grp in reds]
    for i, a in enumerate(reds):
        ra = reads[i]
        for j in range(i + 1, len(reds)):
            b, rb = reds[j], reads[j]
            # largest first; graph order breaks ties (set order varies with the hash seed)
            shared = sorted(set(ra) & set(rb),
                            key=lambda t: (-g.tensor_bytes(t), state.order[t]))
            if not shared or state.between(a, b) or state.between(b, a):
                continue
            t = shared[0]
            links = []
            for xa, la in ra[t]:
                for xb, lb in rb[t]:
                    links.append((xa, xb, {la[d]: lb[d] for d in la if d in lb}))
            ok, reason = state.try_merge(NAME, a, b, sibling_links=links,
                                      record_edges=[(a.root, b.root)])
            if ok:
                return True
            state.record(NAME, a.root, b.root, False, f"both read {t}, but {reason}")
    return False
