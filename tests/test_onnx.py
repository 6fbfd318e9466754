"""ONNX import, checked differentially against onnx.reference.ReferenceEvaluator."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from compiler.frontends.onnx import SUPPORTED_OPS, from_model, load_onnx
from compiler.ir.graph import GraphError, ShapeError, UnsupportedError
from compiler.ir.models import ModelError, load_model
from compiler.ir.reference import evaluate

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
NP = {F32: np.float32, F16: np.float16}


def vi(name, shape, dtype=F32):
    return h.make_tensor_value_info(name, dtype, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "test", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def feeds_for(m, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    inits = {i.name for i in m.graph.initializer}
    out = {}
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        lo = 0.1 if positive else -1.0
        out[inp.name] = rng.uniform(lo, 1.0, shape).astype(NP[tt.elem_type])
    return out


def assert_matches(m, positive=False, tol=None):
    """Our import + numpy reference equals onnx's ReferenceEvaluator on every output."""
    g = from_model(m)
    feeds = feeds_for(m, positive=positive)
    ours = evaluate(g, {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()})
    names = [o.name for o in m.graph.output]
    theirs = ReferenceEvaluator(m).run(names, feeds)
    for name, ref in zip(names, theirs):
        got = ours[g.meta["onnx_outputs"][name]]
        assert got.size == ref.size, name
        assert got.dtype == ref.dtype, (name, got.dtype, ref.dtype)
        t = tol or (2e-2 if ref.dtype == np.float16 else 1e-5)
        np.testing.assert_allclose(got.reshape(ref.shape).astype(np.float32),
                                   ref.astype(np.float32), rtol=t, atol=t)
    return g


UNARY = ["Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf", "Relu", "Sigmoid", "Neg", "Sin",
         "Cos", "Floor", "Ceil"]  # more of the last four in test_trig_ops.py


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, dtype):
    m = model([h.make_node(op, ["x"], ["y"])], [vi("x", [3, 5], dtype)], [vi("y", [3, 5], dtype)])
    assert_matches(m, positive=op in ("Sqrt", "Log", "Reciprocal"))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"])
@pytest.mark.parametrize("shapes", [([2, 3, 4], [4]), ([2, 1, 4], [3, 1]), ([1], [2, 3])])
def test_binary_broadcasting(op, shapes):
    a, b = shapes
    out = list(np.broadcast_shapes(a, b))
    m = model([h.make_node(op, ["a", "b"], ["y"])], [vi("a", a), vi("b", b)], [vi("y", out)])
    assert_matches(m, positive=True)


def test_variadic_max_min_and_scalar_initializer():
    nodes = [h.make_node("Max", ["a", "b", "c"], ["m"]), h.make_node("Min", ["m", "k"], ["y"])]
    m = model(nodes, [vi("a", [4, 3]), vi("b", [3]), vi("c", [4, 1])], [vi("y", [4, 3])],
              [init("k", np.float32(0.25))])
    assert_matches(m)


def test_pow_with_integer_exponent_constant():
    nodes = [h.make_node("Constant", [], ["e"], value=init("ev", np.array(3, np.int64))),
             h.make_node("Pow", ["x", "e"], ["y"])]
    m = model(nodes, [vi("x", [2, 6])], [vi("y", [2, 6])])
    assert_matches(m)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("opset", [13, 18, 21])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0)])
def test_reductions(op, opset, axes, keepdims):
    shape = [3, 4, 5]
    as_input = opset >= 18 or op == "ReduceSum"
    inputs, inits, kw = ["x"], [], {"keepdims": keepdims}
    if axes is not None and as_input:
        inputs.append("axes")
        inits.append(init("axes", np.array(axes, np.int64)))
    elif axes is not None:
        kw["axes"] = axes
    red = list(range(3)) if axes is None else [a % 3 for a in axes]
    out = [1 if i in red else s for i, s in enumerate(shape) if keepdims or i not in red]
    m = model([h.make_node(op, inputs, ["y"], **kw)], [vi("x", shape)], [vi("y", out)],
              inits, opset)
    assert_matches(m)


