"""Split-K across workgroups: a contraction or convolution lowered to two kernels (partial
sums to a workspace, then the reduction that applies the epilogue once). Values equal
numpy through both kernels; the space offers splits only where the tiles do not fill the
GPU; the simulated time is the sum of the two launches; the search and the value check
take the sequence as they take one kernel."""
from __future__ import annotations

import numpy as np
import pytest

import gpusim
from gpusim import program
from gpusim.hw import GFX90A, GFX942

from compiler.fusion import fuse
from compiler.ir import models
from compiler.ir.graph import Graph
from compiler.lower import lower
from compiler.lower.common import LoweringError
from compiler.lower.contraction import lower_contraction
from compiler.schedule import schedule_space
from compiler.tuning.search import score, tune_dispatches, verify_dispatches

from test_lower_contraction import MFMA_TILES, SMALL, TILE, graphs, run_functional, whole

SPLIT_TILE = {**TILE, "vec_a": 1, "vec_b": 1}


def conv3x3(hw=7, c=64, fmt="NCHW"):
    """A ResNet-style 3x3 convolution with a bias and a relu fused after it."""
    g = Graph(f"conv3x3_{hw}_{c}")
    if fmt == "NCHW":
        x, w = g.input("x", (1, c, hw, hw)), g.input("w", (c, c, 3, 3))
        bias = g.input("bias", (1, c, 1, 1))
    else:
        x, w = g.input("x", (1, hw, hw, c)), g.input("w", (c, 3, 3, c))
        bias = g.input("bias", (1, 1, 1, c))
    y = g.conv2d(x, w, data_format=fmt, padding=(1, 1, 1, 1))
    g.output(g.relu(g.add(y, bias)))
    return g


def _assert_matches(g, k):
    res, ref = run_functional(g, k)
    for o in g.outputs:
        np.testing.assert_allclose(res.outputs[o], ref[o], rtol=1e-4, atol=1e-4)
    return res


@pytest.mark.parametrize("swizzle", ["none", "after_fusion", "before_fusion"])
@pytest.mark.parametrize("gi", [0, 1, 4, 5])
@pytest.mark.parametrize("kw", [1, 2])
def test_split_k_equals_numpy(gi, swizzle, kw):
    """1x1 convs (NHWC residual in either layout), a batched transposed matmul with a
    scale, a square matmul: split in two, every swizzle placement, with and without the
    in-workgroup K split."""
    g = graphs()[gi]
    k = lower_contraction(g, whole(g), {**SPLIT_TILE, "KW": kw, "swizzle": swizzle,
                                        "split_k": 2}, GFX942)
    assert isinstance(k, program.KernelSequence) and len(k.kernels) == 2
    partial, reduce = k.kernels
    ws = k.workspaces[0].name
    assert partial.buffer(ws).intent == "out" and reduce.buffer(ws).intent == "in"
    assert partial.grid == 2 * reduce.grid
    # the epilogue runs once, in the reduction kernel: the partial writes no output
    assert not any(b.intent == "out" for b in partial.buffers if b.name != ws)
    _assert_matches(g, k)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_split_k_with_a_ragged_last_k_tile(fmt):
    """K = 45 (three K tiles of 16, the last one partly outside): three splits, each
    guarding its own tile, and two uneven ones (1 and 2 K tiles: per-workgroup loop
    bounds); padded, strided, dilated convs of both layouts."""
    g = graphs()[2 if fmt == "NCHW" else 3]
    with pytest.raises(LoweringError, match="split_k=4 exceeds the 3 K tiles"):
        lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 4}, GFX942)
    _assert_matches(g, lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 3}, GFX942))
    _assert_matches(g, lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 2}, GFX942))


@pytest.mark.parametrize("S,mma", [(3, "fma"), (6, "fma"), (12, "fma"), (3, "mfma"),
                                   (6, "mfma")])
def test_uneven_split_k_equals_numpy(S, mma):
    """K = 448 in 28 K tiles of 16 (7 of 64 for the MFMA tile): S not dividing them, the
    splits differ by one tile."""
    g = models.conv_add_relu(c=448, k=32)
    tile = {**TILE, **MFMA_TILES[1], "lds_pad": 4, "mma": "mfma"} if mma == "mfma" else \
        SPLIT_TILE
    k = lower_contraction(g, whole(g), {**tile, "split_k": S}, GFX942)
    assert any(isinstance(s, program.For) and s.trips_hint is not None
               for s in program.walk(k.kernels[0].body))
    _assert_matches(g, k)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_split_k_3x3_conv_with_bias_relu(fmt):
    """The ResNet case: a padded 3x3 conv, bias and relu applied once after the sum."""
    g = conv3x3(hw=7, c=32, fmt=fmt)
    _assert_matches(g, lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 6}, GFX942))


