"""The direct (depthwise) conv's ``order=channels``: an NCHW conv whose input is stored
channels-last and read through a transpose (ConvNeXt's first depthwise conv reads its
embedding norm's output so) puts lanes on channels, so the 49 taps read the stored
tensor along its contiguous axis (compiler/lower/direct_conv.py)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from compiler.fusion import fuse
from compiler.ir.graph import Graph
from compiler.lower import LoweringError, lower
from compiler.schedule import schedule_space
from gpusim.hw import GFX942

from test_lower_rows import run_dispatch


def _transposed_dwconv(n=1, h=10, w=9, c=24, k=7, bias=True, transposed=True):
    g = Graph("dw_channels_last")
    rng = np.random.default_rng(1)
    if transposed:
        x = g.transpose(g.input("x", (n, h, w, c)), (0, 3, 1, 2))
    else:
        x = g.input("x", (n, c, h, w))
    wt = g.constant(rng.standard_normal((c, 1, k, k)).astype(np.float32), name="w")
    y = g.conv2d(x, wt, padding=(k // 2,) * 4, groups=c)
    if bias:
        y = y + g.constant(rng.standard_normal((1, c, 1, 1)).astype(np.float32), name="b")
    g.output(y)
    return g


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "contraction")


@pytest.mark.parametrize("shape", [(1, 10, 9, 24, 7), (2, 5, 6, 3, 3), (1, 8, 8, 64, 7)])
@pytest.mark.parametrize("wg", [64, 256])
def test_channels_order_equals_numpy(shape, wg):
    n, h, w, c, k = shape
    g = _transposed_dwconv(n, h, w, c, k)
    d = _dispatch(g)
    knobs = {"lowering": "direct", "workgroup": wg, "order": "channels"}
    assert any(x.knobs.get("order") == "channels" and x.legal
               for x in schedule_space(g, d, GFX942))
    run_dispatch(g, d, knobs)


def test_channels_order_reads_the_stored_tensor_along_its_contiguous_axis():
    """At a size whose input outgrows the L1 (32x32x96), lanes on pixels read one line
    per lane for every tap; lanes on channels read two (the filter's per-lane lines hit
    the L1): simulated 49.3 -> 18.1 us; at 16x16x64 everything is cached and the two
    orders are within 5%."""
    from compiler.tuning.search import score
    g = _transposed_dwconv(1, 32, 32, 96, 7)
    d = _dispatch(g)
    by_output = score(g, d, {"lowering": "direct", "workgroup": 256}, GFX942)
    by_channels = score(g, d, {"lowering": "direct", "workgroup": 256, "order": "channels"},
                        GFX942)
    assert by_channels.time_us * 2 < by_output.time_us


def test_channels_order_is_offered_only_for_a_channels_last_input_and_refused_on_nhwc():
    g = _transposed_dwconv(transposed=False)
    d = _dispatch(g)
    assert not any(x.knobs.get("order") == "channels" and x.knobs.get("pixels", 1) == 1
               for x in schedule_space(g, d, GFX942))
    run_dispatch(g, d, {"lowering": "direct", "workgroup": 64, "order": "channels"})
    nhwc = Graph("dw_nhwc")
    x = nhwc.input("x", (1, 8, 8, 16))
    wt = nhwc.constant(np.ones((16, 3, 3, 1), np.float32), name="w")
    nhwc.output(nhwc.conv2d(x, wt, data_format="NHWC", padding=(1, 1, 1, 1), groups=16))
    dn = _dispatch(nhwc)
    with pytest.raises(LoweringError, match="order=channels is for NCHW"):
        lower(nhwc, dn, {"lowering": "direct", "workgroup": 64, "order": "channels"}, "gfx942")


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
def test_channels_order_kernel_compiles_and_checks(tmp_path):
    from gpusim.program import kernels_of
    from hip_check import check_kernels
    g = _transposed_dwconv(1, 16, 16, 64, 7)
    d = _dispatch(g)
    report = check_kernels(kernels_of(lower(g, d, {"lowering": "direct", "workgroup": 256,
                                                   "order": "channels"}, "gfx942")), tmp_path)
    assert not report["disagreements"], [x["message"] for x in report["disagreements"]]
