"""Stream-K for contractions and convolutions (Osama et al., PPoPP 2023): a persistent grid
of W x CUs workgroups, each walking an even share of the tiles x K-tiles iterations across
tile boundaries, then a fix-up kernel that sums each tile's segments in order and applies
the epilogue once. The partition covers every iteration once; values equal numpy through
both kernels (hypothesis over shapes, CU counts and tiles; MFMA; convs); the rules refuse
what the lowering cannot run with a reason; the space offers it where the tiles do not
divide evenly over the CUs and the search can pick it."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import gpusim
from gpusim import program
from gpusim.hw import GFX90A, GFX942

from compiler.ir import models
from compiler.ir.graph import Graph
from compiler.lower.common import LoweringError
from compiler.lower.contraction import Gemm, StreamK, check_schedule, lower_contraction
from compiler.schedule import schedule_space
from compiler.fusion import fuse
from compiler.tuning.search import tune_dispatches, verify_dispatches

from test_lower_contraction import MFMA_TILES, SMALL, TILE, graphs, run_functional, whole
from test_split_k import conv3x3

FMA = {**TILE, "lds_pad": 4, "vec_a": 1, "vec_b": 1, "swizzle": "none"}


def few_cus(n):
    """gfx942 with ``n`` CUs: the small test GEMMs then have many iterations per workgroup
    and tiles shared by several workgroups (the real 304 would need large GEMMs)."""
    return dataclasses.replace(GFX942, num_cus=n)


def matmul(m, n, k, act=True):
    g = Graph(f"mm_{m}x{n}x{k}")
    y = g.matmul(g.input("a", (m, k)), g.input("b", (k, n)))
    g.output(g.relu(g.add(y, g.input("bias", (n,)))) if act else y)
    return g


def _assert_matches(g, k, arch):
    res, ref = run_functional(g, k, arch=arch)
    for o in g.outputs:
        np.testing.assert_allclose(res.outputs[o], ref[o], rtol=1e-4, atol=1e-4)
    return res


@settings(max_examples=60, deadline=None)
@given(tiles=st.integers(1, 40), nk=st.integers(1, 60), cus=st.integers(1, 50))
def test_partition_covers_every_iteration_once(tiles, nk, cus):
    """Workgroup shares are contiguous, disjoint and cover all iterations; the slot
    formula gives each segment of a tile a distinct slot below ``slots``."""
    class G:  # the sizes StreamK reads
        batch, M, N, K = 1, 32 * tiles, 32, 16 * nk
    sk = StreamK(G, {**FMA, "stream_k": 1}, few_cus(cus))
    if sk.G >= sk.iters:
        return
    seen = np.zeros(sk.iters, int)
    slots = {}
    for g in range(sk.G):
        b, e = sk.begin(g), sk.begin(g + 1)
        assert e - b in (sk.iters // sk.G, sk.iters // sk.G + 1)
        seen[b:e] += 1
        for x in range(b, e):
            assert sk.first(x) == g
        for t in range(b // sk.nk, (e - 1) // sk.nk + 1):
            slot = g - sk.first(t * sk.nk)
            assert 0 <= slot < sk.slots and (t, slot) not in slots
            slots[(t, slot)] = g
        assert (e - 1) // sk.nk - b // sk.nk + 1 <= sk.segments
    assert (seen == 1).all()
    for t in range(sk.tiles):  # a tile's slots are 0 .. count-1, the fix-up's count
        count = sk.first((t + 1) * sk.nk - 1) - sk.first(t * sk.nk) + 1
        assert sorted(j for (tt, j) in slots if tt == t) == list(range(count))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# one K tile (K = BK) with tiles left over for two CUs: the partial kernel once had a K
# loop that never ran whose body staged K tile 1, past the operand (the validator refused)
@example(m=33, n=33, k=16, cus=2, kw=1, swizzle="none")
@example(m=33, n=33, k=16, cus=2, kw=2, swizzle="before_fusion")
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 200),
       cus=st.integers(2, 13), kw=st.sampled_from([1, 2]),
       swizzle=st.sampled_from(["none", "after_fusion", "before_fusion"]))
def test_stream_k_matmul_equals_numpy(m, n, k, cus, kw, swizzle):
    """Ragged M, N and K (guarded last tiles), any CU count: values equal numpy, the
    bias and relu applied once, after the fix-up."""
    g = matmul(m, n, k)
    arch = few_cus(cus)
    s = {**FMA, "KW": kw, "swizzle": swizzle, "stream_k": 1}
    why = check_schedule(Gemm(g, whole(g)), s, arch)
    if why:
        with pytest.raises(LoweringError, match="stream_k"):
            lower_contraction(g, whole(g), s, arch)
        return
    k_ = lower_contraction(g, whole(g), s, arch)
    assert isinstance(k_, program.KernelSequence) and len(k_.kernels) == 2
    partial, fixup = k_.kernels
    assert partial.grid == cus and fixup.grid == StreamK(Gemm(g, whole(g)), s, arch).tiles
    ws = k_.workspaces[0].name
    assert not any(b.intent == "out" for b in partial.buffers if b.name != ws)
    _assert_matches(g, k_, arch)


# FMA tiles of other shapes, K group splits, vector widths and LDS layouts; MFMA tiles
STREAM_K_TILES = [
    dict(BM=32, BN=32, BK=16, TM=4, TN=4, KW=1, vec_a=4, vec_b=4, lds_pad=1),
    dict(BM=64, BN=32, BK=8, TM=4, TN=4, KW=2, vec_a=2, vec_b=4, lds_pad="xor"),
    dict(BM=16, BN=64, BK=32, TM=2, TN=4, KW=1, vec_a=1, vec_b=2, lds_pad=0),
    dict(BM=32, BN=16, BK=4, TM=2, TN=2, KW=4, vec_a=4, vec_b=1, lds_pad=4),
    {**MFMA_TILES[0], "mma": "mfma", "vec_a": 1, "vec_b": 1, "lds_pad": 4},
    {**MFMA_TILES[1], "mma": "mfma", "vec_a": 1, "vec_b": 1, "lds_pad": 4, "mfma_lanes": "m"},
]


@st.composite
def k_for(draw, bk):
    """K: often a small multiple of BK (whole K tiles, so no guard on the K rows), one
    K tile and one more or less, else anything up to 200."""
    return draw(st.one_of(st.sampled_from([bk, 2 * bk, 3 * bk]),
                          st.integers(1, 3).map(lambda q: max(1, q * bk + 1 - 2 * (q % 2))),
                          st.integers(1, 200)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ti=st.sampled_from(range(len(STREAM_K_TILES))), m=st.integers(1, 80),
       n=st.integers(1, 80), cus=st.integers(2, 8), w=st.sampled_from([1, 2]),
       data=st.data())
def test_stream_k_tiles_stay_in_bounds(ti, m, n, cus, w, data):
    """Every tile shape, ragged or whole M, N and K, any CU count: a legal point lowers
    to kernels the validator accepts, the simulator runs them without touching memory
    outside a buffer (its runtime check; NUMBA_BOUNDSCHECK too) and the values equal
    numpy. K is drawn in the tile's own K-tile size, so K = BK is common."""
    t = STREAM_K_TILES[ti]
    k = data.draw(k_for(t["BK"]), label="k")
    g = matmul(m, n, k)
    arch = few_cus(cus)
    gemm, s = Gemm(g, whole(g)), {**FMA, **t, "swizzle": "none", "stream_k": w}
    for name in ("vec_a", "vec_b"):  # the widest vector the operand's row length allows
        while re.match(rf"{name}=\d misaligned", check_schedule(gemm, s, arch)):
            s[name] //= 2
    if check_schedule(gemm, s, arch):
        return
    k_ = lower_contraction(g, whole(g), s, arch)
    for kernel in k_.kernels:
        gpusim.validate(kernel, arch)
    _assert_matches(g, k_, arch)


