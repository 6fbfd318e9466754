"""Permute dispatches through an LDS tile: read the input coalesced, write the output
coalesced.

An elementwise dispatch whose input is stored in another order than its output (a
materialised transpose, ``x.T + y``, an NCHW tensor feeding an NHWC one) cannot walk
both coalesced: the naive lowering (``compiler.lower.elementwise``) walks the output's
order and reads that input with one line per lane, or walks the input's order and writes
strided. The classic fix stages a T x T tile in LDS:

- phase 1: consecutive lanes take consecutive elements along the input's contiguous dim
  (``dI``), load them (coalesced) and write them to the tile, row ``dO``, column ``dI``;
- barrier;
- phase 2: consecutive lanes take consecutive elements along the output's contiguous dim
  (``dO``), read the tile down a column, evaluate the dispatch's elementwise expression
  (its other inputs read in the output's order, coalesced when they share its layout)
  and store (coalesced).

Phase 2 reads the tile with a stride of ``T + lds_pad`` words: with ``lds_pad=0`` and
T a multiple of 32 every lane of a half-wave is on the same bank (a 32-way conflict);
``lds_pad=1`` spreads them over all 32 banks. Knobs: ``tile`` (T: 32 or 64),
``workgroup`` (a multiple of T; each thread moves T*T/workgroup elements per phase),
``lds_pad`` (0 or 1).

Which input is staged, and along which dims, is decided from memory, exactly: the table
of the input's memory offsets over the iteration space (pushed through the dispatch's
views, ``emitter.offset_table``) says along which iteration dim its elements are
adjacent. Limits (each an illegal candidate with its reason): one staged input, read at
one index per output element; every output the iteration space's shape, stored with the
same contiguous dim; scalar accesses only (no vector widths in this lowering).
"""
from __future__ import annotations

import math

import numpy as np

from gpusim import program
from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower import affine
from compiler.lower.common import (LoweringError, buffers, ceil_div, defined_registers, sanitize, split_at_last_load)
from compiler.lower.emitter import (BINARY_IR, UNARY_IR, RegisterNamer, ValueEmitter, iadd, idiv, imod, imul, key, offset_table, unravel)

TILES = (32, 64)
WORKGROUPS = (256, 512, 1024)
PADS = (0, 1)
#: the knobs ``lower_transpose`` assumes when a schedule leaves one out
DEFAULTS = {"transpose": "lds", "tile": 32, "workgroup": 256, "lds_pad": 1}


def _paths(graph: Graph, dispatch, root: str, tensor: str) -> list:
    """Every chain of ops from ``root`` down to a read of ``tensor`` inside the dispatch."""
    ops = set(dispatch.ops)
    found = []

    def walk(name, path):
        if name == tensor:
            found.append(path)
            return
        if name not in ops or name in dispatch.inputs:
            return
        op = graph.op(name)
        if not (op.is_view or op.kind == "cast" or op.kind in UNARY_IR or op.kind in BINARY_IR):
            raise LoweringError(f"{op.kind} {name!r} is not elementwise")
        for i in op.inputs:
            walk(i, path + [op])

    walk(root, [])
    return found


def _contiguous_dim(table: np.ndarray):
    """The dim along which consecutive elements are adjacent in memory, or None."""
    for d in reversed(range(table.ndim)):
        if table.shape[d] > 1 and np.all(np.diff(table, axis=d) == 1):
            return d
    return None


