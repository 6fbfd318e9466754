"""The implicit-GEMM conv's staging knobs (issue 27; ``compiler.lower.conv``):

- ``k_order=tap``: K in (ky, kx, ci) with BK dividing C/G, so a K tile lies inside one
  filter tap; its tap part is wave-uniform per tile and a staged element's address is one
  per-thread register plus it (``Operand.taps``, ``_Builder.stage_taps``);
- ``tap_mask=1``: the layout order's padding test as one bit of a per-thread tap mask
  set before the K loop (``Operand.im2col_mask``);
- ``prefetch=2`` (any contraction): two K tiles of global loads in flight
  (``_Builder.k_loop_two_ahead``).

Both split forms give exactly the offsets and padding tests of the inline formula; values
equal numpy in gpusim (hypothesis over shapes, strides, padding, dilation, groups, both
layouts, FMA and MFMA tiles, split-K); the K loop of a tap kernel adds one register to a
uniform value per staged element; the space offers both and keeps the old points; the
rules refuse what they cannot stage with a reason."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from gpusim import program
from gpusim.hw import GFX942

from compiler.lower.common import LoweringError
from compiler.lower.contraction import Gemm, check_schedule, lower_contraction
from compiler.schedule import schedule_space

from test_conv_im2col import _conv
from test_lower_contraction import run_functional, whole

FMA = dict(BM=32, BN=32, BK=16, TM=4, TN=4, KW=1, lds_pad=4, swizzle="none")
#: the search's first FMA tile (``compiler.schedule.contraction.TILES[0]``)
FMA_SEARCH = dict(BM=16, BN=32, BK=64, TM=2, TN=4, KW=8, lds_pad=4, swizzle="none")
MFMA = dict(mma="mfma", BM=16, BN=16, BK=16, TM=16, TN=16, KW=4, lds_pad=4,
            swizzle="before_fusion")


def _widths(gm):
    return gm.A.max_vec[gm.A.inner], gm.B.max_vec[gm.B.inner]


CONVS = [  # (conv kwargs): padded, strided, dilated, grouped, 7x7 (row and column masks)
    dict(fmt="NCHW", c=16, o=8, hw=(9, 7)),
    dict(fmt="NHWC", c=32, o=8, groups=2, stride=(2, 2), n=2, pad=(2, 0, 1, 2), dil=(2, 1)),
    dict(fmt="NCHW", c=16, o=8, k=(7, 7), pad=(3, 3, 3, 3), hw=(10, 10), stride=(2, 2)),
    dict(fmt="NCHW", c=16, o=8, pad=(0, 0, 0, 0)),
    dict(fmt="NCHW", c=4, o=8, k=(5, 3), pad=(2, 1, 2, 1), dil=(1, 2)),
]


def _k_and_tiles(gm, bk):
    b = np.arange(gm.batch).reshape(-1, 1, 1, 1)
    m = np.arange(gm.M).reshape(1, -1, 1, 1)
    k0 = np.arange(0, gm.K, bk).reshape(1, 1, -1, 1)
    kl = np.arange(bk).reshape(1, 1, 1, -1)
    return b, m, k0, kl


@pytest.mark.parametrize("ci", range(len(CONVS)))
def test_tap_split_equals_the_inline_formula(ci):
    g = _conv(**CONVS[ci])
    try:
        gm = Gemm(g, whole(g), "tap")
    except LoweringError as e:
        assert "channels per group" in str(e)
        return
    bk = 4
    b, m, k0, kl = _k_and_tiles(gm, bk)
    shape = (gm.batch, gm.M, gm.K // bk, bk)
    off, valid = gm.A.offset_fn(b, m, k0 + kl)
    fixed, tile = gm.A.taps
    off2, valid2 = tile(fixed(b, m, kl), k0, lambda hint, v: v)
    valid = np.broadcast_to(True if valid is None else valid, shape)
    valid2 = np.broadcast_to(True if valid2 is None else valid2.astype(bool), shape)
    assert np.array_equal(valid, valid2)
    assert np.array_equal(np.broadcast_to(off, shape)[valid], np.broadcast_to(off2, shape)[valid])
    n = np.arange(gm.N).reshape(1, 1, 1, -1)
    kk = np.arange(gm.K).reshape(1, -1, 1)
    offb, _ = gm.B.offset_fn(b[..., 0], kk, n[..., 0, :])
    fixed, tile = gm.B.taps
    kb = (kk // bk) * bk
    offb2, _ = tile(fixed(b[..., 0], n[..., 0, :], kk - kb), kb, lambda hint, v: v)
    assert np.array_equal(np.broadcast_to(offb, offb2.shape), offb2)


@pytest.mark.parametrize("ci", range(len(CONVS)))
def test_mask_split_equals_the_inline_formula(ci):
    g = _conv(**CONVS[ci])
    gm = Gemm(g, whole(g))
    rows, cols = gm.A.im2col_mask
    b = np.arange(gm.batch).reshape(-1, 1, 1)
    m = np.arange(gm.M).reshape(1, -1, 1)
    k = np.arange(gm.K).reshape(1, 1, -1)
    off, valid = gm.A.offset_fn(b, m, k)
    off2, valid2 = cols(rows(b, m), k)
    shape = (gm.batch, gm.M, gm.K)
    valid = np.broadcast_to(True if valid is None else valid, shape)
    valid2 = np.broadcast_to(True if valid2 is None else valid2.astype(bool), shape)
    assert np.array_equal(valid, valid2)
    assert np.array_equal(np.broadcast_to(off, shape)[valid], np.broadcast_to(off2, shape)[valid])


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(["NCHW", "NHWC"]), cg=st.sampled_from([4, 8, 16]),
       groups=st.sampled_from([1, 2]), o=st.sampled_from([4, 8]),
       hw=st.tuples(st.integers(3, 9), st.integers(3, 9)),
       k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       dil=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       pad=st.tuples(*[st.integers(0, 2)] * 4), n=st.integers(1, 2),
       knob=st.sampled_from(["tap", "mask"]), mma=st.booleans(), split=st.sampled_from([1, 2]))
def test_values_equal_numpy(fmt, cg, groups, o, hw, k, stride, dil, pad, n, knob, mma, split):
    if hw[0] + pad[0] + pad[2] < (k[0] - 1) * dil[0] + 1 or \
            hw[1] + pad[1] + pad[3] < (k[1] - 1) * dil[1] + 1:
        return  # no output
    g = _conv(fmt, c=cg * groups, o=o * groups, hw=hw, k=k, stride=stride, pad=pad, dil=dil,
              groups=groups, n=n)
    tile = {**(MFMA if mma else FMA), "BK": 4 if knob == "tap" and not mma else 16}
    if knob == "tap":
        if k == (1, 1) or cg % tile["BK"]:
            return
        gm = Gemm(g, whole(g), "tap")
        s = {**tile, "k_order": "tap"}
    else:
        gm = Gemm(g, whole(g))
        if gm.A.im2col_mask is None:
            return
        s = {**tile, "tap_mask": 1}
    va, vb = _widths(gm)
    s.update(vec_a=va, vec_b=vb)
    if split > 1 and -(-gm.K // s["BK"]) >= split:
        s["split_k"] = split
    assert check_schedule(gm, s, GFX942) == ""
    res, ref = run_functional(g, lower_contraction(g, whole(g), s, GFX942))
    for out in g.outputs:
        np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-4, atol=1e-4)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 40), n=st.integers(1, 40), k_tiles=st.integers(3, 8),
       ragged=st.integers(0, 15), mma=st.booleans(), split=st.sampled_from([1, 2]),
       conv=st.booleans())
def test_two_tiles_of_prefetch_equal_numpy(m, n, k_tiles, ragged, mma, split, conv):
    """Odd and even K tile counts (the peeled odd step), a ragged last K tile, split-K."""
    from compiler.ir.graph import Graph
    if conv:
        g = _conv("NCHW", c=k_tiles * 2, o=8, hw=(5, 6))  # K = 18 * k_tiles: 3x3 taps
    else:
        g = Graph(f"mm_{m}_{n}")
        kk = 16 * k_tiles - (ragged if not mma else 0)
        y = g.matmul(g.input("a", (m, kk)), g.input("b", (kk, n)))
        g.output(g.relu(y))
    gm = Gemm(g, whole(g))
    s = {**(MFMA if mma else FMA), "prefetch": 2}
    s.update(zip(("vec_a", "vec_b"), _widths(gm)))
    nk = -(-gm.K // s["BK"])
    if split > 1 and nk % split == 0 and nk // split > 2:
        s["split_k"] = split
    assert check_schedule(gm, s, GFX942) == ""
    res, ref = run_functional(g, lower_contraction(g, whole(g), s, GFX942))
    for out in g.outputs:
        np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-4, atol=1e-4)


def _segment_tiles(sk):
    """K tiles of every stream-K segment (``StreamK``'s partition)."""
    out = []
    for g in range(sk.G):
        b, e = sk.begin(g), sk.begin(g + 1)
        for t in range(b // sk.nk, (e - 1) // sk.nk + 1):
            out.append(min(e, (t + 1) * sk.nk) - max(b, t * sk.nk))
    return out


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# segments of 1, 2, 3 and 4 K tiles in one launch (the n = 1 branch, the even and odd
# tails after zero and one trip of the pair loop), FMA and MFMA
@example(m=40, n=16, k_tiles=5, ragged=3, mma=False, cus=3, split=0, conv=False)
@example(m=16, n=16, k_tiles=7, ragged=0, mma=True, cus=3, split=0, conv=False)
@example(m=16, n=16, k_tiles=11, ragged=0, mma=True, cus=1, split=4, conv=False)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k_tiles=st.integers(3, 12),
       ragged=st.integers(0, 15), mma=st.booleans(), cus=st.integers(1, 9),
       split=st.sampled_from([0, 3, 4, 8]), conv=st.booleans())
def test_two_tiles_of_prefetch_with_runtime_k_bounds_equal_numpy(m, n, k_tiles, ragged, mma,
                                                                 cus, split, conv):
    """prefetch=2 where each workgroup's K range is known only at run time
    (``_Builder.k_loop_two_ahead_bounded``): stream-K segments (split=0; few CUs, so the
    segments have every length from one K tile up) and uneven split-K; the trip count's
    parity picks the tail at run time."""
    import dataclasses
    from compiler.ir.graph import Graph
    from compiler.lower.contraction import StreamK
    arch = dataclasses.replace(GFX942, num_cus=cus)
    if conv:
        g = _conv("NCHW", c=k_tiles * 2, o=8, hw=(5, 6))  # K = 18 * k_tiles: 3x3 taps
    else:
        g = Graph(f"mm_{m}_{n}")
        kk = 16 * k_tiles - (ragged if not mma else 0)
        y = g.matmul(g.input("a", (m, kk)), g.input("b", (kk, n)))
        g.output(g.relu(y))
    gm = Gemm(g, whole(g))
    s = {**(MFMA if mma else FMA), "prefetch": 2}
    s.update(zip(("vec_a", "vec_b"), _widths(gm)))
    nk = -(-gm.K // s["BK"])
    if split and nk % split and nk >= split:
        s["split_k"] = split
    else:
        s["stream_k"] = 1
        if StreamK(gm, s, arch).why_not():
            return
    assert check_schedule(gm, s, arch) == ""
    k = lower_contraction(g, whole(g), s, arch)
    ifs = [x for x in program.walk(k.kernels[0].body) if isinstance(x, program.If)
           and x.orelse]  # the parity branch
    assert ifs
    res, ref = run_functional(g, k, arch=arch)
    for out in g.outputs:
        np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-4, atol=1e-4)


def test_runtime_bounds_examples_cover_every_segment_length():
    """The examples above do reach segments of 1, 2, 3 and 4 K tiles."""
    from compiler.lower.contraction import StreamK
    import dataclasses

    class G:
        batch, M, N, K = 1, 40, 16, 16 * 5 - 3
    sk = StreamK(G, {**FMA, "stream_k": 1}, dataclasses.replace(GFX942, num_cus=3))
    assert {1, 2, 3, 4} <= set(_segment_tiles(sk))


def test_prefetch_rules():
    g = _conv("NCHW", c=16, o=8)
    gm = Gemm(g, whole(g))
    base = {**FMA, "vec_a": 1, "vec_b": 1, "prefetch": 2}
    # stream-K's and an uneven split's per-workgroup K bounds: the parity at run time
    assert check_schedule(gm, {**base, "split_k": 4}, GFX942) == ""
    assert "prefetch=3" in check_schedule(gm, {**base, "prefetch": 3}, GFX942)


def test_tap_k_loop_adds_one_register_to_a_uniform_value():
    """Every activation and filter load in the K loop reads ``register + uniform``: the
    per-thread part was set before the loop, the tap part is the tile's scalar."""
    g = _conv("NCHW", c=32, o=32, hw=(14, 14))
    gm = Gemm(g, whole(g), "tap")
    va, vb = _widths(gm)
    k = lower_contraction(g, whole(g), {**FMA, "vec_a": va, "vec_b": vb, "k_order": "tap"},
                         GFX942)
    [loop] = [s for s in k.body if isinstance(s, program.For)]
    hoisted = {s.dst.name for s in k.body if isinstance(s, program.Assign)}
    loads = [s for s in program.walk(loop.body) if isinstance(s, program.Load)]
    assert {ld.buffer for ld in loads} == {"x", "w"}
    for ld in loads:
        assert isinstance(ld.index, program.BinOp) and ld.index.op == "add"
        reg, tap = ld.index.a, ld.index.b
        assert isinstance(reg, program.Var) and reg.name in hoisted
        assert isinstance(tap, program.Var) and "tap_off" in tap.name


def test_space_offers_both_knobs_and_keeps_the_old_points():
    g = _conv("NCHW", c=64, o=64, hw=(14, 14))
    d = whole(g)
    space = schedule_space(g, d, GFX942)
    legal = [c.knobs for c in space if c.legal and not c.fallback]
    orders = {(k.get("k_order"), k.get("tap_mask")) for k in legal
              if k.get("lowering", "gemm") == "gemm"}
    assert {("layout", 0), ("layout", 1), ("tap", 0)} <= orders
    for k in legal:
        if k.get("k_order") == "tap":
            assert 64 % k["BK"] == 0 and k["vec_b"] == 1  # OIHW is strided along (ky, kx, ci)


def test_rules_refuse_with_a_reason():
    dw = _conv("NCHW", c=8, o=8, groups=8)
    with pytest.raises(LoweringError, match="channels per group"):
        Gemm(dw, whole(dw), "tap")
    space = schedule_space(dw, whole(dw), GFX942)
    assert any(not c.legal and "k_order=tap" in c.reason for c in space)
    g = _conv("NCHW", c=16, o=8)
    gm = Gemm(g, whole(g), "tap")
    why = check_schedule(gm, {**FMA, "BK": 32, "vec_a": 1, "vec_b": 1, "k_order": "tap"},
                         GFX942)
    assert "does not divide the 16 channels" in why
    pw = _conv("NCHW", c=16, o=8, k=(1, 1), pad=(0, 0, 0, 0))
    why = check_schedule(Gemm(pw, whole(pw)), {**FMA, "vec_a": 1, "vec_b": 1, "tap_mask": 1},
                         GFX942)
    assert "tap_mask=1" in why
    with pytest.raises(LoweringError, match="one tap"):
        Gemm(pw, whole(pw), "tap")


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("knobs", [
    {**FMA, "BK": 16, "k_order": "tap"}, {**FMA, "tap_mask": 1},
    {**MFMA, "k_order": "tap"}, {**MFMA, "tap_mask": 1},
    {**FMA_SEARCH, "prefetch": 2}, {**MFMA, "tap_mask": 1, "prefetch": 2}])
def test_hip_compiles_and_checks(knobs, tmp_path):
    from hip_check import assert_clean, check_kernels
    g = _conv("NCHW", c=32, o=32, hw=(14, 14))
    gm = Gemm(g, whole(g), knobs.get("k_order", "layout"))
    va, vb = _widths(gm)
    k = lower_contraction(g, whole(g), {**knobs, "vec_a": va, "vec_b": vb}, GFX942)
    report = check_kernels([k], tmp_path)
    assert len(report["kernels"]) == 2
    assert_clean(report)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("knobs", [
    {**MFMA, "tap_mask": 1, "prefetch": 2, "stream_k": 1},
    {**FMA_SEARCH, "prefetch": 2, "split_k": 2}])  # 9 K tiles: splits of 4 and 5
def test_hip_runtime_bounded_prefetch_compiles_and_checks(knobs, tmp_path):
    """prefetch=2 with per-workgroup K bounds (stream-K, uneven split-K): both kernels
    compile for gfx90a and gfx940, no spills, ``check`` agrees with the simulator."""
    from hip_check import assert_clean, check_kernels
    g = _conv("NCHW", c=64, o=64, hw=(14, 14))
    gm = Gemm(g, whole(g))
    va, vb = _widths(gm)
    seq = lower_contraction(g, whole(g), {**knobs, "vec_a": va, "vec_b": vb}, GFX942)
    assert isinstance(seq, program.KernelSequence)
    ks = list(seq.kernels)
    report = check_kernels(ks, tmp_path)
    assert len(report["kernels"]) == 4
    assert_clean(report)


@pytest.mark.parametrize("ci", range(len(CONVS)))
def test_period_split_equals_the_inline_formula(ci):
    """NCHW, BK a multiple of the taps: the fixed part of column c plus the tile's
    uniform part gives the inline offsets and padding tests, over every (group, m, k)."""
    g = _conv(**CONVS[ci])
    gm = Gemm(g, whole(g))
    if gm.A.im2col_period is None:
        assert CONVS[ci]["fmt"] == "NHWC" or gm.A.im2col_mask is None
        return
    T, fixed, tile = gm.A.im2col_period
    rows, _ = gm.A.im2col_mask
    bk = 2 * T
    b = np.arange(gm.batch).reshape(-1, 1, 1, 1)
    m = np.arange(gm.M).reshape(1, -1, 1, 1)
    k0 = np.arange(0, gm.K, bk).reshape(1, 1, -1, 1)
    c = np.arange(bk).reshape(1, 1, 1, -1)
    inside = np.broadcast_to(k0 + c < gm.K, (gm.batch, gm.M, k0.size, bk))
    off, valid = gm.A.offset_fn(b, m, k0 + c)
    foff, fok = fixed(rows(b, m), c)
    off2 = foff + tile(k0)
    shape = inside.shape
    valid = np.broadcast_to(True if valid is None else valid, shape) & inside
    valid2 = np.broadcast_to(True if fok is None else fok.astype(bool), shape) & inside
    assert np.array_equal(valid, valid2)
    assert np.array_equal(np.broadcast_to(off, shape)[valid], np.broadcast_to(off2, shape)[valid])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cg=st.integers(1, 24), groups=st.sampled_from([1, 2]), o=st.sampled_from([8, 16]),
       hw=st.tuples(st.integers(3, 8), st.integers(3, 8)),
       k=st.sampled_from([(3, 3), (2, 2), (1, 3), (3, 2)]),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       pad=st.tuples(*[st.integers(0, 1)] * 4), n=st.integers(1, 2),
       tile=st.sampled_from([0, 1, 2]), split=st.sampled_from([1, 2, 3]),
       prefetch=st.sampled_from([1, 2]))
