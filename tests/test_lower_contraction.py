"""Contraction lowering: IR shape facts that decide the swizzle story, legality, and
(when gpusim.simulate exists) numerical equality with the numpy reference."""
from dataclasses import dataclass

import numpy as np
import pytest

from gpusim.hw import GFX1100, GFX942
import gpusim
from gpusim import program
from gpusim.validate import validate

from compiler.ir import models
from compiler.ir.graph import Graph
from compiler.fusion import fuse
from compiler.lower.common import LoweringError, memory_image
from compiler.lower.contraction import lower_contraction
from compiler.ir.reference import evaluate, random_inputs
from compiler.schedule.contraction import contraction_space


@dataclass
class Dispatch:
    """A whole graph as one dispatch (stands in for compiler.fusion.plan in these tests)."""
    name: str
    root: str
    ops: list
    inputs: list
    outputs: list


def whole(g):
    ops = [n for n in g.topo_order() if g.op(n).kind != "input"]
    root = next(n for n in ops if g.op(n).is_contraction)
    ins = [n for n in g.topo_order() if g.op(n).kind in ("input", "constant")]
    return Dispatch(g.name, root, ops, ins, list(g.outputs))


SMALL = dict(c=64, k=32)  # 1x7x7x64 -> 32 filters: M=49 (ragged), N=32, K=64
TILE = dict(BM=32, BN=32, BK=16, TM=4, TN=4, KW=1, lds_pad=1, vec_a=4, vec_b=4)


def global_accesses(kernel, buffer):
    """(kind, width) of every global access to ``buffer``, in program order."""
    out = []
    for s in program.walk(kernel.body):
        if isinstance(s, program.Load) and s.buffer == buffer:
            out.append(("load", len(s.dsts)))
        elif isinstance(s, program.Store) and s.buffer == buffer:
            out.append(("store", len(s.values)))
    return out


@pytest.mark.parametrize("model", [models.conv_add_relu, models.conv_add_relu_mismatch])
@pytest.mark.parametrize("swizzle", ["none", "after_fusion", "before_fusion"])
@pytest.mark.parametrize("pad", [0, 1, "xor"])
def test_conv_kernels_validate(model, swizzle, pad):
    """Every conv kernel is one the modelled GPU accepts (aligned vectors, LDS, bounds)."""
    g = model(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, "lds_pad": pad, "swizzle": swizzle}, GFX942)
    validate(k, "gfx942")
    assert k.meta["schedule"]["swizzle"] == swizzle
    assert k.block == 64 and k.grid == 2  # 2 M-tiles x 1 N-tile


@pytest.mark.parametrize("swizzle,store_width", [("none", 1), ("after_fusion", 4),
                                                  ("before_fusion", 4)])
def test_output_store_width(swizzle, store_width):
    """Direct stores from the MFMA-like layout are dwords; the swizzle makes them dwordx4."""
    g = models.conv_add_relu(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, "swizzle": swizzle}, GFX942)
    stores = [w for kind, w in global_accesses(k, g.outputs[0]) if kind == "store"]
    assert stores and set(stores) == {store_width}


@pytest.mark.parametrize("model,before_width,matches", [
    (models.conv_add_relu, 4, True), (models.conv_add_relu_mismatch, 1, False)])
def test_residual_read_follows_placement(model, before_width, matches):
    """before_fusion reads a same-layout residual with x4 loads, a channel-major one with
    scalars; in the register layout the residual is always read one dword at a time."""
    g = model(**SMALL)
    d = whole(g)
    widths = {}
    for swz in ("none", "after_fusion", "before_fusion"):
        k = lower_contraction(g, d, {**TILE, "swizzle": swz}, GFX942)
        widths[swz] = {w for kind, w in global_accesses(k, "residual")}
        assert k.meta["extra_inputs"]["residual"]["layout_matches_output"] is matches
    assert widths["none"] == widths["after_fusion"] == {1}
    assert widths["before_fusion"] == {before_width}


