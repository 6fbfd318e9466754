"""compiler.ir.errorbound: the rounding-error scale verify allows on top of its constant
tolerance. It must hold (the f32 reference stays within lam * scale of the exact value,
computed in float64) and it must still catch real errors (a perturbed weight, a wrong
kernel), including in graphs deep enough that the constant alone rejects honest
reorderings."""
import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from compiler.ir import builders
from compiler.ir import errorbound, numerics
from compiler.cli.commands import verify
from compiler.frontends.onnx import load_onnx
from compiler.ir.graph import Graph
from compiler.ir.ops import OPS
from gpusim import engine
from gpusim import program
from compiler.ir.reference import evaluate, random_inputs

DATA = "tests/data"
ERF = np.vectorize(math.erf)
ACTS = {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh,
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": ERF}


def _conv64(x, w, pad):
    """Exact-enough NCHW stride-1 convolution in float64."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w)


def _chain(rng, depth, k, act, conv):
    """A graph of ``depth`` contraction + bias + activation layers, then softmax and layer
    norm; returns (graph, inputs, the same computation in float64)."""
    g = Graph("chain")
    if conv:
        shape = (1, k, 6, 6)
        x = g.input("x", shape)
    else:
        shape = (4, k)
        x = g.input("x", shape)
    xv = rng.uniform(-1, 1, shape).astype(np.float32)
    h, h64 = x, xv.astype(np.float64)
    for i in range(depth):
        if conv:
            w = rng.normal(0, math.sqrt(2.0 / (9 * k)), (k, k, 3, 3)).astype(np.float32)
            b = rng.uniform(-0.1, 0.1, (1, k, 1, 1)).astype(np.float32)
            h = g.conv2d(h, g.constant(w), padding=(1, 1, 1, 1))
            h64 = _conv64(h64, w.astype(np.float64), 1)
        else:
            w = rng.normal(0, math.sqrt(2.0 / k), (k, k)).astype(np.float32)
            b = rng.uniform(-0.1, 0.1, (k,)).astype(np.float32)
            h = g.matmul(h, g.constant(w))
            h64 = h64 @ w.astype(np.float64)
        h = g.unary(act, g.add(h, g.constant(b)))
        h64 = ACTS[act](h64 + b)
    h = builders.layer_norm(g, builders.softmax(g, h))
    e = np.exp(h64 - h64.max(-1, keepdims=True))
    s = e / e.sum(-1, keepdims=True)
    d = s - s.mean(-1, keepdims=True)
    h64 = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
    g.output(h)
    return g, {"x": xv}, h64


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31), depth=st.integers(1, 6), k=st.sampled_from([8, 64, 300]),
       act=st.sampled_from(sorted(ACTS)), conv=st.booleans())
def test_the_scale_bounds_the_f32_reference_against_float64(seed, depth, k, act, conv):
    rng = np.random.default_rng(seed)
    g, inputs, exact = _chain(rng, depth, min(k, 32) if conv else k, act, conv)
    out, scales = errorbound.evaluate_with_scales(g, inputs)
    name = g.outputs[0]
    assert np.array_equal(out[name], evaluate(g, inputs)[name])  # the reference itself
    err = np.abs(out[name].astype(np.float64) - exact)
    bound = errorbound.lam(exact.size) * scales[name]
    assert np.all(err <= bound), float((err / bound).max())


def _cancelling_dot(k=4096, seed=0):
    """x . w whose terms cancel pairwise: the exact result is 0 while the terms are about
    +-100, so every summation order leaves its own rounding residue."""
    rng = np.random.default_rng(seed)
    half = rng.uniform(5, 10, k // 2).astype(np.float32)
    x = np.concatenate([half, half])[None, :]
    wh = rng.uniform(5, 10, k // 2).astype(np.float32)
    w = np.concatenate([wh, -wh])[:, None]
    g = Graph("dot")
    xi = g.input("x", x.shape)
    g.output(g.matmul(xi, g.constant(w)))
    return g, {"x": x}, x, w


def test_a_long_cancelling_contraction_needs_the_scale_and_the_scale_still_catches_a_wrong_weight():
    g, inputs, x, w = _cancelling_dot()
    out, scales = errorbound.evaluate_with_scales(g, inputs)
    ours = out[g.outputs[0]]
    # another honest order: a sequential f32 sum, as a single-lane loop would run it
    terms = (x[0] * w[:, 0]).astype(np.float32)
    seq = np.float32(0)
    for t in terms:
        seq = np.float32(seq + t)
    theirs = np.array([[seq]], np.float32)
    assert abs(float(ours[0, 0]) - float(seq)) > 1e-4  # the constant alone rejects it
    assert not numerics.compare(ours, theirs, 1e-4)[0]
    assert verify.compare(ours, theirs, "f32", scales[g.outputs[0]])[0]
    # one weight of 4096 with its sign flipped: outside the allowance
    w_bad = w.copy()
    w_bad[7, 0] *= -1
    wrong = (x @ w_bad.astype(np.float64)).astype(np.float32)
    assert not verify.compare(ours, wrong, "f32", scales[g.outputs[0]])[0]


def _ctx(graph):
    return verify.VerifyContext("m", graph, 0, random_inputs(graph, 0))


def _perturbed(model, which, rel):
    """The model with its ``which``-th 4-D initializer's largest weight scaled by 1+rel."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    init = [i for i in m.graph.initializer if len(i.dims) == 4][which]
    w = numpy_helper.to_array(init).copy()
    w[np.unravel_index(np.argmax(np.abs(w)), w.shape)] *= 1 + rel
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    return m


def test_verify_onnx_check_passes_a_real_cnn_and_fails_a_perturbed_weight_or_wrong_kernel():
    graph = load_onnx(f"{DATA}/resnet_tiny.onnx")
    ctx = _ctx(graph)
    assert verify.check_reference(ctx).status == "pass"
    assert ctx.scales and all(s.shape == ctx.reference[n].shape for n, s in ctx.scales.items())
    good = verify.check_onnx(ctx)
    assert good.status == "pass", good.detail
    assert "rounding allowance" in good.detail
    model = graph.meta["onnx_model"]
    # one weight 1% off in the first convolution
    graph.meta["onnx_model"] = _perturbed(model, 0, 0.01)
    bad = verify.check_onnx(ctx)
    assert bad.status == "fail", bad.detail
    # a wrong kernel: the last convolution's filter taps flipped (correlation vs convolution)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    init = [i for i in m.graph.initializer if len(i.dims) == 4 and i.dims[2] == 3][-1]
    w = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w[:, :, ::-1, ::-1]), init.name))
    graph.meta["onnx_model"] = m
    assert verify.check_onnx(ctx).status == "fail"
    graph.meta["onnx_model"] = model


