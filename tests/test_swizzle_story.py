"""rocMLIR's output-swizzle placement story, answered by the simulator.

conv_add_relu (1x7x7x2048 NHWC, 512 1x1 filters, NHWC residual): with the same tile,
``before_fusion`` must be predicted faster than ``after_fusion`` (MI300 measurement:
0.0541 ms -> 0.0464 ms) because the residual is then read with coalesced dwordx4 loads;
for the channel-major residual (``conv_add_relu_mismatch``) it must not be, because the
swizzled layout reads that residual with strided scalar loads. The kernels are the honest
lowerings; only the swizzle knob changes between the runs compared.
"""
import pytest

import gpusim

from compiler import models
from compiler.lower.contraction import lower_contraction

from test_lower_contraction import SMALL, whole  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(gpusim, "simulate"),
                                reason="gpusim.simulate is not available yet")

TILE = dict(BM=64, BN=64, BK=16, TM=4, TN=4, lds_pad=1, vec_a=4, vec_b=4)


def predict(model, swizzle, arch="gfx942", **shape):
    g = model(**shape)
    k = lower_contraction(g, whole(g), {**TILE, "swizzle": swizzle}, arch)
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
def test_before_fusion_does_not_win_when_layouts_differ(arch):
    k_after, after = predict(models.conv_add_relu_mismatch, "after_fusion", arch)
    k_before, before = predict(models.conv_add_relu_mismatch, "before_fusion", arch)
    assert k_before.meta["extra_inputs"]["residual"]["layout_matches_output"] is False
    assert before.time_us >= after.time_us, (before.counters, after.counters)
    assert before.counters["coalescing_pct"] <= after.counters["coalescing_pct"]


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
    from compiler.reference import evaluate, random_inputs
    g = model(**SMALL)
    k = lower_contraction(g, whole(g), {**TILE, "BM": 32, "BN": 32, "swizzle": swizzle},
                          "gfx942")
    x = random_inputs(g)
    res = gpusim.simulate(k, arch="gfx942", inputs=x)
    ref = evaluate(g, x)
    np.testing.assert_allclose(res.outputs[g.outputs[0]], ref[g.outputs[0]],
                               rtol=1e-4, atol=1e-4)
