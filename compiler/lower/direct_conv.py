"""Direct convolution for few taps per output (depthwise): one thread per output element,
an unrolled sum over its group's window, then the fused epilogue.

It reads its operands through the implicit GEMM's formulas (``compiler.lower.conv``'s
addressing, filled into a ``compiler.lower.contraction.Gemm``), so it sits above the
contraction lowering; the schedule space offers it as the knob ``lowering=direct``
(``compiler.schedule.contraction``).
"""
from __future__ import annotations

import collections
import math

from gpusim import program
from gpusim.hw import Arch

from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.contraction import Gemm
from compiler.lower.conv import conv_geometry
from compiler.lower.emitter import RegisterNamer, ValueEmitter, iadd, idiv, imod, imul, key, unravel
from compiler.lower.operands import _affine_strides, _in_range
from gpusim.analysis import affine_form


#: The direct lowering unrolls every tap of a group's window per output element; past
#: this many (C/G * kH * kW) the implicit GEMM's tiled reuse wins and the code would bloat.
#: 49 covers a 7x7 depthwise conv (ConvNeXt): at 32 it went through the implicit GEMM
#: with N = 1 (one filter per group, a 1-column tile), 15.86 us simulated for ConvNeXt's
#: 14x14x384 against 7.45 direct (issue 27; docs/kernels.md). The direct points are
#: always tried beside the GEMM's, so the search keeps whichever is faster.
DIRECT_MAX_TAPS = 49
DIRECT_WORKGROUPS = (64, 256)
#: taps from which the direct lowering computes what they share once (``_shared``): a
#: 7x7 window's 49 taps repeated ~35 VALU operations each (7.45 -> 6.96 us on ConvNeXt's
#: 14x14x384); a 3x3's 9 gain less than the dependent register assignments cost (each
#: of MobileNetV2's 16 depthwise convs 0.02-0.09 us slower with them, simulated)
SHARED_MIN_TAPS = 16
#: which output element a thread computes: ``output`` (the result's row-major order, x
#: innermost for NCHW) or ``channels`` (NCHW only: channels innermost, for an input stored
#: channels-last, whose NCHW row-major order would read one line per lane)
DIRECT_ORDERS = ("output", "channels")
#: outputs along x per thread (``pixels``): with more than one, a thread keeps its
#: channel's kH*kW filter taps in registers for all of them and reads each input element
#: of its window rows once (kH * ((P-1)*sw + (kW-1)*dw + 1) loads for P outputs, against
#: P * kH*kW), and stores its P outputs as vectors (issue 27: ConvNeXt's stage-0 7x7
#: depthwise conv, lanes on channels, was bound by 98 loads per output, half of them
#: filter taps reading one cache line per lane, and its per-tap im2col arithmetic)
DIRECT_PIXELS = (1, 4, 8)


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
    pixels = int(schedule.get("pixels", 1))
    if pixels != 1:
        why = pixels_why(gemm.geo, pixels, order)
        if why:
            raise LoweringError(f"lowering=direct: {why}")
        return _lower_rows(graph, dispatch, gemm, root, schedule, wg, order, pixels)
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
    taps = []   # (k, input offset, padding test or None, filter offset or None)
    for k in range(gemm.K):
        a_off, valid = gemm.A.offset_fn(b, m, k) if k % wa == 0 else (None, None)
        b_off = gemm.B.offset_fn(b, k, n)[0] if k % wb == 0 else None
        taps.append((k, a_off, valid, b_off))
    # the taps' index arithmetic with what they share computed once (the output's row
    # and column, each window row's and column's padding test), as hipcc's CSE does:
    # written per tap it was ~35 VALU operations each, the kernel VALU-bound (ConvNeXt's
    # 7x7 at 14x14: each wave issuing VALU for ~6,970 of the CU's 8,299 cycles)
    shared = _shared(stmts, regs, [x for t in taps for x in t[1:] if x is not None]) \
        if gemm.K >= SHARED_MIN_TAPS else (lambda x: x)
    for k, a_off, valid, b_off in taps:
        if a_off is not None:
            group = tuple(ra[k:k + wa])
            a_off = shared(a_off)
            if valid is None:
                loads.append(program.Load(group, gemm.A.buffer, a_off))
            else:
                stmts.extend(program.Assign(r, program.f32(0.0)) for r in group)
                loads.append(program.If(shared(valid),
                                        (program.Load(group, gemm.A.buffer, a_off),)))
        if b_off is not None:
            loads.append(program.Load(tuple(rb[k:k + wb]), gemm.B.buffer, shared(b_off)))
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