def staging_plan(graph: Graph, dispatch) -> tuple:
    """(input to stage, its contiguous dim dI, the outputs' contiguous dim dO, shape), or
    a reason string when this dispatch has no input worth staging."""
    outs = [graph.op(o).type for o in dispatch.outputs]
    shape = outs[0].shape
    if len(shape) < 2:
        return "a rank-1 dispatch has nothing to transpose"
    if any(t.shape != shape for t in outs):
        return "outputs of different shapes: the LDS-tiled permute needs one iteration space"
    d_out = {t.order[-1] for t in outs}
    if len(d_out) > 1:
        return "the outputs disagree on their contiguous dim"
    d_o = d_out.pop()
    try:
        for o in dispatch.outputs:
            for t in dispatch.inputs:
                _paths(graph, dispatch, o, t)
    except LoweringError as e:
        return f"not an elementwise dispatch ({e})"
    for t in dispatch.inputs:
        op = graph.op(t)
        if op.kind == "constant" and op.type.size == 1:
            continue
        paths = [list(reversed(p)) for o in dispatch.outputs
                 for p in _paths(graph, dispatch, o, t)]
        forms = [affine.of_path(graph, t, p) for p in paths]
        if all(f is not None for f in forms):
            # closed form (compiler.lower.affine): O(rank), not O(elements)
            forms = [f for f in forms if f.shape == tuple(shape)]
            if not forms or len({f.key() for f in forms}) > 1:
                continue  # not read, or read at several indices per output element
            unique = forms[0].injective()
            if unique is None:
                unique = np.unique(forms[0].table()).size == math.prod(shape)
            if not unique:
                continue  # broadcast along some dim: lanes share its elements
            d_i = forms[0].contiguous_dim()
            if d_i is not None and d_i != d_o:
                return t, d_i, d_o, shape
            continue
        tables = []
        for path in paths:
            tab = offset_table(graph, t, None, path)
            if tab.shape == shape:
                tables.append(tab)
        if not tables or any(not np.array_equal(tables[0], x) for x in tables[1:]):
            continue  # not read, or read at several indices per output element
        if np.unique(tables[0]).size != tables[0].size:
            continue  # broadcast along some dim: lanes share its elements, no transpose
        d_i = _contiguous_dim(tables[0])
        if d_i is not None and d_i != d_o:
            return t, d_i, d_o, shape
    return "no input is stored with another contiguous dim than the output"


def check_schedule(s: dict, arch: Arch) -> str:
    """'' when the tile schedule ``s`` (every knob given) is legal on ``arch``, else why
    not: the one check the transpose space (``compiler.schedule.transpose``) and
    ``lower_transpose`` share."""
    T, wg, pad = int(s["tile"]), int(s["workgroup"]), int(s["lds_pad"])
    if T not in TILES:
        return f"tile={T}: the LDS tile is 32 or 64 elements square"
    if pad not in PADS:
        return f"lds_pad={pad}: pad the tile rows by 0 or 1 element"
    if wg % T or wg > min(T * T, arch.max_block_threads):
        return (f"workgroup={wg} must be a multiple of tile={T} and at most "
                f"{min(T * T, arch.max_block_threads)}")
    if T * (T + pad) * 4 > arch.lds_bytes_per_workgroup:
        return (f"the tile does not fit in {arch.lds_bytes_per_workgroup // 1024} KiB of "
                f"LDS")
    return ""


