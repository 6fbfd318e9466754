"""ONNX ops that real exporters emit (issue 12), each checked differentially against
onnx.reference.ReferenceEvaluator: integer/bool values, views, injective ops, pools,
activations, constant folding, op-version differences."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from compiler.frontends.onnx import from_model
from compiler.ir.graph import ShapeError, UnsupportedError
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir.reference import evaluate

from test_onnx import init, vi  # noqa: E402  (the ONNX tests' tensor helpers)

F32, F16, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
NP = {F32: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, BOOL: np.bool_}


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "test", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def feeds_for(m, seed=0, high=4):
    rng = np.random.default_rng(seed)
    inits = {i.name for i in m.graph.initializer}
    out = {}
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == BOOL:
            out[inp.name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif tt.elem_type in (I64, I32):
            out[inp.name] = rng.integers(-high, high, shape).astype(NP[tt.elem_type])
        else:
            out[inp.name] = rng.uniform(-2.0, 2.0, shape).astype(NP[tt.elem_type])
    return out


def assert_matches(m, feeds=None, tol=1e-5):
    """Import + numpy reference == ReferenceEvaluator on every output, and so do both
    fusion plans run dispatch by dispatch."""
    g = from_model(m)
    feeds = feeds if feeds is not None else feeds_for(m)
    # the IR has no rank-0 tensors: a scalar input is fed as shape (1,)
    ours_in = {g.meta["onnx_inputs"][k]: np.reshape(v, g.op(g.meta["onnx_inputs"][k]).type.shape)
               for k, v in feeds.items() if k in g.meta["onnx_inputs"]}
    ours = evaluate(g, ours_in)
    names = [o.name for o in m.graph.output]
    theirs = ReferenceEvaluator(m).run(names, feeds)
    plans = [execute_plan(fuse(g, aggressive=a), ours_in) for a in (True, False)]
    for name, ref in zip(names, theirs):
        ref = np.asarray(ref)
        for got in [ours[g.meta["onnx_outputs"][name]]] + [
                p[g.meta["onnx_outputs"][name]] for p in plans]:
            assert got.size == ref.size, name
            if ref.dtype.kind in "biu":
                np.testing.assert_array_equal(got.reshape(ref.shape), ref)
                assert got.dtype.kind == ref.dtype.kind
            else:
                assert got.dtype == ref.dtype, (name, got.dtype, ref.dtype)
                t = 2e-2 if ref.dtype == np.float16 else tol
                np.testing.assert_allclose(got.reshape(ref.shape).astype(np.float32),
                                           ref.astype(np.float32), rtol=t, atol=t)
    return g


def kinds(g):
    return {op.kind for op in g.ops}


# ------------------------------------------------------------------ views and copies
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], [1]), ([0, 1], [2, 5], [0, 2], [1, 2]), ([-1], [-1000], [2], [-2]),
    ([2], [1 << 62], [-1], [1]), ([0], [2], None, None)])
def test_slice(starts, ends, axes, steps):
    ins, inits = ["x", "s", "e"], [init("s", np.array(starts, np.int64)),
                                   init("e", np.array(ends, np.int64))]
    if axes is not None:
        ins.append("a")
        inits.append(init("a", np.array(axes, np.int64)))
    if steps is not None:
        ins.append("t")
        inits.append(init("t", np.array(steps, np.int64)))
    ref = ReferenceEvaluator(model([h.make_node("Slice", ins, ["y"])], [vi("x", [3, 4, 6])],
                                   [vi("y", None)], inits))
    shape = ref.run(None, {"x": np.zeros((3, 4, 6), np.float32)})[0].shape
    m = model([h.make_node("Slice", ins, ["y"])], [vi("x", [3, 4, 6])], [vi("y", shape)],
              inits)
    assert_matches(m)


@pytest.mark.parametrize("opset,kw,split", [
    (13, {"axis": 2}, [2, 4]), (18, {"axis": -1, "num_outputs": 3}, None),
    (18, {"axis": 0, "num_outputs": 2}, None), (13, {"axis": 0}, None)])
def test_split(opset, kw, split):
    ins, inits = ["x"], []
    if split:
        ins.append("sp")
        inits.append(init("sp", np.array(split, np.int64)))
    n = len(split) if split else kw.get("num_outputs", 3)
    outs = [f"y{i}" for i in range(n)]
    ref = ReferenceEvaluator(model([h.make_node("Split", ins, outs, **kw)],
                                   [vi("x", [3, 4, 6])], [vi(o, None) for o in outs], inits,
                                   opset))
    shapes = [r.shape for r in ref.run(None, {"x": np.zeros((3, 4, 6), np.float32)})]
    m = model([h.make_node("Split", ins, outs, **kw)], [vi("x", [3, 4, 6])],
              [vi(o, s) for o, s in zip(outs, shapes)], inits, opset)
    g = assert_matches(m)
    assert "slice" in kinds(g)


def test_rotate_half_slice_neg_concat():
    """Llama's rotate_half: cat(-x[..., d/2:], x[..., :d/2]) * sin + x * cos."""
    i = lambda n, v: init(n, np.array(v, np.int64))  # noqa: E731
    nodes = [h.make_node("Slice", ["x", "h", "big", "ax"], ["x2"]),
             h.make_node("Slice", ["x", "z", "h", "ax"], ["x1"]),
             h.make_node("Neg", ["x2"], ["nx2"]),
             h.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             h.make_node("Mul", ["rot", "sin"], ["a"]), h.make_node("Mul", ["x", "cos"], ["b"]),
             h.make_node("Add", ["a", "b"], ["y"])]
    rng = np.random.default_rng(1)
    m = model(nodes, [vi("x", [1, 4, 8, 16])], [vi("y", [1, 4, 8, 16])],
              [i("h", [8]), i("big", [1 << 62]), i("z", [0]), i("ax", [-1]),
               init("sin", rng.uniform(-1, 1, (8, 16)).astype(np.float32)),
               init("cos", rng.uniform(-1, 1, (8, 16)).astype(np.float32))])
    g = assert_matches(m)
    assert {"slice", "concat"} <= kinds(g)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_with_constant_and_empty(axis):
    shape_c = [2, 3, 4]
    shape_c[axis] = 2
    empty = [2, 3, 4]
    empty[axis] = 0
    out = [2, 3, 4]
    out[axis] += 2
    m = model([h.make_node("Concat", ["x", "c", "e"], ["y"], axis=axis)], [vi("x", [2, 3, 4])],
              [vi("y", out)], [init("c", np.ones(shape_c, np.float32)),
                               init("e", np.zeros(empty, np.float32))])
    assert_matches(m)