def test_period_staging_values_equal_numpy(cg, groups, o, hw, k, stride, pad, n, tile, split,
                                           prefetch):
    """BK a multiple of the taps (16x16 and 32x32 MFMA blocks; a ragged last K tile
    when C/G * taps is not a multiple of BK), padding, strides, groups, split-K even or
    not, one or two tiles of prefetch: values equal numpy in gpusim."""
    if hw[0] + pad[0] + pad[2] < k[0] or hw[1] + pad[1] + pad[3] < k[1]:
        return  # no output
    g = _conv("NCHW", c=cg * groups, o=o * groups, hw=hw, k=k, stride=stride, pad=pad,
              groups=groups, n=n)
    gm = Gemm(g, whole(g))
    T = k[0] * k[1]
    base = [dict(PERIOD_16, BK=16 * T), dict(PERIOD_16, BN=32, BK=4 * T, KW=1),
            dict(PERIOD_32, BK=2 * T, KW=1)][tile]
    # scalar activation loads (a one-position image may allow wider ones)
    vb = _widths(gm)[1]
    while base["BK"] % vb:  # B's vectors run along K (OIHW)
        vb //= 2
    s = {**base, "prefetch": prefetch, "vec_a": 1, "vec_b": vb}
    nk = -(-gm.K // s["BK"])
    if split <= nk:
        s["split_k"] = split
    why = check_schedule(gm, s, GFX942)
    assert why == "", why
    k_ = lower_contraction(g, whole(g), s, GFX942)
    first = k_.kernels[0] if isinstance(k_, program.KernelSequence) else k_
    assert any("im_poff" in x.dst.name for x in first.body if isinstance(x, program.Assign))
    res, ref = run_functional(g, k_)
    for out in g.outputs:
        np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-4, atol=1e-4)


