"""Lowering of row-reduction dispatches: softmax, layer norm, RMS norm in one kernel.

A row dispatch reduces tensors of shape ``(P..., C)`` over the last axis and computes
per-element ops over the same rows (the aggressive-fusion case: producers, sibling
reductions and consumers all share the rows). A reduction is a sum, mean, max, min or
product; it accumulates in its operand's register dtype from the combine's identity
(``identity``), so i32 rows (shape arithmetic, masks, ArgMax's positions) add, compare
and multiply as integers, wrapping at 32 bits. Each row is owned by one wave
(``mapping=wave``, several rows per workgroup) or one workgroup (``mapping=workgroup``).
The kernel runs in *phases*: the reductions that do not depend on each other share one
pass over the row (sibling fusion), a pass per dependency level; a final pass computes
and stores the per-element outputs.

Knobs:
- ``mapping``: wave | workgroup; ``workgroup``: threads per workgroup.
- ``vector``: 1, 2, 4 elements per access along the row.
- ``cache``: ``registers`` keeps the row's loaded values in registers across passes, so
  the input is read from memory once (legal when a thread holds at most 32 elements);
  ``reread`` loops over the row again in every pass (fewer registers, more loads — which
  the L2 usually catches).
- ``reduce``: ``wave`` (a wave reduction, printed as a shuffle butterfly), ``shuffle``
  (the explicit xor butterfly in the IR), ``lds_tree`` (a classic shared-memory tree with
  a barrier per level; workgroup mapping only).
- ``passes``: ``multi`` as above, or ``single``: one pass over the row for two dependent
  reductions: a mean of squared deviations from a mean becomes Welford's update (running
  count, mean and M2 per lane, merged across lanes with the parallel formula), and
  softmax's max then sum of exp(x - max) becomes the online softmax (running max and a
  rescaled running sum, merged across lanes).

Dispatches that do not have this shape fall back to :func:`lower_generic`: one thread per
element of the root, each reduction a serial loop — correct, and slow, and the search
will say so.
"""
from __future__ import annotations

import math

from gpusim import program as P
from gpusim.hw import Arch

from compiler.ir.graph import REDUCE, Graph
from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.emitter import (REG_DTYPE, RegisterNamer, ValueEmitter, align_index, iadd, imul, unravel)

NEG_INF = -3.0e38
REDUCE_KINDS = REDUCE
#: how each reduction combines two partials (a kernel-IR binary operator); a mean sums
COMBINE = {"reduce_sum": "add", "reduce_mean": "add", "reduce_max": "max",
           "reduce_min": "min", "reduce_prod": "mul"}
#: the same combine as a cross-lane kind (``WaveReduce`` has sum/max/min; prod is
#: combined by the shuffle butterfly whatever the ``reduce`` knob says)
LANE_KIND = {"add": "sum", "max": "max", "min": "min", "mul": "prod"}
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def identity(combine: str, reg_dtype: str) -> P.Const:
    """The accumulator's start value: the combine's identity in the register dtype (f32
    max/min start at -/+3e38, the finite stand-ins for -/+inf this lowering has always
    used; i32 at the type's extremes, so every row value replaces them)."""
    if reg_dtype == "i32":
        return P.i32({"add": 0, "mul": 1, "max": _I32_MIN, "min": _I32_MAX}[combine])
    return P.f32({"add": 0.0, "mul": 1.0, "max": NEG_INF, "min": -NEG_INF}[combine])


def _mean_of(em, total, count: int):
    """sum / count: an f32 multiply by 1/count; an i32 division truncating toward zero
    (numpy's integer mean cast back to i32, which the reference computes)."""
    if total.dtype == "i32":
        return em.assign(P.BinOp("div", total, P.i32(count)), "mean")
    return em.assign(total * (1.0 / count), "mean")


#: row elements one thread may keep with cache=registers: a budget of this lowering (the
#: passes need the rest of the registers), far under the Arch's VGPRs per lane
REGISTER_CACHE_ELEMS = 32