def test_expand_tile_flatten():
    nodes = [h.make_node("Expand", ["x", "s"], ["e"]),
             h.make_node("Tile", ["e", "r"], ["t"]),
             h.make_node("Flatten", ["t"], ["y"], axis=-1)]
    m = model(nodes, [vi("x", [3, 1])], [vi("y", [2 * 2 * 3, 4 * 3])],
              [init("s", np.array([2, 1, 4], np.int64)), init("r", np.array([1, 2, 3], np.int64))])
    g = assert_matches(m)
    assert "broadcast" in kinds(g)


@pytest.mark.parametrize("pads,value,opset", [
    ([0, 1, 2, 0, 2, 1], 0.0, 13), ([1, 0, 0, 0, 0, 3], -1.5, 18)])
def test_pad_constant(pads, value, opset):
    out = [3 + pads[0] + pads[3], 4 + pads[1] + pads[4], 5 + pads[2] + pads[5]]
    m = model([h.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant")],
              [vi("x", [3, 4, 5])], [vi("y", out)],
              [init("p", np.array(pads, np.int64)), init("v", np.array(value, np.float32))],
              opset)
    assert_matches(m)


def test_negative_pads_crop():
    """Negative pads remove elements (onnx.reference does not implement them: numpy)."""
    m = model([h.make_node("Pad", ["x", "p"], ["y"])], [vi("x", [3, 4])], [vi("y", [4, 2])],
              [init("p", np.array([0, -1, 1, -1], np.int64))])
    g = from_model(m)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = evaluate(g, {"x": x})[g.outputs[0]]
    np.testing.assert_array_equal(got, np.pad(x[:, 1:3], ((0, 1), (0, 0))))


def test_pad_with_axes_opset18():
    m = model([h.make_node("Pad", ["x", "p", "", "ax"], ["y"])], [vi("x", [3, 4, 5])],
              [vi("y", [3, 7, 5])], [init("p", np.array([1, 2], np.int64)),
                                     init("ax", np.array([-2], np.int64))])
    assert_matches(m)


# ------------------------------------------------------------------ integers, bools, masks
@pytest.mark.parametrize("axis,idx_shape", [(0, [2, 3]), (1, [5]), (-1, [])])
def test_gather_computed_indices_and_embedding(axis, idx_shape):
    data = np.random.default_rng(0).uniform(-1, 1, (6, 5, 4)).astype(np.float32)
    n = data.shape[axis]
    out = list(data.shape)
    a = axis % 3
    out[a:a + 1] = idx_shape
    m = model([h.make_node("Gather", ["d", "i"], ["y"], axis=axis)], [vi("i", idx_shape, I64)],
              [vi("y", out)], [init("d", data)])
    feeds = {"i": np.random.default_rng(2).integers(-n, n, idx_shape).astype(np.int64)}
    g = assert_matches(m, feeds)
    assert "gather" in kinds(g)
    assert g.op(g.inputs[0]).type.dtype == "i32"


@pytest.mark.parametrize("indices", [np.array(2, np.int64), np.array([[0, -1], [3, 1]], np.int64)])
def test_gather_constant_indices_on_computed_data(indices):
    out = [4, 3] if indices.ndim == 0 else [4, 2, 2, 3]
    m = model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Gather", ["r", "i"], ["y"], axis=1)],
              [vi("x", [4, 5, 3])], [vi("y", out)], [init("i", indices)])
    assert_matches(m)