def test_period_space_and_stream_k_refusal():
    """A 3x3 NCHW conv gets the period tiles (BK 144 and 72, tap_mask=1); stream-K on
    them is refused with the reason; a 1x1 conv and an NHWC conv get none."""
    g = _conv("NCHW", c=64, o=64, hw=(14, 14))
    space = schedule_space(g, whole(g), GFX942)
    per = [c for c in space if c.legal and c.knobs.get("BK") in (144, 72)]
    assert per and all(c.knobs["tap_mask"] == 1 for c in per)
    assert {c.knobs.get("prefetch") for c in per} == {1, 2}
    gm = Gemm(g, whole(g))
    va, vb = _widths(gm)
    why = check_schedule(gm, {**PERIOD_16, "vec_a": va, "vec_b": vb, "stream_k": 1}, GFX942)
    assert "stream_k with the taps fixed" in why
    for other in (_conv("NHWC", c=64, o=64, hw=(14, 14)),
                  _conv("NCHW", c=64, o=64, k=(1, 1), pad=(0, 0, 0, 0))):
        assert not [c for c in schedule_space(other, whole(other), GFX942)
                    if c.legal and c.knobs.get("BK") in (144, 72)]


#: MFMA tiles whose BK is a multiple of a 3x3 conv's 9 taps (``Operand.im2col_period``)
PERIOD_16 = dict(mma="mfma", BM=16, BN=16, BK=144, TM=16, TN=16, KW=4, lds_pad=4,
                 swizzle="none", tap_mask=1)
