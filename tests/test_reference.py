"""The numpy reference interpreter: every primitive vs numpy, composites vs formulas."""
import math

import numpy as np
import pytest

from compiler.ir import builders
from compiler.ir.graph import BINARY, UNARY, Graph, GraphError
from compiler.ir.ops import OPS
from compiler.ir.reference import evaluate, random_inputs
from gpusim import engine
from gpusim import program

RNG = np.random.default_rng(0)
X = RNG.uniform(0.1, 2.0, (3, 5)).astype(np.float32)
Y = RNG.uniform(-1.0, 1.0, (5,)).astype(np.float32)
V = RNG.uniform(-2.0, 2.0, (3, 5)).astype(np.float32)
ERF = np.vectorize(math.erf)



def simulator_formula(kind: str):
    """Graph op ``kind``'s formula as the simulator evaluates it (``gpusim.engine``'s scalar
    branch for the IR operator the op lowers to), elementwise in float64: the second,
    independent implementation the reference is compared with, so no test keeps a third
    copy of each formula."""
    spec = OPS[kind]
    if spec.arity == 1:
        code = program.IR_UNARY[spec.ir].engine
        return np.vectorize(lambda x: engine.fun(code, float(x)), otypes=[np.float64])
    code = program.IR_BINARY[spec.ir].engine
    return np.vectorize(lambda x, y: engine.fbin(code, float(x), float(y)), otypes=[np.float64])


def run1(build, **inputs):
    g = Graph()
    vals = {k: g.input(k, v.shape, "f16" if v.dtype == np.float16 else "f32")
            for k, v in inputs.items()}
    g.output(build(g, **vals))
    return evaluate(g, inputs)[g.outputs[0]]


def test_every_float_primitive_has_a_simulator_formula():
    for kind in UNARY + BINARY:
        assert OPS[kind].ir in (program.IR_UNARY if OPS[kind].arity == 1 else program.IR_BINARY), kind


@pytest.mark.parametrize("kind", UNARY)
def test_unary_against_numpy(kind):
    x = X if kind in ("log", "sqrt", "rsqrt", "reciprocal") else V
    got = run1(lambda g, x: g.unary(kind, x), x=x)
    np.testing.assert_allclose(got, simulator_formula(kind)(x), rtol=1e-6, atol=1e-6)
    assert got.dtype == np.float32


@pytest.mark.parametrize("kind", BINARY)
def test_binary_broadcasting_against_numpy(kind):
    got = run1(lambda g, a, b: g.binary(kind, a, b), a=X, b=Y)
    np.testing.assert_allclose(got, simulator_formula(kind)(X, Y), rtol=1e-6)


@pytest.mark.parametrize("kind,fn", [("reduce_sum", np.sum), ("reduce_max", np.max),
                                     ("reduce_mean", np.mean)])
@pytest.mark.parametrize("axes,keep", [(1, True), (0, False), ((0, 1), True)])
def test_reductions_against_numpy(kind, fn, axes, keep):
    got = run1(lambda g, x: g.reduce(kind, x, axes, keep), x=V)
    want = fn(V.astype(np.float64), axis=axes, keepdims=keep)
    np.testing.assert_allclose(got, np.reshape(want, got.shape), rtol=1e-6, atol=1e-6)


def test_matmul_transpose_reshape_broadcast_cast():
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(run1(lambda g, a, b: g.matmul(a, b), a=a, b=b), a @ b, rtol=1e-5)
    np.testing.assert_array_equal(run1(lambda g, a: g.transpose(a, (2, 0, 1)), a=a),
                                  a.transpose(2, 0, 1))
    np.testing.assert_array_equal(run1(lambda g, a: g.reshape(a, (4, -1)), a=a), a.reshape(4, 6))
    np.testing.assert_array_equal(run1(lambda g, y: g.broadcast(y, (3, 5)), y=Y),
                                  np.broadcast_to(Y, (3, 5)))
    half = run1(lambda g, v: g.cast(v, "f16"), v=V)
    assert half.dtype == np.float16 and np.array_equal(half, V.astype(np.float16))