def test_reduce_noop_with_empty_axes():
    node = h.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)
    m = model([node], [vi("x", [2, 3])], [vi("y", [2, 3])], opset=18)
    assert_matches(m)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_is_decomposed(axis):
    m = model([h.make_node("Softmax", ["x"], ["y"], axis=axis)], [vi("x", [6, 10])],
              [vi("y", [6, 10])], opset=13)
    g = assert_matches(m)
    kinds = {op.kind for op in g.ops}
    assert {"reduce_max", "exp", "reduce_sum", "div"} <= kinds


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("axis,bias", [(-1, True), (1, False), (2, True)])
def test_layer_normalization(axis, bias, dtype):
    shape = [2, 3, 8]
    norm = shape[axis % 3:]
    rng = np.random.default_rng(1)
    inits = [init("scale", rng.standard_normal(norm).astype(NP[dtype]))]
    inputs = ["x", "scale"]
    if bias:
        inits.append(init("bias", rng.standard_normal(norm).astype(NP[dtype])))
        inputs.append("bias")
    node = h.make_node("LayerNormalization", inputs, ["y"], axis=axis, epsilon=1e-3)
    m = model([node], [vi("x", shape, dtype)], [vi("y", shape, dtype)], inits)
    g = assert_matches(m, tol=5e-2 if dtype == F16 else 1e-4)
    assert "reduce_mean" in {op.kind for op in g.ops}


@pytest.mark.parametrize("a,b", [([3, 4], [4, 5]), ([2, 3, 4], [4, 6]), ([4], [4, 3]),
                                 ([2, 3, 4], [4]), ([2, 1, 3, 4], [5, 4, 2])])
def test_matmul(a, b):
    out = list(np.matmul(np.zeros(a), np.zeros(b)).shape)
    m = model([h.make_node("MatMul", ["a", "b"], ["y"])], [vi("a", a), vi("b", b)],
              [vi("y", out)])
    assert_matches(m, tol=1e-4)


@pytest.mark.parametrize("ta,tb,alpha,beta,c_shape", [(0, 0, 1.0, 1.0, [5]),
                                                       (1, 0, 0.5, 2.0, [3, 5]),
                                                       (0, 1, 1.0, 1.0, None),
                                                       (1, 1, 2.0, 0.5, [1])])
def test_gemm(ta, tb, alpha, beta, c_shape):
    a = [4, 3] if ta else [3, 4]
    b = [5, 4] if tb else [4, 5]
    rng = np.random.default_rng(2)
    inputs, inits = ["a", "b"], [init("b", rng.standard_normal(b).astype(np.float32))]
    if c_shape:
        inputs.append("c")
        inits.append(init("c", rng.standard_normal(c_shape).astype(np.float32)))
    node = h.make_node("Gemm", inputs, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)
    m = model([node], [vi("a", a)], [vi("y", [3, 5])], inits)
    assert_matches(m, tol=1e-4)


@pytest.mark.parametrize("kw,xshape,wshape", [
    ({}, [1, 3, 8, 8], [4, 3, 3, 3]),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, [2, 4, 9, 9], [6, 4, 3, 3]),
    ({"group": 2, "dilations": [2, 1], "pads": [0, 1, 2, 0]}, [1, 4, 10, 7], [6, 2, 3, 2]),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, [1, 2, 7, 8], [3, 2, 4, 3]),
    ({"auto_pad": "SAME_LOWER"}, [1, 2, 6, 6], [2, 2, 2, 2]),
    ({"auto_pad": "VALID", "kernel_shape": [1, 1]}, [1, 8, 5, 5], [4, 8, 1, 1]),
])
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv(kw, xshape, wshape, with_bias):
    rng = np.random.default_rng(3)
    inputs, inits = ["x", "w"], [init("w", rng.standard_normal(wshape).astype(np.float32))]
    if with_bias:
        inputs.append("b")
        inits.append(init("b", rng.standard_normal(wshape[0]).astype(np.float32)))
    node = h.make_node("Conv", inputs, ["y"], **kw)
    ref = ReferenceEvaluator(model([node], [vi("x", xshape)], [vi("y", None)], inits))
    out = ref.run(None, {"x": np.zeros(xshape, np.float32)})[0].shape
    m = model([node], [vi("x", xshape)], [vi("y", list(out))], inits)
    assert_matches(m, tol=1e-4)


