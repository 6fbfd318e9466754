"""The direct (depthwise) conv's ``pixels`` knob: a thread computes P outputs along x,
keeps its channel's filter taps in registers for all of them, reads each input element
of its window rows once from one base register plus constants, and stores its P outputs
as vectors (compiler/lower/direct_conv.py; issue 27, ConvNeXt's stage-0 7x7 depthwise
conv)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from compiler.fusion import fuse
from compiler.ir.graph import Graph
from compiler.lower import LoweringError, lower
from compiler.schedule import schedule_space
from gpusim.hw import GFX942

from test_lower_rows import run_dispatch


def _dwconv(n, h, w, c, k, *, stride=1, dilation=1, pad=None, mult=1, transposed=True,
            bias=True, relu=False):
    g = Graph("dw_pixels")
    rng = np.random.default_rng(3)
    if transposed:
        x = g.transpose(g.input("x", (n, h, w, c)), (0, 3, 1, 2))
    else:
        x = g.input("x", (n, c, h, w))
    wt = g.constant(rng.standard_normal((c * mult, 1, k, k)).astype(np.float32), name="w")
    p = (k // 2) * dilation if pad is None else pad
    y = g.conv2d(x, wt, stride=(stride, stride), dilation=(dilation, dilation),
                 padding=(p, p, p, p), groups=c)
    if bias:
        y = y + g.constant(rng.standard_normal((1, c * mult, 1, 1)).astype(np.float32),
                           name="b")
    if relu:
        y = g.relu(y)
    g.output(y)
    return g


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "contraction")


def _out_width(w, k, stride, dilation, pad):
    return (w + 2 * pad - dilation * (k - 1) - 1) // stride + 1


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), h=st.integers(1, 9), c=st.sampled_from([3, 16, 24, 32, 48, 96]),
       k=st.sampled_from([1, 3, 5, 7]), stride=st.sampled_from([1, 2]),
       dilation=st.sampled_from([1, 2]), pad=st.sampled_from([None, 0]),
       mult=st.sampled_from([1, 2]), pixels=st.sampled_from([4, 8]),
       order=st.sampled_from(["channels", "output"]), wg=st.sampled_from([64, 256]),
       transposed=st.booleans(), segs=st.integers(1, 3))
@example(n=1, h=9, c=24, k=7, stride=1, dilation=1, pad=None, mult=1, pixels=8,
         order="channels", wg=64, transposed=True, segs=2)
def test_pixels_equal_numpy(n, h, c, k, stride, dilation, pad, mult, pixels, order, wg,
                            transposed, segs):
    p = (k // 2) * dilation if pad is None else pad
    # pick the input width so the output width is segs * pixels
    ow = segs * pixels
    w = (ow - 1) * stride + dilation * (k - 1) + 1 - 2 * p
    if w < 1 or h + 2 * p < dilation * (k - 1) + 1:
        return
    assert _out_width(w, k, stride, dilation, p) == ow
    g = _dwconv(n, h, w, c, k, stride=stride, dilation=dilation, pad=p, mult=mult,
                transposed=transposed, relu=mult == 2)
    d = _dispatch(g)
    knobs = {"lowering": "direct", "workgroup": wg, "order": order, "pixels": pixels}
    if order == "output" or (c * mult) % 16:
        with pytest.raises(LoweringError, match="not a multiple of 16|is for order=channels"):
            lower(g, d, knobs, "gfx942")
        return
    run_dispatch(g, d, knobs)


def test_pixels_store_vectors_and_load_each_window_element_once():
    g = _dwconv(1, 8, 16, 64, 7)
    d = _dispatch(g)
    k, _ = run_dispatch(g, d, {"lowering": "direct", "workgroup": 64, "order": "channels",
                               "pixels": 8})
    from gpusim.program import LdsLoad, Load, Store, walk
    loads = [s for s in walk(k.body) if isinstance(s, Load)]
    stores = [s for s in walk(k.body) if isinstance(s, Store)]
    # 49 filter taps + 7 rows x (8 + 6) input columns, each once; 8 outputs as 2 x 4
    # the filter slice of the workgroup's 64 channels staged as 4-wide loads, then 49
    # LDS reads per lane
    assert [len(s.dsts) for s in loads if s.buffer == "w"] == [4] * 13
    assert len([s for s in walk(k.body) if isinstance(s, LdsLoad)]) == 49
    assert len([s for s in loads if s.buffer == "x"]) == 7 * 14
    assert [len(s.values) for s in stores] == [4, 4]


def test_pixels_cut_the_stage0_shape_by_more_than_half():
    """ConvNeXt-T's stage-0 depthwise conv (96 channels, 56x56, read channels-last through
    a transpose): one output per thread against eight (simulated, gfx942; the full
    figures are in docs/kernels.md)."""
    from compiler.tuning.search import score
    g = _dwconv(1, 56, 56, 96, 7)
    d = _dispatch(g)
    one = score(g, d, {"lowering": "direct", "workgroup": 256, "order": "channels"}, GFX942)
    eight = score(g, d, {"lowering": "direct", "workgroup": 64, "order": "channels",
                         "pixels": 8}, GFX942)
    assert eight.ok and eight.time_us * 2 < one.time_us, (one.time_us, eight.time_us)


def test_pixels_offered_where_they_apply_and_refused_with_reasons():
    for transposed in (True, False):   # channels-last input read through a transpose, NCHW
        g = _dwconv(1, 8, 16, 32, 7, transposed=transposed)
        d = _dispatch(g)
        space = schedule_space(g, d, GFX942)
        px = {(c.knobs.get("order", "output"), c.knobs.get("pixels", 1)) for c in space
              if c.knobs.get("lowering") == "direct" and c.legal}
        assert {("channels", 4), ("channels", 8)} <= px
        assert not any(p > 1 for o, p in px if o == "output")
    # width 14: 8 does not divide it (not offered), 4 does not either
    g14 = _dwconv(1, 8, 14, 32, 7)
    d14 = _dispatch(g14)
    assert not any(c.knobs.get("pixels", 1) > 1 for c in schedule_space(g14, d14, GFX942)
                   if c.legal)
    with pytest.raises(LoweringError, match="not a multiple of pixels=8"):
        lower(g14, d14, {"lowering": "direct", "workgroup": 64, "pixels": 8,
                         "order": "channels"}, "gfx942")
    # a grouped conv of several channels per group
    gg = Graph("grouped")
    x = gg.input("x", (1, 8, 8, 8))
    wt = gg.constant(np.ones((8, 2, 3, 3), np.float32), name="w")
    gg.output(gg.conv2d(x, wt, padding=(1, 1, 1, 1), groups=4))
    dg = _dispatch(gg)
    with pytest.raises(LoweringError, match="one input channel per output"):
        lower(gg, dg, {"lowering": "direct", "workgroup": 64, "pixels": 4,
                       "order": "channels"}, "gfx942")


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
def test_pixels_kernels_compile_and_check(tmp_path):
    from gpusim.program import kernels_of
    from hip_check import assert_clean, check_kernels
    for i, (g, knobs) in enumerate((
            (_dwconv(1, 16, 16, 64, 7),
             {"lowering": "direct", "workgroup": 64, "order": "channels", "pixels": 8}),
            (_dwconv(1, 9, 15, 48, 3, stride=2),
             {"lowering": "direct", "workgroup": 256, "order": "channels", "pixels": 4}),
            (_dwconv(2, 8, 16, 96, 7, transposed=False, relu=True),
             {"lowering": "direct", "workgroup": 256, "order": "channels", "pixels": 4}))):
        d = _dispatch(g)
        (tmp_path / str(i)).mkdir()
        assert_clean(check_kernels(kernels_of(lower(g, d, knobs, "gfx942")), tmp_path / str(i)))