def direct_conv_nchw(x, w, stride, pad, dil, groups):
    """Seven nested loops: obviously right, independent of the im2col implementation."""
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    pt, pl, pb, pr = pad
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for oc in range(o):
            gi = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for cc in range(ci):
                        for p in range(kh):
                            for q in range(kw):
                                acc += xp[b, gi * ci + cc, i * stride[0] + p * dil[0],
                                          j * stride[1] + q * dil[1]] * w[oc, cc, p, q]
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("stride,pad,dil,groups", [((1, 1), (0, 0, 0, 0), (1, 1), 1),
                                                   ((2, 1), (1, 0, 2, 1), (1, 2), 2)])
def test_conv2d_against_direct_loops(fmt, stride, pad, dil, groups):
    x = RNG.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 4 // groups, 3, 2)).astype(np.float32)
    want = direct_conv_nchw(x, w, stride, pad, dil, groups)
    if fmt == "NHWC":
        x, w, want = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), want.transpose(0, 2, 3, 1)
    got = run1(lambda g, x, w: g.conv2d(x, w, data_format=fmt, stride=stride, padding=pad,
                                        dilation=dil, groups=groups),
               x=np.ascontiguousarray(x), w=np.ascontiguousarray(w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_f16_ops_round_their_results():
    a = np.array([1.0, 2.0, 3.0], np.float16)
    got = run1(lambda g, a: g.div(a, g.constant(np.array([3.0], np.float16))), a=a)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, (a.astype(np.float32) / 3).astype(np.float16))


# ------------------------------------------------------------------ composites
def softmax_np(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_builder(axis):
    got = run1(lambda g, x: builders.softmax(g, x, axis), x=V)
    np.testing.assert_allclose(got, softmax_np(V.astype(np.float64), axis), rtol=1e-5)


@pytest.mark.parametrize("affine,residual", [(False, False), (True, False), (True, True)])
def test_layer_norm_builder(affine, residual):
    gamma, beta = RNG.standard_normal(5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    x = V + (X if residual else 0)
    mu = x.mean(-1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    if affine:
        want = want * gamma + beta

    def build(g, v, x_):
        gm = g.constant(gamma) if affine else None
        bt = g.constant(beta) if affine else None
        return builders.layer_norm(g, v, gm, bt, residual=x_ if residual else None)
    got = run1(build, v=V, x_=X)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rms_norm_builder():
    gamma = RNG.standard_normal(5).astype(np.float32)
    got = run1(lambda g, v: builders.rms_norm(g, v, g.constant(gamma)), v=V)
    want = V / np.sqrt((V.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_gelu_builder(approx):
    v = V.astype(np.float64)
    if approx == "none":
        want = 0.5 * v * (1 + ERF(v / math.sqrt(2)))
    else:
        want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    got = run1(lambda g, v: builders.gelu(g, v, approx), v=V)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        run1(lambda g, v: builders.gelu(g, v, "fast"), v=V)


def test_bias_add_and_composites_are_primitive_only():
    g = Graph()
    x = g.input("x", (4, 6))
    g.output(builders.bias_add(g, builders.softmax(g, x), g.constant(np.ones(6, np.float32))))
    assert {op.kind for op in g.ops} <= set(UNARY + BINARY) | {"input", "constant", "reduce_max",
                                                                 "reduce_sum"}


def test_missing_or_misshaped_inputs_and_determinism():
    g = Graph()
    x = g.input("x", (2, 3))
    g.output(g.exp(x))
    with pytest.raises(GraphError, match="missing value for graph input 'x'"):
        evaluate(g, {})
    with pytest.raises(GraphError, match="expected"):
        evaluate(g, {"x": np.zeros((3, 2))})
    a, b = random_inputs(g, 7), random_inputs(g, 7)
    assert np.array_equal(a["x"], b["x"]) and not np.array_equal(a["x"], random_inputs(g, 8)["x"])
    assert np.all(np.abs(a["x"]) <= 1)
