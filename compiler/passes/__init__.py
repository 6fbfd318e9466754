"""Fusion passes: graph -> FusionPlan, one rule per module, each decision explained.

Like IREE's DispatchCreation and TVM's FuseOps, fusion works on primitive ops and their
indexing maps, never on recognised "layers". Every compute op starts as its own group;
the rules below are tried in order and the first one that merges two groups restarts the
sequence, so cheap local fusions (elementwise chains, epilogues) settle before the
root-level ones look at the result. ``state.FusionState.try_merge`` is the single
legality check (parallel loops pair one-to-one through the indexing maps; no cycle
between dispatches; rule 2's all-uses condition; the mode).

Order: 1 ``elementwise`` -> 7 ``epilogue`` -> 2 ``multi_use`` -> 3 ``reduction_producers``
-> 6 ``sibling`` -> 4 ``root_consumers`` -> 8 ``attention`` (last: it folds the three
settled dispatches of an attention into one, aggressive mode only); then rule 2's recomputation of cheap chains over
graph inputs, and rule 5 (``multi_result``) forms the dispatches.

Built-in models (aggressive / conservative): softmax 1/2, layernorm 1/2, rmsnorm 1/1,
conv_add_relu 1/1, mlp 2/2, attention 1/4, encoder_layer 9/14; without rule 8
(``attention=False``, the plan the search compares with): attention 3, encoder_layer 11.
The encoder layer's 11:
q, k, v projections (3: matmul + bias epilogue each; horizontal fusion of contractions
is not done), QK^T + scale (1), softmax (1), PV (1), output projection + bias + residual
(1), layer norm 1 (1), FFN1 + bias + GELU (1), FFN2 + bias + residual (1), layer norm 2
(1). The head reshapes/transposes are index maps of the matmuls that read them. A
reduction never joins a contraction's dispatch, so each softmax / layer norm stays its
own dispatch; conservative mode splits each of those three into two (+3).
"""
from __future__ import annotations

from ..graph import Graph
from ..plan import FusionPlan
from . import (attention, elementwise, epilogue, multi_result, multi_use, reduction_producers,
               root_consumers, sibling)
from .state import FusionState

RULES = (elementwise, epilogue, multi_use, reduction_producers, sibling, root_consumers,
         attention)


def fuse(graph: Graph, aggressive: bool = True, attention: bool = True) -> FusionPlan:
    """Forms dispatches for ``graph``; ``aggressive=False`` is IREE's default behaviour;
    ``attention=False`` leaves rule 8 out (the 3-dispatch attention the search compares)."""
    st = FusionState.start(graph, aggressive)
    rules = RULES if attention else tuple(r for r in RULES if r.NAME != "attention")
    while any(rule.apply(st) for rule in rules):
        pass
    multi_use.recompute(st)
    return multi_result.build_plan(st)


__all__ = ["fuse", "RULES"]