# ------------------------------------------------------------------------- analysis
class RowShape:
    """The rows of a dispatch: parallel shape P, row length C, its reductions by level."""

    def __init__(self, graph: Graph, dispatch):
        ops = [graph.op(n) for n in dispatch.ops]
        reds = [o for o in ops if o.kind in REDUCE_KINDS]
        if not reds:
            raise LoweringError("no reduction in this dispatch")
        shapes = {graph.op(r.inputs[0]).type.shape for r in reds}
        if len(shapes) != 1:
            raise LoweringError(f"reductions over differently shaped rows {sorted(shapes)}")
        full = shapes.pop()
        for r in reds:
            if r.attrs["axes"] != (len(full) - 1,):
                raise LoweringError(f"{r.name} reduces axes {r.attrs['axes']}, not the last")
            if not r.attrs["keepdims"] and any(r.name in graph.op(n).inputs
                                               for n in dispatch.ops):
                # without its unit dim, broadcasting would align the row index with the
                # columns of a consumer: not a per-row value
                raise LoweringError(f"{r.name} drops its reduced dim and is read inside "
                                    f"the dispatch")
        self.full = full
        self.parallel = full[:-1]
        self.C = full[-1]
        self.R = math.prod(self.parallel)
        for o in ops:
            if o.kind in REDUCE_KINDS:
                continue
            if o.is_view and o.kind != "broadcast" or o.is_contraction:
                raise LoweringError(f"{o.name} ({o.kind}) inside a row dispatch")
            if not _row_aligned(o.type.shape, full):
                raise LoweringError(f"{o.name} has shape {o.type.shape}, not a row shape of "
                                    f"{full}")
        self.reductions = reds
        level = {}
        for r in reds:  # topological order, so producers come first
            deps = _reduction_deps(graph, dispatch, r.inputs[0], {x.name for x in reds})
            level[r.name] = 1 + max((level[d] for d in deps), default=-1)
        self.level = level


def _row_aligned(shape, full):
    lead = len(full) - len(shape)
    if lead < 0:
        return False
    for d, s in enumerate(shape):
        f = full[lead + d]
        if s not in (1, f):
            return False
        if d + lead < len(full) - 1 and s == 1 and f != 1 and lead == 0:
            # a per-column parameter with a squeezed row dim is fine; a row dim of 1 in a
            # full-rank tensor would mean one row broadcast to all: still aligned
            pass
    return True


def _reduction_deps(graph, dispatch, tensor, reds, seen=None):
    seen = set() if seen is None else seen
    out = set()
    if tensor in seen or tensor not in dispatch.ops:
        return out
    seen.add(tensor)
    if tensor in reds:
        return {tensor}
    for i in graph.op(tensor).inputs:
        out |= _reduction_deps(graph, dispatch, i, reds, seen)
    return out


