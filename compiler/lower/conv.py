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
The A offset is also given split in two (``a_rows``/``a_cols``, the operand's
``im2col``): the part of the output position, which the K loop's staging computes once
per thread before the loop, and the part of k, computed per K tile (issue 27: the inline
form made ResNet-50's split 3x3 convs CU-bound on address arithmetic).
Depthwise (G = C) is the same formula with K = kH*kW and N = the channel multiplier.

K order ``tap`` (the schedule knob ``k_order``; ``layout`` is the order above): K is
(ky, kx, ci) whatever the layout, and a schedule with it stages K tiles whose depth BK
divides C/G, so every K tile lies inside one filter tap. The tap, its offset
(ky*dh*sy + kx*dw*sx) and the tile's first channel are then wave-uniform per K tile
(scalar arithmetic), and a staged element's address is a per-thread register (its output
position's, or filter's, offset plus its channel inside the tile times the channel
stride) plus that uniform part: one VALU add, where the ``layout`` order splits every
element's k into (ci, ky, kx) with divisions and recomputes the padding test. The
padding test becomes one bit of a per-thread tap mask (bit ky*kW + kx: that tap of this
output position is inside the image), built once before the K loop (``Operand.taps``,
staged by ``_Builder.stage_taps``). The price for NCHW: the OIHW filter is strided along
(ky, kx, ci), so its loads are scalar (issue 27: ResNet-50's 3x3 convs spent ~20 VALU
operators per staged element on the ``layout`` order's address and test).

Each formula works on numbers or IR (``compiler.lower.operands``'s ``_add`` family), so
the same code fills the numpy offset tables that decide vector legality and builds the
kernel's index expressions. The contraction lowering imports this module; the direct
lowering of few-tap convs, which builds on its ``Gemm``, is ``compiler.lower.direct_conv``.
"""
from __future__ import annotations

from compiler.lower.common import LoweringError
from compiler.lower.operands import Operand, _add, _affine_strides, _and, _div, _in_range, _mod, _mul


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


#: ``k_order`` values: ``layout`` (NCHW: (ci, ky, kx); NHWC: (ky, kx, ci)) or ``tap``
K_ORDERS = ("layout", "tap")
#: a tap mask of more bits than this is kept as a row mask and a column mask (an i32
#: register holds 31 bits a shift can test without touching the sign)
MASK_BITS = 31


def tap_order_why(geo: dict) -> str:
    """'' when ``k_order=tap`` can stage this conv (each K tile inside one tap for some
    BK), else why not."""
    if geo["kh"] * geo["kw"] == 1:
        return "k_order=tap: a 1x1 conv has one tap (K is the channels already)"
    if geo["cg"] % 4:
        return (f"k_order=tap: {geo['cg']} channels per group is no multiple of a K tile "
                f"(each K tile must lie inside one tap)")
    return ""


def tap_tile_why(geo: dict, BK: int) -> str:
    """'' when a K tile of depth ``BK`` lies inside one tap, else why not."""
    if geo["cg"] % BK:
        return (f"k_order=tap: BK={BK} does not divide the {geo['cg']} channels per group "
                f"(a K tile would span two taps)")
    return ""


def setup_conv_gemm(gemm, dispatch, k_order: str = "layout") -> None:
    """Fills ``gemm`` (a ``compiler.lower.contraction.Gemm``) for its conv2d root:
    sizes, the two operands and ``conv`` facts ``root_index`` and the swizzle use;
    ``k_order`` (``K_ORDERS``) picks the K order (module docstring)."""
    g = gemm.graph
    root = gemm.root
    geo = conv_geometry(g, root)
    if k_order not in K_ORDERS:
        raise LoweringError(f"k_order={k_order!r} not in {K_ORDERS}")
    tap = k_order == "tap"
    if tap and tap_order_why(geo):
        raise LoweringError(f"conv {root.name!r}: {tap_order_why(geo)}")
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
    xa = _affine_strides(g, dispatch, x_t)
    wa = _affine_strides(g, dispatch, w_t)
    if xa is None or wa is None:
        raise LoweringError(f"conv {root.name!r}: operands must be inputs or views of inputs "
                            f"(a fused producer of a conv operand is not supported)")

    def split_k(k):
        """(ky, kx, ci) of a K index in this format's K order."""
        if kh == kw == 1:  # 1x1: K is the channel index
            return 0, 0, k
        if fmt == "NHWC" or tap:  # (ky, kx, ci): channels innermost
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

    # The same A offsets split for the K loop (``Operand.im2col``): a part of the output
    # position alone (image, y*sh - pt, x*sw - pl, and their offset; for a 1x1 conv also
    # the padding test), which a staging thread keeps in registers across the whole K
    # loop since its row of the tile never changes, and a part of k, computed per K tile.
    # The inline form above re-derived (image, y, x) from m with divisions and moduli,
    # and tested all four padding sides from scratch, for every element of every K tile.
    sn, sc, sy, sx = (xst[0], xst[3], xst[1], xst[2]) if fmt == "NHWC" else xst

    def a_rows(b, m):
        _, _, base = xa
        nb, y, x = _div(m, oh * ow), _mod(_div(m, ow), oh), _mod(m, ow)
        yb, xb = _add(_mul(y, sh), -pt), _add(_mul(x, sw), -pl)
        off = dot((nb, yb, xb), (sn, sy, sx), base)
        if geo["groups"] > 1:
            off = _add(off, _mul(_mul(b, cg), sc))
        parts = {"yb": yb, "xb": xb, "off": off}
        if kh == kw == 1 and any(geo["padding"]):  # no tap moves: the test is the row's
            parts["valid"] = _and(_in_range(yb, 0 if pt else None, h if pb else None),
                                  _in_range(xb, 0 if pl else None, wd if pr else None))
        return parts

    def a_cols(parts, k, let=lambda hint, v: v):
        """``let(hint, value)`` may name a value once (a register) where it is used
        twice: the kernel's expressions are evaluated as written, without CSE."""
        ki, kj, ci = (let(n, v) for n, v in zip(("ky", "kx", "ci"), split_k(k)))
        off = _add(parts["off"], dot((ci, ki, kj), (sc, dh * sy, dw * sx), 0))
        if kh == kw == 1:
            return off, parts.get("valid")
        ih, iw = let("ih", _add(parts["yb"], _mul(ki, dh))), let("iw", _add(parts["xb"], _mul(kj, dw)))
        valid = _and(_in_range(ih, 0 if pt else None, h if pb else None),
                     _in_range(iw, 0 if pl else None, wd if pr else None))
        return off, valid

    def b_offset(b, k, f):
        _, st, base = wa
        ki, kj, ci = split_k(k)
        fo = _add(_mul(b, og), f) if geo["groups"] > 1 else f
        ix = (fo, ki, kj, ci) if fmt == "NHWC" else (fo, ci, ki, kj)
        return dot(ix, st, base), None

    # k_order=tap: the offsets split into a per-thread part fixed across the K loop and
    # a wave-uniform part of the K tile (``Operand.taps``). ``kl`` is the element's K
    # index inside its tile (0 <= kl < BK <= C/G: its channel inside the tile's first),
    # ``k0`` the tile's first K (a multiple of BK, which divides C/G: one tap).
    _, wst, _ = wa
    so, sci, sky, skx = (wst[0], wst[3], wst[1], wst[2]) if fmt == "NHWC" else wst

    def tile_tap(k0, let):
        """The K tile's tap and first channel (scalars: ``k0`` is wave-uniform)."""
        tp = let("tap", _div(k0, cg))
        return tp, let("ky", _div(tp, kw)), let("kx", _mod(tp, kw)), let("ci0", _mod(k0, cg))

    def tap_mask(parts, let=lambda hint, v: v):
        """The per-thread tap mask of an output position (``yb``, ``xb`` popped): bit
        ky*kW + kx set when that tap is inside the image ("mask"), or a row mask and a
        column mask past ``MASK_BITS`` taps; nothing when the conv has no padding.
        ``let`` names a value used more than once (the input row and column, the column
        bits): the kernel's expressions are evaluated as written."""
        yb, xb = parts.pop("yb"), parts.pop("xb")
        if not any(geo["padding"]):
            return parts
        yb, xb = let("yb", yb), let("xb", xb)

        def bits(tests):
            out = 0
            for i, ok in tests:
                out = _add(out, _mul(ok, 1 << i) if ok is not None else 1 << i)
            return out
        tests_y = [(ky, _in_range(_add(yb, ky * dh), 0 if pt else None, h if pb else None))
                   for ky in range(kh)]
        xrow = bits([(kx, _in_range(_add(xb, kx * dw), 0 if pl else None, wd if pr else None))
                     for kx in range(kw)])
        if kh * kw <= MASK_BITS:
            xrow = let("xrow", xrow)
            mask = 0
            for ky, ok in tests_y:
                row = _mul(xrow, 1 << (ky * kw))
                mask = _add(mask, _mul(ok, row) if ok is not None else row)
            parts["mask"] = mask
        else:
            parts["ymask"], parts["xmask"] = bits(tests_y), xrow
        return parts

    def tap_valid(parts, tp, ky, kx):
        """The padding test of tap (ky, kx) = ``tp`` from :func:`tap_mask`'s registers."""
        if "mask" in parts:
            return (parts["mask"] >> tp) & 1
        if "ymask" in parts:
            return (parts["ymask"] >> ky) & (parts["xmask"] >> kx) & 1
        return None

    def a_fixed(b, m, kl, let=lambda hint, v: v):
        parts = a_rows(b, m)
        parts.pop("valid", None)  # kh*kw > 1 here: the taps move the test
        parts["off"] = _add(parts["off"], _mul(kl, sc))
        return tap_mask(parts, let)

    def a_tile(parts, k0, let):
        tp, ky, kx, ci0 = tile_tap(k0, let)
        off = _add(parts["off"], let("a_tap_off", _add(_add(_mul(ci0, sc), _mul(ky, dh * sy)),
                                                          _mul(kx, dw * sx))))
        return off, tap_valid(parts, tp, ky, kx)

    def b_fixed(b, f, kl, let=lambda hint, v: v):
        _, _, base = wa
        fo = _add(_mul(b, og), f) if geo["groups"] > 1 else f
        return {"off": _add(_add(base, _mul(fo, so)), _mul(kl, sci))}

    def b_tile(parts, k0, let):
        _, ky, kx, ci0 = tile_tap(k0, let)
        return _add(parts["off"], let("b_tap_off", _add(_add(_mul(ci0, sci), _mul(ky, sky)),
                                                        _mul(kx, skx)))), None

    # tap_mask=1 on the layout order's split: the row part keeps the tap mask instead of
    # the input row and column, and the column part tests one bit of it
    def a_rows_mask(b, m, let=lambda hint, v: v):
        return tap_mask(a_rows(b, m), let)

    def a_cols_mask(parts, k, let=lambda hint, v: v):
        if fmt == "NHWC":  # (ky, kx, ci): the tap is k // C/G
            tp = let("tap", _div(k, cg))
            ci = let("ci", _mod(k, cg))
        else:  # (ci, ky, kx): the tap is k % (kH*kW)
            tp = let("tap", _mod(k, kh * kw))
            ci = _div(k, kh * kw)
        ki, kj = let("ky", _div(tp, kw)), let("kx", _mod(tp, kw))
        off = _add(parts["off"], dot((ci, ki, kj), (sc, dh * sy, dw * sx), 0))
        return off, tap_valid(parts, tp, ki, kj)

    # BK a multiple of kH*kW in the NCHW layout order (ci, ky, kx): the element at column
    # c of a K tile starting at k0 (a multiple of BK) has tap c % T and channel
    # k0 / T + c / T, so all but (k0 / T) * (channel stride) is fixed across the K loop
    def a_period_fixed(parts, c, let=lambda hint, v: v):
        tp = let("ptap", _mod(c, kh * kw))
        ki, kj = let("pky", _div(tp, kw)), let("pkx", _mod(tp, kw))
        off = _add(parts["off"], dot((_div(c, kh * kw), ki, kj), (sc, dh * sy, dw * sx), 0))
        return off, tap_valid(parts, tp, ki, kj)

    def a_period_tile(k0, let=lambda hint, v: v):
        return let("ptile", _mul(_div(k0, kh * kw), sc))

    gemm.A = Operand(x_t, xa[0], gemm.M, gemm.K, a_offset)
    if tap:
        gemm.A.taps = (a_fixed, a_tile)
    elif not flat_image:
        gemm.A.im2col = (a_rows, a_cols)
        if kh * kw > 1:
            gemm.A.im2col_mask = (a_rows_mask, a_cols_mask)
            if fmt == "NCHW":
                gemm.A.im2col_period = (kh * kw, a_period_fixed, a_period_tile)
    gemm.B = Operand(w_t, wa[0], gemm.K, gemm.N, b_offset)
    gemm.B.simplify_affine = True  # K = (ci, ky, kx) recombined: one provable stride
    if tap:
        gemm.B.taps = (b_fixed, b_tile)
    gemm.k_order = k_order


def conv_root_index(gemm, b, m, n) -> tuple:
    """Logical index of the conv result for GEMM element (group b, m, n)."""
    geo = gemm.geo
    oh, ow = geo["oh"], geo["ow"]
    nb, y, x = _div(m, oh * ow), _mod(_div(m, ow), oh), _mod(m, ow)
    ch = _add(_mul(b, geo["og"]), n) if geo["groups"] > 1 else n
    return (nb, y, x, ch) if gemm.fmt == "NHWC" else (nb, ch, y, x)
