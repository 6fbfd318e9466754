"""Direct convolution for few taps per output (depthwise): one thread per output element,
an unrolled sum over its group's window, then the fused epilogue.

It reads its operands through the implicit GEMM's formulas (``compiler.lower.conv``'s
addressing, filled into a ``compiler.lower.contraction.Gemm``), so it sits above the
contraction lowering; the schedule space offers it as the knob ``lowering=direct``
(``compiler.schedule.contraction``).
"""
from __future__ import annotations

import math

from gpusim import program
from gpusim.hw import Arch

from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.contraction import Gemm
from compiler.lower.conv import conv_geometry
from compiler.lower.emitter import RegisterNamer, ValueEmitter, iadd, idiv, imod, imul, unravel


#: The direct lowering unrolls every tap of a group's window per output element; past
#: this many (C/G * kH * kW) the implicit GEMM's tiled reuse wins and the code would bloat.
#: 49 covers a 7x7 depthwise conv (ConvNeXt): at 32 it went through the implicit GEMM
#: with N = 1 (one filter per group, a 1-column tile), 15.86 us simulated for ConvNeXt's
#: 14x14x384 against 7.45 direct (issue 27; docs/kernels.md). The direct points are
#: always tried beside the GEMM's, so the search keeps whichever is faster.
DIRECT_MAX_TAPS = 49
DIRECT_WORKGROUPS = (64, 256)
#: which output element a thread computes: ``output`` (the result's row-major order, x
#: innermost for NCHW) or ``channels`` (NCHW only: channels innermost, for an input stored
#: channels-last, whose NCHW row-major order would read one line per lane)
DIRECT_ORDERS = ("output", "channels")


def direct_applies(graph, root) -> str:
    """'' when the direct lowering can serve this conv (few taps per output, as a
    depthwise conv has), else why not."""
    if root.kind != "conv2d":
        return f"{root.name!r} is a {root.kind}, not a conv2d"
    if root.type.dtype == "i32":
        return ("an integer conv (ConvInteger, QLinearConv) accumulates in i32 on the "
                "implicit GEMM; the direct lowering is f32 only")
    geo = conv_geometry(graph, root)
    taps = geo["cg"] * geo["kh"] * geo["kw"]
    if taps > DIRECT_MAX_TAPS:
        return (f"{taps} taps per output (C/G*kH*kW) > {DIRECT_MAX_TAPS}: the implicit GEMM "
                f"reuses them through LDS")
    return ""