def test_operand_vectors_and_illegal_widths():
    """NHWC activations and KYXC filters are contiguous along K, so 4-wide loads are
    legal; rows of 30 elements are not 4-aligned, so vec_a=4 is refused with the reason."""
    g = models.conv_add_relu(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, "swizzle": "none"}, GFX942)
    assert {w for _, w in global_accesses(k, "x")} == {4}
    assert {w for _, w in global_accesses(k, "filter")} == {4}
    g = Graph("odd")
    a = g.input("a", (32, 30))  # K = 30: rows of A are not 4-aligned
    b = g.input("b", (30, 32))
    g.output(g.matmul(a, b))
    with pytest.raises(LoweringError, match="vec_a=4 misaligned"):
        lower_contraction(g, whole(g), {**TILE, "vec_a": 4, "vec_b": 1}, GFX942)


@pytest.mark.parametrize("fmt,c,o,groups", [("NCHW", 4, 6, 2), ("NHWC", 8, 8, 8),
                                             ("NCHW", 8, 16, 8), ("NHWC", 8, 12, 2)])
def test_grouped_and_depthwise_convs_match_numpy(fmt, c, o, groups):
    """Groups are the implicit GEMM's batch: grouped, depthwise (groups = channels) and
    depthwise with a channel multiplier, padded and strided, equal numpy."""
    g = Graph("grouped")
    if fmt == "NCHW":
        x, w = g.input("x", (2, c, 9, 8)), g.input("w", (o, c // groups, 3, 3))
    else:
        x, w = g.input("x", (2, 9, 8, c)), g.input("w", (o, 3, 3, c // groups))
    g.output(g.relu(g.conv2d(x, w, data_format=fmt, groups=groups, padding=(1, 1, 1, 1),
                             stride=(1, 2))))
    d = whole(g)
    knobs = next(c.knobs for c in contraction_space(g, d, GFX942) if c.legal)
    k = lower_contraction(g, d, knobs, GFX942)
    assert k.meta["gemm"]["batch"] == groups
    res, ref = run_functional(g, k)
    np.testing.assert_allclose(res.outputs[g.outputs[0]], ref[g.outputs[0]], rtol=1e-4,
                               atol=1e-4)


def test_space_marks_illegal_points_with_reasons():
    g = models.conv_add_relu()
    cands = contraction_space(g, whole(g), GFX942)
    legal = [c for c in cands if c.legal and c.knobs.get("split_k", 1) == 1
             and not c.knobs.get("stream_k")]
    assert 30 <= len(legal) <= 160  # with the prefetch=2 points (issue 27, docs/kernels.md)
    # split-K (7x7 output: few tiles) adds at most two split points per one-kernel point
    # (reduced by a second kernel, and by the last workgroup), stream-K at most two
    # (stream_k=1 and 2)
    assert len([c for c in cands if c.legal]) <= 5 * len(legal)
    assert legal[0].knobs["KW"] > 1 and legal[0].knobs["vec_a"] == 4
    reasons = " | ".join(c.reason for c in cands if not c.legal)
    assert "whole number of waves" in reasons and "LDS" in reasons
    assert {c.knobs["swizzle"] for c in legal} == {"none", "after_fusion", "before_fusion"}
    mm = Graph("odd")
    mm.output(mm.matmul(mm.input("a", (32, 30)), mm.input("b", (30, 32))))
    bad = [c for c in contraction_space(mm, whole(mm), GFX942) if not c.legal]
    assert any("misaligned" in c.reason for c in bad)


# ------------------------------------------------------------------ numerics (gpusim)
def run_functional(g, k, arch="gfx942"):
    """(simulated result, numpy reference) on seeded inputs; buffers get memory images
    (a channel-major residual or a transposed operand is passed in its memory order)."""
    x = random_inputs(g)
    res = gpusim.simulate(k, arch=arch, inputs={n: memory_image(g, n, v) for n, v in x.items()})
    return res, evaluate(g, x)





def graphs():
    """Small cases covering conv formats/padding/stride, batched and transposed matmul."""
    out = [models.conv_add_relu(**SMALL), models.conv_add_relu_mismatch(**SMALL)]
    for fmt in ("NCHW", "NHWC"):
        g = Graph(f"conv_{fmt}")
        if fmt == "NCHW":
            x, w = g.input("x", (2, 5, 9, 8)), g.input("w", (12, 5, 3, 3))
        else:
            x, w = g.input("x", (2, 9, 8, 5)), g.input("w", (12, 3, 3, 5))
        y = g.conv2d(x, w, data_format=fmt, stride=(2, 1), padding=(1, 2, 1, 0),
                     dilation=(1, 2))
        g.output(g.relu(y))
        out.append(g)
    g = Graph("bmm")
    a = g.input("a", (3, 1, 40, 24))
    b = g.input("b", (2, 36, 24), layout=(0, 2, 1))
    g.output(g.mul(g.matmul(a, g.transpose(b, (0, 2, 1))), 0.5))
    out.append(g)
    g = Graph("mm64")
    g.output(g.matmul(g.input("a", (64, 64)), g.input("b", (64, 64))))
    out.append(g)
    return out


@pytest.mark.parametrize("swizzle", ["none", "after_fusion", "before_fusion"])
@pytest.mark.parametrize("gi", range(6))
def test_simulated_outputs_equal_reference(gi, swizzle):
    g = graphs()[gi]
    d = whole(g)
    cands = [c for c in contraction_space(g, d, GFX942) if c.legal]
    knobs = next(c.knobs for c in cands if c.knobs.get("swizzle") == swizzle)
    k = lower_contraction(g, d, {**knobs, "BM": 32, "BN": 32, "BK": 16, "TM": 4, "TN": 4,
                                 "KW": 2 if swizzle == "after_fusion" else 1}, GFX942)
    res, ref = run_functional(g, k)
    for o in g.outputs:
        np.testing.assert_allclose(res.outputs[o], ref[o], rtol=1e-4, atol=1e-4)


MFMA_TILES = [dict(BM=32, BN=32, BK=16, TM=32, TN=32, KW=1),
              dict(BM=32, BN=32, BK=64, TM=16, TN=16, KW=4)]


@pytest.mark.parametrize("model", [models.conv_add_relu, models.conv_add_relu_mismatch])
@pytest.mark.parametrize("swizzle", ["none", "after_fusion", "before_fusion"])
@pytest.mark.parametrize("tile", MFMA_TILES, ids=["32x32x2", "16x16x4-splitk"])
@pytest.mark.parametrize("lanes", ["n", "m"])
def test_mfma_conv_kernels_match_numpy(model, swizzle, tile, lanes):
    """mma=mfma, ragged M = 49 (guards), every swizzle placement, accumulator lanes along
    N or (C^T, rocMLIR's conv layout) along M: equal to numpy."""
    g = model(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, **tile, "lds_pad": 4, "swizzle": swizzle,
                                        "mma": "mfma", "mfma_lanes": lanes}, GFX942)
    assert any(isinstance(s, program.Mfma) for s in program.walk(k.body))
    res, ref = run_functional(g, k)
    np.testing.assert_allclose(res.outputs[g.outputs[0]], ref[g.outputs[0]], rtol=1e-4, atol=1e-4)
    assert res.counters["mfma_insts"] > 0


def test_mfma_lanes_along_m_store_the_nhwc_output_one_line_per_lane():
    """Lanes along the output positions (rocMLIR's conv GEMM): the unswizzled epilogue
    stores touch a line per lane; lanes along the channels store whole rows of lanes; the
    swizzle through LDS makes both coalesced."""
    g = models.conv_add_relu(**SMALL)
    lines = {}
    for lanes in ("n", "m"):
        for swz in ("none", "before_fusion"):
            k = lower_contraction(g, whole(g), {**TILE, **MFMA_TILES[0], "lds_pad": 4,
                                                "swizzle": swz, "mma": "mfma",
                                                "mfma_lanes": lanes}, GFX942)
            c = gpusim.simulate(k, "gfx942", functional=False).counters
            lines[(lanes, swz)] = c["global_store_lines"] / c["global_store_requests"]
    assert lines[("m", "none")] > 4 * lines[("n", "none")]
    assert lines[("m", "before_fusion")] == lines[("n", "before_fusion")]
    with pytest.raises(LoweringError, match="mfma_lanes"):
        lower_contraction(g, whole(g), {**TILE, **MFMA_TILES[0], "lds_pad": 4,
                                        "mma": "mfma", "mfma_lanes": "k"}, GFX942)


def test_mfma_is_refused_where_there_are_no_matrix_cores():
    g = models.conv_add_relu(**SMALL)
    with pytest.raises(LoweringError, match="MFMA|mfma"):
        lower_contraction(g, whole(g), {**TILE, **MFMA_TILES[0], "lds_pad": 4, "mma": "mfma"},
                          GFX1100)


def test_swizzled_epilogue_through_a_unit_dim_view():
    """A (2, 1) GEMM whose output is an identity reshape of it: the swizzled epilogue finds
    the accumulator although the view rewrites the unit dim's index as a constant 0."""
    g = Graph("unit_view")
    y = g.matmul(g.input("x", (2, 2)), g.input("w", (2, 1)))
    g.output(g.reshape(y, (2, 1)))
    for swz in ("none", "after_fusion", "before_fusion"):
        d = fuse(g).dispatches[0]
        k = lower_contraction(g, d, {**TILE, "vec_a": 1, "vec_b": 1, "swizzle": swz}, GFX942)
        res, ref = run_functional(g, k)
        np.testing.assert_allclose(res.outputs[g.outputs[0]], ref[g.outputs[0]], rtol=1e-5)


def heads_projection(heads=4, seq=40, dim=32, n=48):
    """A transformer's attention output projection: the (heads, seq, dim) attention
    result transposed to (seq, heads, dim) and merged to (seq, heads * dim) as the GEMM's
    A, then bias and residual (BERT's and GPT-2's pattern; seq 40 leaves a ragged tile)."""
    g = Graph("heads_projection")
    att = g.input("att", (1, heads, seq, dim))
    a = g.reshape(g.transpose(att, (0, 2, 1, 3)), (1, seq, heads * dim))
    y = g.add(g.matmul(a, g.input("w", (heads * dim, n))), g.input("b", (n,)))
    g.output(g.add(y, g.input("r", (1, seq, n))))
    return g


def _heads_points():
    g = heads_projection()
    legal = [c.knobs for c in contraction_space(g, whole(g), GFX942)
             if c.legal and not c.opt_in]
    picks = {
        "fma": lambda k: k["mma"] == "fma" and k.get("split_k", 1) == 1
        and not k.get("stream_k"),
        "mfma-prefetch2": lambda k: k["mma"] == "mfma" and k.get("prefetch") == 2,
        "split_k": lambda k: k.get("split_k", 1) > 1,
    }
    return {name: next(k for k in legal if pick(k)) for name, pick in picks.items()}


@pytest.mark.parametrize("point", ["fma", "mfma-prefetch2", "split_k"])
def test_heads_merge_operand_loads_vectors_and_equals_numpy(point):
    """The merged-heads A is affine in the digits of K (head at seq * dim, head dim at 1):
    its loads are 4-wide (they were scalar through the emitter) and the values, one kernel
    or a split-K sequence, equal numpy. (Stream-K stages through the same address; its
    rule refuses a GEMM this small.)"""
    from gpusim.program import kernels_of

    from compiler.lower import lower
    g = heads_projection()
    d = whole(g)
    knobs = _heads_points()[point]
    assert knobs["vec_a"] == 4
    seq = lower(g, d, knobs, GFX942)
    widths = {w for k in kernels_of(seq) for kind, w in global_accesses(k, "att")}
    assert widths == {4}
    res, ref = run_functional(g, seq)
    np.testing.assert_allclose(res.outputs[g.outputs[0]].reshape(ref[g.outputs[0]].shape),
                               ref[g.outputs[0]], rtol=1e-4, atol=1e-4)


@pytest.mark.hip
@pytest.mark.parametrize("point", ["fma", "mfma-prefetch2"])
def test_heads_merge_operand_compiles_and_checks(point, tmp_path):
    """hipcc (gfx90a, gfx940) issues the 4-wide loads of the digit-form address and
    ``check`` agrees with the simulator (widths, LDS, VGPR occupancy)."""
    import shutil

    from hip_check import check_kernels
    from gpusim.program import kernels_of

    from compiler.lower import lower
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed")
    g = heads_projection()
    ks = list(kernels_of(lower(g, whole(g), _heads_points()[point], GFX942)))
    report = check_kernels(ks, tmp_path)
    assert not report["disagreements"], [x["message"] for x in report["disagreements"]]
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
