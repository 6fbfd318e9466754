"""Fusion passes: graph -> FusionPlan, one rule per module, each decision explained.

Like IREE's DispatchCreation and TVM's FuseOps, fusion works on primitive ops and their
indexing maps, never on recognised "layers". Every compute op starts as its own group;
the rules below are tried in order and the first one that merges two groups restarts the
sequence, so cheap local fusions (elementwise chains, epilogues) settle before the
root-level ones look at the result. ``core.FusionState.try_merge`` is the one place a
merge happens: the shared mechanism (projected maps, parallel loops paired one-to-one, no
cycle between dispatches) plus the conditions the rules state in their own files
(``CONDITIONS``, ``SPACE_CONDITIONS``), which hold for every merge whichever rule tries it.

Before the rules, when asked (the search's aggressive plan), ``horizontal`` rewrites sibling matmuls that share
an input into one wide GEMM (a graph rewrite: concatenated weights, results as slice
views), which the rules then fuse like any GEMM.

Rules, in the order they are tried: ``elementwise`` -> ``epilogue`` -> ``multi_use`` ->
``reduction_producers`` -> ``sibling`` -> ``root_consumers`` -> ``attention`` (last: it
folds the three settled dispatches of an attention into one, aggressive mode only); then
the multi-use rule's recomputation of cheap chains over graph inputs, and
``multi_result`` forms the
dispatches.

Built-in models (aggressive / conservative): softmax 1/2, layernorm 1/2, rmsnorm 1/1,
conv_add_relu 1/1, mlp 2/2, attention 1/4, encoder_layer 9/14; without the attention
rule (``attention=False``, the plan the search compares with): attention 3,
encoder_layer 11. The encoder layer's 11:
q, k, v projections (3: matmul + bias epilogue each; horizontal fusion of contractions
is not done), QK^T + scale (1), softmax (1), PV (1), output projection + bias + residual
(1), layer norm 1 (1), FFN1 + bias + GELU (1), FFN2 + bias + residual (1), layer norm 2
(1). The head reshapes/transposes are index maps of the matmuls that read them. A
reduction never joins a contraction's dispatch (except through the attention rule, which
takes QK^T, the softmax and PV as one), so each layer norm stays its own dispatch;
conservative mode splits the softmax and the two layer norms into two each (+3).
"""
from __future__ import annotations

from compiler.ir.graph import Graph
from compiler.fusion.plan import FusionPlan, execute_plan, max_error
from compiler.ir.reference import evaluate, random_inputs
from compiler.fusion import (attention, elementwise, epilogue, horizontal, multi_result, multi_use, reduction_producers, root_consumers, sibling)
from compiler.fusion.core import FusionState

RULES = (elementwise, epilogue, multi_use, reduction_producers, sibling, root_consumers,
         attention)
#: rule conditions checked on every merge before the parallel spaces are paired, in order
CONDITIONS = (attention.condition, epilogue.condition, root_consumers.condition,
              multi_use.condition)
#: rule conditions checked after pairing (they need the pairing's outcome)
SPACE_CONDITIONS = (root_consumers.space_condition,)
#: rules that pair spaces joined through a reshape splitting or merging dims (not a
#: projection of the loops), each proving the merge exact itself
REINDEXERS = (epilogue.reindex,)


def fuse(graph: Graph, aggressive: bool = True, attention: bool = True,
         horizontal_gemms: bool = False) -> FusionPlan:
    """Forms dispatches for ``graph``; ``aggressive=False`` is IREE's default behaviour;
    ``attention=False`` leaves the attention rule out (the 3-dispatch attention plan the
    search compares with the fused one). ``horizontal_gemms`` first rewrites sibling
    matmuls sharing an input into one wide GEMM (``compiler.fusion.horizontal``): the
    plan's ``graph`` is then the rewritten one, its outputs and every other tensor keeping
    their names. Off by default, so a caller pairing the plan with its own graph stays
    right; the search turns it on for its aggressive plan and scores the plan without it
    too."""
    pre = []
    if horizontal_gemms:
        graph, pre = horizontal.rewrite(graph)
    state = FusionState.start(graph, aggressive, CONDITIONS, SPACE_CONDITIONS, REINDEXERS)
    rules = RULES if attention else tuple(r for r in RULES if r.NAME != "attention")
    while any(rule.apply(state) for rule in rules):
        pass
    multi_use.recompute(state)
    plan = multi_result.build_plan(state)
    plan.decisions[:0] = pre
    return plan


def check_plan(graph: Graph, inputs: dict | None = None) -> list[tuple[str, float]]:
    """Fuses ``graph`` in both modes, runs each plan and returns (mode, max abs error)
    against the unfused reference; ``wavefuse verify`` reports these."""
    inputs = inputs if inputs is not None else random_inputs(graph)
    want = evaluate(graph, inputs)
    out = []
    for aggressive in (True, False):
        plan = fuse(graph, aggressive=aggressive)
        out.append((plan.mode, max_error(want, execute_plan(plan, inputs))))
    return out


__all__ = ["fuse", "check_plan", "RULES", "CONDITIONS", "SPACE_CONDITIONS", "REINDEXERS"]
