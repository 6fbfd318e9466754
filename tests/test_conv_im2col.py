"""The implicit GEMM's activation offsets split for the K loop (``Operand.im2col``): the
part of the output position, kept in registers across the K loop, and the part of k.
The split form gives exactly the offsets and padding tests of the inline formula for
every (group, m, k); the K loop of the lowered kernel recomputes no part of the output
position; values equal numpy on padded, strided, dilated and grouped convs of both
layouts (with split-K, whose partial kernel starts at another K tile)."""
from __future__ import annotations

import numpy as np
import pytest

from gpusim import program
from gpusim.hw import GFX942

from compiler.ir.graph import Graph
from compiler.lower.contraction import Gemm, lower_contraction

from test_lower_contraction import graphs, run_functional, whole


def _conv(fmt, c=6, o=8, hw=(9, 7), k=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1), dil=(1, 1),
          groups=1, n=1):
    g = Graph(f"conv_{fmt}_{groups}")
    h, w = hw
    if fmt == "NCHW":
        x, wt = g.input("x", (n, c, h, w)), g.input("w", (o, c // groups) + k)
        bias = g.input("bias", (1, o, 1, 1))
    else:
        x, wt = g.input("x", (n, h, w, c)), g.input("w", (o,) + k + (c // groups,))
        bias = g.input("bias", (1, 1, 1, o))
    y = g.conv2d(x, wt, data_format=fmt, stride=stride, padding=pad, dilation=dil,
                 groups=groups)
    g.output(g.relu(g.add(y, bias)))
    return g


CONVS = [
    lambda: graphs()[2], lambda: graphs()[3],                    # stride, dilation, padding
    lambda: _conv("NCHW"), lambda: _conv("NHWC", c=8),
    lambda: _conv("NCHW", groups=2, stride=(2, 2), n=2),
    lambda: _conv("NHWC", c=8, groups=4, dil=(2, 1), pad=(2, 0, 1, 2)),
    lambda: _conv("NCHW", k=(1, 1), pad=(1, 0, 0, 1)),          # 1x1 with padding
    lambda: _conv("NCHW", k=(1, 1), pad=(0, 0, 0, 0), hw=(7, 7)),
]


@pytest.mark.parametrize("ci", range(len(CONVS)))
def test_split_offsets_equal_the_inline_formula(ci):
    g = CONVS[ci]()
    gm = Gemm(g, whole(g))
    if gm.A.im2col is None:
        pytest.skip("the flat-image pointwise form has no K-loop split")
    rows, cols = gm.A.im2col
    b = np.arange(gm.batch).reshape(-1, 1, 1)
    m = np.arange(gm.M).reshape(1, -1, 1)
    k = np.arange(gm.K).reshape(1, 1, -1)
    off, valid = gm.A.offset_fn(b, m, k)
    off2, valid2 = cols(rows(b, m), k)
    shape = (gm.batch, gm.M, gm.K)
    valid = np.broadcast_to(True if valid is None else valid, shape)
    valid2 = np.broadcast_to(True if valid2 is None else valid2, shape)
    assert np.array_equal(valid, valid2)
    assert np.array_equal(np.broadcast_to(off, shape)[valid], np.broadcast_to(off2, shape)[valid])


def test_the_k_loop_recomputes_no_part_of_the_output_position():
    g = _conv("NCHW", c=32, o=32, hw=(14, 14))
    k = lower_contraction(g, whole(g), dict(BM=32, BN=32, BK=16, TM=4, TN=4, KW=1, lds_pad=4,
                                            vec_a=1, vec_b=4), GFX942)
    [loop] = [s for s in k.body if isinstance(s, program.For)]
    assigned = {s.dst.name for s in program.walk(loop.body) if isinstance(s, program.Assign)}
    hoisted = {s.dst.name for s in k.body if isinstance(s, program.Assign)}
    assert any(n.startswith("im_off") for n in hoisted)
    assert not any(n.startswith(("im_off", "im_yb", "im_xb", "im_m", "im_row_ok"))
                   for n in assigned)
    # the loop's activation loads read the hoisted offset register
    x_loads = [s for s in program.walk(loop.body) if isinstance(s, program.Load) and s.buffer == "x"]
    assert x_loads and all("im_off" in repr(s.index) for s in x_loads)


@pytest.mark.parametrize("ci", range(len(CONVS)))
@pytest.mark.parametrize("split", [1, 2])
def test_values_equal_numpy(ci, split):
    g = CONVS[ci]()
    gm = Gemm(g, whole(g))
    nk = -(-gm.K // 16)
    if split > 1 and nk % split:
        split = 1
    vec_a = gm.A.max_vec[gm.A.inner]
    k = lower_contraction(g, whole(g), dict(BM=32, BN=32, BK=16, TM=4, TN=4, KW=1, lds_pad=4,
                                            vec_a=vec_a if vec_a <= 4 else 1, vec_b=1,
                                            split_k=split), GFX942)
    res, ref = run_functional(g, k)
    for o in g.outputs:
        np.testing.assert_allclose(res.outputs[o], ref[o], rtol=1e-4, atol=1e-4)
