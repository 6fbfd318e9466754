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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusim.hw import ARCHES

from compiler.ir.graph import Graph
from compiler.fusion.core import Attempt, FusionState, Group

NAME = "attention"

#: LDS a workgroup may allocate on every modelled arch (each Arch's
#: lds_bytes_per_workgroup, 64 KiB on all three); the rule runs before an arch is chosen
ATTENTION_LDS_LIMIT = min(a.lds_bytes_per_workgroup for a in ARCHES.values())
#: the smallest tile the lowering offers (query rows, keys per block)
MIN_BLOCK = 16


def min_lds_bytes(dk: int, dv: int) -> int:
    """LDS of the smallest tile: Q, K, V blocks with a pad word per row, and P."""
    b = MIN_BLOCK
    return 4 * (b * (dk + 1) + b * (dk + 1) + b * (dv + 1) + b * (b + 1))


@dataclass(frozen=True)
class AttentionPattern:
    """The ops of one attention, named by their role."""
    qk: str            # S0 = matmul(Q, K')
    scores: str        # X = f(S0), what the softmax reads (may be qk itself)
    chain: tuple       # elementwise ops from S0 (exclusive) to X (inclusive), in order
    row_max: str
    sub: str
    exp: str
    row_sum: str
    probs: str         # P = E / L
    pv: str            # O = matmul(P, V)
    batch: tuple       # leading extents (batch, heads)
    sq: int            # query rows
    sk: int            # keys
    dk: int            # head dim of Q and K
    dv: int            # head dim of V
    causal: bool = False  # an additive constant hides every key after the query row

    @property
    def ops(self) -> tuple:
        return (self.qk, *self.chain, self.row_max, self.sub, self.exp, self.row_sum,
                self.probs, self.pv)


def _is_last_axis_rowreduce(g: Graph, n: str, kind: str) -> bool:
    op = g.op(n)
    if op.kind != kind or not op.attrs.get("keepdims"):
        return False
    rank = g.op(op.inputs[0]).type.rank
    return tuple(a % rank for a in op.attrs["axes"]) == (rank - 1,)


def _visible(g: Graph, n: str, seen=None) -> str:
    """'' when tensor ``n`` is data the rule can see (scalar, leaf, views or elementwise
    chains over leaves), else why not."""
    op = g.op(n)
    if op.kind in ("input", "constant"):
        return ""
    if op.is_view or op.is_elementwise:
        for i in op.inputs:
            why = _visible(g, i)
            if why:
                return why
        return ""
    return (f"the mask {n} is computed by a {op.kind} from data (another dispatch's result): "
            f"the rule fuses only masks it can see (graph inputs, constants, elementwise "
            f"chains over them), read block by block")


def match(g: Graph, pv: str):
    """The :class:`AttentionPattern` ending at contraction ``pv``, or a reason string
    (None when ``pv`` does not read a softmax at all: nothing to record)."""
    op = g.op(pv)
    if op.kind != "matmul":
        return None
    probs, v = op.inputs
    pop = g.op(probs)
    if pop.kind != "div":
        return None
    e, rs = pop.inputs
    if not _is_last_axis_rowreduce(g, rs, "reduce_sum") or g.op(rs).inputs[0] != e:
        return None
    if g.op(e).kind != "exp" or g.op(g.op(e).inputs[0]).kind != "sub":
        return None
    sub = g.op(e).inputs[0]
    x, rm = g.op(sub).inputs
    if not _is_last_axis_rowreduce(g, rm, "reduce_max") or g.op(rm).inputs[0] != x:
        return "the softmax's maximum is not the row maximum of the scores it subtracts from"
    # walk the score chain back to the QK^T contraction
    chain, n = [], x
    while g.op(n).kind != "matmul":
        cur = g.op(n)
        if cur.is_view:
            return (f"the softmax reads the scores through the view {n} ({cur.kind}): the "
                    f"rows of S would not be the rows the workgroup owns")
        if not cur.is_elementwise:
            return (f"the softmax's input {n} is a {cur.kind}, not an elementwise chain over "
                    f"a contraction")
        shape = cur.type.shape
        on_path = [i for i in cur.inputs if g.op(i).type.shape == shape
                   and g.op(i).kind not in ("input", "constant")
                   and _reaches_matmul(g, i)]
        if len(on_path) != 1:
            return (f"{n} combines two score tensors: the rule needs one path from the "
                    f"contraction to the softmax")
        for i in cur.inputs:
            if i != on_path[0]:
                why = _visible(g, i)
                if why:
                    return why
        chain.append(n)
        n = on_path[0]
    qk = n
    chain.reverse()
    s0 = g.op(qk).type.shape
    out = op.type.shape
    if len(s0) < 2 or s0 != g.op(x).type.shape:
        return f"the scores {x} do not have the contraction's shape {s0}"
    if s0[:-1] != out[:-1] or g.op(probs).type.shape != s0:
        return (f"parallel spaces differ: QK^T gives {s0[:-1]} (batch, heads, rows), PV "
                f"gives {out[:-1]}")
    q, kt = (g.op(i).type.shape for i in g.op(qk).inputs)
    vt = g.op(v).type.shape
    if tuple(q[:-2]) != tuple(s0[:-2]) or tuple(kt[:-2]) != tuple(s0[:-2]) or \
            tuple(vt[:-2]) != tuple(out[:-2]):
        return (f"a batch dimension of Q {q}, K' {kt} or V {vt} is broadcast: the "
                f"workgroups of the fused dispatch would not own whole rows of each")
    dk, dv = q[-1], out[-1]
    need = min_lds_bytes(dk, dv)
    if need > ATTENTION_LDS_LIMIT:
        return (f"head dims {dk}/{dv} need {need} B of LDS for the smallest tile "
                f"({MIN_BLOCK} rows x {MIN_BLOCK} keys), over the {ATTENTION_LDS_LIMIT} B a "
                f"workgroup may use: the 3-dispatch plan is kept")
    pat = AttentionPattern(qk, x, tuple(chain), rm, sub, e, rs, probs, pv,
                           tuple(s0[:-2]), s0[-2], s0[-1], dk, dv,
                           any(is_causal_mask(g, n) for n in chain))
    inner = set(pat.ops) - {pv}
    for n in sorted(inner):
        if n in g.outputs:
            return f"{n} is a graph output: the fused dispatch never writes S, P or the row statistics"
        outside = [u for u in g.users(n) if u not in inner | {pv}]
        if outside:
            return (f"{n} is also read by {', '.join(sorted(outside))}: the fused dispatch "
                    f"keeps it in registers and LDS only")
    return pat


