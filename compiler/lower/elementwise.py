"""Lowering of elementwise (injective) dispatches: one thread, a few vector groups.

The iteration space is the root's logical shape. Threads walk it in *groups* of
``vector`` consecutive elements along the innermost iterated dimension; each thread
handles ``elems`` elements, i.e. ``elems / vector`` groups, and consecutive lanes take
consecutive groups in every step (``group = (block * steps + step) * workgroup + thread``)
so that a wave's accesses are contiguous whenever the tensors are.

Knobs:
- ``workgroup``: threads per workgroup.
- ``vector``: 1, 2 or 4 elements per access; a boundary tensor whose memory is not
  contiguous along the iterated dimension is read with scalar loads (see ``emitter``).
- ``elems``: elements per thread (a multiple of ``vector``), unrolled.
- ``order``: "output" walks the root row-major; "input:<tensor>" walks in the memory
  order of that input, so *it* is read coalesced and the output is written strided —
  the choice a layout mismatch forces on an elementwise kernel.

Outputs smaller than the root (a broadcast operand that is also a dispatch output) are
written by the threads whose index along the broadcast dimensions is 0.
"""
from __future__ import annotations

import math

from gpusim import program
from gpusim.hw import Arch

from compiler.ir.graph import Graph, shared_iteration
from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.emitter import RegisterNamer, ValueEmitter, align_index, iadd, imul, unravel
from compiler.lower.loadmerge import merge_loads
from compiler.lower.loadorder import loads_early


def iteration_order(graph: Graph, dispatch, order: str) -> tuple:
    """The permutation of the iteration space's dims walked outermost-first."""
    shape = iteration_shape(graph, dispatch)
    if order == "output":
        return tuple(range(len(shape)))
    if order.startswith("input:"):
        t = graph.op(order[len("input:"):]).type
        if t.shape != shape:
            raise LoweringError(f"order={order}: that input's shape {t.shape} is not the "
                                f"iteration space {shape}")
        return t.order
    raise LoweringError(f"unknown order {order!r}; use 'output' or 'input:<tensor>'")


def iteration_shape(graph: Graph, dispatch) -> tuple:
    """The largest output's shape: every output is that shape, a broadcast-smaller one,
    or a view with as many elements (a reshape written as a graph output); the root's
    own shape when the largest output is a view of it (the smaller outputs broadcast
    against the root, not the view). ``graph.shared_iteration`` decides it."""
    shape = shared_iteration([graph.op(o).type.shape for o in dispatch.outputs],
                             graph.op(dispatch.root).type.shape)
    if isinstance(shape, str):
        raise LoweringError(shape)
    return shape


#: the knobs ``lower_elementwise`` assumes when a schedule leaves one out; ``elems`` has no
#: fixed default: absent, it is one vector per thread (``elems = vector``, ``with_defaults``)
DEFAULTS = {"workgroup": 256, "vector": 1, "order": "output", "transpose": "none"}


def with_defaults(schedule: dict) -> dict:
    """``schedule`` with every knob given: the ``DEFAULTS``, and ``elems`` = ``vector``."""
    s = {**DEFAULTS, **schedule}
    s.setdefault("elems", s["vector"])
    return s


def check_schedule(shape: tuple, inner: int, s: dict, arch: Arch) -> str:
    """'' when the naive walk ``s`` (every knob given) of an iteration space ``shape``,
    walked with dim ``inner`` innermost, is legal on ``arch``, else why not: the one check
    the space (``compiler.schedule.elementwise``) and ``lower_elementwise`` share."""
    wg, vec, elems = int(s["workgroup"]), int(s["vector"]), int(s["elems"])
    if vec not in (1, 2, 4):
        return f"vector={vec}: vector width must be 1, 2 or 4"
    if shape[inner] % vec:
        return (f"vector={vec} does not divide the innermost iterated dimension "
                f"({shape[inner]})")
    if elems % vec:
        return f"elems={elems} must be a multiple of vector={vec}"
    max_wg = arch.max_block_threads
    if not 1 <= wg <= max_wg:
        return f"workgroup={wg}: a workgroup holds 1 to {max_wg} threads"
    return ""


