"""Attention in one dispatch: a contraction, the row softmax over its output and the
contraction that consumes the normalised result fuse into one dispatch (FlashAttention).

``O = softmax(f(Q K^T)) V`` arrives as three dispatches (QK^T with its epilogue ``f``, the
softmax, PV) because a reduction never joins a contraction's dispatch: the softmax needs a
whole row of ``S = f(Q K^T)`` before it can normalise any element. The online softmax
removes that need. A workgroup owns a block of query rows and walks the keys block by
block, keeping per row a running maximum ``m`` and sum ``l``; when a new block raises the
maximum, everything accumulated so far is rescaled by ``exp(m_old - m_new)``, so S and
the probabilities never leave registers and LDS (``compiler.lower.attention``).

The rule fires on a PV contraction ``matmul(P, V)`` when, walking back from it, it finds
exactly ``P = E / reduce_sum(E)``, ``E = exp(X - reduce_max(X))`` (both reductions over
the last axis, keepdims) and ``X`` an elementwise chain over ``S0 = matmul(Q, K')`` with
the same leading (batch, heads) and row extents as PV's output: the parallel spaces
(batch, heads, query rows) of the three dispatches line up one to one, and the key axis
is the serial loop of all three. The chain ``f`` may scale (a scalar constant), add a
mask and apply any elementwise op, as long as every other operand is one the rule can
see: a scalar, a graph input or constant (an additive BERT mask broadcast over the query
rows, a causal GPT-2 mask as a constant triangle), or an elementwise chain over those,
each read block by block at the (batch, row, key) point. A causal constant (0 on and
below the diagonal, <= -1e4 above) is recognised (``is_causal_mask``): the lowering then
skips the key blocks after each query block, half the work, as FlashAttention's causal
mode does. None of S, the statistics or P may be needed outside (a graph output or
another reader).

It stays three dispatches, with the reason recorded, when: the mode is conservative (one
root per dispatch); a mask is computed by another dispatch from data (a reduction or
contraction result the rule cannot see through); the softmax is not over the key axis or
reads the scores through a view; the parallel extents differ (a broadcast P); or the
smallest tile (16 query rows, 16 keys) of the head dims does not fit the 64 KiB LDS a
workgroup may use on every modelled arch (``ATTENTION_LDS_LIMIT``). The 3-dispatch plan
remains a candidate of the search, which picks by predicted time.

The pattern itself (``match``, ``is_causal_mask``, ``ATTENTION_LDS_LIMIT``) is in
``compiler.ir.attention_pattern``, which the lowering reads too.
"""
from __future__ import annotations

from compiler.fusion.core import Attempt, FusionState, Group
from compiler.ir.attention_pattern import AttentionPattern, match, visible

NAME = "attention"

def apply(state: FusionState) -> bool:
    """Merges the three (or, conservative, four) groups of one attention into one."""
    g = state.graph
    for grp in state.sorted_groups():
        if grp.closed or g.op(grp.root).kind != "matmul":
            continue
        pat = match(g, grp.root)
        if pat is None:
            continue
        prob = g.op(grp.root).inputs[0]
        if isinstance(pat, str):
            state.record(NAME, prob, grp.root, False, pat)
            continue
        if not state.aggressive:
            state.record(NAME, prob, pat.pv, False,
                      "conservative mode keeps one root per dispatch: QK^T, the softmax and "
                      "PV stay apart (aggressive fusion forms one attention dispatch)")
            continue
        groups = {state.owner[n] for n in pat.ops if n in state.owner}
        allowed = set(pat.ops)
        for gid in groups:
            for n in state.groups[gid].ops:
                if n in allowed:
                    continue
                if gid == grp.id or (g.op(n).is_elementwise and not visible(g, n)):
                    continue   # PV's epilogue, or a visible mask chain fused into QK^T
                state.record(NAME, prob, pat.pv, False,
                          f"{n} shares a dispatch with part of the attention but is not "
                          f"part of it")
                break
            else:
                continue
            break
        else:
            _merge(state, grp, [state.groups[i] for i in groups if i != grp.id], pat)
            return True
    return False


def condition(state: FusionState, attempt: Attempt) -> str | None:
    """An attention dispatch takes no further ops (checked on every merge)."""
    if attempt.prod.closed == NAME or attempt.cons.closed == NAME:
        return ("an attention dispatch is closed: its lowering streams keys through LDS "
                "and takes no further ops")
    return None


def _merge(state: FusionState, pv_group: Group, others: list, pat: AttentionPattern) -> None:
    """Folds the QK^T and softmax groups into PV's: one dispatch, kind ``attention``.
    No cycle can appear: none of the folded ops has a reader outside the attention."""
    for o in others:
        state.absorb(pv_group, o)
    pv_group.closed = NAME
    space = "x".join(map(str, pat.batch + (pat.sq,)))
    reason = (f"one attention dispatch over (batch, heads, query rows) {space}: QK^T, the "
              f"row softmax over {pat.sk} keys and PV line up; S and P stay in registers/LDS "
              f"(online softmax, keys streamed in blocks)")
    prob = state.graph.op(pat.pv).inputs[0]
    state.record(NAME, pat.qk, pat.row_max, True, reason)
    state.record(NAME, prob, pat.pv, True, reason)
