"""A reduction root fuses with producers whose parallel space matches its own.

IREE's dispatch formation did not fuse a root with the producers of its inputs (to keep
GEMM operands out). For a reduction that is too strict: when the indexing map through
which the reduction reads a value equals the map through which the producer writes it,
the producer runs exactly once per iteration of the reduction, on the same rows — e.g.
``sum(exp(x - max))`` reads ``exp`` at (row, col) and ``exp`` is computed at (row, col).
The producer's own parallel loops then map onto the root's parallel loops and onto its
reduction loop, which becomes the producer's serial loop too.

Limits: only elementwise producers read by the reduction alone (several readers: the
multi-use rule);
a producer whose parallel loop would land on the root's parallel loop at another point
(a transposed read), or behind a splitting reshape, stays outside.
"""
from __future__ import annotations

from compiler.fusion.core import FusionState

NAME = "reduction_producer"


def apply(state: FusionState) -> bool:
    g = state.graph
    for grp in state.sorted_groups():
        if not state.elementwise_only(grp):
            continue
        u = state.sole_user(grp)
        if u is None:
            continue
        if not g.op(u).is_reduction:
            continue
        if state.merge_or_record(NAME, grp, state.group_of(u)):
            return True
    return False
