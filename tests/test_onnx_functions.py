"""Ops with no rule of their own whose ONNX schema defines them as a function of other ops
(opset 23's RMSNormalization and RotaryEmbedding, PRelu, Selu, ...) import as that body,
inlined by onnx's inliner; model-local functions are inlined too. Checked against onnx's
ReferenceEvaluator, fused plans against the unfused graph, and the simulated kernels."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from compiler.frontends.onnx import from_model
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir import numerics
from compiler.ir.graph import UnsupportedError
from compiler.ir.reference import evaluate


def _model(nodes, inputs, out_shape, inits=(), opset=23, functions=(), extra_opsets=()):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          initializer=[onnx.numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, functions=list(functions), opset_imports=[
        helper.make_opsetid("", opset), *[helper.make_opsetid(d, 1) for d in extra_opsets]])


def _agrees(model, feeds, tol=1e-5):
    g = from_model(model, "t")
    ins = {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()}
    ours = evaluate(g, ins)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    ok, err = numerics.compare(ours[g.meta["onnx_outputs"]["y"]], want, tol)
    assert ok, err
    for aggressive in (True, False):
        got = execute_plan(fuse(g, aggressive=aggressive), ins)
        for o in ours:
            assert numerics.compare(got[o], ours[o], tol)[0]
    return g


def test_rms_normalization_imports_as_its_onnx_body():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    s = rng.random(16).astype(np.float32) + 0.5
    m = _model([helper.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-5)],
               [("x", x.shape)], x.shape, [("s", s)])
    g = _agrees(m, {"x": x})
    kinds = {op.kind for op in g.ops}
    assert "reduce_mean" in kinds and "sqrt" in kinds


def test_rotary_embedding_imports_as_its_onnx_body():
    rng = np.random.default_rng(1)
    b, heads, seq, d = 1, 2, 6, 8
    x = rng.standard_normal((b, heads, seq, d)).astype(np.float32)
    cos = rng.standard_normal((b, seq, d // 2)).astype(np.float32)
    sin = rng.standard_normal((b, seq, d // 2)).astype(np.float32)
    m = _model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])],
               [("x", x.shape), ("cos", cos.shape), ("sin", sin.shape)], x.shape)
    _agrees(m, {"x": x, "cos": cos, "sin": sin})


@pytest.mark.parametrize("op,attrs", [("PRelu", {}), ("Selu", {}), ("Elu", {"alpha": 0.5}),
                                      ("Softsign", {}), ("Mish", {}), ("LogSoftmax", {})])
def test_activation_functions_import_as_their_bodies(op, attrs):
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32) * 3
    ins = ["x", "slope"] if op == "PRelu" else ["x"]
    inits = [("slope", np.full(5, 0.25, np.float32))] if op == "PRelu" else []
    _agrees(_model([helper.make_node(op, ins, ["y"], **attrs)], [("x", x.shape)], x.shape,
                   inits, opset=18), {"x": x}, tol=1e-4)


def test_a_model_local_function_is_inlined(tmp_path):
    """torch.onnx can write a module as a model-local function in a domain of its own."""
    from compiler import cli
    fn = helper.make_function(
        "custom", "ScaledTanh", ["a"], ["b"],
        [helper.make_node("Constant", [], ["two"], value_float=2.0),
         helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("Mul", ["t", "two"], ["b"])],
        opset_imports=[helper.make_opsetid("", 18)])
    m = _model([helper.make_node("ScaledTanh", ["x"], ["y"], domain="custom")],
               [("x", (8, 32))], (8, 32), opset=18, functions=[fn], extra_opsets=["custom"])
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    _agrees(m, {"x": x})
    onnx.save(m, tmp_path / "f.onnx")
    assert cli.main(["verify", str(tmp_path / "f.onnx")]) == 0


def test_an_op_without_a_body_is_still_refused_in_one_line():
    m = _model([helper.make_node("Hardmax", ["x"], ["y"])], [("x", (2, 3))], (2, 3), opset=18)
    with pytest.raises(UnsupportedError) as e:
        from_model(m, "t")
    assert "Hardmax" in str(e.value) and "\n" not in str(e.value)


def test_the_callers_model_is_left_as_it_was():
    m = _model([helper.make_node("PRelu", ["x", "slope"], ["y"])], [("x", (2, 3))], (2, 3),
               [("slope", np.full(3, 0.1, np.float32))], opset=18)
    before = m.SerializeToString()
    from_model(m, "t")
    assert m.SerializeToString() == before
