"""Implicit-GEMM addressing of a 2-D convolution: every kernel size, stride, padding,
dilation and group count, NCHW or NHWC.

A convolution with G groups is G independent GEMMs, so the groups are the GEMM's batch
(the contraction kernel already walks a batch of tiles): for group b,

    C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]
    m = (image, oy, ox)              M = N * OH * OW
    n = filter inside the group      N = O / G
    k = (ci, ky, kx) or (ky, kx, ci) K = C / G * kH * kW   (ci: channel inside the group)

A[b, m, k] is input[image, b*C/G + ci, oy*sh + ky*dh - pt, ox*sw + kx*dw - pl] (NCHW; NHWC
has the channel last), B[b, k, n] is filter[b*O/G + n, ci, ky, kx] (OIHW; KYXC for NHWC).
For NHWC the K order is (ky, kx, ci): channels innermost, so an A row reads contiguous
memory and 4-wide loads along K are legal when C/G is a multiple of 4; for NCHW it is
(ci, ky, kx), which makes the OIHW filter contiguous along K.

Padding is never materialised: a tap outside the image is a predicated load whose
register stays zero (``valid`` below); the contraction lowering puts the guard on the
tile load. Only sides with padding get a test, so an unpadded conv has no guard at all.
Depthwise (G = C) is the same formula with K = kH*kW and N = the channel multiplier.

Each formula works on numbers or IR (``compiler.lower.contraction``'s ``_add`` family), so
the same code fills the numpy offset tables that decide vector legality and builds the
kernel's index expressions.
"""
from __future__ import annotations

import math

from gpusim import program as P
from gpusim.hw import Arch

from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize
from compiler.lower.emitter import RegisterNamer, ValueEmitter, iadd, idiv, imod, imul, unravel


def conv_geometry(graph, root) -> dict:
    """Sizes of a conv2d op: n, c, h, w, o, kh, kw, oh, ow, groups, strides, padding."""
    at = root.attrs
    fmt = at.get("data_format", "NCHW")
    x_t, w_t = root.inputs
    xs, ws = graph.op(x_t).type.shape, graph.op(w_t).type.shape
    if fmt == "NHWC":
        n, h, wd, c = xs
        o, kh, kw, _ = ws
        _, oh, ow, _ = root.type.shape
    else:
        n, c, h, wd = xs
        o, _, kh, kw = ws
        _, _, oh, ow = root.type.shape
    g = int(at.get("groups", 1))
    return {"fmt": fmt, "n": n, "c": c, "h": h, "w": wd, "o": o, "kh": kh, "kw": kw,
            "oh": oh, "ow": ow, "groups": g, "cg": c // g, "og": o // g,
            "stride": tuple(at.get("stride", (1, 1))),
            "dilation": tuple(at.get("dilation", (1, 1))),
            "padding": tuple(at.get("padding", (0, 0, 0, 0)))}


