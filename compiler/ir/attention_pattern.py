"""The attention pattern in the graph: QK^T, a last-axis softmax and PV, with the roles of
their ops (:class:`AttentionPattern`), or the reason a candidate is not one.

Both the fusion rule (``compiler.fusion.attention``, which folds the three dispatches
into one) and the lowering (``compiler.lower.attention``, which finds the roles again in
the dispatch it is given) read it, so it lives here, below both: a lowering never
depends on a fusion pass. What the pattern requires and why is the rule's docstring; the
LDS bound it checks is the smallest tile the lowering offers, on every modelled arch,
because fusion runs before an arch is chosen.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusim.hw import ARCHES

from compiler.ir.graph import Graph

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


def visible(g: Graph, n: str, seen=None) -> str:
    """'' when tensor ``n`` is data the rule can see (scalar, leaf, views or elementwise
    chains over leaves), else why not."""
    op = g.op(n)
    if op.kind in ("input", "constant"):
        return ""
    if op.is_view or op.is_elementwise:
        for i in op.inputs:
            why = visible(g, i)
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
                why = visible(g, i)
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
    if sq > 1 and (m[sq - 1, 0] != 0 or not m[0, sq - 1] <= CAUSAL_MASKED):
        return False  # two corners decide most tensors (weights) without the full test
    upper = np.triu(np.ones((sq, sk), bool), 1)
    return bool(np.all(m[~upper] == 0) and np.all(m[upper] <= CAUSAL_MASKED))


def _reaches_matmul(g: Graph, n: str) -> bool:
    """True when ``n`` is, or is an elementwise chain over, a matmul result."""
    op = g.op(n)
    if op.kind == "matmul":
        return True
    if op.is_elementwise:
        return any(_reaches_matmul(g, i) for i in op.inputs)
    return False