def test_gather_embedding_lookup_records_index_bound():
    from compiler.ir.reference import random_inputs
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    m = model([h.make_node("Gather", ["w", "ids"], ["y"])], [vi("ids", [1, 6], I64)],
              [vi("y", [1, 6, 4])], [init("w", table)])
    g = from_model(m)
    assert g.meta["index_bounds"] == {"ids": 10}
    ids = random_inputs(g, seed=3)["ids"]
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 10


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [F32, I64])
def test_compare_where(op, dtype):
    nodes = [h.make_node(op, ["a", "b"], ["c"]), h.make_node("Where", ["c", "x", "z"], ["y"])]
    m = model(nodes, [vi("a", [3, 4], dtype), vi("b", [4], dtype), vi("x", [3, 4])],
              [vi("y", [3, 4]), vi("c", [3, 4], BOOL)],
              [init("z", np.array(-np.inf, np.float32))])
    g = assert_matches(m)
    assert {"select"} <= kinds(g)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_and_not(op):
    nodes = [h.make_node(op, ["a", "b"], ["c"]), h.make_node("Not", ["c"], ["y"])]
    m = model(nodes, [vi("a", [3, 4], BOOL), vi("b", [1, 4], BOOL)], [vi("y", [3, 4], BOOL)])
    assert_matches(m)


@pytest.mark.parametrize("src,dst", [(F32, I64), (F32, BOOL), (BOOL, F32), (I64, F32),
                                     (I64, BOOL), (BOOL, I32), (F32, F16), (I32, I64)])
def test_cast_between_float_int_bool(src, dst):
    m = model([h.make_node("Cast", ["x"], ["y"], to=dst)], [vi("x", [4, 5], src)],
              [vi("y", [4, 5], dst)])
    feeds = feeds_for(m)
    if src == F32:
        feeds["x"] = (feeds["x"] * 3).astype(np.float32)
        feeds["x"][0, :3] = [0.0, -0.0, 2.5]
    assert_matches(m, feeds)