def lower_transpose(graph: Graph, dispatch, schedule: dict, arch: Arch):
    plan = staging_plan(graph, dispatch)
    if isinstance(plan, str):
        raise LoweringError(f"transpose=lds: {plan}; use transpose=none")
    staged, d_i, d_o, shape = plan
    s = {**DEFAULTS, **schedule}
    why = check_schedule(s, arch)
    if why:
        raise LoweringError(why)
    T, wg, pad = int(s["tile"]), int(s["workgroup"]), int(s["lds_pad"])
    rows = wg // T            # tile rows covered per pass
    passes = T // rows        # elements each thread moves per phase
    others = [d for d in range(len(shape)) if d not in (d_i, d_o)]
    n_i, n_o = ceil_div(shape[d_i], T), ceil_div(shape[d_o], T)
    n_other = math.prod(shape[d] for d in others)
    exact = shape[d_i] % T == 0 and shape[d_o] % T == 0
    stride = T + pad

    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=True)
    body: list = []
    em.stmts = body
    b = program.block_id()
    t = program.thread_id()
    tile_o = em.assign(imul(imod(b, n_o), T), "tile_o", "i32")
    tile_i = em.assign(imul(imod(idiv(b, n_o), n_i), T), "tile_i", "i32")
    rest = unravel(idiv(b, n_o * n_i), [shape[d] for d in others]) if others else ()
    lane_fast = em.assign(imod(t, T), "lane_t", "i32")
    lane_row = em.assign(idiv(t, T), "row_t", "i32")

    def index(pos_i, pos_o):
        ix = [None] * len(shape)
        for d, r in zip(others, rest):
            ix[d] = r
        ix[d_i], ix[d_o] = pos_i, pos_o
        return tuple(ix)

    def guard(ix):
        if exact:
            return None
        return program.land(ix[d_i] < shape[d_i], ix[d_o] < shape[d_o])

    def staged_index(ix):
        """The staged input's index read for iteration index ``ix`` (one per element)."""
        seen = []
        probe = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=False)
        probe.bound[staged] = lambda xi: seen.append(tuple(xi)) or program.f32(0.0)
        with probe.scope([]):
            for o in dispatch.outputs:
                probe.value(o, ix)
        keys = {tuple(key(e) for e in xi) for xi in seen}
        if len(keys) != 1:
            raise LoweringError(f"transpose=lds: {staged!r} is read at {len(keys)} indices per "
                                f"element; use transpose=none")
        return seen[0]

    # As hipcc schedules such code, every pass's loads are issued before the first value
    # is used (one memory latency per phase, not one per pass): loads first, guarded,
    # into zero-initialised registers, then the uses.
    # phase 1: lanes along the staged input's contiguous dim
    st = graph.op(staged).type
    loads, uses = [], []
    for j in range(passes):
        lo = iadd(lane_row, j * rows)
        ix = index(iadd(tile_i, lane_fast), iadd(tile_o, lo))
        v = program.Var(em.regs.new(f"ld_{staged}"), "f32")
        g = guard(ix)
        load = program.Load((v,), staged, em.offset(st, staged_index(ix)))
        put = program.LdsStore("tile", iadd(imul(lo, stride), lane_fast), (v,))
        if g is None:
            loads.append(load)
            uses.append(put)
        else:
            body.append(program.Assign(v, program.f32(0.0)))
            loads.append(program.If(g, (load,)))
            uses.append(program.If(g, (put,)))
    body += loads + uses + [program.Barrier()]
    # phase 2: lanes along the outputs' contiguous dim
    loads, uses = [], []
    for j in range(passes):
        li = iadd(lane_row, j * rows)
        ix = index(iadd(tile_i, li), iadd(tile_o, lane_fast))
        stmts: list = []
        with em.scope(stmts):
            v = program.Var(em.regs.new(f"tile_{staged}"), "f32")
            stmts.append(program.LdsLoad((v,), "tile", iadd(imul(lane_fast, stride), li)))
            em.define(v)
            want = tuple(key(e) for e in staged_index(ix))

            def read(xi, v=v, want=want):
                if tuple(key(e) for e in xi) != want:
                    raise LoweringError(f"transpose=lds: {staged!r} read off its staged index")
                return v
            em.bound[staged] = read
            for o in dispatch.outputs:
                val = em.value(o, ix)
                stmts.append(program.Store(o, em.offset(graph.op(o).type, ix), (val,)))
            em.bound.pop(staged)
        pre, post = split_at_last_load(stmts)
        g = guard(ix)
        if g is None:
            loads += pre
            uses += post
        else:
            body.extend(program.Assign(r, program.f32(0.0) if r.dtype == "f32" else program.i32(0))
                        for r in defined_registers(pre))
            loads.append(program.If(g, tuple(pre)))
            uses.append(program.If(g, tuple(post)))
    body += loads + uses
    return program.Kernel(sanitize(dispatch.name), buffers(graph, dispatch),
                    grid=n_other * n_i * n_o, block=wg, body=tuple(body),
                    lds=(program.LdsArray("tile", "f32", (T * stride,)),),
                    meta={"dispatch": dispatch.name, "kind": "elementwise",
                          "schedule": dict(schedule), "staged_input": staged,
                          "tile_dims": {"input_contiguous": d_i, "output_contiguous": d_o},
                          "loads": sorted(set(em.loads))})
