"""A reduction root fuses with its consumers, even when that lowers their
parallelism ("aggressive fusion", IREE's --iree-dispatch-creation-enable-aggressive-fusion).

``x - max(x)`` runs over rows x cols, the max over rows only. Fusing the subtraction into
the max's dispatch makes it a serial loop per row, giving up the cols parallelism, but
the row of ``x`` is read once and ``x - max`` is never written. Roots are visited
last-first, so a later root first gathers its own consumers and producers (the multi-use
and reduction-producer rules) and an earlier root then joins that whole dispatch.

Two modes, as in IREE:
- conservative (``aggressive=False``): a root absorbs elementwise consumers only when they
  add no more serial iterations per row than the root already walks (IREE's default check
  "consumer loops <= producer loops"); a dispatch never holds two chained roots. Layer
  norm stays at 2 dispatches (mean | variance + normalisation) and softmax at 2
  (max | sub, exp, sum, div): the IREE thread's state before aggressive fusion.
- aggressive (default): the bound is lifted and a root also fuses with a consumer
  dispatch rooted at another reduction over the *same* parallel space (max -> sum,
  mean -> variance): one dispatch per softmax / layer norm, as in the IREE thread.

The conservative mode's two bounds are this rule's ``condition`` (no two chained roots)
and ``space_condition`` (no more serial iterations than the root walks); they hold for
every merge, whichever rule tries it.

Limits: consumers rooted at a contraction never join (its epilogue is the epilogue rule's,
the other way round); the parallel loops must pair one-to-one; no cycle between
dispatches.
"""
from __future__ import annotations

import math

from compiler.fusion import indexing as ix
from compiler.fusion.core import Attempt, FusionState, Pairing, RootKind

NAME = "root_consumer"


def apply(state: FusionState) -> bool:
    g = state.graph
    for grp in state.sorted_groups(reverse=True):
        if grp.kind(g) == RootKind.REDUCTION and state.fuse_into_consumers(NAME, grp):
            return True
    return False


def condition(state: FusionState, attempt: Attempt) -> str | None:
    """Conservative mode keeps one root per dispatch."""
    if attempt.chained and not state.aggressive:
        return ("conservative mode keeps one root per dispatch: "
                f"{attempt.prod.root} does not fuse with the consumer root {attempt.cons.root} "
                f"(IREE's default; --aggressive lifts it)")
    return None


def space_condition(state: FusionState, attempt: Attempt, p: Pairing) -> str | None:
    """Conservative mode: consumers add no more serial iterations than the root walks."""
    if p.new_loops > 1 and not state.aggressive:
        g = state.graph
        rext = math.prod(s for s, kind in ix.domain(g.op(p.keeper.root), g)
                         if kind == "reduction")
        if p.new_loops > rext:
            return (f"conservative mode: the consumer would add {p.new_loops} serial "
                    f"iterations per row, more than the {rext} the root walks")
    return None
