"""rocMLIR's output-swizzle placement story, answered by the simulator.

conv_add_relu (1x7x7x2048 NHWC, 512 1x1 filters, NHWC residual): with the same tile,
``before_fusion`` must be predicted faster than ``after_fusion`` (MI300 measurement:
0.0541 ms -> 0.0464 ms) because the residual is then read with coalesced dwordx4 loads;
for the channel-major residual (``conv_add_relu_mismatch``) it must not be, because the
swizzled layout reads that residual with strided scalar loads, 4 lines per quad of lanes,
and the vL1D spends a cycle on each. The kernels are the honest lowerings; only the
swizzle knob changes between the runs compared.

Figures on gfx942 (tile 16x32x64, KW=8; ``python -m pytest tests/test_swizzle_story.py``
checks the directions, not these digits): matching residual before 24.01 us, after 24.22;
channel-major residual before 24.21, after 24.14, no swizzle 23.97. The effect is well
under 1%, against the measured 14%: the epilogue is a small part of this predicted kernel.
"""
import pytest

from gpusim.hw import GFX942, get_arch
import gpusim

from compiler.ir import models
from compiler.lower.contraction import lower_contraction

from test_lower_contraction import SMALL, run_functional, whole  # noqa: E402


TILE = dict(BM=16, BN=32, BK=64, TM=2, TN=4, KW=8, lds_pad=4, vec_a=4, vec_b=4)


def predict(model, swizzle, arch="gfx942", tile=TILE):
    g = model()
    k = lower_contraction(g, whole(g), {**tile, "swizzle": swizzle}, get_arch(arch))
    return k, gpusim.simulate(k, arch=arch, functional=False)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_before_fusion_wins_when_residual_matches_output(arch):
    _, after = predict(models.conv_add_relu, "after_fusion", arch)
    _, before = predict(models.conv_add_relu, "before_fusion", arch)
    assert before.time_us < after.time_us, (before.counters, after.counters)
    # why: the same bytes, read in fewer and wider requests
    assert before.counters["coalescing_pct"] > after.counters["coalescing_pct"]
    assert before.counters["vmem_insts"] < after.counters["vmem_insts"]


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_mismatched_residual_is_read_uncoalesced_before_fusion(arch):
    """The counters show the regression's cause: swizzled order reads a channel-major
    residual with strided dwords (more lines, lower coalescing than after_fusion)."""
    k_after, after = predict(models.conv_add_relu_mismatch, "after_fusion", arch)
    k_before, before = predict(models.conv_add_relu_mismatch, "before_fusion", arch)
    assert k_before.meta["extra_inputs"]["residual"]["layout_matches_output"] is False
    assert before.counters["coalescing_pct"] < after.counters["coalescing_pct"]
    assert before.counters["tcp_accesses"] > after.counters["tcp_accesses"]


def residual_reads(res):
    """(instructions, TCP accesses) of the residual loads: the vL1D time they take."""
    recs = [r for r in res.per_inst
            if r["kind"] == "global_load" and r["stmt"].buffer == "residual"]
    return sum(r["executions"] for r in recs), sum(r["tcp_accesses"] for r in recs)


@pytest.mark.parametrize("arch", ["gfx942"])
def test_before_fusion_does_not_win_when_layouts_differ(arch):
    """Swizzled order puts 4 consecutive lanes on 4 channels: each quad of a residual load
    touches 4 lines of the channel-major residual (64 TCP accesses per load), while the
    register layout keeps a quad on 4 consecutive pixels of one channel (one line). The
    vL1D pays one cycle per access, more than after_fusion's extra LDS pass costs."""
    _, after = predict(models.conv_add_relu_mismatch, "after_fusion", arch)
    _, before = predict(models.conv_add_relu_mismatch, "before_fusion", arch)
    (n_after, tcp_after), (n_before, tcp_before) = residual_reads(after), residual_reads(before)
    assert n_before == n_after
    assert tcp_before / n_before == 64 and tcp_before > 3 * tcp_after
    assert before.time_us > after.time_us, (before.counters, after.counters)
    # and the tool's answer for this case is no swizzle of the epilogue inputs at all
    _, none = predict(models.conv_add_relu_mismatch, "none", arch)
    assert none.time_us < after.time_us