def _shared(out: list, regs, exprs: list):
    """A rewriter of the integer expressions ``exprs``: every subexpression (an integer
    operation on registers) that two of them hold, or one holds twice, is assigned to a
    register once (appended to ``out``, operands before their users) and read from it."""
    uses = collections.Counter()

    def count(e):
        if isinstance(e, program.BinOp) and e.dtype == "i32":
            uses[key(e)] += 1
            if uses[key(e)] == 1:
                count(e.a)
                count(e.b)

    for e in exprs:
        count(e)
    memo: dict = {}

    def rewrite(e):
        if not (isinstance(e, program.BinOp) and e.dtype == "i32"):
            return e
        k = key(e)
        if k not in memo:
            new = program.BinOp(e.op, rewrite(e.a), rewrite(e.b))
            if uses[k] > 1:
                reg = program.Var(regs.new("ix"), "i32")
                out.append(program.Assign(reg, new))
                new = reg
            memo[k] = new
        return memo[k]
    return rewrite


def pixels_why(geo, pixels: int, order: str = "output") -> str:
    """'' when a thread can compute ``pixels`` outputs along x (``DIRECT_PIXELS``)."""
    if pixels not in DIRECT_PIXELS:
        return f"pixels={pixels} not in {DIRECT_PIXELS}"
    if geo["fmt"] != "NCHW":
        return "pixels > 1 is for NCHW convs (x is the output's contiguous axis)"
    if order != "channels":
        # tried: a workgroup per (image, channel) plane, the filter address uniform; hipcc
        # then keeps the 49 taps in SGPRs (90 VGPRs) where gpusim's estimate counts every
        # uniform f32 as a VGPR (124, occupancy 4 instead of 5), so ``check`` disagrees
        return ("pixels > 1 is for order=channels (with lanes on output pixels the filter "
                "taps are wave-uniform: SGPRs in hipcc, VGPRs in gpusim's estimate)")
    if geo["cg"] != 1:
        return (f"pixels > 1 needs one input channel per output (C/G = {geo['cg']}): a "
                f"thread holds one channel's taps")
    if geo["ow"] % pixels:
        return f"output width {geo['ow']} is not a multiple of pixels={pixels}"
    if order == "channels" and not _channel_block(geo["o"], 64):
        return (f"order=channels with pixels > 1 stages blocks of 16, 32 or 64 channels; "
                f"{geo['o']} channels is not a multiple of 16")
    return ""