# ------------------------------------------------------------------------- lowering
def check_schedule(rows: RowShape, s: dict, arch: Arch) -> str:
    """'' when the row schedule ``s`` (every knob given) is legal on ``arch``, else why
    not: the one check the rows space (``compiler.schedule.rows``) and ``lower_rows``
    share."""
    ws, max_wg = arch.wave_size, arch.max_block_threads
    mapping, wg, vec = s["mapping"], int(s["workgroup"]), int(s["vector"])
    if mapping not in ("wave", "workgroup"):
        return f"mapping={mapping!r}; use wave or workgroup"
    if wg % ws or not ws <= wg <= max_wg:
        return f"workgroup={wg} must be a multiple of the wave size {ws}, at most {max_wg}"
    if vec not in (1, 2, 4) or rows.C % vec:
        return f"vector={vec} must be 1, 2 or 4 and divide the row ({rows.C})"
    if s["reduce"] == "lds_tree" and (mapping != "workgroup" or wg & (wg - 1)):
        return "reduce=lds_tree needs mapping=workgroup and a power-of-two workgroup"
    chunk = (ws if mapping == "wave" else wg) * vec
    if s["cache"] == "registers" and (rows.C % chunk or
                                      rows.C // chunk * vec > REGISTER_CACHE_ELEMS):
        return (f"cache=registers needs the row split evenly with at most "
                f"{REGISTER_CACHE_ELEMS} elements per thread (row {rows.C}, {chunk} per pass)")
    return ""


#: the knobs ``lower_rows`` assumes when a schedule leaves one out
ROW_DEFAULTS = {"mapping": "wave", "workgroup": 256, "vector": 1, "cache": "reread",
                "reduce": "wave", "passes": "multi"}


def lower_rows(graph: Graph, dispatch, schedule: dict, arch: Arch):
    rows = RowShape(graph, dispatch)
    s = {**ROW_DEFAULTS, **schedule}
    why = check_schedule(rows, s, arch)
    if why:
        raise LoweringError(why)
    ws = arch.wave_size
    mapping, wg, vec = s["mapping"], int(s["workgroup"]), int(s["vector"])
    cache, reduce, passes = s["cache"], s["reduce"], s["passes"]
    C, R = rows.C, rows.R
    T = ws if mapping == "wave" else wg
    nwaves = wg // ws
    rows_per_wg = nwaves if mapping == "wave" else 1
    chunk = T * vec
    n_it = ceil_div(C, chunk)
    ragged = C % chunk != 0

    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=True)
    stmts: list = []
    em.stmts = stmts
    if mapping == "wave":
        row = em.assign(iadd(imul(P.block_id(), rows_per_wg), P.wave_id()), "row", "i32")
        tcol = P.lane()
    else:
        row = em.assign(P.block_id(), "row", "i32")
        tcol = P.thread_id()
    pidx = unravel(row, rows.parallel) if rows.parallel else ()

    red_names = {r.name for r in rows.reductions}
    for r in rows.reductions:
        em.analyse_access(r.inputs[0], vec, stop_at=red_names)
    for o in dispatch.outputs:
        if o not in red_names:
            em.analyse_access(o, vec, stop_at=red_names)

    lds = []
    red_slot = {r.name: i for i, r in enumerate(rows.reductions)}
    groups = _phase_groups(graph, dispatch, rows, passes)

    def col_idxs(it, as_register=False):
        base = imul(iadd(imul(it, T), tcol), vec)
        if as_register:  # a named column lets the bounds check see the guard on it
            base = em.assign(base, "col", "i32")
        return base, [pidx + (iadd(base, j),) for j in range(vec)]

    def row_loop(body_fn, keep_cache):
        """Runs body_fn(it, idxs, guard) over the row's column chunks."""
        if cache == "registers":
            for it in range(n_it):
                base, idxs = col_idxs(P.i32(it))
                body_fn(idxs)
            return
        it_var = P.Var(em.regs.new("it"), "i32")
        inner: list = []
        with em.scope(inner):
            em.define(it_var)
            base, idxs = col_idxs(it_var, as_register=ragged)
            if ragged:
                guarded: list = []
                with em.scope(guarded):
                    body_fn(idxs)
                # "the last element of the vector is inside": C % vec == 0, so equivalent
                inner.append(P.If(base < C - vec + 1, tuple(guarded)))
            else:
                body_fn(idxs)
        em.stmts.append(P.For(it_var, P.i32(0), P.i32(n_it), 1, tuple(inner)))

    for group in groups:
        accs = {}
        for item in group:
            accs[item.name] = item.init(em)
        row_loop(lambda idxs: [item.accumulate(em, idxs, accs[item.name]) for item in group],
                 keep_cache=cache == "registers")
        for item in group:
            item.finish(em, accs[item.name], rows, ws, T, nwaves, mapping, reduce, lds,
                        red_slot, wg)

    # final pass: per-element outputs, then per-row outputs once
    row_outs = [o for o in dispatch.outputs if graph.op(o).type.shape[-1] == C
                and o not in red_names]
    per_row = [o for o in dispatch.outputs if o not in row_outs]

    def store_row(idxs):
        for o in row_outs:
            t = graph.op(o).type
            oidx = [align_index(ix, t.shape, rows.full) for ix in idxs]
            vals = em.values(o, oidx, vec)
            store = P.Store(o, em.offset(t, oidx[0]), tuple(vals) if vec > 1 else (vals[0],))
            if math.prod(t.shape[:-1]) < rows.R:
                # the same for every row (a per-column value): row 0 writes it
                em.stmts.append(P.If(row.eq(0), (store,)))
            else:
                em.stmts.append(store)

    if row_outs:
        row_loop(store_row, keep_cache=True)
    if per_row:
        st: list = []
        with em.scope(st, keep_cache=True):
            for o in per_row:
                t = graph.op(o).type
                ix = pidx + (P.i32(0),) if len(t.shape) == len(rows.full) else pidx
                v = em.value(o, align_index(ix, t.shape, t.shape) if ix else (P.i32(0),))
                em.stmts.append(P.Store(o, em.offset(t, ix if ix else (P.i32(0),)), (v,)))
        stmts.append(P.If(tcol.eq(0), tuple(st)))

    body = stmts
    grid = ceil_div(R, rows_per_wg)
    if mapping == "wave" and R % rows_per_wg:
        body = [stmts[0], P.If(row < R, tuple(stmts[1:]))]
    body = em.provably_aligned(tuple(body), ws)
    return P.Kernel(sanitize(dispatch.name), buffers(graph, dispatch), grid, wg, body,
                    lds=tuple(lds),
                    meta={"dispatch": dispatch.name, "kind": "row_reduction",
                          "schedule": dict(schedule), "rows": R, "cols": C,
                          "passes_over_row": len(groups) + (1 if row_outs else 0),
                          "loads": sorted(set(em.loads))})