def setup_conv_gemm(gemm, dispatch, affine_strides, ops) -> None:
    """Fills ``gemm`` (a ``compiler.lower.contraction.Gemm``) for its conv2d root:
    sizes, the two operands and ``conv`` facts ``root_index`` and the swizzle use.
    ``affine_strides(graph, dispatch, tensor)`` and ``ops`` (the Operand class and the
    numbers-or-IR helpers ``_add, _mul, _div, _mod, _and, _in_range``) come from the
    contraction module, which imports this one (so this one imports ``Gemm`` inside
    ``lower_direct_conv``)."""
    Operand, _add, _mul, _div, _mod, _and, _in_range = ops
    g = gemm.graph
    root = gemm.root
    geo = conv_geometry(g, root)
    fmt, kh, kw = geo["fmt"], geo["kh"], geo["kw"]
    cg, og, oh, ow = geo["cg"], geo["og"], geo["oh"], geo["ow"]
    h, wd = geo["h"], geo["w"]
    sh, sw = geo["stride"]
    dh, dw = geo["dilation"]
    pt, pl, pb, pr = geo["padding"]
    x_t, w_t = root.inputs
    gemm.fmt = fmt
    gemm.geo = geo
    gemm.batch, gemm.bshape = geo["groups"], (geo["groups"],)
    gemm.M, gemm.N, gemm.K = geo["n"] * oh * ow, og, cg * kh * kw
    gemm.vec_dim = "n" if fmt == "NHWC" else "m"
    gemm.conv = (geo["n"], geo["c"], h, wd, geo["o"], kh, kw, oh, ow)
    xa = affine_strides(g, dispatch, x_t)
    wa = affine_strides(g, dispatch, w_t)
    if xa is None or wa is None:
        raise LoweringError(f"conv {root.name!r}: operands must be inputs or views of inputs "
                            f"(a fused producer of a conv operand is not supported)")

    def split_k(k):
        """(ky, kx, ci) of a K index in this format's K order."""
        if kh == kw == 1:  # 1x1: K is the channel index
            return 0, 0, k
        if fmt == "NHWC":  # (ky, kx, ci): channels innermost
            return _div(k, kw * cg), _mod(_div(k, cg), kw), _mod(k, cg)
        return _mod(_div(k, kw), kh), _mod(k, kw), _div(k, kh * kw)  # (ci, ky, kx)

    def dot(ix, strides, base):
        off = base
        for i, s in zip(ix, strides):
            off = _add(off, _mul(i, s))
        return off

    _, xst, _ = xa
    # A pointwise NCHW conv whose image rows are narrower than a vector but whose image
    # is a whole number of vectors (14x14: W = 14, H*W = 196) reads each image as one
    # contiguous run along M. Split into (y, x) and recombined as y*W + x, the index
    # proves only gcd(W, 4)-alignment to the validator, which then rejects every vector
    # load the offset table allows (ResNet-50's 14x14 stage had only the scalar fallback
    # left); recombined as m % (H*W) it proves the alignment. Other shapes keep the
    # per-dimension form the timing model's address arithmetic was checked on.
    flat_image = (kh == kw == 1 and (sh, sw) == (1, 1) and not any(geo["padding"])
                  and fmt == "NCHW" and ow % 4 and (oh * ow) % 4 == 0
                  and xst[2] == ow * xst[3])

    def a_offset(b, m, k):
        _, st, base = xa
        ki, kj, ci = split_k(k)
        ch = _add(_mul(b, cg), ci) if geo["groups"] > 1 else ci
        if flat_image:
            nb, pix = _div(m, oh * ow), _mod(m, oh * ow)
            return dot((nb, ch, pix), (st[0], st[1], st[3]), base), None
        nb, y, x = _div(m, oh * ow), _mod(_div(m, ow), oh), _mod(m, ow)
        ih = _add(_add(_mul(y, sh), _mul(ki, dh)), -pt)
        iw = _add(_add(_mul(x, sw), _mul(kj, dw)), -pl)
        ix = (nb, ih, iw, ch) if fmt == "NHWC" else (nb, ch, ih, iw)
        # only padding can take a tap outside the image
        valid = _and(_in_range(ih, 0 if pt else None, h if pb else None),
                     _in_range(iw, 0 if pl else None, wd if pr else None))
        return dot(ix, st, base), valid

    def b_offset(b, k, f):
        _, st, base = wa
        ki, kj, ci = split_k(k)
        fo = _add(_mul(b, og), f) if geo["groups"] > 1 else f
        ix = (fo, ki, kj, ci) if fmt == "NHWC" else (fo, ci, ki, kj)
        return dot(ix, st, base), None

    gemm.A = Operand(x_t, xa[0], gemm.M, gemm.K, a_offset)
    gemm.B = Operand(w_t, wa[0], gemm.K, gemm.N, b_offset)
    gemm.B.simplify_affine = True  # K = (ci, ky, kx) recombined: one provable stride


def conv_root_index(gemm, b, m, n, ops) -> tuple:
    """Logical index of the conv result for GEMM element (group b, m, n)."""
    _add, _mul, _div, _mod = ops
    geo = gemm.geo
    oh, ow = geo["oh"], geo["ow"]
    nb, y, x = _div(m, oh * ow), _mod(_div(m, ow), oh), _mod(m, ow)
    ch = _add(_mul(b, geo["og"]), n) if geo["groups"] > 1 else n
    return (nb, y, x, ch) if gemm.fmt == "NHWC" else (nb, ch, y, x)


# ------------------------------------------------------------------ direct lowering
#: The direct lowering unrolls every tap of a group's window per output element; past
#: this many (C/G * kH * kW) the implicit GEMM's tiled reuse wins and the code would bloat.
DIRECT_MAX_TAPS = 32
DIRECT_WORKGROUPS = (64, 256)


