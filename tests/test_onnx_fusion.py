"""ONNX models fuse exactly like the built-in models they mirror (issue 3): the importer
decomposes Softmax and LayerNormalization into the same primitives, so fusion — which
never pattern-matches layers — must find the same dispatches."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper

from compiler.frontends.onnx import from_model
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir.reference import evaluate, random_inputs


def model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def vi(name, shape):
    return h.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def onnx_softmax(rows, cols):
    return model([h.make_node("Softmax", ["x"], ["y"], axis=-1)],
                 [vi("x", [rows, cols])], [vi("y", [rows, cols])])


def onnx_layernorm(rows, cols):
    return model([h.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-5)],
                 [vi("x", [rows, cols]), vi("gamma", [cols]), vi("beta", [cols])],
                 [vi("y", [rows, cols])])


def onnx_mlp(tokens, hidden, ffn):
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((hidden, ffn)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(ffn).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((ffn, hidden)).astype(np.float32), "w2")
    half = numpy_helper.from_array(np.array([0.5], np.float32), "half")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    rs2 = numpy_helper.from_array(np.array([1 / np.sqrt(2)], np.float32), "rs2")
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("Mul", ["a1", "half"], ["g0"]), h.make_node("Mul", ["a1", "rs2"], ["g1"]),
             h.make_node("Erf", ["g1"], ["g2"]), h.make_node("Add", ["g2", "one"], ["g3"]),
             h.make_node("Mul", ["g0", "g3"], ["gelu"]), h.make_node("MatMul", ["gelu", "w2"], ["y"])]
    return model(nodes, [vi("x", [tokens, hidden])], [vi("y", [tokens, hidden])],
                 [w1, b1, w2, half, one, rs2])


@pytest.mark.parametrize("builtin,onnx_model", [
    ("softmax:rows=32,cols=128", onnx_softmax(32, 128)),
    ("layernorm:rows=32,cols=128", onnx_layernorm(32, 128)),
    ("mlp:tokens=16,hidden=32,ffn=64", onnx_mlp(16, 32, 64)),
], ids=["softmax", "layernorm", "mlp"])
@pytest.mark.parametrize("aggressive", [True, False])
def test_onnx_fuses_like_the_builtin(builtin, onnx_model, aggressive):
    ours = fuse(load_model(builtin), aggressive=aggressive)
    g = from_model(onnx_model)
    theirs = fuse(g, aggressive=aggressive)
    assert theirs.num_dispatches == ours.num_dispatches
    assert sorted(d.kind for d in theirs.dispatches) == sorted(d.kind for d in ours.dispatches)
    assert sorted(len(d.inputs) for d in theirs.dispatches) == \
        sorted(len(d.inputs) for d in ours.dispatches)
    inputs = random_inputs(g)
    want = evaluate(g, inputs)
    got = execute_plan(theirs, inputs)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6)


def onnx_attention(heads, seq, dim, mask):
    """BERT (additive key-padding mask input) or GPT-2 (additive causal constant) attention
    as PyTorch's exporter writes it: MatMul, Transpose, Div by sqrt(d), Add, Softmax, MatMul."""
    inits = [numpy_helper.from_array(np.array(np.sqrt(dim), np.float32), "scale")]
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             h.make_node("MatMul", ["q", "kt"], ["qk"]),
             h.make_node("Div", ["qk", "scale"], ["s"])]
    inputs = [vi("q", [heads, seq, dim]), vi("k", [heads, seq, dim]), vi("v", [heads, seq, dim])]
    if mask == "bert":
        inputs.append(vi("mask", [1, 1, seq]))
        nodes.append(h.make_node("Add", ["s", "mask"], ["sm"]))
    else:
        tri = np.where(np.arange(seq)[None, :] > np.arange(seq)[:, None], -1e4, 0.0)
        inits.append(numpy_helper.from_array(tri.astype(np.float32), "causal"))
        nodes.append(h.make_node("Add", ["s", "causal"], ["sm"]))
    nodes += [h.make_node("Softmax", ["sm"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "v"], ["y"])]
    return model(nodes, inputs, [vi("y", [heads, seq, dim])], inits)


@pytest.mark.parametrize("mask", ["bert", "gpt2"])
def test_onnx_attention_is_one_dispatch_and_runs_in_gpusim(mask):
    import gpusim
    from compiler.lower import lower
    from compiler.lower.common import memory_image

    g = from_model(onnx_attention(2, 40, 32, mask))
    plan = fuse(g)
    assert [d.kind for d in plan.dispatches] == ["attention"]
    assert len(fuse(g, attention=False).dispatches) == 3
    inputs = random_inputs(g, 2)
    env = evaluate(g, inputs, keep_all=True)
    d = plan.dispatches[0]
    knobs = {"BQ": 16, "BK": 16, "waves": 2, "RM": 2, "q_in": "registers",
             "row_stats": "registers", "lds_pad": 4}
    k = lower(g, d, knobs, "gfx942")
    res = gpusim.simulate(k, "gfx942", inputs={b.name: memory_image(g, b.name, env[b.name])
                                               for b in k.buffers if b.intent == "in"})
    out = d.outputs[0]
    np.testing.assert_allclose(res.outputs[out].reshape(env[out].shape), env[out],
                               rtol=1e-4, atol=1e-5)