# ------------------------------------------------------------------------- phase items
class _Reduce:
    """One reduction accumulated over the row (sum, mean, max, min, product), in the
    register dtype of its operand: i32 rows accumulate in i32 (wrapping, as the
    reference's cast back to i32 does)."""

    def __init__(self, graph, op):
        self.op = op
        self.name = op.name
        self.combine = COMBINE[op.kind]
        self.kind = LANE_KIND[self.combine]
        self.dtype = REG_DTYPE[graph.op(op.inputs[0]).type.dtype]
        self.count = graph.op(op.inputs[0]).type.shape[-1] if op.kind == "reduce_mean" \
            else None

    def init(self, em):
        return em.assign(identity(self.combine, self.dtype), "acc")

    def accumulate(self, em, idxs, acc):
        for v in em.values(self.op.inputs[0], idxs, len(idxs)):
            em.stmts.append(P.Assign(acc, P.BinOp(self.combine, acc, v)))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        total = cross_lane(em, acc, self.kind, ws, T, nwaves, mapping, reduce, lds,
                           slot[self.name], wg)
        if self.count is not None:
            total = _mean_of(em, total, self.count)
        em.bound[self.name] = lambda idx, r=total: r


class _Welford:
    """Single pass for mean((x - mean(x))^2): Welford's update per lane (count, running
    mean, running sum of squared deviations M2), merged across lanes with the parallel
    formula in sum form: mean = sum(n_i * mean_i) / C, then
    M2 = sum(M2_i + n_i * (mean_i - mean)^2). No large sums are subtracted, so a row whose
    mean is large next to its spread keeps its digits (unlike E[x^2] - E[x]^2). The two
    merges are dependent cross-lane sums; the row is still read once."""

    def __init__(self, graph, mean_op, var_op, x):
        self.mean, self.var, self.x = mean_op, var_op, x
        self.name = var_op.name
        self.C = graph.op(x).type.shape[-1]

    def init(self, em):
        return tuple(em.assign(P.f32(0.0), h) for h in ("count", "runmean", "m2"))

    def accumulate(self, em, idxs, acc):
        n, mean, m2 = acc
        for v in em.values(self.x, idxs, len(idxs)):
            em.stmts.append(P.Assign(n, n + 1.0))
            d = em.assign(v - mean, "dev")
            em.stmts.append(P.Assign(mean, mean + d / n))
            em.stmts.append(P.Assign(m2, P.fma(d, v - mean, m2)))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        n, mean, m2 = acc
        tot = cross_lane(em, em.assign(n * mean, "nmean"), "sum", ws, T, nwaves, mapping,
                         reduce, lds, slot[self.mean.name], wg)
        gmean = em.assign(tot * (1.0 / self.C), "mean")
        dev = em.assign(mean - gmean, "lanedev")
        part = em.assign(P.fma(n * dev, dev, m2), "m2part")
        tm2 = cross_lane(em, part, "sum", ws, T, nwaves, mapping, reduce, lds,
                         slot[self.var.name], wg)
        var = em.assign(tm2 * (1.0 / self.C), "var")
        em.bound[self.mean.name] = lambda idx, r=gmean: r
        em.bound[self.var.name] = lambda idx, r=var: r