def test_cast_like_and_integer_arithmetic():
    nodes = [h.make_node("Add", ["i", "j"], ["s"]), h.make_node("Mul", ["s", "k"], ["p"]),
             h.make_node("CastLike", ["p", "x"], ["f"]), h.make_node("Add", ["f", "x"], ["y"])]
    m = model(nodes, [vi("i", [2, 3], I64), vi("j", [3], I64), vi("x", [2, 3])],
              [vi("y", [2, 3])], [init("k", np.array(3, np.int64))])
    assert_matches(m)


def test_bert_style_mask_from_int_input():
    """(1 - mask) * finfo.min added to scores, the mask an int64 graph input."""
    nodes = [h.make_node("Cast", ["mask"], ["mf"], to=F32),
             h.make_node("Sub", ["one", "mf"], ["inv"]),
             h.make_node("Mul", ["inv", "big"], ["bias"]),
             h.make_node("Add", ["scores", "bias"], ["y"])]
    m = model(nodes, [vi("mask", [1, 8], I64), vi("scores", [4, 8])], [vi("y", [4, 8])],
              [init("one", np.array(1.0, np.float32)),
               init("big", np.array(np.finfo(np.float32).min, np.float32))])
    feeds = {"mask": np.array([[1, 1, 1, 0, 1, 0, 0, 1]], np.int64),
             "scores": np.ones((4, 8), np.float32)}
    assert_matches(m, feeds)


