"""A batched matmul whose right operand has no batch extent (a Linear layer over an
(N, H, W, C) tensor, ConvNeXt's pointwise convs) lowers as one GEMM with the batch folded
into M (``lower.contraction._fold_batch``): the view is refused where A's rows are not
one stride apart, and every legal schedule of the folded GEMM (FMA and MFMA tiles,
split-K, stream-K, the output swizzle, an epilogue writing a transposed NCHW output)
computes what numpy computes, in gpusim."""
import dataclasses

import numpy as np
import pytest

import gpusim
from gpusim.hw import GFX942

from compiler.fusion import fuse
from compiler.ir.graph import Graph
from compiler.ir.reference import evaluate, random_inputs
from compiler.lower import lower
from compiler.lower.common import memory_image
from compiler.lower.contraction import Gemm
from compiler.schedule import schedule_space
from compiler.tuning.search import legal_candidates


def pointwise(h=3, w=5, c=16, f=24, nchw_out=False):
    """LayerNorm-free ConvNeXt block core: x (1, H, W, C) @ W (C, F) + bias, GELU-like
    epilogue; with ``nchw_out`` the result is scaled, transposed to NCHW and added to a
    residual (pwconv2's epilogue)."""
    g = Graph(f"pw_{h}x{w}x{c}x{f}" + ("_nchw" if nchw_out else ""))
    x = g.input("x", (1, h, w, c))
    rng = np.random.default_rng(0)
    wt = g.constant(rng.standard_normal((c, f)).astype(np.float32), "w")
    bias = g.constant(rng.standard_normal((f,)).astype(np.float32), "bias")
    y = g.add(g.matmul(x, wt), bias)
    if nchw_out:
        res = g.input("res", (1, f, h, w))
        g.output(g.add(g.transpose(g.mul(y, 0.5), (0, 3, 1, 2)), res))
    else:
        g.output(g.mul(y, g.sigmoid(y)))
    return g


def _dispatch(g):
    plan = fuse(g)
    (d,) = [d for d in plan.dispatches if d.kind == "contraction"]
    return d


def test_the_batch_folds_into_m():
    g = pointwise(7, 7, 32, 64)
    gm = Gemm(g, _dispatch(g))
    assert (gm.batch, gm.M, gm.N, gm.K) == (1, 49, 64, 32)


def test_a_batched_weight_or_a_strided_a_keeps_the_batch():
    g = Graph("bmm")
    a = g.input("a", (3, 8, 16))
    g.output(g.matmul(a, g.input("b", (3, 16, 8))))
    gm = Gemm(g, _dispatch(g))
    assert (gm.batch, gm.M) == (3, 8)
    g = Graph("strided")   # rows of A not one stride apart across the batch
    a = g.input("a", (8, 3, 16))
    g.output(g.matmul(g.transpose(a, (1, 0, 2)), g.input("b", (16, 8))))
    gm = Gemm(g, _dispatch(g))
    assert (gm.batch, gm.M) == (3, 8)


#: few CUs, so that stream-K has more MAC-loop iterations than workgroups on a small GEMM
FEW_CUS = dataclasses.replace(GFX942, num_cus=3)


def _check_space(g, every: int, arch=GFX942):
    d = _dispatch(g)
    legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
    x = random_inputs(g)
    want = evaluate(g, x)
    consts = {b: g.op(b).attrs["value"] for b in d.inputs if g.op(b).kind == "constant"}
    mem = {n: memory_image(g, n, v) for n, v in {**x, **consts}.items()}
    seen = set()
    for c in legal[::every]:
        k = lower(g, d, c.knobs, arch)
        res = gpusim.simulate(k, arch, inputs=mem)
        for o in g.outputs:
            np.testing.assert_allclose(np.asarray(res.outputs[o]).reshape(want[o].shape),
                                       want[o], rtol=2e-4, atol=2e-4, err_msg=str(c.knobs))
        seen.add((c.knobs.get("mma"), c.knobs.get("split_k", 1) > 1,
                  c.knobs.get("stream_k", 0) > 0))
    return seen


@pytest.mark.parametrize("nchw_out", [False, True], ids=["gelu", "nchw-residual"])
def test_every_schedule_of_a_folded_gemm_equals_numpy(nchw_out):
    seen = _check_space(pointwise(3, 5, 256, 24, nchw_out), every=5, arch=FEW_CUS)
    assert {m for m, _, _ in seen} == {"fma", "mfma"}
    assert any(sk for _, sk, _ in seen) and any(st for _, _, st in seen)