def test_swizzle_costs_lds_traffic():
    """Both placements pay one LDS round trip of the output tile over no swizzle."""
    _, none = predict(models.conv_add_relu, "none")
    _, after = predict(models.conv_add_relu, "after_fusion")
    _, before = predict(models.conv_add_relu, "before_fusion")
    assert after.counters["lds_insts"] > none.counters["lds_insts"]
    assert before.counters["lds_insts"] > none.counters["lds_insts"]


@pytest.mark.parametrize("model", [models.conv_add_relu, models.conv_add_relu_mismatch])
@pytest.mark.parametrize("swizzle", ["none", "after_fusion", "before_fusion"])
def test_story_kernels_are_numerically_right(model, swizzle):
    import numpy as np
    g = model(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, "BM": 32, "BN": 32, "swizzle": swizzle},
                          GFX942)
    res, ref = run_functional(g, k)
    np.testing.assert_allclose(res.outputs[g.outputs[0]], ref[g.outputs[0]],
                               rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- MFMA tiles (mma=mfma)
# One v_mfma_f32_32x32x2f32 block per wave, split-K over 4 wave groups. The MFMA
# accumulator layout puts 32 consecutive output channels on 32 consecutive lanes, so even
# the direct (no-swizzle) stores of an NHWC output are full 128 B rows: 100% coalescing.
MFMA_TILE = dict(BM=32, BN=32, BK=64, TM=32, TN=32, KW=4, lds_pad=4, vec_a=4, vec_b=4,
                 mma="mfma")


def predict_mfma(model, swizzle, arch="gfx942"):
    return predict(model, swizzle, arch, MFMA_TILE)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_mfma_before_fusion_wins_when_residual_matches_output(arch):
    k, after = predict_mfma(models.conv_add_relu, "after_fusion", arch)
    _, before = predict_mfma(models.conv_add_relu, "before_fusion", arch)
    assert k.meta["mfma_shape"] == "32x32x2f32"
    assert before.counters["mfma_insts"] == after.counters["mfma_insts"] > 0
    assert before.time_us < after.time_us, (before.counters, after.counters)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_mfma_is_faster_than_the_fma_tile(arch):
    for swz in ("none", "after_fusion", "before_fusion"):
        _, fma = predict(models.conv_add_relu, swz, arch)
        _, mfma = predict_mfma(models.conv_add_relu, swz, arch)
        assert mfma.time_us < fma.time_us
        assert mfma.counters["valu_insts"] < fma.counters["valu_insts"]


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_mfma_placement_is_a_wash_when_layouts_differ(arch):
    """In the MFMA layout 32 consecutive lanes hold 32 consecutive channels, as in the
    swizzled layout: a channel-major residual is read with 4 lines per quad either way
    (same TCP accesses, same coalescing, same L2 and memory traffic). So the placement
    moves nothing in memory; what is left is the epilogue's index arithmetic, a little
    cheaper on the swizzled rows (fewer VALU instructions) than on the 16 scattered
    accumulator rows: under 0.5% either way, a wash."""
    _, after = predict_mfma(models.conv_add_relu_mismatch, "after_fusion", arch)
    _, before = predict_mfma(models.conv_add_relu_mismatch, "before_fusion", arch)
    assert residual_reads(before) == residual_reads(after)
    assert before.counters["coalescing_pct"] == after.counters["coalescing_pct"]
    for c in ("l2_accesses", "hbm_bytes_read", "hbm_bytes_written", "global_store_lines"):
        assert before.counters[c] == after.counters[c], c
    assert before.counters["valu_insts"] <= after.counters["valu_insts"]
    assert abs(before.time_us - after.time_us) < 5e-3 * after.time_us