PERIOD_32 = dict(mma="mfma", BM=32, BN=32, BK=72, TM=32, TN=32, KW=4, lds_pad=4,
                 swizzle="before_fusion", tap_mask=1)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("knobs", [
    {**PERIOD_16, "prefetch": 2}, {**PERIOD_16, "BN": 32, "prefetch": 2},
    {**PERIOD_16, "BN": 32, "prefetch": 2, "split_k": 3}, {**PERIOD_32, "split_k": 3},
    PERIOD_32])
def test_hip_period_staging_compiles_and_checks(knobs, tmp_path):
    """The taps fixed across the K loop (BK a multiple of the taps): every kernel
    compiles for gfx90a and gfx940, no spills, ``check`` agrees (VGPRs included)."""
    from hip_check import assert_clean, check_kernels
    g = _conv("NCHW", c=256 if knobs.get("split_k") else 64, o=64, hw=(14, 14))
    gm = Gemm(g, whole(g))
    va, vb = _widths(gm)
    k = lower_contraction(g, whole(g), {**knobs, "vec_a": va, "vec_b": vb}, GFX942)
    ks = list(k.kernels) if isinstance(k, program.KernelSequence) else [k]
    report = check_kernels(ks, tmp_path)
    assert len(report["kernels"]) == 2 * len(ks)
    assert_clean(report)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_depthwise_7x7_gets_the_direct_lowering_and_equals_numpy(fmt):
    """49 taps per output (ConvNeXt's depthwise 7x7): within ``DIRECT_MAX_TAPS``, so the
    space offers the direct lowering beside the implicit GEMM's 1-column tiles."""
    from compiler.lower import lower
    g = _conv(fmt, c=8, o=8, groups=8, hw=(9, 8), k=(7, 7), pad=(3, 3, 3, 3))
    d = whole(g)
    direct = [c.knobs for c in schedule_space(g, d, GFX942)
              if c.legal and c.knobs.get("lowering") == "direct"]
    assert direct
    res, ref = run_functional(g, lower(g, d, direct[0], "gfx942"))
    for out in g.outputs:
        np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-4, atol=1e-4)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
def test_depthwise_7x7_direct_compiles_and_checks(tmp_path):
    from hip_check import assert_clean, check_kernels
    from compiler.lower import lower
    g = _conv("NCHW", c=32, o=32, groups=32, hw=(14, 14), k=(7, 7), pad=(3, 3, 3, 3))
    k = lower(g, whole(g), {"lowering": "direct", "workgroup": 256}, "gfx942")
    report = check_kernels([k], tmp_path)
    assert_clean(report)