# ------------------------------------------------------------------ folding
def test_shape_arithmetic_folds_to_constants():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape, Range and
    Equal/Where on constants: all of it folds; only the reshape remains."""
    i = lambda n, v: init(n, np.array(v, np.int64))  # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["sh"]),
             h.make_node("Gather", ["sh", "zero"], ["b"], axis=0),
             h.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
             h.make_node("Concat", ["b1", "minus1"], ["newshape"], axis=0),
             h.make_node("Reshape", ["x", "newshape"], ["r"]),
             h.make_node("Size", ["x"], ["n"]),
             h.make_node("Range", ["zero", "n", "one"], ["rng"]),
             h.make_node("ConstantOfShape", ["sh"], ["ones"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
             h.make_node("Equal", ["rng", "zero"], ["is0"]),
             h.make_node("Where", ["is0", "zf", "onef"], ["w"]),
             h.make_node("Reshape", ["w", "newshape"], ["wr"]),
             h.make_node("Mul", ["r", "wr"], ["m"]),
             h.make_node("Add", ["m", "ones_r"], ["y"]),
             h.make_node("Reshape", ["ones", "newshape"], ["ones_r"])]
    nodes = nodes[:-2] + [nodes[-1], nodes[-2]]
    m = model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 12])],
              [i("zero", 0), i("one", 1), i("ax0", [0]), i("minus1", [-1]),
               init("zf", np.array(0.0, np.float32)), init("onef", np.array(1.0, np.float32))])
    g = assert_matches(m)
    assert kinds(g) <= {"input", "constant", "reshape", "mul", "add"}


def test_trilu_on_constant_folds_and_on_computed_selects():
    i = init("k", np.array(1, np.int64))
    for upper in (0, 1):
        nodes = [h.make_node("Trilu", ["c", "k"], ["t"], upper=upper),
                 h.make_node("Trilu", ["x", "k"], ["u"], upper=upper),
                 h.make_node("Add", ["t", "u"], ["y"])]
        m = model(nodes, [vi("x", [2, 4, 5])], [vi("y", [2, 4, 5])],
                  [i, init("c", np.full((4, 5), np.inf, np.float32))])
        g = assert_matches(m)
        assert "select" in kinds(g)


# ------------------------------------------------------------------ activations & norms
@pytest.mark.parametrize("op,kw", [("Clip", {}), ("LeakyRelu", {"alpha": 0.2}),
                                   ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                   ("HardSwish", {}), ("Softplus", {})])
def test_activations(op, kw):
    ins = ["x"]
    inits = []
    if op == "Clip":
        ins += ["lo", "hi"]
        inits = [init("lo", np.array(-0.5, np.float32)), init("hi", np.array(0.7, np.float32))]
    m = model([h.make_node(op, ins, ["y"], **kw)], [vi("x", [3, 7])], [vi("y", [3, 7])], inits)
    assert_matches(m)


def test_clip_one_sided():
    m = model([h.make_node("Clip", ["x", "", "hi"], ["y"])], [vi("x", [3, 7])],
              [vi("y", [3, 7])], [init("hi", np.array(0.1, np.float32))])
    assert_matches(m)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    m = model([h.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [vi("x", [3, 7])],
              [vi("y", [3, 7])], opset=20)
    assert_matches(m)


def test_batch_normalization_folds_into_a_multiply_add():
    rng = np.random.default_rng(0)
    c = 6
    stats = [init("s", rng.uniform(0.5, 1.5, c).astype(np.float32)),
             init("b", rng.uniform(-1, 1, c).astype(np.float32)),
             init("m", rng.uniform(-1, 1, c).astype(np.float32)),
             init("v", rng.uniform(0.5, 2, c).astype(np.float32)),
             init("w", rng.uniform(-1, 1, (c, 3, 3, 3)).astype(np.float32))]
    nodes = [h.make_node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["cv", "s", "b", "m", "v"], ["y"], epsilon=1e-3)]
    m = model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, c, 8, 8])], stats)
    g = assert_matches(m, tol=1e-4)
    assert fuse(g).num_dispatches == 1  # the multiply-add is the conv's epilogue


def test_batch_normalization_training_mode_is_refused():
    nodes = [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                         training_mode=1)]
    c = [init(n, np.ones(2, np.float32)) for n in "sbmv"]
    m = model(nodes, [vi("x", [1, 2, 3])], [vi("y", [1, 2, 3]), vi("rm", [2]), vi("rv", [2])],
              c)
    with pytest.raises(UnsupportedError, match="training-mode"):
        from_model(m)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("kw", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "dilations": [2, 2]}])
def test_pools(op, kw):
    kw = dict(kw)
    if op == "MaxPool":
        kw.pop("count_include_pad", None)
    node = h.make_node(op, ["x"], ["y"], **kw)
    ref = ReferenceEvaluator(model([node], [vi("x", [1, 3, 9, 10])], [vi("y", None)], opset=19))
    shape = ref.run(None, {"x": np.zeros((1, 3, 9, 10), np.float32)})[0].shape
    m = model([node], [vi("x", [1, 3, 9, 10])], [vi("y", shape)], opset=19)
    assert_matches(m)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op):
    m = model([h.make_node(op, ["x"], ["y"])], [vi("x", [2, 3, 5, 4])], [vi("y", [2, 3, 1, 1])])
    assert_matches(m)


@pytest.mark.parametrize("op,opset", [("ReduceL2", 13), ("ReduceL2", 18),
                                      ("ReduceSumSquare", 13), ("ReduceSumSquare", 18)])
def test_reduce_l2_and_sum_square(op, opset):
    if opset >= 18:
        m = model([h.make_node(op, ["x", "a"], ["y"], keepdims=0)], [vi("x", [3, 4, 5])],
                  [vi("y", [3, 5])], [init("a", np.array([1], np.int64))], opset)
    else:
        m = model([h.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)], [vi("x", [3, 4, 5])],
                  [vi("y", [3, 5])], opset=opset)
    assert_matches(m, tol=1e-4)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_sum_mean(op):
    m = model([h.make_node(op, ["a", "b", "c"], ["y"])],
              [vi("a", [3, 4]), vi("b", [4]), vi("c", [3, 1])], [vi("y", [3, 4])])
    assert_matches(m)


def test_layer_normalization_optional_outputs():
    nodes = [h.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], axis=1)]
    m = model(nodes, [vi("x", [2, 3, 4])],
              [vi("y", [2, 3, 4]), vi("mean", [2, 1, 1]), vi("inv", [2, 1, 1])],
              [init("g", np.ones((3, 4), np.float32) * 1.5), init("b", np.zeros((3, 4), np.float32))])
    assert_matches(m, tol=1e-4)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ijk->ik", [(2, 3, 4)]),
    ("ik,k->i", [(3, 4), (4,)])])
def test_einsum_matmul_shaped(eq, shapes):
    names = ["a", "b"][:len(shapes)]
    ref = ReferenceEvaluator(model([h.make_node("Einsum", names, ["y"], equation=eq)],
                                   [vi(n, list(s)) for n, s in zip(names, shapes)],
                                   [vi("y", None)]))
    shape = ref.run(None, {n: np.zeros(s, np.float32) for n, s in zip(names, shapes)})[0].shape
    m = model([h.make_node("Einsum", names, ["y"], equation=eq)],
              [vi(n, list(s)) for n, s in zip(names, shapes)], [vi("y", list(shape))])
    assert_matches(m, tol=1e-4)


def test_einsum_with_repeated_letter_is_refused():
    m = model([h.make_node("Einsum", ["a"], ["y"], equation="ii->i")], [vi("a", [3, 3])],
              [vi("y", [3])])
    with pytest.raises(UnsupportedError, match="repeated letters"):
        from_model(m)


# ------------------------------------------------------------------ versions and inputs
def test_newest_opset_is_accepted():
    import onnx.defs
    top = onnx.defs.onnx_opset_version()
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
              opset=top)
    assert_matches(m)


def test_symbolic_dimension_pinned_by_dims():
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 4])],
              [vi("y", ["batch", 4])])
    with pytest.raises(ShapeError, match=r"'batch'.*--dim batch=VALUE"):
        from_model(m)
    g = from_model(m, dims={"batch": 3})
    assert g.op(g.inputs[0]).type.shape == (3, 4)


def test_zero_size_dimension_is_not_called_dynamic():
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [0, 4])], [vi("y", [0, 4])])
    with pytest.raises(ShapeError) as e:
        from_model(m)
    # the empty input is the constant empty array; the empty result is what is refused
    assert "'y' is empty (shape (0, 4))" in str(e.value) and "dynamic" not in str(e.value)


def test_empty_initializer_is_accepted_where_unused_as_a_value():
    """An empty `axes` initializer (ReduceSum with noop_with_empty_axes=0 reduces all)."""
    m = model([h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
              [vi("x", [2, 3])], [vi("y", [])], [init("axes", np.zeros(0, np.int64))])
    assert_matches(m)


def test_unsupported_ops_are_all_listed():
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sinh", ["a"], ["b"]),
             h.make_node("Atan", ["b"], ["c"]), h.make_node("Shape", ["c"], ["s"]),
             h.make_node("ConstantOfShape", ["s"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    with pytest.raises(UnsupportedError, match="Atan, Sinh") as e:
        from_model(m)
    assert "ConstantOfShape" not in str(e.value).split("(supported")[0]


def test_large_initializers_skip_the_serialising_checks_but_still_import():
    """Weights over LARGE_INITIALIZER_BYTES are typed inputs for the checker and shape
    inference (speed), read by numpy_helper at import; a malformed one is one clear error."""
    from compiler.frontends.onnx import LARGE_INITIALIZER_BYTES
    from compiler.ir.models import ModelError
    n = 1 + int((LARGE_INITIALIZER_BYTES / 4) ** 0.5)
    w = np.random.default_rng(0).uniform(-1, 1, (n, n)).astype(np.float32)
    m = model([h.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [2, n])], [vi("y", [2, n])],
              [init("w", w)])
    assert_matches(m, tol=1e-4)
    bad = m.graph.initializer[0]
    bad.raw_data = bad.raw_data[:-4]
    with pytest.raises(ModelError, match="initializer 'w' is malformed"):
        from_model(m)