class _OnlineSoftmax:
    """Single pass for max(x) then sum(exp(x - max)): running max, rescaled running sum."""

    def __init__(self, graph, max_op, sum_op, x):
        self.max, self.sum, self.x = max_op, sum_op, x
        self.name = sum_op.name

    def init(self, em):
        return (em.assign(P.f32(NEG_INF), "runmax"), em.assign(P.f32(0.0), "runsum"))

    def accumulate(self, em, idxs, acc):
        m, s = acc
        for v in em.values(self.x, idxs, len(idxs)):
            m2 = em.assign(P.maximum(m, v), "m")
            em.stmts.append(P.Assign(s, P.fma(s, P.exp(m - m2), P.exp(v - m2))))
            em.stmts.append(P.Assign(m, m2))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        m, s = acc
        gm = cross_lane(em, m, "max", ws, T, nwaves, mapping, reduce, lds, slot[self.max.name], wg)
        scaled = em.assign(s * P.exp(m - gm), "scaled")
        gs = cross_lane(em, scaled, "sum", ws, T, nwaves, mapping, reduce, lds,
                        slot[self.sum.name], wg)
        em.bound[self.max.name] = lambda idx, r=gm: r
        em.bound[self.sum.name] = lambda idx, r=gs: r


def _single_pass_pair(graph, dispatch, a, b):
    """Recognises the two rewrites of ``passes=single`` on primitive ops (f32/f16 rows:
    both rewrites divide)."""
    if graph.op(a.inputs[0]).type.dtype not in ("f32", "f16"):
        return None
    if a.kind == "reduce_mean" and b.kind == "reduce_mean":
        sq = graph.op(b.inputs[0])
        if sq.kind == "mul" and sq.inputs[0] == sq.inputs[1] and sq.inputs[0] in dispatch.ops:
            d = graph.op(sq.inputs[0])
            if d.kind == "sub" and d.inputs[1] == a.name and d.inputs[0] == a.inputs[0]:
                return _Welford(graph, a, b, a.inputs[0])
    if a.kind == "reduce_max" and b.kind == "reduce_sum":
        e = graph.op(b.inputs[0])
        if e.kind == "exp" and e.inputs[0] in dispatch.ops:
            d = graph.op(e.inputs[0])
            if d.kind == "sub" and d.inputs[1] == a.name and d.inputs[0] == a.inputs[0]:
                return _OnlineSoftmax(graph, a, b, a.inputs[0])
    return None


def _phase_groups(graph, dispatch, rows, passes):
    items = {r.name: _Reduce(graph, r) for r in rows.reductions}
    level = dict(rows.level)
    if passes == "single":
        merged = False
        for a in rows.reductions:
            for b in rows.reductions:
                if a.name in items and b.name in items and level[b.name] == level[a.name] + 1:
                    pair = _single_pass_pair(graph, dispatch, a, b)
                    if pair is not None:
                        del items[a.name]
                        items[b.name] = pair
                        level[b.name] = level[a.name]
                        merged = True
        if not merged:
            raise LoweringError("passes=single: no mean/variance or max/sum-of-exp pair to "
                                "merge in this dispatch")
    elif passes != "multi":
        raise LoweringError(f"passes={passes!r}; use multi or single")
    groups = {}
    for name, item in items.items():
        groups.setdefault(level[name], []).append(item)
    return [groups[k] for k in sorted(groups)]