def direct_applies(graph, root) -> str:
    """'' when the direct lowering can serve this conv (few taps per output, as a
    depthwise conv has), else why not."""
    if root.kind != "conv2d":
        return f"{root.name!r} is a {root.kind}, not a conv2d"
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


    from compiler.lower.contraction import Gemm  # import cycle: contraction imports the conv helpers above

    root = graph.op(dispatch.root)
    why = direct_applies(graph, root)
    if why:
        raise LoweringError(f"dispatch {dispatch.name!r}: lowering=direct: {why}")
    wg = int(schedule.get("workgroup", 64))
    if wg not in DIRECT_WORKGROUPS:
        raise LoweringError(f"lowering=direct: workgroup {wg} not in {DIRECT_WORKGROUPS}")
    gemm = Gemm(graph, dispatch)
    for o in dispatch.outputs:
        if graph.op(o).type.size != root.type.size:
            raise LoweringError(f"dispatch {dispatch.name!r}: output {o!r} is not the conv "
                                f"result or a view of it")
    geo = gemm.geo
    regs = RegisterNamer()
    em = ValueEmitter(graph, list(dispatch.ops), list(dispatch.inputs), regs)
    stmts: list = []   # the work of one element, under the bounds guard

    def let(hint, value, out, dtype="i32"):
        v = P.Var(regs.new(hint), dtype)
        out.append(P.Assign(v, value))
        return v

    size = root.type.size
    head: list = []
    e = let("e", iadd(imul(P.block_id(), wg), P.thread_id()), head)
    ridx = [let(f"i{d}", x, stmts) for d, x in enumerate(unravel(e, root.type.shape))]
    if geo["fmt"] == "NHWC":
        nb, y, x, ch = ridx
    else:
        nb, ch, y, x = ridx
    og = geo["og"]
    b = let("grp", idiv(ch, og), stmts) if geo["groups"] > 1 else P.i32(0)
    n = let("f", imod(ch, og), stmts) if geo["groups"] > 1 else ch
    m = let("m", iadd(imul(iadd(imul(nb, geo["oh"]), y), geo["ow"]), x), stmts)
    acc = let("acc", P.f32(0.0), stmts, "f32")
    # Taps whose operand elements are consecutive and aligned in memory (the exact offset
    # tables of ``Operand.analyse``: a filter row along K, OIHW; channels along K, NHWC)
    # are read as one 2- or 4-wide vector, as hipcc's load-store vectorizer merges them
    # (a 1x1 NCHW conv's 32 filter taps: 8 global_load_dwordx4, issue 28); a tap group
    # shares one padding guard (``analyse`` checks it is uniform over the group).
    wa, wb = gemm.A.max_vec["c"], gemm.B.max_vec["r"]
    ra = [P.Var(regs.new("xa"), "f32") for _ in range(gemm.K)]
    rb = [P.Var(regs.new("wb"), "f32") for _ in range(gemm.K)]
    loads, fmas = [], []
    for k in range(gemm.K):
        if k % wa == 0:
            a_off, valid = gemm.A.offset_fn(b, m, k)
            group = tuple(ra[k:k + wa])
            if valid is None:
                loads.append(P.Load(group, gemm.A.buffer, a_off))
            else:
                stmts.extend(P.Assign(r, P.f32(0.0)) for r in group)
                loads.append(P.If(valid, (P.Load(group, gemm.A.buffer, a_off),)))
        if k % wb == 0:
            b_off, _ = gemm.B.offset_fn(b, k, n)
            loads.append(P.Load(tuple(rb[k:k + wb]), gemm.B.buffer, b_off))
        fmas.append(P.Assign(acc, P.fma(ra[k], rb[k], acc)))
    stmts += loads + fmas  # every tap's loads first: one memory latency, as hipcc issues
    with em.scope(stmts):
        em.bound[root.name] = lambda ix: acc
        for o in dispatch.outputs:
            oidx = gemm.out_index(o, tuple(ridx))
            val = em.value(o, oidx)
            stmts.append(P.Store(o, em.offset(graph.op(o).type, oidx), (val,)))
    body = head + ([P.If(e < size, tuple(stmts))] if size % wg else stmts)
    grid = ceil_div(size, wg)
    meta = {"dispatch": dispatch.name, "root": dispatch.root, "kind": "contraction",
            "lowering": "direct", "schedule": dict(schedule),
            "taps": gemm.K, "groups": geo["groups"], "flops": 2 * size * gemm.K,
            "vector_widths": {"input": wa, "filter": wb},
            "elements": math.prod(root.type.shape)}
    return P.Kernel(sanitize(f"{dispatch.name}_direct"), buffers(graph, dispatch), grid=grid,
                    block=wg, body=tuple(body), meta=meta)