def test_stream_k_one_k_tile_has_no_k_loop():
    """K = BK: every segment is the one K tile staged before it, so the partial kernel's
    only loop is the segment loop."""
    g, arch = matmul(33, 33, 16), few_cus(2)
    k_ = lower_contraction(g, whole(g), {**FMA, "stream_k": 1}, arch)
    loops = [s for s in program.walk(k_.kernels[0].body) if isinstance(s, program.For)]
    assert [s.rolled for s in loops] == [True]


@pytest.mark.parametrize("gi", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("w", [1, 2])
def test_stream_k_convs_and_batched_matmul(gi, w):
    """1x1 convs with a residual in either layout, padded/strided/dilated convs of both
    layouts with a ragged K tile, a batched transposed matmul; two workgroups per CU."""
    g = graphs()[gi]
    arch = few_cus(5 // w)  # 5 or 4 workgroups: the smallest case has 6 iterations
    _assert_matches(g, lower_contraction(g, whole(g), {**FMA, "stream_k": w}, arch), arch)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_stream_k_3x3_conv_with_bias_relu(fmt):
    g = conv3x3(hw=7, c=32, fmt=fmt)
    _assert_matches(g, lower_contraction(g, whole(g), {**FMA, "stream_k": 1}, few_cus(11)),
                    few_cus(11))


@pytest.mark.parametrize("swizzle", ["none", "before_fusion"])
@pytest.mark.parametrize("lanes", ["n", "m"])
@pytest.mark.parametrize("tile", [0, 1])
def test_stream_k_mfma_equals_numpy(swizzle, lanes, tile):
    """Matrix-core tiles: MFMA inside the runtime-bounded K loop (wave-uniform bounds)."""
    g = models.conv_add_relu(c=256, k=32)
    arch = few_cus(5)
    k = lower_contraction(g, whole(g), {**TILE, **MFMA_TILES[tile], "lds_pad": 4,
                                        "mma": "mfma", "swizzle": swizzle,
                                        "mfma_lanes": lanes, "stream_k": 1}, arch)
    assert any(isinstance(s, program.Mfma) for s in program.walk(k.kernels[0].body))
    _assert_matches(g, k, arch)


def test_rules_refuse_with_a_reason():
    g = matmul(64, 64, 64)
    gm = Gemm(g, whole(g))
    assert "exclude each other" in check_schedule(gm, {**FMA, "stream_k": 1, "split_k": 2},
                                                  few_cus(3))
    assert "at most one each" in check_schedule(gm, {**FMA, "stream_k": 1}, GFX942)
    # legal where the tiles divide evenly too (the space does not offer it there)
    assert check_schedule(gm, {**FMA, "stream_k": 1}, few_cus(2)) == ""
    assert "not in" in check_schedule(gm, {**FMA, "stream_k": 3}, few_cus(3))
    assert check_schedule(gm, {**FMA, "stream_k": 1}, few_cus(3)) == ""


def test_sequence_time_and_workspace():
    """Two launches; the partial kernel runs one workgroup per CU; it writes at most
    tiles + CUs - 1 partial tiles (each workgroup's segments), whatever K."""
    g = conv3x3(hw=14, c=256)
    gm = Gemm(g, whole(g))
    s = {**FMA, "BM": 16, "BN": 32, "BK": 64, "TM": 2, "TN": 4, "KW": 8}
    k = lower_contraction(g, whole(g), {**s, "stream_k": 1}, GFX942)
    sk = StreamK(gm, {**s, "stream_k": 1}, GFX942)
    assert k.kernels[0].grid == GFX942.num_cus and sk.tiles == 104
    written = sum(sk.first((t + 1) * sk.nk - 1) - sk.first(t * sk.nk) + 1
                  for t in range(sk.tiles))
    assert written <= sk.tiles + sk.G - 1
    assert k.workspace_bytes == sk.tiles * sk.slots * 16 * 32 * 4
    res = gpusim.simulate(k, GFX942, functional=False)
    assert len(res.parts) == 2
    assert res.launch_overhead_us == pytest.approx(2 * GFX942.launch_overhead_us)
    assert res.time_us == pytest.approx(sum(r.time_us for r in res.parts))


def test_space_offers_stream_k_where_tiles_do_not_divide():
    """A ResNet 3x3 conv at 14x14 (104 tiles of 16x32 on 304 CUs) gets stream-K points
    with one and two workgroups per CU, one (W = 1) tried whatever the budget; a GEMM whose tiles divide evenly over the CUs gets no
    stream_k knob; a conv too small for it keeps an illegal point saying why."""
    g = conv3x3(hw=14, c=256)
    space = schedule_space(g, whole(g), GFX942)
    sk = [c for c in space if c.knobs.get("stream_k")]
    assert any(c.legal and c.always and c.knobs["stream_k"] == 1 for c in sk)
    # W = 2 beside each legal W = 1 point whose 608 workgroups the rule allows
    ones = {tuple(sorted({**c.knobs, "stream_k": 0}.items())) for c in sk
            if c.legal and c.knobs["stream_k"] == 1}
    twos = {tuple(sorted({**c.knobs, "stream_k": 0}.items())) for c in sk
            if c.legal and c.knobs["stream_k"] == 2 and "split_reduce" not in c.knobs}
    assert twos and twos <= ones
    for c in sk:
        if c.legal and c.knobs["stream_k"] == 2:
            assert not check_schedule(Gemm(g, whole(g)), c.knobs, GFX942)
    assert all(c.knobs.get("stream_k", 0) == 0 for c in space if c.legal and c.fallback)
    even = matmul(64 * 19, 64 * 16, 64, act=False)  # 304 tiles of 64x64
    assert not any(c.knobs.get("stream_k") and c.knobs["BM"] == 64 and c.knobs["BN"] == 64
                   for c in schedule_space(even, whole(even), GFX942))
    small = models.conv_add_relu(**SMALL)
    refused = [c for c in schedule_space(small, whole(small), GFX942)
               if c.knobs.get("stream_k")]
    assert refused and not any(c.legal for c in refused)
    assert "at most one each" in refused[0].reason


@pytest.mark.parametrize("arch", [GFX942, GFX90A], ids=lambda a: a.name)
def test_search_with_a_pinned_stream_k_checks_values(arch):
    """The search scores the sequence and its value check passes (whole reference)."""
    g = conv3x3(hw=7, c=256)
    d = fuse(g).dispatches[0]
    t = tune_dispatches(g, [d], arch, budget=2, fixed={"stream_k": 1})[0]
    assert t.best.knobs["stream_k"] == 1 and isinstance(t.kernel, program.KernelSequence)
    for check_all in (True, False):
        t.verified = None
        verify_dispatches(g, [t], arch, check_all=check_all)
        assert t.verified, t.max_error