def cross_lane(em, acc, kind, ws, T, nwaves, mapping, reduce, lds, slot, wg):
    """Combines per-lane partials into one value every thread of the row holds, in the
    partials' register dtype. ``kind`` is sum, max, min or prod; a product has no
    ``WaveReduce``, so ``reduce=wave`` prints it as the shuffle butterfly."""
    op = {"sum": "add", "max": "max", "min": "min", "prod": "mul"}[kind]
    dt = acc.dtype
    if reduce == "wave" and kind == "prod":
        reduce = "shuffle"
    if reduce == "lds_tree":
        name = f"tree{slot}"
        lds.append(P.LdsArray(name, dt, (wg,)))
        em.stmts.append(P.LdsStore(name, P.thread_id(), (acc,)))
        s = wg // 2
        while s >= 1:
            em.stmts.append(P.Barrier())
            a = P.Var(em.regs.new("ta"), dt)
            b = P.Var(em.regs.new("tb"), dt)
            em.stmts.append(P.If(P.thread_id() < s, (
                P.LdsLoad((a,), name, P.thread_id()),
                P.LdsLoad((b,), name, P.thread_id() + s),
                P.LdsStore(name, P.thread_id(), (P.BinOp(op, a, b),)),
            )))
            s //= 2
        em.stmts.append(P.Barrier())
        out = P.Var(em.regs.new("red"), dt)
        em.stmts.append(P.LdsLoad((out,), name, P.i32(0)))
        em.define(out)
        return out
    if reduce == "wave":
        total = P.Var(em.regs.new("wred"), dt)
        em.stmts.append(P.WaveReduce(total, acc, kind))
        em.define(total)
    elif reduce == "shuffle":
        total = em.assign(acc, "bfly")
        off = ws // 2
        while off >= 1:
            other = P.Var(em.regs.new("sh"), dt)
            em.stmts.append(P.Shuffle(other, total, "xor", off))
            em.stmts.append(P.Assign(total, P.BinOp(op, total, other)))
            off //= 2
    else:
        raise LoweringError(f"reduce={reduce!r}; use wave, shuffle or lds_tree")
    if mapping == "workgroup" and nwaves > 1:
        name = f"part{slot}"
        lds.append(P.LdsArray(name, dt, (nwaves,)))
        em.stmts.append(P.If(P.lane().eq(0), (P.LdsStore(name, P.wave_id(), (total,)),)))
        em.stmts.append(P.Barrier())
        # read the partials with the widest aligned LDS loads (what hipcc would merge them
        # into anyway: ds_read_b64/b128), then combine in registers
        width = 4 if nwaves % 4 == 0 else (2 if nwaves % 2 == 0 else 1)
        parts = []
        for w in range(0, nwaves, width):
            regs = tuple(P.Var(em.regs.new("pw"), dt) for _ in range(width))
            em.stmts.append(P.LdsLoad(regs, name, P.i32(w)))
            em.define(*regs)
            parts.extend(regs)
        comb = em.assign(parts[0], "comb")
        for t in parts[1:]:
            em.stmts.append(P.Assign(comb, P.BinOp(op, comb, t)))
        return comb
    return total


# ------------------------------------------------------------------------- fallback

#: the knobs ``lower_generic`` assumes when a schedule leaves one out
GENERIC_DEFAULTS = {"lowering": "generic", "workgroup": 256}


#: widths the generic loop tries for its innermost reduced axis, widest first
GENERIC_VECTORS = (4, 2)


def check_generic_schedule(s: dict, arch: Arch) -> str:
    """'' when the generic fallback's schedule ``s`` is legal on ``arch``, else why not:
    the one check its space (``compiler.schedule.generic``) and ``lower_generic`` share."""
    wg, max_wg = int(s["workgroup"]), arch.max_block_threads
    if not 1 <= wg <= max_wg:
        return f"workgroup={wg}: a workgroup holds 1 to {max_wg} threads"
    return ""