def test_views_transpose_reshape_squeeze_unsqueeze_cast_identity():
    nodes = [
        h.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        h.make_node("Transpose", ["t"], ["t2"]),
        h.make_node("Reshape", ["t2", "shape"], ["r"]),
        h.make_node("Unsqueeze", ["r", "uaxes"], ["u"]),
        h.make_node("Squeeze", ["u", "saxes"], ["s"]),
        h.make_node("Squeeze", ["one"], ["s1"]),
        h.make_node("Cast", ["s"], ["c16"], to=F16),
        h.make_node("Cast", ["c16"], ["c32"], to=F32),
        h.make_node("Identity", ["c32"], ["i"]),
        h.make_node("Add", ["i", "s1"], ["y"]),
    ]
    inits = [init("shape", np.array([0, -1], np.int64)), init("uaxes", np.array([0, -1], np.int64)),
             init("saxes", np.array([0], np.int64))]
    # (2,3,4) -perm 2,0,1-> (4,2,3) -reversed-> (3,2,4) -[0,-1]-> (3,8) -unsqueeze 0,-1->
    # (1,3,8,1) -squeeze 0-> (3,8,1); "one" (1,8,1,1) squeezes to (8,); the sum is (3,8,8)
    m = model(nodes, [vi("x", [2, 3, 4]), vi("one", [1, 8, 1, 1])], [vi("y", [3, 8, 8])], inits)
    assert_matches(m, tol=2e-3)


def test_reshape_allowzero_and_constant_forms():
    nodes = [h.make_node("Constant", [], ["shape"], value_ints=[4, 3]),
             h.make_node("Reshape", ["x", "shape"], ["r"], allowzero=1),
             h.make_node("Constant", [], ["half"], value_float=0.5),
             h.make_node("Mul", ["r", "half"], ["y"])]
    m = model(nodes, [vi("x", [2, 6])], [vi("y", [4, 3])])
    assert_matches(m)