def lower_elementwise(graph: Graph, dispatch, schedule: dict, arch: Arch):
    shape = iteration_shape(graph, dispatch)
    s = with_defaults(schedule)
    wg, vec, elems = int(s["workgroup"]), int(s["vector"]), int(s["elems"])
    perm = iteration_order(graph, dispatch, s["order"])
    inner = perm[-1]
    why = check_schedule(shape, inner, s, arch)
    if why:
        raise LoweringError(why)

    em = ValueEmitter(graph, dispatch.ops, dispatch.inputs, RegisterNamer(), cse=True)
    perm_shape = tuple(shape[d] for d in perm)
    n_groups = math.prod(shape) // vec
    steps = elems // vec
    threads = ceil_div(n_groups, steps)
    grid = ceil_div(threads, wg)

    for out in dispatch.outputs:
        _analyse(em, graph, out, perm, vec)

    body: list = []
    em.stmts = body  # the kernel body is the outermost scope (CSE may hoist into it)
    exact = n_groups == grid * wg * steps
    for step in range(steps):
        group = iadd(imul(iadd(imul(program.block_id(), steps), step), wg), program.thread_id())
        g = em.assign(group, "group", "i32")  # named: the bounds check sees its guard
        stmts = []
        with em.scope(stmts):
            base = unravel(imul(g, vec), perm_shape)  # index in walk order
            idx = [None] * len(shape)
            for pos, d in enumerate(perm):
                idx[d] = base[pos]
            identity = tuple(perm) == tuple(range(len(shape)))
            idxs = [base if identity else tuple(idx)]
            for j in range(1, vec):
                ij = list(idx)
                ij[inner] = iadd(ij[inner], j)
                idxs.append(tuple(ij))
            for out in dispatch.outputs:
                _store(em, graph, out, idxs, shape, inner, vec, stmts)
        body.extend(stmts if exact else [program.If(g < n_groups, tuple(stmts))])
    name = sanitize(dispatch.name)
    body = em.provably_aligned(tuple(body), arch.wave_size)
    # overlapping windows (pooling taps) load elements twice and in dword runs: say what
    # hipcc makes of them (see loadmerge)
    params = buffers(graph, dispatch)
    body = merge_loads(body, arch.wave_size,
                       frozenset(x.buffer for x in program.walk(body) if isinstance(x, program.Store)),
                       frozenset(b.name for b in params if isinstance(b, program.Buffer)
                                 and program.DTYPE_BYTES[b.dtype] == 4))
    # each step's loads issue before the earlier steps' arithmetic and stores (loadorder)
    body = loads_early(body)
    return program.Kernel(name, params, grid, wg, body,
                    meta={"dispatch": dispatch.name, "kind": "elementwise",
                          "schedule": dict(schedule),
                          "loads": sorted(set(em.loads))})


def _analyse(em, graph, out, perm, vec):
    """Vector-access analysis along the walked innermost dim, for this output's inputs."""
    if vec == 1:
        return
    inner = perm[-1]
    rank = len(graph.op(out).type.shape)
    if rank and inner != rank - 1:
        # The emitter checks the last axis; walking another dim innermost means vector
        # groups run along it, which only the scalar path serves honestly.
        em._access.update({t: "scalar" for t in em.analyse_access(out, vec)})
        return
    em.analyse_access(out, vec)


def _store(em, graph, out, idxs, root_shape, inner, vec, stmts):
    t = graph.op(out).type
    fits = len(t.shape) <= len(root_shape) and all(
        s in (1, f) for s, f in zip(t.shape, root_shape[len(root_shape) - len(t.shape):]))
    if not fits:  # a reshaped view of the same elements: store by linear element number
        strides = [math.prod(root_shape[d + 1:]) for d in range(len(root_shape))]
        for ix in idxs:
            linear = program.i32(0)
            for i, s in zip(ix, strides):
                linear = iadd(linear, imul(i, s))
            oix = unravel(linear, t.shape)
            v = em.values(out, [oix], 1)[0]
            stmts.append(program.Store(out, em.offset(t, oix), (v,)))
        return
    lead = len(root_shape) - len(t.shape)
    oidx = [align_index(ix, t.shape, root_shape) for ix in idxs]
    bcast = [lead + d for d, s in enumerate(t.shape) if s == 1 and root_shape[lead + d] != 1]
    bcast += list(range(lead))
    inner_o = inner - lead
    contiguous = (vec > 1 and inner_o == len(t.shape) - 1 and t.shape[-1] == root_shape[-1]
                  and t.is_row_major)
    if contiguous:
        vals = em.values(out, oidx, vec)
        store = [program.Store(out, em.offset(t, oidx[0]), tuple(vals))]
    elif inner_o >= 0 and t.shape[inner_o] == root_shape[inner] or vec == 1:
        store = []
        for ix in oidx:
            v = em.values(out, [ix], 1)[0]
            store.append(program.Store(out, em.offset(t, ix), (v,)))
    else:  # broadcast along the vector dim: one element per group
        v = em.values(out, [oidx[0]], 1)[0]
        store = [program.Store(out, em.offset(t, oidx[0]), (v,))]
    if bcast:
        cond = None
        for d in bcast:
            c = idxs[0][d].eq(0)
            cond = c if cond is None else program.land(cond, c)
        stmts.append(program.If(cond, tuple(store)))
    else:
        stmts.extend(store)