def lower_direct_conv(graph, dispatch, schedule: dict, arch: Arch):
    """A direct convolution for few taps per output (depthwise): thread e computes root
    element e (in the root's row-major order, so consecutive lanes walk the innermost
    output dim: x in NCHW, channels in NHWC, each coalesced with the input read) as an
    unrolled sum over its group's window, then the fused epilogue. A tap in the padding is
    a predicated load that leaves its register zero. No LDS: the window overlap between
    neighbouring threads is served by the vL1D, which is what makes this lowering win
    over the implicit GEMM's 1-column tiles (N = channel multiplier) on depthwise convs.
    The operand formulas are the implicit GEMM's (``setup_conv_gemm``)."""
    root = graph.op(dispatch.root)
    why = direct_applies(graph, root)
    if why:
        raise LoweringError(f"dispatch {dispatch.name!r}: lowering=direct: {why}")
    wg = int(schedule.get("workgroup", 64))
    if wg not in DIRECT_WORKGROUPS:
        raise LoweringError(f"lowering=direct: workgroup {wg} not in {DIRECT_WORKGROUPS}")
    order = schedule.get("order", "output")
    if order not in DIRECT_ORDERS:
        raise LoweringError(f"lowering=direct: order={order!r}; use {' or '.join(DIRECT_ORDERS)}")
    gemm = Gemm(graph, dispatch)
    if order == "channels" and gemm.geo["fmt"] != "NCHW":
        raise LoweringError("lowering=direct: order=channels is for NCHW convs (an NHWC "
                            "output's own order already has the channels innermost)")
    for o in dispatch.outputs:
        if graph.op(o).type.size != root.type.size:
            raise LoweringError(f"dispatch {dispatch.name!r}: output {o!r} is not the conv "
                                f"result or a view of it")
    geo = gemm.geo
    regs = RegisterNamer()
    em = ValueEmitter(graph, list(dispatch.ops), list(dispatch.inputs), regs)
    stmts: list = []   # the work of one element, under the bounds guard

    def let(hint, value, out, dtype="i32"):
        v = program.Var(regs.new(hint), dtype)
        out.append(program.Assign(v, value))
        return v

    size = root.type.size
    head: list = []
    e = let("e", iadd(imul(program.block_id(), wg), program.thread_id()), head)
    if order == "channels":
        # lanes on consecutive channels: an input stored channels-last and read as NCHW
        # through a transpose (ConvNeXt's first depthwise conv reads its embedding norm's
        # output so) is then read along its contiguous axis
        nn, cc, oh, ow = root.type.shape
        nb_, y_, x_, ch_ = [let(f"i{d}", v, stmts)
                            for d, v in enumerate(unravel(e, (nn, oh, ow, cc)))]
        ridx = [nb_, ch_, y_, x_]
    else:
        ridx = [let(f"i{d}", x, stmts) for d, x in enumerate(unravel(e, root.type.shape))]
    if geo["fmt"] == "NHWC":
        nb, y, x, ch = ridx
    else:
        nb, ch, y, x = ridx
    og = geo["og"]
    b = let("grp", idiv(ch, og), stmts) if geo["groups"] > 1 else program.i32(0)
    n = let("f", imod(ch, og), stmts) if geo["groups"] > 1 else ch
    m = let("m", iadd(imul(iadd(imul(nb, geo["oh"]), y), geo["ow"]), x), stmts)
    acc = let("acc", program.f32(0.0), stmts, "f32")
    # Taps whose operand elements are consecutive and aligned in memory (the exact offset
    # tables of ``Operand.analyse``: a filter row along K, OIHW; channels along K, NHWC)
    # are read as one 2- or 4-wide vector, as hipcc's load-store vectorizer merges them
    # (a 1x1 NCHW conv's 32 filter taps: 8 global_load_dwordx4, issue 28); a tap group
    # shares one padding guard (``analyse`` checks it is uniform over the group).
    wa, wb = gemm.A.max_vec["c"], gemm.B.max_vec["r"]
    ra = [program.Var(regs.new("xa"), "f32") for _ in range(gemm.K)]
    rb = [program.Var(regs.new("wb"), "f32") for _ in range(gemm.K)]
    loads, fmas = [], []
    for k in range(gemm.K):
        if k % wa == 0:
            a_off, valid = gemm.A.offset_fn(b, m, k)
            group = tuple(ra[k:k + wa])
            if valid is None:
                loads.append(program.Load(group, gemm.A.buffer, a_off))
            else:
                stmts.extend(program.Assign(r, program.f32(0.0)) for r in group)
                loads.append(program.If(valid, (program.Load(group, gemm.A.buffer, a_off),)))
        if k % wb == 0:
            b_off, _ = gemm.B.offset_fn(b, k, n)
            loads.append(program.Load(tuple(rb[k:k + wb]), gemm.B.buffer, b_off))
        fmas.append(program.Assign(acc, program.fma(ra[k], rb[k], acc)))
    stmts += loads + fmas  # every tap's loads first: one memory latency, as hipcc issues
    with em.scope(stmts):
        em.bound[root.name] = lambda ix: acc
        for o in dispatch.outputs:
            oidx = gemm.out_index(o, tuple(ridx))
            val = em.value(o, oidx)
            stmts.append(program.Store(o, em.offset(graph.op(o).type, oidx), (val,)))
    body = head + ([program.If(e < size, tuple(stmts))] if size % wg else stmts)
    grid = ceil_div(size, wg)
    meta = {"dispatch": dispatch.name, "root": dispatch.root, "kind": "contraction",
            "lowering": "direct", "schedule": dict(schedule), "order": order,
            "taps": gemm.K, "groups": geo["groups"], "flops": 2 * size * gemm.K,
            "vector_widths": {"input": wa, "filter": wb},
            "elements": math.prod(root.type.shape)}
    return program.Kernel(sanitize(f"{dispatch.name}_direct"), buffers(graph, dispatch), grid=grid,
                    block=wg, body=tuple(body), meta=meta)