def _lower_rows(graph, dispatch, gemm, root, schedule, wg, order, pixels):
    """``pixels`` = P outputs along x per thread (one input channel per output, NCHW):
    a thread computes (image, channel, row y, x0 .. x0+P-1), x0 = P * segment; a
    workgroup is a block of channels (lanes, ``order=channels`` only) x segments, its
    filter slice staged through LDS. Its kH*kW filter taps are read once; each window
    row's (P-1)*sw + (kW-1)*dw + 1 input elements are loaded once from one per-thread
    base register plus constants (the input's strides through its views,
    ``operands._affine_strides``), a padding element as a predicated load that leaves its
    register zero (one row test per ky, one column test per column, kept in registers);
    then P accumulators, the fused epilogue per output, and the P outputs stored as
    4-wide vectors where the output is x-contiguous."""
    geo = gemm.geo
    kh, kw, og = geo["kh"], geo["kw"], geo["og"]
    oh, ow, h, wd = geo["oh"], geo["ow"], geo["h"], geo["w"]
    sh, sw = geo["stride"]
    dh, dw = geo["dilation"]
    pt, pl, pb, pr = geo["padding"]
    x_t, w_t = root.inputs
    xbuf, xst, xbase = _affine_strides(graph, dispatch, x_t)   # logical (n, c, h, w)
    wbuf, wst, wbase = _affine_strides(graph, dispatch, w_t)   # (o, c/g = 1, kh, kw)
    regs = RegisterNamer()
    em = ValueEmitter(graph, list(dispatch.ops), list(dispatch.inputs), regs)

    def let(hint, value, out, dtype="i32"):
        v = program.Var(regs.new(hint), dtype)
        out.append(program.Assign(v, value))
        return v

    nn, cc = root.type.shape[:2]
    segs = ow // pixels
    taps = kh * kw
    so, _, sky, skx = wst
    head: list = []
    stmts: list = []
    lds: tuple = ()
    wregs = [[program.Var(regs.new("w"), "f32") for _ in range(kw)] for _ in range(kh)]
    wloads: list = []
    # order=channels (the only order, ``pixels_why``): a workgroup is a block of CB
    # channels (lanes) x wg/CB pixel segments, so its filter slice is CB consecutive
    # filters: staged once through LDS with coalesced loads, then each lane reads its
    # channel's taps from LDS (a lane's 49 taps from global memory are one cache line
    # per lane, and hipcc merges their consecutive dwords into unaligned dwordx4 the IR
    # cannot state)
    cb = _channel_block(cc, wg)
    per_wg = wg // cb
    total = nn * oh * segs
    grid = (cc // cb) * ceil_div(total, per_wg)
    bid = program.block_id()
    tid = program.thread_id()
    cblk = let("cblk", imod(bid, cc // cb), head)
    sg = let("seg", iadd(imul(idiv(bid, cc // cb), per_wg), idiv(tid, cb)), head)
    inside = (sg < total) if total % per_wg else None
    nb, y, xs = [let(f"i{d}", v, stmts) for d, v in enumerate(unravel(sg, (nn, oh, segs)))]
    cl = let("cl", imod(tid, cb), head)
    ch = let("ch", iadd(imul(cblk, cb), cl), stmts)
    tile = cb * taps
    contiguous = (so, sky, skx) == (taps, kw, 1) and isinstance(wbase, int)
    vw = 4 if contiguous and wbase % 4 == 0 and tile % 4 == 0 else 1
    lds = (program.LdsArray("wtaps", "f32", (tile,)),)
    slots = tile // vw
    for j in range(ceil_div(slots, wg)):
        slot = let(f"slot{j}", iadd(tid, j * wg), head)
        regs_j = tuple(program.Var(regs.new("ws"), "f32") for _ in range(vw))
        if contiguous:
            off = iadd(iadd(wbase, imul(cblk, tile)), imul(slot, vw))
        else:
            fl, tp = idiv(slot, taps), imod(slot, taps)
            off = iadd(iadd(wbase, imul(iadd(imul(cblk, cb), fl), so)),
                       iadd(imul(idiv(tp, kw), sky), imul(imod(tp, kw), skx)))
        part = (program.Load(regs_j, wbuf, off),
                program.LdsStore("wtaps", imul(slot, vw), regs_j))
        head.extend(part if (j + 1) * wg <= slots else (program.If(slot < slots, part),))
    head.append(program.Barrier())
    wbase_l = let("wl", imul(cl, taps), stmts)
    for ky in range(kh):
        for kx in range(kw):
            wloads.append(program.LdsLoad((wregs[ky][kx],), "wtaps",
                                          iadd(wbase_l, ky * kw + kx)))
    x0 = let("x0", imul(xs, pixels), stmts)
    ci = let("ci", idiv(ch, og), stmts) if og > 1 else ch   # the group's one input channel
    iy0 = let("iy0", iadd(imul(y, sh), -pt), stmts) if (sh != 1 or pt) else y
    ix0 = let("ix0", iadd(imul(x0, sw), -pl), stmts) if (sw != 1 or pl) else x0
    sn, sc, sy, sx = xst
    xoff = let("xoff", iadd(iadd(iadd(iadd(xbase, imul(nb, sn)), imul(ci, sc)), imul(iy0, sy)),
                            imul(ix0, sx)), stmts)
    cols = (pixels - 1) * sw + (kw - 1) * dw + 1
    used = sorted({p * sw + kx * dw for p in range(pixels) for kx in range(kw)})

    def test(v, lo, hi, hint, const):
        """The register holding lo <= v + const < hi (None: always holds)."""
        cond = _in_range(iadd(v, const), 0 if lo else None, hi if hi else None)
        return None if cond is None else let(hint, cond, stmts)
    rows_ok = [test(iy0, pt, pb and h, f"ry{ky}", ky * dh) for ky in range(kh)]
    cols_ok = {j: test(ix0, pl, pr and wd, f"cx{j}", j) for j in used}
    xregs = [{j: program.Var(regs.new("x"), "f32") for j in used} for _ in range(kh)]
    loads: list = list(wloads)
    for ky in range(kh):
        row: list = []
        for j in used:
            ld = program.Load((xregs[ky][j],), xbuf, iadd(xoff, ky * dh * sy + j * sx))
            if cols_ok[j] is None:
                row.append(ld)
            else:
                stmts.append(program.Assign(xregs[ky][j], program.f32(0.0)))
                row.append(program.If(cols_ok[j], (ld,)))
        if rows_ok[ky] is None:
            loads.extend(row)
        else:
            stmts.extend(program.Assign(xregs[ky][j], program.f32(0.0)) for j in used
                         if cols_ok[j] is None)
            loads.append(program.If(rows_ok[ky], tuple(row)))
    accs = [program.Var(regs.new("acc"), "f32") for _ in range(pixels)]
    stmts.extend(program.Assign(a, program.f32(0.0)) for a in accs)
    stmts.extend(loads)  # every load first: one memory latency, as hipcc issues them
    for p in range(pixels):
        for ky in range(kh):
            for kx in range(kw):
                stmts.append(program.Assign(accs[p], program.fma(
                    xregs[ky][p * sw + kx * dw], wregs[ky][kx], accs[p])))
    with em.scope(stmts):
        for o in dispatch.outputs:
            t = graph.op(o).type
            vals, offs = [], []
            for p in range(pixels):
                em.bound[root.name] = lambda ix, a=accs[p]: a
                oidx = gemm.out_index(o, (nb, ch, y, iadd(x0, p)))
                vals.append(em.value(o, oidx))
                offs.append(em.offset(t, oidx))
            width = _store_width(offs, pixels)
            for p in range(0, pixels, width):
                stmts.append(program.Store(o, offs[p], tuple(vals[p:p + width])))
    body = head + ([program.If(inside, tuple(stmts))] if inside is not None else stmts)
    meta = {"dispatch": dispatch.name, "root": dispatch.root, "kind": "contraction",
            "lowering": "direct", "schedule": dict(schedule), "order": order,
            "pixels": pixels, "taps": gemm.K, "groups": geo["groups"],
            "flops": 2 * root.type.size * gemm.K, "vector_widths": {"input": 1, "filter": 1},
            "elements": math.prod(root.type.shape)}
    return program.Kernel(sanitize(f"{dispatch.name}_direct"), buffers(graph, dispatch),
                          grid=grid, block=wg, body=tuple(body), lds=lds, meta=meta)


def _channel_block(channels: int, wg: int) -> int:
    """The channels of one workgroup under ``order=channels`` with pixels > 1: the
    largest of 64, 32, 16 dividing both the channels and the workgroup (0: none)."""
    return next((cb for cb in (64, 32, 16) if channels % cb == 0 and wg % cb == 0), 0)


def _store_width(offs, pixels) -> int:
    """4, 2 or 1: the widest vector the P output offsets allow, where they are
    consecutive (the same affine form, constants 0, 1, ...). Their first is a multiple of
    P (x0 = P * segment and OW a multiple of P, in an x-contiguous output)."""
    forms = [affine_form(o) for o in offs]
    base_terms, base_c = forms[0]
    if any(t != base_terms or c != base_c + p for p, (t, c) in enumerate(forms)):
        return 1
    return math.gcd(pixels, 4)