def test_the_fused_plan_check_uses_the_same_allowance():
    g, _, _, _ = _cancelling_dot(k=512)
    ctx = _ctx(g)
    verify.check_reference(ctx)
    r = verify.check_fused_plan(ctx)
    assert r.status == "pass" and "rounding allowance" in r.detail


@pytest.mark.parametrize("kind", sorted(errorbound._UNARY_ROUNDING))
def test_every_unary_rule_bounds_a_perturbed_input(kind):
    """An input carrying a known error: the op's propagated scale covers what it does to
    the result (first order, derivative at the interval's ends)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0.2, 3.0, 200)
    s = np.full_like(x, 1e-4)
    dx = rng.choice([-1.0, 1.0], x.shape) * 1e-4
    code = program.IR_UNARY[OPS[kind].ir].engine  # the op's formula in float64 (the simulator's)
    f = np.vectorize(lambda v: engine.fun(code, float(v)), otypes=[np.float64])
    moved = np.abs(f(x + dx) - f(x))
    assert np.all(moved <= errorbound._unary(kind, x, s, 1.0) * (1 + 1e-9))


def test_lam_grows_with_the_number_of_compared_elements():
    assert 6 < errorbound.lam(1) < errorbound.lam(10**6) < 9


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), kind=st.sampled_from(["reduce_prod", "reduce_min",
                                                         "reduce_max", "reduce_sum"]),
       axes=st.sampled_from([(2,), (1, 2), (0, 2)]), keepdims=st.booleans())
def test_every_reduction_rule_bounds_the_f32_reference_against_float64(seed, kind, axes,
                                                                       keepdims):
    """reduce_prod and reduce_min have rules of their own (a product's error through the
    other terms, a minimum's chosen element); over an erring input (exp) every reduction's
    scale covers the f32 reference's distance from the float64 value."""
    rng = np.random.default_rng(seed)
    g = Graph("reduce")
    x = g.input("x", (3, 5, 16))
    g.output(g.reduce(kind, g.unary("exp", x), axes, keepdims))
    xv = rng.uniform(-0.3, 0.3, (3, 5, 16)).astype(np.float32)
    out, scales = errorbound.evaluate_with_scales(g, {"x": xv})
    f64 = {"reduce_prod": np.prod, "reduce_min": np.min, "reduce_max": np.max,
           "reduce_sum": np.sum}[kind]
    exact = f64(np.exp(xv.astype(np.float64)), axis=axes, keepdims=keepdims)
    name = g.outputs[0]
    err = np.abs(out[name].astype(np.float64) - exact)
    bound = errorbound.lam(exact.size) * scales[name]
    assert err.shape == bound.shape
    assert np.all(err <= bound), float((err / bound).max())


def test_a_product_with_a_zero_term_keeps_the_zero_terms_error():
    """d prod / d x_i is the product of the other terms: a term that is zero (exp(0) - 1,
    which carries exp's rounding) passes its error on, scaled by the others' product,
    where r / x_i would be 0/0."""
    g = Graph("prod")
    x = g.input("x", (1, 4))
    t = g.sub(g.unary("exp", x), g.constant(np.array([[1, 0, 0, 0]], np.float32)))
    g.output(g.reduce("reduce_prod", t, (1,), True))
    xv = np.array([[0.0, 0.5, 1.0, 1.5]], np.float32)
    out, scales = errorbound.evaluate_with_scales(g, {"x": xv}, keep=[t.name])
    assert out[g.outputs[0]][0, 0] == 0.0
    others = float(np.prod(np.exp(xv[0, 1:].astype(np.float64))))
    assert scales[g.outputs[0]][0, 0] == pytest.approx(others * scales[t.name][0, 0])


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_a_causal_mask_of_minus_inf_leaves_every_scale_finite(dtype):
    # issue 28: the mask's -inf gave the masked scores an infinite scale, and the softmax
    # spread it to every later tensor (CLIP's f16 block verified with an allowance of inf)
    g = Graph("masked")
    q = g.input("q", (8, 16), dtype)
    k = g.input("k", (16, 8), dtype)
    mask = np.triu(np.full((8, 8), -np.inf), 1).astype(np.float32 if dtype == "f32"
                                                        else np.float16)
    scores = g.add(g.matmul(q, k), g.constant(mask, "mask"))
    g.output(g.matmul(builders.softmax(g, scores), g.input("v", (8, 4), dtype)))
    out, scales = errorbound.evaluate_with_scales(g, random_inputs(g, 0))
    s = scales[g.outputs[0]]
    assert np.all(np.isfinite(s)) and np.all(s > 0)
    # tens of roundings of the output's size, not an allowance that accepts anything
    u = errorbound.UNIT_ROUNDOFF[dtype]
    assert float(np.max(s)) < 100 * u * float(np.max(np.abs(out[g.outputs[0]])))