def lower_generic(graph: Graph, dispatch, schedule: dict, arch: Arch):
    """Thread e computes element e of every output (each output in its own row-major
    order, guarded by its size); each reduction is a serial loop over its axes. Outputs
    need not share an iteration space: a fallback must lower whatever fusion formed.

    Where a reduction's innermost loop runs along its input's last dimension and every
    boundary tensor it reads is consecutive and aligned in groups of ``w`` (proved on the
    offset tables, as for every vector access), the loop steps by ``w`` and reads each
    group with one ``w``-wide load, adding the elements in the serial order: hipcc merges
    such a loop's scalar loads into one ``global_load_dwordx4`` anyway, so the IR says
    what the hardware runs and the simulator prices the same access. The loops stay
    rolled in HIP (``#pragma unroll 1``), as the simulator runs them."""
    s = {**GENERIC_DEFAULTS, **schedule}
    why = check_generic_schedule(s, arch)
    if why:
        raise LoweringError(why)
    wg = int(s["workgroup"])
    n = max(graph.op(o).type.size for o in dispatch.outputs)
    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer())
    reductions = [r for r in dispatch.ops if graph.op(r).kind in REDUCE_KINDS]
    width = _generic_width(graph, em, reductions)

    def bind(r):
        op = graph.op(r)
        in_t = graph.op(op.inputs[0]).type
        axes = op.attrs["axes"]
        w = width.get(r, 1)

        def f(idx):
            full = []
            it = iter(idx)
            for d in range(in_t.rank):
                if d in axes:
                    full.append(None)
                    if op.attrs["keepdims"]:
                        next(it)
                else:
                    full.append(next(it))
            acc = em.assign(identity(COMBINE[op.kind], REG_DTYPE[in_t.dtype]), "acc")
            body: list = []
            loops = []
            with em.scope(body):
                for d in axes:
                    v = P.Var(em.regs.new(f"k{d}"), "i32")
                    loops.append((v, in_t.shape[d]))
                    full[d] = v
                last = len(full) - 1
                group = [tuple(full[:last]) + (iadd(full[last], j),) for j in range(w)]
                for x in em.values(op.inputs[0], group if w > 1 else [tuple(full)], w):
                    body.append(P.Assign(acc, P.BinOp(COMBINE[op.kind], acc, x)))
            stmt = tuple(body)
            for i, (v, size) in reversed(list(enumerate(loops))):
                step = w if i == len(loops) - 1 else 1
                # rolled: unrolled, hipcc re-forms the loads of neighbouring trips at
                # widths of its own (dwordx2 pieces across trips, seen on gpt2_2block)
                stmt = (P.For(v, P.i32(0), P.i32(size), step, stmt, rolled=True),)
            em.stmts.extend(stmt)
            if op.kind == "reduce_mean":
                return _mean_of(em, acc, math.prod(in_t.shape[d] for d in axes))
            return acc
        return f

    for n_ in reductions:
        em.bound[n_] = bind(n_)
    body: list = []
    em.stmts = body
    e = em.assign(iadd(imul(P.block_id(), wg), P.thread_id()), "e", "i32")
    for o in dispatch.outputs:
        t = graph.op(o).type
        stmts: list = []
        with em.scope(stmts):  # a fresh scope per output: its values live in its guard
            oix = unravel(e, t.shape)
            stmts.append(P.Store(o, em.offset(t, oix), (em.value(o, oix),)))
        body.extend(stmts if t.size == grid_threads(n, wg) else [P.If(e < t.size, tuple(stmts))])
    body = em.provably_aligned(tuple(body), arch.wave_size)
    return P.Kernel(sanitize(dispatch.name), buffers(graph, dispatch), ceil_div(n, wg), wg,
                    tuple(body), meta={"dispatch": dispatch.name, "kind": "generic",
                                       "schedule": dict(schedule),
                                       "vector_widths": dict(width)})


def _generic_width(graph: Graph, em: ValueEmitter, reductions: list) -> dict:
    """reduction -> the load width of its innermost loop (absent: 1). One width serves the
    whole dispatch (the emitter keeps one access kind per tensor): the widest of
    ``GENERIC_VECTORS`` that divides the length of every reduction whose innermost loop
    runs along its input's last dimension and at which every boundary read they make is
    a vector access."""
    along = []
    for r in reductions:
        op = graph.op(r)
        in_t = graph.op(op.inputs[0]).type
        if in_t.rank and max(op.attrs["axes"]) == in_t.rank - 1 and in_t.shape[-1] > 1:
            along.append((r, op.inputs[0], in_t.shape[-1]))
    for w in GENERIC_VECTORS:
        if not along or any(length % w for _, _, length in along):
            continue
        kinds = {}
        for _, src, _ in along:
            found = em.analyse_access(src, w, stop_at=tuple(reductions))
            for t, k in found.items():
                kinds[t] = k if kinds.get(t, k) == k else "scalar"
        if kinds and all(k in ("vector", "broadcast") for k in kinds.values()) \
                and any(k == "vector" for k in kinds.values()):
            return {r: w for r, _, _ in along}
        em._access.clear()  # this width's proofs do not hold: no vector loads
    return {}


def grid_threads(n: int, wg: int) -> int:
    return ceil_div(n, wg) * wg