@pytest.mark.parametrize("swizzle", ["none", "before_fusion"])
@pytest.mark.parametrize("lanes", ["n", "m"])
def test_split_k_mfma_equals_numpy(swizzle, lanes):
    """Matrix-core tiles: the workspace holds each lane's MFMA accumulators."""
    g = models.conv_add_relu(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, **MFMA_TILES[0], "lds_pad": 4, "mma": "mfma",
                                        "swizzle": swizzle, "mfma_lanes": lanes,
                                        "split_k": 4}, GFX942)
    assert any(isinstance(s, program.Mfma) for s in program.walk(k.kernels[0].body))
    assert not any(isinstance(s, program.Mfma) for s in program.walk(k.kernels[1].body))
    _assert_matches(g, k)


def test_split_k_1_is_the_one_kernel_gemm():
    g = graphs()[5]
    k1 = lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 1}, GFX942)
    k0 = lower_contraction(g, whole(g), SPLIT_TILE, GFX942)
    assert isinstance(k1, program.Kernel)
    assert len(list(program.walk(k1.body))) == len(list(program.walk(k0.body)))
    with pytest.raises(LoweringError, match="split_k=5 not in"):
        lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 5}, GFX942)


def test_sequence_time_is_the_sum_of_its_launches():
    """Two launches, each with its launch overhead; the workspace's bytes are counted
    (written by the partial kernel, read back by the reduction)."""
    g = conv3x3(hw=7, c=64)
    k = lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 4}, GFX942)
    res = gpusim.simulate(k, GFX942, functional=False)
    assert len(res.parts) == 2
    assert res.time_us == pytest.approx(sum(r.time_us for r in res.parts))
    assert res.launch_overhead_us == pytest.approx(2 * GFX942.launch_overhead_us)
    ws_bytes = k.workspace_bytes
    assert res.parts[0].counters["global_store_bytes"] >= ws_bytes
    assert res.parts[1].counters["global_load_bytes"] >= ws_bytes
    assert res.counters["global_store_bytes"] == pytest.approx(
        sum(r.counters["global_store_bytes"] for r in res.parts))


def test_space_offers_splits_only_where_the_tiles_do_not_fill_the_gpu():
    g = conv3x3(hw=7, c=256)
    d = fuse(g).dispatches[0]
    space = schedule_space(g, d, GFX942)
    splits = [c for c in space if c.legal and c.knobs.get("split_k", 1) > 1]
    assert splits and all("split_k" in c.knobs for c in space
                          if c.knobs and not c.fallback)
    # one always-tried split: reduced in the one kernel by the last workgroup
    assert [c.knobs["split_reduce"] for c in splits if c.always] == ["last_wg"]
    big = Graph("big")
    big.output(big.matmul(big.input("a", (4096, 64)), big.input("b", (64, 4096))))
    d = fuse(big).dispatches[0]
    assert not any("split_k" in c.knobs for c in schedule_space(big, d, GFX942))


def test_split_wins_on_a_7x7_conv_with_few_tiles():
    """The issue's case at a 7x7 stage: the same tile split over K is predicted faster
    (simulated) than unsplit, the workspace traffic and second launch included."""
    g = conv3x3(hw=7, c=256)
    d = fuse(g).dispatches[0]
    space = [c for c in schedule_space(g, d, GFX942) if c.legal]
    split = next(c for c in space if c.always)
    one = {**split.knobs, "split_k": 1}
    t_split = score(g, d, split.knobs, GFX942).time_us
    t_one = score(g, d, one, GFX942).time_us
    assert t_split < 0.7 * t_one, (t_split, t_one)


@pytest.mark.parametrize("arch", [GFX942, GFX90A])
def test_search_chooses_and_checks_a_split(arch):
    """A pinned split goes through the search and the value check (every workgroup, and
    the sampled check) like one kernel."""
    g = conv3x3(hw=7, c=32)
    d = fuse(g).dispatches[0]
    t = tune_dispatches(g, [d], arch, budget=2, fixed={"split_k": 4})[0]
    assert t.best.knobs["split_k"] == 4 and isinstance(t.kernel, program.KernelSequence)
    for check_all in (True, False):
        t.verified = None
        verify_dispatches(g, [t], arch, check_all=check_all)
        assert t.verified, t.max_error
    assert isinstance(lower(g, d, t.best.knobs, arch), program.KernelSequence)


def test_sequence_refuses_a_workspace_read_before_it_is_written():
    g = graphs()[5]
    k = lower_contraction(g, whole(g), {**SPLIT_TILE, "split_k": 2}, GFX942)
    with pytest.raises(ValueError, match="before any kernel writes it"):
        program.KernelSequence("bad", tuple(reversed(k.kernels)), k.workspaces)
