"""Lowering of row-reduction dispatches: softmax, layer norm, RMS norm in one kernel.

A row dispatch reduces tensors of shape ``(P..., C)`` over the last axis and computes
per-element ops over the same rows (the aggressive-fusion case: producers, sibling
reductions and consumers all share the rows). A reduction is a sum, mean, max, min or
product; it accumulates in its operand's register dtype from the combine's identity
(``identity``), so i32 rows (shape arithmetic, masks, ArgMax's positions) add, compare
and multiply as integers, wrapping at 32 bits. Each row is owned by one wave
(``mapping=wave``, several rows per workgroup) or one workgroup (``mapping=workgroup``).
The reduced axes may be any one consecutive block (``RowShape``): the last ones give
contiguous rows (a pool over H and W of NCHW is a row of H*W); others give strided rows
(a norm over the channels of NCHW), which ``mapping=columns`` reads with lanes across
consecutive rows and the reduced axis split over the workgroup (``_lower_columns``).
The kernel runs in *phases*: the reductions that do not depend on each other share one
pass over the row (sibling fusion), a pass per dependency level; a final pass computes
and stores the per-element outputs.

Knobs:
- ``mapping``: wave | workgroup | columns; ``workgroup``: threads per workgroup.
- ``row_lanes`` (columns only): lanes of a wave on consecutive rows (16, 32, 64).
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

from gpusim import program
from gpusim.hw import Arch

from compiler.ir.graph import REDUCE, Graph
from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.layout import unit_only_reshape
from compiler.lower.loadorder import loads_early
from compiler.lower.emitter import (REG_DTYPE, RegisterNamer, ValueEmitter, align_index, iadd, idiv, imod, imul, unravel)

NEG_INF = -3.0e38
REDUCE_KINDS = REDUCE
#: how each reduction combines two partials (a kernel-IR binary operator); a mean sums
COMBINE = {"reduce_sum": "add", "reduce_mean": "add", "reduce_max": "max",
           "reduce_min": "min", "reduce_prod": "mul"}
#: the same combine as a cross-lane kind (``WaveReduce`` has sum/max/min; prod is
#: combined by the shuffle butterfly whatever the ``reduce`` knob says)
LANE_KIND = {"add": "sum", "max": "max", "min": "min", "mul": "prod"}
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def identity(combine: str, reg_dtype: str) -> program.Const:
    """The accumulator's start value: the combine's identity in the register dtype (f32
    max/min start at -/+3e38, the finite stand-ins for -/+inf this lowering has always
    used; i32 at the type's extremes, so every row value replaces them)."""
    if reg_dtype == "i32":
        return program.i32({"add": 0, "mul": 1, "max": _I32_MIN, "min": _I32_MAX}[combine])
    return program.f32({"add": 0.0, "mul": 1.0, "max": NEG_INF, "min": -NEG_INF}[combine])


def _mean_of(em, total, count: int):
    """sum / count: an f32 multiply by 1/count; an i32 division truncating toward zero
    (numpy's integer mean cast back to i32, which the reference computes)."""
    if total.dtype == "i32":
        return em.assign(program.BinOp("div", total, program.i32(count)), "mean")
    return em.assign(total * (1.0 / count), "mean")


#: row elements one thread may keep with cache=registers: a budget of this lowering (the
#: passes need the rest of the registers), far under the Arch's VGPRs per lane
REGISTER_CACHE_ELEMS = 32


# ------------------------------------------------------------------------- analysis
class RowShape:
    """The rows of a dispatch: the reductions' input shape ``full`` split as
    ``outer + red + inner`` around the reduced axes (one consecutive block, the same for
    every reduction). A row is one (outer, inner) index; its ``C = prod(red)`` elements
    are reduced. ``inner`` is empty when the reduced axes are the last ones (softmax, a
    norm over the last axis, a global pool over H and W of NCHW): the row is contiguous.
    Otherwise (a norm over the channels of NCHW) consecutive rows are the contiguous
    ones and a row is strided, which only ``mapping=columns`` reads coalesced."""

    def __init__(self, graph: Graph, dispatch):
        ops = [graph.op(n) for n in dispatch.ops]
        reds = [o for o in ops if o.kind in REDUCE_KINDS]
        if not reds:
            raise LoweringError("no reduction in this dispatch")
        shapes = {graph.op(r.inputs[0]).type.shape for r in reds}
        if len(shapes) != 1:
            raise LoweringError(f"reductions over differently shaped rows {sorted(shapes)}")
        full = shapes.pop()
        axes = {tuple(sorted(r.attrs["axes"])) for r in reds}
        if len(axes) != 1:
            raise LoweringError(f"reductions over different axes {sorted(axes)}")
        axes = axes.pop()
        if not axes or list(axes) != list(range(axes[0], axes[-1] + 1)):
            raise LoweringError(f"reduced axes {axes} are not one consecutive block")
        for r in reds:
            if not r.attrs["keepdims"] and any(r.name in graph.op(n).inputs
                                               for n in dispatch.ops):
                # without its unit dims, broadcasting would align the row index with the
                # columns of a consumer: not a per-row value
                raise LoweringError(f"{r.name} drops its reduced dim and is read inside "
                                    f"the dispatch")
        self.graph, self.dispatch = graph, dispatch
        self.full = full
        self.axes = axes
        self.outer = full[:axes[0]]
        self.red = full[axes[0]:axes[-1] + 1]
        self.inner = full[axes[-1] + 1:]
        self.trailing = not self.inner
        # the last-axis case keeps its historical names: parallel = every other dim
        self.parallel = self.outer + self.inner
        self.C = math.prod(self.red)
        self.inner_size = math.prod(self.inner)
        self.R = math.prod(self.parallel)
        #: (perm) when the rows are read through one transpose of a tensor in memory
        #: (``_through_transpose``): ``outer``, ``red`` and ``inner`` are then the
        #: transposed tensor's, and ``logical`` maps an index in that order back
        self.perm = _through_transpose(graph, dispatch, ops, full, axes, reds)
        if self.perm is not None:
            phys = graph.op(next(o for o in ops if o.kind == "transpose").inputs[0]).type.shape
            paxes = sorted(self.perm[a] for a in axes)
            self.outer = tuple(phys[:paxes[0]])
            self.red = tuple(phys[paxes[0]:paxes[-1] + 1])
            self.inner = tuple(phys[paxes[-1] + 1:])
            self.trailing = False
            self.parallel = self.outer + self.inner
            self.inner_size = math.prod(self.inner)
        for o in ops:
            if o.kind in REDUCE_KINDS:
                continue
            if o.is_view and o.kind != "broadcast" and not _unit_reshape(graph, o) \
                    and not (o.kind == "transpose" and self.perm is not None) \
                    or o.is_contraction:
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

    def per_element(self, shape) -> bool:
        """Whether a tensor of ``shape`` (broadcast against the rows) varies along the
        reduced axes: stored per element, not once per row."""
        lead = len(self.full) - len(shape)
        return any(shape[a - lead] != 1 for a in self.axes if a - lead >= 0)

    def row_index(self, outer_idx, inner_idx, out_shape) -> tuple:
        """The index of a per-row output of ``out_shape`` (keepdims: zeros over the
        reduced axes; without: outer and inner only)."""
        if len(out_shape) == len(self.full):
            return self.logical(tuple(outer_idx) + (program.i32(0),) * len(self.red)
                                + tuple(inner_idx))
        return tuple(outer_idx) + tuple(inner_idx)

    def logical(self, idx: tuple) -> tuple:
        """An element index in ``outer + red + inner`` order as an index of ``full`` (the
        same tuple, unless the rows are read through a transpose)."""
        if self.perm is None:
            return idx
        return tuple(idx[p] for p in self.perm)


def _unit_reshape(graph, op) -> bool:
    """A reshape that only adds or drops unit dims (GPT-2's exported final layer norm ends
    in a no-op reshape to the output's shape): the emitter maps its index without a
    div/mod, and the row-shape check below still applies to its result, so the rows
    lowering keeps the dispatch instead of falling back to a thread per element."""
    return op.kind == "reshape" and unit_only_reshape(graph, op)


def _through_transpose(graph, dispatch, ops, full, axes, reds):
    """The ``perm`` of the one transpose view a dispatch reads its rows through, or None.

    A norm over the channels written channels-last in the model but stored NCHW
    (ConvNeXt's LayerNorm: ``permute(0, 2, 3, 1)`` of a convolution's output, then a
    reduction over the last axis) reduces a contiguous-looking axis that is strided in
    memory: lanes along it would read one element per cache line. Seen through the
    transpose it is a norm over axis 1 of NCHW, which ``mapping=columns`` reads coalesced
    (lanes on consecutive pixels). The rule applies when the dispatch holds exactly one
    transpose, of a tensor it reads from memory, to the reductions' input shape, the
    reduced axes land on one consecutive block of the stored tensor that is not its last,
    and every reduction keeps its dims (so a per-row output is indexed like an element)."""
    views = [o for o in ops if o.kind == "transpose"]
    if len(views) != 1:
        return None
    t = views[0]
    perm = tuple(int(p) for p in t.attrs["perm"])
    if t.inputs[0] not in dispatch.inputs or tuple(t.type.shape) != tuple(full):
        return None
    paxes = sorted(perm[a] for a in axes)
    if paxes != list(range(paxes[0], paxes[-1] + 1)) or paxes[-1] == len(full) - 1:
        return None
    if not all(r.attrs["keepdims"] for r in reds):
        return None
    return perm


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
    row_lanes = int(s["row_lanes"])
    if mapping not in ("wave", "workgroup", "columns"):
        return f"mapping={mapping!r}; use wave, workgroup or columns"
    if wg % ws or not ws <= wg <= max_wg:
        return f"workgroup={wg} must be a multiple of the wave size {ws}, at most {max_wg}"
    if mapping == "columns":
        return (_check_columns(rows, s, ws, wg, vec, row_lanes)
                or _check_row_splits(rows, s, wg, vec))
    why = _check_row_splits(rows, s, wg, vec)
    if why:
        return why
    if row_lanes != ROW_DEFAULTS["row_lanes"]:
        return "row_lanes is a knob of mapping=columns only"
    if not rows.trailing:
        return (f"mapping={mapping} reads a strided row (axes {rows.axes} of {rows.full} are "
                f"not the last: a lane per element of a row, lanes {rows.inner_size} "
                f"elements apart); use mapping=columns")
    if vec not in (1, 2, 4) or rows.C % vec or rows.red[-1] % vec:
        return f"vector={vec} must be 1, 2 or 4 and divide the row ({rows.red})"
    if s["reduce"] == "lds_tree" and (mapping != "workgroup" or wg & (wg - 1)):
        return "reduce=lds_tree needs mapping=workgroup and a power-of-two workgroup"
    chunk = (ws if mapping == "wave" else wg) * vec
    if s["cache"] == "registers" and (rows.C % chunk or
                                      rows.C // chunk * vec > REGISTER_CACHE_ELEMS):
        return (f"cache=registers needs the row split evenly with at most "
                f"{REGISTER_CACHE_ELEMS} elements per thread (row {rows.C}, {chunk} per pass)")
    return ""


def _check_row_splits(rows: RowShape, s: dict, wg: int, vec: int) -> str:
    """The rules of two-stage rows (``row_splits`` = P > 1, :func:`lower_rows`)."""
    P = s.get("row_splits", 1)
    if P not in ROW_SPLITS:
        return f"row_splits={P!r} not in {ROW_SPLITS}"
    if P == 1:
        return ""
    if s["mapping"] not in ("workgroup", "columns"):
        return (f"row_splits={P}: two-stage rows split a row over workgroups "
                f"(mapping=workgroup or columns)")
    if s["cache"] != "reread":
        return f"row_splits={P}: each split reads its columns again in the second kernel (cache=reread)"
    try:
        groups = _phase_groups(rows.graph, rows.dispatch, rows, s["passes"])
    except LoweringError as e:
        return str(e)
    if len(groups) != 1:
        return (f"row_splits={P}: two-stage rows need every reduction in one pass over the "
                f"row ({len(groups)} dependency levels; passes=single merges a mean and "
                f"variance or a max and sum of exp)")
    if any(REG_DTYPE[rows.graph.op(r.inputs[0]).type.dtype] != "f32" for r in rows.reductions):
        return f"row_splits={P}: the f32 workspace holds f32 partials only (an i32 row)"
    if s["mapping"] == "columns":  # a chunk: one element per slice of the workgroup
        step = wg // int(s["row_lanes"])
        if ceil_div(P, step) > COLUMN_STATES_PER_THREAD:
            return (f"row_splits={P}: the combine spreads a row's states over its {step} "
                    f"slices, at most {COLUMN_STATES_PER_THREAD} per thread")
    else:
        step = wg * vec
    chunks = ceil_div(rows.C, step)
    if (P - 1) * ceil_div(chunks, P) >= chunks:
        return (f"row_splits={P}: the row's {chunks} chunks of {step} columns leave a "
                f"split without columns")
    return ""


#: lanes of a wave on consecutive rows that ``mapping=columns`` may use: at 16 f32 lanes
#: a wave's load still covers whole 64-byte segments
COLUMN_ROW_LANES = (16, 32, 64)


def _check_columns(rows: RowShape, s: dict, ws: int, wg: int, vec: int, row_lanes: int) -> str:
    """The rules of ``mapping=columns`` (see ``_lower_columns``)."""
    if rows.trailing:
        return (f"mapping=columns needs strided rows; the reduced axes {rows.axes} of "
                f"{rows.full} are the last, so a row is contiguous (use wave or workgroup)")
    if row_lanes not in COLUMN_ROW_LANES or row_lanes > ws or ws % row_lanes:
        return (f"row_lanes={row_lanes} must be one of {COLUMN_ROW_LANES} and divide the "
                f"wave size {ws}")
    if vec != 1:
        # simplification: a lane owns one row, so a vector would need one accumulator per
        # row it holds; not built (a wave's scalar loads are already whole cache lines)
        return "mapping=columns loads one element per lane (vector=1)"
    if s["reduce"] != ROW_DEFAULTS["reduce"]:
        return (f"reduce={s['reduce']} combines lanes of one row; with mapping=columns a lane "
                f"owns a row and the slices' partials meet in LDS (leave reduce={ROW_DEFAULTS['reduce']})")
    slices = wg // row_lanes
    if s["cache"] == "registers" and (rows.C % slices or
                                      rows.C // slices > REGISTER_CACHE_ELEMS):
        return (f"cache=registers needs the reduced axis split evenly with at most "
                f"{REGISTER_CACHE_ELEMS} elements per thread ({rows.C} over {slices} slices)")
    return ""


#: the knobs ``lower_rows`` assumes when a schedule leaves one out
ROW_DEFAULTS = {"mapping": "wave", "workgroup": 256, "vector": 1, "cache": "reread",
                "reduce": "wave", "passes": "multi", "row_lanes": 64, "row_splits": 1}
#: two-stage ``mapping=columns``: states of a row one combine thread holds in registers
#: (loaded together; more splits per slice are refused)
COLUMN_STATES_PER_THREAD = 4
#: row_splits values (two-stage rows, :func:`_check_row_splits`)
ROW_SPLITS = (1, 2, 4, 8, 16, 32, 64)


def lower_rows(graph: Graph, dispatch, schedule: dict, arch: Arch):
    """One kernel per row-reduction dispatch; with ``row_splits`` = P > 1 (two-stage rows,
    for few long rows that one workgroup each cannot spread over the GPU) a
    ``KernelSequence``:

    1. partial (``<dispatch>_rows_partial``): R x P workgroups; workgroup (row, split)
       reduces its split's column chunks (P contiguous shares of the row's chunks) and
       thread 0 stores the workgroup's partial state to the f32 workspace
       ``[row][split][field]``: a sum/max/min/product's partial, Welford's (count, mean,
       M2), online softmax's (max, sum of exp(x - max));
    2. combine (``<dispatch>_rows_combine``): every thread of workgroup (row, split)
       loads the row's P partial states (the same words: broadcast loads) and combines
       them in split order (deterministic; the same result in every workgroup of the
       row): sums add, Welford's parallel merge, the softmax's rescale by exp(m_p - M);
       then the per-element outputs of its split's columns and, in split 0, the per-row
       outputs, so the epilogue runs once per element. Without per-element outputs (a
       pool) the combine runs one workgroup per row.

    ``mapping=columns`` splits the same way (:func:`_lower_columns`): the workgroups of a
    block of ``row_lanes`` rows each take P contiguous shares of the reduced axis.
    """
    rows = RowShape(graph, dispatch)
    s = {**ROW_DEFAULTS, **schedule}
    why = check_schedule(rows, s, arch)
    if why:
        raise LoweringError(why)
    P = int(s["row_splits"])
    build = _lower_columns if s["mapping"] == "columns" else _rows_kernel
    if P == 1:
        return build(graph, dispatch, rows, s, schedule, arch)
    partial = build(graph, dispatch, rows, s, schedule, arch, stage="partial")
    combine = build(graph, dispatch, rows, s, schedule, arch, stage="combine")
    ws = partial.buffer(rows_workspace_name(dispatch))
    meta = {**combine.meta, "row_splits": P, "workspace_bytes": ws.size * 4}
    return program.KernelSequence(sanitize(f"{dispatch.name}_rows"), (partial, combine),
                                  (program.Buffer(ws.name, "f32", ws.shape, "out"),), meta)


def rows_workspace_name(dispatch) -> str:
    return sanitize(f"{dispatch.name}_row_partials")


def _rows_kernel(graph: Graph, dispatch, rows: RowShape, s: dict, schedule: dict, arch: Arch,
                 stage=None):
    """The wave/workgroup-mapped row kernel; ``stage`` None (one kernel), "partial" or
    "combine" (the two kernels of ``row_splits`` > 1, see :func:`lower_rows`)."""
    ws = arch.wave_size
    mapping, wg, vec = s["mapping"], int(s["workgroup"]), int(s["vector"])
    cache, reduce, passes = s["cache"], s["reduce"], s["passes"]
    C, R = rows.C, rows.R
    P = int(s["row_splits"]) if stage else 1
    T = ws if mapping == "wave" else wg
    nwaves = wg // ws
    rows_per_wg = nwaves if mapping == "wave" else 1
    chunk = T * vec
    chunks = ceil_div(C, chunk)
    n_it = ceil_div(chunks, P)      # this split's column chunks (all of them when P = 1)
    ragged = C % chunk != 0 or n_it * P != chunks

    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=True)
    stmts: list = []
    em.stmts = stmts
    groups = _phase_groups(graph, dispatch, rows, passes)
    red_names = {r.name for r in rows.reductions}
    row_outs = [o for o in dispatch.outputs if rows.per_element(graph.op(o).type.shape)
                and o not in red_names]
    per_row = [o for o in dispatch.outputs if o not in row_outs]
    if stage == "combine" and not row_outs:
        P_grid = 1   # a pool: nothing per element, one workgroup per row combines
    else:
        P_grid = P
    if mapping == "wave":
        row = em.assign(iadd(imul(program.block_id(), rows_per_wg), program.wave_id()), "row", "i32")
        tcol = program.lane()
    elif P_grid > 1:
        row = em.assign(idiv(program.block_id(), P_grid), "row", "i32")
        tcol = program.thread_id()
    else:
        row = em.assign(program.block_id(), "row", "i32")
        tcol = program.thread_id()
    split = em.assign(imod(program.block_id(), P_grid), "split", "i32") if P_grid > 1 \
        else program.i32(0)
    pidx = unravel(row, rows.parallel) if rows.parallel else ()
    split_red = len(rows.red) > 1  # a trailing block of axes (a pool over H and W)

    for r in rows.reductions:
        em.analyse_access(r.inputs[0], vec, stop_at=red_names)
    for o in dispatch.outputs:
        if o not in red_names:
            em.analyse_access(o, vec, stop_at=red_names)

    lds = []
    red_slot = {r.name: i for i, r in enumerate(rows.reductions)}

    def col_idxs(it, as_register=False):
        if P_grid > 1:
            it = iadd(imul(split, n_it), it)
        base = imul(iadd(imul(it, T), tcol), vec)
        if as_register:  # a named column lets the bounds check see the guard on it
            base = em.assign(base, "col", "i32")
        if split_red:
            return base, [tuple(pidx) + tuple(unravel(iadd(base, j), rows.red))
                          for j in range(vec)]
        return base, [pidx + (iadd(base, j),) for j in range(vec)]

    def row_loop(body_fn, keep_cache):
        """Runs body_fn(it, idxs, guard) over the row's (this split's) column chunks."""
        if cache == "registers":
            for it in range(n_it):
                base, idxs = col_idxs(program.i32(it))
                body_fn(idxs)
            return
        it_var = program.Var(em.regs.new("it"), "i32")
        inner: list = []
        with em.scope(inner):
            em.define(it_var)
            base, idxs = col_idxs(it_var, as_register=ragged)
            if ragged:
                guarded: list = []
                with em.scope(guarded):
                    body_fn(idxs)
                # "the last element of the vector is inside": C % vec == 0, so equivalent
                inner.append(program.If(base < C - vec + 1, tuple(guarded)))
            else:
                body_fn(idxs)
        em.stmts.append(program.For(it_var, program.i32(0), program.i32(n_it), 1, tuple(inner)))

    workspace = None
    if stage:
        # each item's partial state is one aligned vector of 1, 2 or 4 words (Welford's
        # three padded to four): thread 0 stores it with one store, as hipcc would merge
        # them anyway; widest first, so every offset is a multiple of its width
        (group,) = groups
        width = {item.name: {1: 1, 2: 2, 3: 4}[item.fields] for item in group}
        group = sorted(group, key=lambda item: -width[item.name])
        offset, fields = {}, 0
        for item in group:
            offset[item.name] = fields
            fields += width[item.name]
        widest = max(width.values())
        fields = ceil_div(fields, widest) * widest
        workspace = program.Buffer(rows_workspace_name(dispatch), "f32", (R * P * fields,),
                                   "out" if stage == "partial" else "in")
    if stage == "partial":
        accs = {item.name: item.init(em) for item in group}
        row_loop(lambda idxs: [item.accumulate(em, idxs, accs[item.name]) for item in group],
                 keep_cache=False)
        slots = iter(range(len(red_slot), 10 ** 6))

        def cl(acc, kind):
            return cross_lane(em, acc, kind, ws, T, nwaves, mapping, reduce, lds, next(slots), wg)
        base = em.assign(imul(iadd(imul(row, P), split), fields), "wsbase", "i32")
        st = []
        for item in group:
            vals = item.partial(em, accs[item.name], cl)
            vals += [program.f32(0.0)] * (width[item.name] - len(vals))
            st.append(program.Store(workspace.name, iadd(base, offset[item.name]), tuple(vals)))
        stmts.append(program.If(tcol.eq(0), tuple(st)))
        return _row_kernel_of(graph, dispatch, rows, schedule, em, stmts, lds, R * P, wg, ws,
                              row, mapping, rows_per_wg, workspace, "partial", 1)
    if stage == "combine":
        rowbase = em.assign(imul(row, P * fields), "wsrow", "i32")

        def sweep(item, body_fn):
            """A rolled loop over the row's P partial states of ``item``, in split order:
            each trip loads one state (a broadcast: the same words in every lane) and
            ``body_fn(regs)`` gives the statements that fold it in."""
            p = program.Var(em.regs.new("sp"), "i32")
            regs = tuple(program.Var(em.regs.new("wp"), "f32") for _ in range(item.fields))
            idx = iadd(rowbase, iadd(imul(p, fields), offset[item.name]))
            # dword loads: a wave-uniform address, which hipcc reads with s_load_dword
            # (the check knows it; a padded vector it would shorten or split)
            inner = tuple(program.Load((x,), workspace.name, iadd(idx, f))
                          for f, x in enumerate(regs)) + tuple(body_fn(regs))
            stmts.append(program.For(p, program.i32(0), program.i32(P), 1, inner, rolled=True))

        for item in group:
            item.combine_parts(em, sweep)
    else:
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

    def store_row(idxs):
        for o in row_outs:
            t = graph.op(o).type
            oidx = [align_index(ix, t.shape, rows.full) for ix in idxs]
            vals = em.values(o, oidx, vec)
            store = program.Store(o, em.offset(t, oidx[0]), tuple(vals) if vec > 1 else (vals[0],))
            if _rows_spanned(rows, t.shape) < rows.R:
                # the same for every row (a per-column value): row 0 writes it
                em.stmts.append(program.If(row.eq(0), (store,)))
            else:
                em.stmts.append(store)

    if row_outs:
        row_loop(store_row, keep_cache=True)
    if per_row:
        st: list = []
        with em.scope(st, keep_cache=True):
            for o in per_row:
                t = graph.op(o).type
                ix = rows.row_index(pidx, (), t.shape)
                v = em.value(o, ix if ix else (program.i32(0),))
                em.stmts.append(program.Store(o, em.offset(t, ix if ix else (program.i32(0),)), (v,)))
        first = tcol.eq(0) if P_grid == 1 else program.land(tcol.eq(0), split.eq(0))
        stmts.append(program.If(first, tuple(st)))
    return _row_kernel_of(graph, dispatch, rows, schedule, em, stmts, lds, R * P_grid, wg, ws,
                          row, mapping, rows_per_wg, workspace, stage,
                          len(groups) + (1 if row_outs else 0))


def _row_kernel_of(graph, dispatch, rows, schedule, em, stmts, lds, R, wg, ws, row, mapping,
                   rows_per_wg, workspace, stage, passes_over_row):
    """The ``Kernel`` of :func:`_rows_kernel`'s statements (``R`` rows of work)."""
    body = stmts
    grid = ceil_div(R, rows_per_wg)
    if mapping == "wave" and R % rows_per_wg:
        body = [stmts[0], program.If(row < R, tuple(stmts[1:]))]
    body = loads_early(em.provably_aligned(tuple(body), ws))
    params = buffers(graph, dispatch)
    name = sanitize(dispatch.name)
    meta = {"dispatch": dispatch.name, "kind": "row_reduction",
            "schedule": dict(schedule), "rows": rows.R, "cols": rows.C,
            "passes_over_row": passes_over_row, "loads": sorted(set(em.loads))}
    if stage:
        used = {x.buffer for x in program.walk(body) if isinstance(x, (program.Load, program.Store))}
        params = tuple(b for b in params if b.name in used) + (workspace,)
        name = sanitize(f"{dispatch.name}_rows_{stage}")
        meta["row_splits_phase"] = stage
    return program.Kernel(name, params, grid, wg, body, lds=tuple(lds), meta=meta)


def _rows_spanned(rows: RowShape, shape) -> int:
    """How many rows a tensor of ``shape`` (broadcast against the rows) tells apart: the
    product of its non-reduced dims. Fewer than ``rows.R`` means a per-column value the
    same for every row, stored by row 0 only."""
    lead = len(rows.full) - len(shape)
    return math.prod(n for d, n in enumerate(shape) if d + lead not in rows.axes)


def _lower_columns(graph: Graph, dispatch, rows: RowShape, s: dict, schedule: dict,
                   arch: Arch, stage=None):
    """``mapping=columns``: rows whose elements are strided (a norm over the channels of
    NCHW: the reduced axis is not the last) are read coalesced by putting ``row_lanes``
    lanes on consecutive rows (the contiguous axis) and spreading the reduced axis over
    the rest of the workgroup: thread t owns row ``t % row_lanes`` of its workgroup's
    ``row_lanes`` rows and reduces every ``slices``-th element of it from element
    ``t // row_lanes`` (``slices = workgroup / row_lanes``). The slices' partials meet in
    LDS (one barrier per dependency level), every thread combines all of its row's
    partials in the same order, and the final pass stores the per-element outputs over
    the same split. Rows go over workgroups: ``prod(outer) * ceil(inner / row_lanes)``.

    A row index past the tensor (the inner size not a multiple of ``row_lanes``) is
    clamped to the last row for loads, so every thread reaches every barrier, and its
    stores are skipped.

    Two-stage (``stage`` "partial" / "combine", ``row_splits`` = P > 1: where those
    workgroups cannot fill the GPU): each block of ``row_lanes`` rows gets P workgroups,
    workgroup (block, split) walking the split's share of the ``ceil(C / slices)``
    chunks of the reduced axis (P contiguous shares, the last guarded). The partial
    kernel combines its slices in LDS as above and the threads of slice 0 store the
    rows' partial states (``_Reduce``, ``_Welford``, ``_OnlineSoftmax``: the same as
    for contiguous rows) to the f32 workspace ``[split][field][row]``: a wave's lanes
    on consecutive rows store, and later load, consecutive words. In the combine kernel
    the row's P states are spread over the slices as its elements are: slice j loads
    splits j, j + slices, ... (at most ``COLUMN_STATES_PER_THREAD``, independent loads
    issued together), folds them in that order, and the slices' folds meet in LDS as in
    the partial kernel (``merge_states``; fixed orders, so deterministic and the same in
    every workgroup of the block), then it stores the per-element outputs of its split's
    chunks and, in split 0's slice 0, the per-row outputs; a pool (nothing per element)
    combines with one workgroup per block. (Merging the states in one serial loop per
    thread, as contiguous rows do, left the combine latency-bound: a dependent load per
    split and sweep, 8 us of a 12 us combine for a 768-channel norm split 16 ways.)"""
    ws = arch.wave_size
    wg, row_lanes, cache = int(s["workgroup"]), int(s["row_lanes"]), s["cache"]
    slices = wg // row_lanes
    C, B = rows.C, rows.inner_size
    A = math.prod(rows.outer)
    R = A * B
    blocks_per_outer = ceil_div(B, row_lanes)
    n_chunks = ceil_div(C, slices)
    P = int(s["row_splits"]) if stage else 1
    n_it = ceil_div(n_chunks, P)    # this split's chunks (all of them when P = 1)
    ragged_k, ragged_b = n_it * P * slices != C, B % row_lanes != 0

    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=True)
    stmts: list = []
    em.stmts = stmts
    groups = _phase_groups(graph, dispatch, rows, s["passes"])
    red_names = {r.name for r in rows.reductions}
    row_outs = [o for o in dispatch.outputs if rows.per_element(graph.op(o).type.shape)
                and o not in red_names]
    per_row = [o for o in dispatch.outputs if o not in row_outs]
    P_grid = 1 if stage == "combine" and not row_outs else P
    if row_lanes == ws:
        rlane, slice_ = program.lane(), program.wave_id()
    else:
        rlane = em.assign(imod(program.thread_id(), row_lanes), "rlane", "i32")
        slice_ = em.assign(idiv(program.thread_id(), row_lanes), "slice", "i32")
    blk = program.block_id()
    if P_grid > 1:
        split = em.assign(imod(blk, P_grid), "split", "i32")
        blk = em.assign(idiv(blk, P_grid), "rowblk", "i32")
    else:
        split = program.i32(0)
    if A > 1 and blocks_per_outer > 1:
        a = em.assign(idiv(blk, blocks_per_outer), "outer", "i32")
        bb = imod(blk, blocks_per_outer)
    elif A > 1:
        a, bb = blk, program.i32(0)
    else:
        a, bb = program.i32(0), blk
    b = em.assign(iadd(imul(bb, row_lanes), rlane), "inner", "i32")
    b_read = em.assign(program.minimum(b, program.i32(B - 1)), "inner_rd", "i32") if ragged_b else b
    outer_idx = tuple(em.assign(e, "oi", "i32") for e in unravel(a, rows.outer)) \
        if len(rows.outer) > 1 else ((a,) if rows.outer else ())
    inner_idx = tuple(em.assign(e, "ii", "i32") for e in unravel(b_read, rows.inner)) \
        if len(rows.inner) > 1 else (b_read,)

    def idx_at(it, named):
        if P_grid > 1:
            it = iadd(imul(split, n_it), it)
        k = iadd(imul(it, slices), slice_)
        if named:  # a named index lets the bounds check see the guard on it
            k = em.assign(k, "k", "i32")
        red = tuple(unravel(k, rows.red)) if len(rows.red) > 1 else (k,)
        return k, [rows.logical(tuple(outer_idx) + red + tuple(inner_idx))]

    def row_loop(body_fn):
        if cache == "registers":
            for it in range(n_it):
                body_fn(idx_at(program.i32(it), False)[1])
            return
        it_var = program.Var(em.regs.new("it"), "i32")
        inner: list = []
        with em.scope(inner):
            em.define(it_var)
            k, idxs = idx_at(it_var, ragged_k)
            if ragged_k:
                guarded: list = []
                with em.scope(guarded):
                    body_fn(idxs)
                inner.append(program.If(k < C, tuple(guarded)))
            else:
                body_fn(idxs)
        em.stmts.append(program.For(it_var, program.i32(0), program.i32(n_it), 1, tuple(inner)))

    lds: list = []
    red_slot = {r.name: i for i, r in enumerate(rows.reductions)}
    in_range = (b < B) if ragged_b else None
    workspace = None
    if stage:
        (group,) = groups
        offset, fields = {}, 0
        for item in group:
            offset[item.name] = fields
            fields += item.fields
        workspace = program.Buffer(rows_workspace_name(dispatch), "f32", (R * P * fields,),
                                   "out" if stage == "partial" else "in")
        row_id = em.assign(iadd(imul(a, B), b_read), "wsrow", "i32")

    def ws_index(sp, f):  # word of field f of split sp's state of this thread's row
        return iadd(imul(iadd(imul(sp, fields), f), R), row_id)

    if stage == "partial":
        accs = {item.name: item.init(em) for item in group}
        row_loop(lambda idxs: [item.accumulate(em, idxs, accs[item.name]) for item in group])
        slots = iter(range(len(red_slot), 10 ** 6))

        def cl(acc, kind):  # the columns branch reads ws as the row lanes, nwaves as slices
            return cross_lane(em, acc, kind, row_lanes, wg, slices, "columns", s["reduce"],
                              lds, next(slots), wg)
        st = []
        for item in group:
            for f, v in enumerate(item.partial(em, accs[item.name], cl)):
                st.append(program.Store(workspace.name, ws_index(split, offset[item.name] + f),
                                        (v,)))
        first = program.as_expr(slice_).eq(0)
        stmts.append(program.If(program.land(first, in_range) if ragged_b else first, tuple(st)))
        return _columns_kernel(graph, dispatch, rows, schedule, em, stmts, lds,
                               A * blocks_per_outer * P, wg, ws, row_lanes, slices, workspace,
                               stage, 1)
    if stage == "combine":
        # the row's P states spread over the slices: slice j holds splits j, j + slices,
        # ... (loaded up front, independent loads; a split past P holds the void state)
        slots = iter(range(len(red_slot), 10 ** 6))

        def cl(acc, kind):
            return cross_lane(em, acc, kind, row_lanes, wg, slices, "columns", s["reduce"],
                              lds, next(slots), wg)
        for item in group:
            states = []
            for i in range(ceil_div(P, slices)):
                sp = iadd(slice_, i * slices)
                regs = tuple(em.assign(v, "wp") for v in item.void_state())
                loads = tuple(program.Load((x,), workspace.name,
                                           ws_index(sp, offset[item.name] + f))
                              for f, x in enumerate(regs))
                stmts.extend(loads if (i + 1) * slices <= P
                             else (program.If(program.as_expr(sp) < P, loads),))
                states.append(regs)
            item.merge_states(em, states, cl)
    else:
        for group in groups:
            accs = {item.name: item.init(em) for item in group}
            row_loop(lambda idxs: [item.accumulate(em, idxs, accs[item.name]) for item in group])
            for item in group:
                # cross_lane's columns branch reads ws as the row lanes, nwaves as the slices
                item.finish(em, accs[item.name], rows, row_lanes, wg, slices, "columns",
                            s["reduce"], lds, red_slot, wg)

    first_row = program.land(program.as_expr(blk).eq(0), program.as_expr(rlane).eq(0))

    def guarded(stmt, cond):
        return program.If(cond, (stmt,)) if cond is not None else stmt

    def store_row(idxs):
        for o in row_outs:
            t = graph.op(o).type
            oidx = align_index(idxs[0], t.shape, rows.full)
            v = em.values(o, [oidx], 1)[0]
            cond = first_row if _rows_spanned(rows, t.shape) < rows.R else in_range
            em.stmts.append(guarded(program.Store(o, em.offset(t, oidx), (v,)), cond))

    if row_outs:
        row_loop(store_row)
    if per_row:
        st: list = []
        with em.scope(st, keep_cache=True):
            for o in per_row:
                t = graph.op(o).type
                ix = rows.row_index(outer_idx, inner_idx, t.shape)
                ix = ix if ix else (program.i32(0),)
                em.stmts.append(program.Store(o, em.offset(t, ix), (em.value(o, ix),)))
        cond = program.as_expr(slice_).eq(0)
        if P_grid > 1:
            cond = program.land(cond, program.as_expr(split).eq(0))
        stmts.append(program.If(program.land(cond, in_range) if ragged_b else cond, tuple(st)))
    return _columns_kernel(graph, dispatch, rows, schedule, em, stmts, lds,
                           A * blocks_per_outer * P_grid, wg, ws, row_lanes, slices, workspace,
                           stage, len(groups) + (1 if row_outs else 0))


def _columns_kernel(graph, dispatch, rows, schedule, em, stmts, lds, grid, wg, ws, row_lanes,
                    slices, workspace, stage, passes_over_row):
    """The ``Kernel`` of :func:`_lower_columns`'s statements."""
    body = loads_early(em.provably_aligned(tuple(stmts), ws))
    params = buffers(graph, dispatch)
    name = sanitize(dispatch.name)
    meta = {"dispatch": dispatch.name, "kind": "row_reduction", "schedule": dict(schedule),
            "rows": rows.R, "cols": rows.C, "mapping": "columns", "row_lanes": row_lanes,
            "slices": slices, "passes_over_row": passes_over_row,
            "loads": sorted(set(em.loads))}
    if stage:
        used = {x.buffer for x in program.walk(body) if isinstance(x, (program.Load, program.Store))}
        params = tuple(p for p in params if p.name in used) + (workspace,)
        name = sanitize(f"{dispatch.name}_rows_{stage}")
        meta["row_splits_phase"] = stage
    return program.Kernel(name, params, grid, wg, body, lds=tuple(lds), meta=meta)


# ------------------------------------------------------------------------- phase items
def _reduced_count(graph, op) -> int:
    """Elements one row of reduction ``op`` reduces (the product over its axes)."""
    shape = graph.op(op.inputs[0]).type.shape
    return math.prod(shape[a] for a in op.attrs["axes"])


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
        self.count = _reduced_count(graph, op) if op.kind == "reduce_mean" else None

    def init(self, em):
        return em.assign(identity(self.combine, self.dtype), "acc")

    def accumulate(self, em, idxs, acc):
        for v in em.values(self.op.inputs[0], idxs, len(idxs)):
            em.stmts.append(program.Assign(acc, program.BinOp(self.combine, acc, v)))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        total = cross_lane(em, acc, self.kind, ws, T, nwaves, mapping, reduce, lds,
                           slot[self.name], wg)
        if self.count is not None:
            total = _mean_of(em, total, self.count)
        em.bound[self.name] = lambda idx, r=total: r

    #: two-stage rows: words of partial state per workgroup
    fields = 1

    def partial(self, em, acc, cl):
        """The workgroup's partial (the combine of its lanes, no mean division yet)."""
        return [cl(acc, self.kind)]

    def combine_parts(self, em, sweep):
        """The row's value from the splits' partials, combined in split order from the
        combine's identity (exact: identity op x = x)."""
        total = em.assign(identity(self.combine_op, "f32"), "comb")
        sweep(self, lambda r: [program.Assign(total, program.BinOp(self.combine_op, total,
                                                                   r[0]))])
        if self.count is not None:
            total = _mean_of(em, total, self.count)
        em.bound[self.name] = lambda idx, r=total: r

    @property
    def combine_op(self):
        return COMBINE[self.op.kind]

    def void_state(self):
        """The state of no elements (a split a combine thread does not hold)."""
        return [identity(self.combine_op, "f32")]

    def merge_states(self, em, states, cl):
        """``mapping=columns``' combine: this thread's states folded in order, then the
        slices' folds combined by ``cl`` (in slice order: deterministic)."""
        part = em.assign(states[0][0], "comb")
        for r in states[1:]:
            em.stmts.append(program.Assign(part, program.BinOp(self.combine_op, part, r[0])))
        total = cl(part, self.kind)
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
        self.C = _reduced_count(graph, var_op)

    def init(self, em):
        return tuple(em.assign(program.f32(0.0), h) for h in ("count", "runmean", "m2"))

    def accumulate(self, em, idxs, acc):
        n, mean, m2 = acc
        for v in em.values(self.x, idxs, len(idxs)):
            em.stmts.append(program.Assign(n, n + 1.0))
            d = em.assign(v - mean, "dev")
            em.stmts.append(program.Assign(mean, mean + d / n))
            em.stmts.append(program.Assign(m2, program.fma(d, v - mean, m2)))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        n, mean, m2 = acc
        tot = cross_lane(em, em.assign(n * mean, "nmean"), "sum", ws, T, nwaves, mapping,
                         reduce, lds, slot[self.mean.name], wg)
        gmean = em.assign(tot * (1.0 / self.C), "mean")
        dev = em.assign(mean - gmean, "lanedev")
        part = em.assign(program.fma(n * dev, dev, m2), "m2part")
        tm2 = cross_lane(em, part, "sum", ws, T, nwaves, mapping, reduce, lds,
                         slot[self.var.name], wg)
        var = em.assign(tm2 * (1.0 / self.C), "var")
        em.bound[self.mean.name] = lambda idx, r=gmean: r
        em.bound[self.var.name] = lambda idx, r=var: r

    fields = 3

    def partial(self, em, acc, cl):
        """(count, mean, M2) of the workgroup's elements: the lanes merged by the same
        parallel formula as :meth:`finish`, over the workgroup's count."""
        n, mean, m2 = acc
        wn = cl(n, "sum")
        wmean = em.assign(cl(em.assign(n * mean, "nmean"), "sum") / wn, "wmean")
        dev = em.assign(mean - wmean, "lanedev")
        wm2 = cl(em.assign(program.fma(n * dev, dev, m2), "m2part"), "sum")
        return [wn, wmean, wm2]

    def combine_parts(self, em, sweep):
        """Chan et al.'s parallel merge over the splits, in split order (two sweeps over
        the states): mean = sum(n_p mean_p) / C, M2 = sum(M2_p + n_p (mean_p - mean)^2)."""
        tot = em.assign(program.f32(0.0), "smean")
        sweep(self, lambda r: [program.Assign(tot, program.fma(r[0], r[1], tot))])
        gmean = em.assign(tot * (1.0 / self.C), "mean")
        m2 = em.assign(program.f32(0.0), "m2")
        dev = program.Var(em.regs.new("sdev"), "f32")
        sweep(self, lambda r: [program.Assign(dev, r[1] - gmean),
                               program.Assign(m2, m2 + program.fma(r[0] * dev, dev, r[2]))])
        var = em.assign(m2 * (1.0 / self.C), "var")
        em.bound[self.mean.name] = lambda idx, r=gmean: r
        em.bound[self.var.name] = lambda idx, r=var: r

    def void_state(self):
        return [program.f32(0.0)] * 3   # count 0: adds nothing to either sum

    def merge_states(self, em, states, cl):
        """The same merge over this thread's states, each sum completed across the
        slices by ``cl``; the states stay in registers for the second sum."""
        tot = em.assign(program.f32(0.0), "smean")
        for r in states:
            em.stmts.append(program.Assign(tot, program.fma(r[0], r[1], tot)))
        gmean = em.assign(cl(tot, "sum") * (1.0 / self.C), "mean")
        m2 = em.assign(program.f32(0.0), "m2")
        for r in states:
            dev = em.assign(r[1] - gmean, "sdev")
            em.stmts.append(program.Assign(m2, m2 + program.fma(r[0] * dev, dev, r[2])))
        var = em.assign(cl(m2, "sum") * (1.0 / self.C), "var")
        em.bound[self.mean.name] = lambda idx, r=gmean: r
        em.bound[self.var.name] = lambda idx, r=var: r


class _OnlineSoftmax:
    """Single pass for max(x) then sum(exp(x - max)): running max, rescaled running sum."""

    def __init__(self, graph, max_op, sum_op, x):
        self.max, self.sum, self.x = max_op, sum_op, x
        self.name = sum_op.name

    def init(self, em):
        return (em.assign(program.f32(NEG_INF), "runmax"), em.assign(program.f32(0.0), "runsum"))

    def accumulate(self, em, idxs, acc):
        m, s = acc
        for v in em.values(self.x, idxs, len(idxs)):
            m2 = em.assign(program.maximum(m, v), "m")
            em.stmts.append(program.Assign(s, program.fma(s, program.exp(m - m2), program.exp(v - m2))))
            em.stmts.append(program.Assign(m, m2))

    def finish(self, em, acc, rows, ws, T, nwaves, mapping, reduce, lds, slot, wg):
        m, s = acc
        gm = cross_lane(em, m, "max", ws, T, nwaves, mapping, reduce, lds, slot[self.max.name], wg)
        scaled = em.assign(s * program.exp(m - gm), "scaled")
        gs = cross_lane(em, scaled, "sum", ws, T, nwaves, mapping, reduce, lds,
                        slot[self.sum.name], wg)
        em.bound[self.max.name] = lambda idx, r=gm: r
        em.bound[self.sum.name] = lambda idx, r=gs: r

    fields = 2

    def partial(self, em, acc, cl):
        """(max, sum of exp(x - max)) of the workgroup's elements."""
        m, s = acc
        gm = cl(m, "max")
        return [gm, cl(em.assign(s * program.exp(m - gm), "scaled"), "sum")]

    def combine_parts(self, em, sweep):
        """M = max_p m_p, S = sum_p s_p exp(m_p - M), in split order (two sweeps)."""
        gm = em.assign(program.f32(NEG_INF), "gmax")
        sweep(self, lambda r: [program.Assign(gm, program.maximum(gm, r[0]))])
        gs = em.assign(program.f32(0.0), "gsum")
        sweep(self, lambda r: [program.Assign(gs, gs + r[1] * program.exp(r[0] - gm))])
        em.bound[self.max.name] = lambda idx, r=gm: r
        em.bound[self.sum.name] = lambda idx, r=gs: r

    def void_state(self):
        return [program.f32(NEG_INF), program.f32(0.0)]  # a zero sum: adds nothing

    def merge_states(self, em, states, cl):
        """M = max over the slices of this thread's maxima; S likewise of its
        ``s_p exp(m_p - M)``."""
        m = em.assign(states[0][0], "gmax")
        for r in states[1:]:
            em.stmts.append(program.Assign(m, program.maximum(m, r[0])))
        gm = cl(m, "max")
        gs = em.assign(program.f32(0.0), "gsum")
        for r in states:
            em.stmts.append(program.Assign(gs, gs + r[1] * program.exp(r[0] - gm)))
        gs = cl(gs, "sum")
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
    if mapping == "columns":
        return _cross_slices(em, acc, op, ws, nwaves, lds, slot)
    if reduce == "wave" and kind == "prod":
        reduce = "shuffle"
    if reduce == "lds_tree":
        name = f"tree{slot}"
        lds.append(program.LdsArray(name, dt, (wg,)))
        em.stmts.append(program.LdsStore(name, program.thread_id(), (acc,)))
        s = wg // 2
        while s >= 1:
            em.stmts.append(program.Barrier())
            a = program.Var(em.regs.new("ta"), dt)
            b = program.Var(em.regs.new("tb"), dt)
            em.stmts.append(program.If(program.thread_id() < s, (
                program.LdsLoad((a,), name, program.thread_id()),
                program.LdsLoad((b,), name, program.thread_id() + s),
                program.LdsStore(name, program.thread_id(), (program.BinOp(op, a, b),)),
            )))
            s //= 2
        em.stmts.append(program.Barrier())
        out = program.Var(em.regs.new("red"), dt)
        em.stmts.append(program.LdsLoad((out,), name, program.i32(0)))
        em.define(out)
        return out
    if reduce == "wave":
        total = program.Var(em.regs.new("wred"), dt)
        em.stmts.append(program.WaveReduce(total, acc, kind))
        em.define(total)
    elif reduce == "shuffle":
        total = em.assign(acc, "bfly")
        off = ws // 2
        while off >= 1:
            other = program.Var(em.regs.new("sh"), dt)
            em.stmts.append(program.Shuffle(other, total, "xor", off))
            em.stmts.append(program.Assign(total, program.BinOp(op, total, other)))
            off //= 2
    else:
        raise LoweringError(f"reduce={reduce!r}; use wave, shuffle or lds_tree")
    if mapping == "workgroup" and nwaves > 1:
        name = f"part{slot}"
        lds.append(program.LdsArray(name, dt, (nwaves,)))
        em.stmts.append(program.If(program.lane().eq(0), (program.LdsStore(name, program.wave_id(), (total,)),)))
        em.stmts.append(program.Barrier())
        # read the partials with the widest aligned LDS loads (what hipcc would merge them
        # into anyway: ds_read_b64/b128), then combine in registers
        width = 4 if nwaves % 4 == 0 else (2 if nwaves % 2 == 0 else 1)
        parts = []
        for w in range(0, nwaves, width):
            regs = tuple(program.Var(em.regs.new("pw"), dt) for _ in range(width))
            em.stmts.append(program.LdsLoad(regs, name, program.i32(w)))
            em.define(*regs)
            parts.extend(regs)
        comb = em.assign(parts[0], "comb")
        for t in parts[1:]:
            em.stmts.append(program.Assign(comb, program.BinOp(op, comb, t)))
        return comb
    return total


def _cross_slices(em, acc, op, row_lanes, slices, lds, slot):
    """``mapping=columns``: thread t's partial of row ``t % row_lanes`` goes to LDS at
    ``t`` (slice-major, so a wave's stores are consecutive words: no bank conflict);
    after a barrier every thread reads its row's ``slices`` partials (lanes of a row
    read the same word: a broadcast) and combines them in slice order, so every
    thread of the row holds the same total."""
    if slices == 1:
        return acc
    dt = acc.dtype
    name = f"part{slot}"
    lds.append(program.LdsArray(name, dt, (slices * row_lanes,)))
    em.stmts.append(program.LdsStore(name, program.thread_id(), (acc,)))
    em.stmts.append(program.Barrier())
    rlane = em.assign(imod(program.thread_id(), row_lanes), "rlane", "i32", cse=True)
    comb = None
    for sl in range(slices):
        v = program.Var(em.regs.new("pw"), dt)
        em.stmts.append(program.LdsLoad((v,), name, iadd(rlane, sl * row_lanes)))
        em.define(v)
        if comb is None:
            comb = em.assign(v, "comb")
        else:
            em.stmts.append(program.Assign(comb, program.BinOp(op, comb, v)))
    return comb


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
                    v = program.Var(em.regs.new(f"k{d}"), "i32")
                    loops.append((v, in_t.shape[d]))
                    full[d] = v
                last = len(full) - 1
                group = [tuple(full[:last]) + (iadd(full[last], j),) for j in range(w)]
                for x in em.values(op.inputs[0], group if w > 1 else [tuple(full)], w):
                    body.append(program.Assign(acc, program.BinOp(COMBINE[op.kind], acc, x)))
            stmt = tuple(body)
            for i, (v, size) in reversed(list(enumerate(loops))):
                step = w if i == len(loops) - 1 else 1
                # rolled: unrolled, hipcc re-forms the loads of neighbouring trips at
                # widths of its own (dwordx2 pieces across trips, seen on gpt2_2block)
                stmt = (program.For(v, program.i32(0), program.i32(size), step, stmt, rolled=True),)
            em.stmts.extend(stmt)
            if op.kind == "reduce_mean":
                return _mean_of(em, acc, math.prod(in_t.shape[d] for d in axes))
            return acc
        return f

    for n_ in reductions:
        em.bound[n_] = bind(n_)
    body: list = []
    em.stmts = body
    e = em.assign(iadd(imul(program.block_id(), wg), program.thread_id()), "e", "i32")
    for o in dispatch.outputs:
        t = graph.op(o).type
        stmts: list = []
        with em.scope(stmts):  # a fresh scope per output: its values live in its guard
            oix = unravel(e, t.shape)
            stmts.append(program.Store(o, em.offset(t, oix), (em.value(o, oix),)))
        body.extend(stmts if t.size == grid_threads(n, wg) else [program.If(e < t.size, tuple(stmts))])
    body = em.provably_aligned(tuple(body), arch.wave_size)
    return program.Kernel(sanitize(dispatch.name), buffers(graph, dispatch), ceil_div(n, wg), wg,
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
