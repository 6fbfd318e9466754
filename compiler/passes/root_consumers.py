"""Rule 4 — a reduction root fuses with its consumers, even when that lowers their
parallelism ("aggressive fusion", IREE's --iree-dispatch-creation-enable-aggressive-fusion).

``x - max(x)`` runs over rows x cols, the max over rows only. Fusing the subtraction into
the max's dispatch makes it a serial loop per row, giving up the cols parallelism, but
the row of ``x`` is read once and ``x - max`` is never written. Roots are visited
last-first, so a later root first gathers its own consumers and producers (rules 2 and 3)
and an earlier root then joins that whole dispatch.

Two modes, as in IREE:
- conservative (``aggressive=False``): a root absorbs elementwise consumers only when they
  add no more serial iterations per row than the root already walks (IREE's default check
  "consumer loops <= producer loops"); a dispatch never holds two chained roots. Layer
  norm stays at 2 dispatches (mean | variance + normalisation) and softmax at 2
  (max | sub, exp, sum, div): the IREE thread's state before aggressive fusion.
- aggressive (default): the bound is lifted and a root also fuses with a consumer
  dispatch rooted at another reduction over the *same* parallel space (max -> sum,
  mean -> variance): one dispatch per softmax / layer norm, as in the IREE thread.

Limits: consumers rooted at a contraction never join (its epilogue is rule 7's, the other
way round); the parallel loops must pair one-to-one; no cycle between dispatches.
"""
from __future__ import annotations

from .state import FusionState

NAME = "root_consumer"


def apply(st: FusionState) -> bool:
    g = st.graph
    for grp in st.sorted_groups(reverse=True):
        if grp.rank(g) == 2 and st.fuse_into_consumers(NAME, grp):
            return True
    return False