#: the additive value at or below which a masked score counts as -inf: exp(-1e4 + s - m)
#: is 0 in f32 for any score range under ~9900, so skipping such keys changes nothing
CAUSAL_MASKED = -1.0e4


def is_causal_mask(g: Graph, n: str) -> bool:
    """``n`` adds a constant that is 0 at and below the diagonal and <= -1e4 above it (a
    GPT-2 causal mask): the lowering can then skip the key blocks after a query block."""

    op = g.op(n)
    if op.kind != "add":
        return False
    for i in op.inputs:
        c = g.op(i)
        while c.is_view and c.kind == "broadcast":
            c = g.op(c.inputs[0])
        if is_causal_constant(c):
            return True
    return False


def is_causal_constant(c) -> bool:
    """``c`` is a constant square triangle: 0 at and below the diagonal, <= -1e4 above."""
    if c.kind != "constant" or c.type.rank < 2:
        return False
    val = np.asarray(c.attrs["value"])
    sq, sk = val.shape[-2:]
    if sq != sk or val.size != sq * sk:
        return False
    m = val.reshape(sq, sk)
    upper = np.triu(np.ones((sq, sk), bool), 1)
    return bool(np.all(m[~upper] == 0) and np.all(m[upper] <= CAUSAL_MASKED))
    for i in op.inputs:
        c = g.op(i)
        while c.is_view and c.kind == "broadcast":
            c = g.op(c.inputs[0])
        if c.kind != "constant" or c.type.rank < 2:
            continue
        val = np.asarray(c.attrs["value"])
        sq, sk = val.shape[-2:]
        if sq != sk or val.size != sq * sk:
            continue
        m = val.reshape(sq, sk)
        upper = np.triu(np.ones((sq, sk), bool), 1)
        if np.all(m[~upper] == 0) and np.all(m[upper] <= CAUSAL_MASKED):
            return True
    return False


def _reaches_matmul(g: Graph, n: str) -> bool:
    """True when ``n`` is, or is an elementwise chain over, a matmul result."""
    op = g.op(n)
    if op.kind == "matmul":
        return True
    if op.is_elementwise:
        return any(_reaches_matmul(g, i) for i in op.inputs)
    return False


def apply(st: FusionState) -> bool:
    """Merges the three (or, conservative, four) groups of one attention into one."""
    g = st.graph
    for grp in st.sorted_groups():
        if grp.closed or g.op(grp.root).kind != "matmul":
            continue
        pat = match(g, grp.root)
        if pat is None:
            continue
        prob = g.op(grp.root).inputs[0]
        if isinstance(pat, str):
            st.record(NAME, prob, grp.root, False, pat)
            continue
        if not st.aggressive:
            st.record(NAME, prob, pat.pv, False,
                      "conservative mode keeps one root per dispatch: QK^T, the softmax and "
                      "PV stay apart (aggressive fusion forms one attention dispatch)")
            continue
        groups = {st.owner[n] for n in pat.ops if n in st.owner}
        allowed = set(pat.ops)
        for gid in groups:
            for n in st.groups[gid].ops:
                if n in allowed:
                    continue
                if gid == grp.id or (g.op(n).is_elementwise and not _visible(g, n)):
                    continue   # PV's epilogue, or a visible mask chain fused into QK^T
                st.record(NAME, prob, pat.pv, False,
                          f"{n} shares a dispatch with part of the attention but is not "
                          f"part of it")
                break
            else:
                continue
            break
        else:
            _merge(st, grp, [st.groups[i] for i in groups if i != grp.id], pat)
            return True
    return False


def condition(st: FusionState, at: Attempt) -> str | None:
    """An attention dispatch takes no further ops (checked on every merge)."""
    if at.prod.closed == NAME or at.cons.closed == NAME:
        return ("an attention dispatch is closed: its lowering streams keys through LDS "
                "and takes no further ops")
    return None


def _merge(st: FusionState, pv_group: Group, others: list, pat: AttentionPattern) -> None:
    """Folds the QK^T and softmax groups into PV's: one dispatch, kind ``attention``.
    No cycle can appear: none of the folded ops has a reader outside the attention."""
    for o in others:
        st.absorb(pv_group, o)
    pv_group.closed = NAME
    space = "x".join(map(str, pat.batch + (pat.sq,)))
    reason = (f"one attention dispatch over (batch, heads, query rows) {space}: QK^T, the "
              f"row softmax over {pat.sk} keys and PV line up; S and P stay in registers/LDS "
              f"(online softmax, keys streamed in blocks)")
    prob = st.graph.op(pat.pv).inputs[0]
    st.record(NAME, pat.qk, pat.row_max, True, reason)
    st.record(NAME, prob, pat.pv, True, reason)