def test_whole_mlp_with_gemm_and_gelu():
    rng = np.random.default_rng(4)
    w1 = rng.standard_normal((16, 32)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((32, 8)).astype(np.float32) * 0.2
    nodes = [h.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
             h.make_node("Div", ["h", "sqrt2"], ["hs"]), h.make_node("Erf", ["hs"], ["e"]),
             h.make_node("Add", ["e", "one"], ["e1"]), h.make_node("Mul", ["h", "e1"], ["he"]),
             h.make_node("Mul", ["he", "half"], ["g"]),
             h.make_node("Gemm", ["g", "w2"], ["y"], transB=1)]
    inits = [init("w1", w1), init("b1", np.zeros(32, np.float32) + 0.1),
             init("w2", np.ascontiguousarray(w2.T)), init("sqrt2", np.float32(np.sqrt(2))),
             init("one", np.float32(1)), init("half", np.float32(0.5))]
    m = model(nodes, [vi("x", [10, 16])], [vi("y", [10, 8])], inits)
    g = assert_matches(m, tol=1e-4)
    assert [op.kind for op in g.ops].count("matmul") == 2


def test_whole_layer_norm_from_primitives_and_softmax_model():
    nodes = [h.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             h.make_node("Sub", ["x", "m"], ["d"]), h.make_node("Mul", ["d", "d"], ["d2"]),
             h.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             h.make_node("Add", ["v", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["s"]),
             h.make_node("Div", ["d", "s"], ["n"]), h.make_node("Softmax", ["n"], ["y"])]
    m = model(nodes, [vi("x", [4, 32])], [vi("y", [4, 32])],
              [init("eps", np.float32(1e-5))], opset=17)
    assert_matches(m)


def test_whole_conv_relu_model_and_names(tmp_path):
    rng = np.random.default_rng(5)
    nodes = [h.make_node("Conv", ["input.1", "w", "b"], ["conv:0"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["conv:0"], ["output/0"])]
    inits = [init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             init("b", rng.standard_normal(4).astype(np.float32))]
    m = model(nodes, [vi("input.1", [1, 3, 6, 6])], [vi("output/0", [1, 4, 6, 6])], inits)
    path = tmp_path / "convrelu.onnx"
    path.write_bytes(m.SerializeToString())
    g = load_onnx(path)
    assert g.inputs == ["input_1"] and g.outputs == ["output_0"]
    assert g.meta["onnx_inputs"] == {"input.1": "input_1"}
    assert load_model(str(path)).outputs == ["output_0"]
    assert_matches(m, tol=1e-4)


def test_unsupported_ops_are_listed_in_one_error():
    nodes = [h.make_node("Sinh", ["x"], ["a"]), h.make_node("Atan", ["a"], ["b"]),
             h.make_node("Sinh", ["b"], ["c"]), h.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, [vi("x", [2, 2])], [vi("y", [2, 2])])
    with pytest.raises(UnsupportedError, match=r"unsupported ONNX op\(s\): Atan, Sinh \("):
        from_model(m)


def test_every_supported_op_has_a_test_here():
    import pathlib
    here = pathlib.Path(__file__)
    text = here.read_text() + "".join((here.parent / f).read_text()
                                      for f in ("test_onnx_ops.py", "test_onnx_gaps.py",
                                                "test_onnx_families.py", "test_onnx_quant.py",
                                                "test_onnx_conv_transpose.py",
                                                "test_onnx_functions.py",
                                                "test_more_ops.py"))
    missing = [op for op in SUPPORTED_OPS if f'"{op}"' not in text]
    assert not missing, missing


@pytest.mark.parametrize("make,exc,pattern", [
    (lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 4])],
                   [vi("y", ["batch", 4])]), ShapeError,
     "symbolic dimension 0 .'batch'.*--dim batch=VALUE"),
    (lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2], TensorProto.DOUBLE)],
                   [vi("y", [2], TensorProto.DOUBLE)]), UnsupportedError, "DOUBLE"),
    (lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])],
                   opset=11), UnsupportedError, "opset 11"),
    (lambda: model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [3])]),
     ShapeError, "differ in dimension 0"),
    (lambda: model([h.make_node("Add", ["x", "z"], ["y"])], [vi("x", [2])], [vi("y", [2])]),
     ModelError, "not a valid ONNX model"),
    (lambda: model([h.make_node("MatMul", ["x", "x"], ["y"])], [vi("x", [2, 3])],
                   [vi("y", [2, 3])]), ShapeError, "shape inference fails.*MatMul"),
    (lambda: model([h.make_node("Reshape", ["x", "s"], ["y"], name="reshape_dyn")],
                   [vi("x", [2, 3]), h.make_tensor_value_info("s", TensorProto.INT64, [2])],
                   [vi("y", [3, 2])]), UnsupportedError,
     "reshape_dyn.*the target shape must be a constant.*'s' is computed"),
    (lambda: model([h.make_node("Conv", ["x", "w"], ["y"], name="conv3d")],
                   [vi("x", [1, 2, 4, 4, 4]), vi("w", [3, 2, 3, 3, 3])],
                   [vi("y", [1, 3, 2, 2, 2])]),
     UnsupportedError, "node 'conv3d' .Conv.: only 1-D and 2-D"),
])
def test_bad_models_raise_one_line_errors(make, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        from_model(make())
    assert "\n" not in str(info.value).strip() or exc is ModelError


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        load_onnx(tmp_path / "absent.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffthis is not protobuf")
    with pytest.raises(GraphError, match="bad.onnx"):
        load_onnx(bad)
