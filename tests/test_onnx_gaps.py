"""ONNX forms real exporters emit that wavefuse once refused (issue 12): integer
reductions and ArgMax/ArgMin, 1-D convolution, MaxPool's Indices output. Each is checked
against onnx.reference.ReferenceEvaluator through the numpy reference and both fusion
plans (``assert_matches``), and where it reaches a kernel, through the lowered kernels run
by gpusim (``assert_kernels_match``) -- integers exactly."""
import itertools

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import gpusim
from compiler.frontends.onnx import from_model
from compiler.lower import lower
from compiler.lower.common import memory_image
from compiler.fusion import fuse
from compiler.ir.reference import evaluate
from compiler.schedule import schedule_space
from gpusim.hw import get_arch

from test_onnx import init, vi  # noqa: E402  (the ONNX tests' tensor helpers)
from test_onnx_ops import BOOL, F16, F32, I32, I64, NP, assert_matches, model  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def out_shape(nodes, inputs, inits=(), opset=18, feeds=None):
    """The output shapes onnx's own evaluator gives (to declare them in the model)."""
    outs = [o for n in nodes[-1:] for o in n.output if o]
    ref = ReferenceEvaluator(model(nodes, inputs, [vi(o, None) for o in outs], inits, opset))
    feeds = feeds or {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim],
                                       NP[i.type.tensor_type.elem_type]) for i in inputs}
    return [np.asarray(r).shape for r in ref.run(None, feeds)]


def assert_kernels_match(g, feeds: dict, picks=(0, -1), arch="gfx942"):
    """Every dispatch of both plans, lowered under the first and the last legal schedule
    (the last is the always-lowerable fallback), run by gpusim == the numpy reference."""
    ins = {g.meta["onnx_inputs"][k]: np.reshape(v, g.op(g.meta["onnx_inputs"][k]).type.shape)
           for k, v in feeds.items() if k in g.meta["onnx_inputs"]}
    env = evaluate(g, ins, keep_all=True)
    checked = 0
    for aggressive in (True, False):
        for d in fuse(g, aggressive=aggressive).dispatches:
            legal = [c for c in schedule_space(g, d, get_arch(arch)) if c.legal]
            assert legal, d.name
            for i in picks:
                k = lower(g, d, legal[i].knobs, arch)
                mem = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
                       if b.intent == "in"}
                res = gpusim.simulate(k, arch, inputs=mem)
                for o in d.outputs:
                    got, want = res.outputs[o].reshape(env[o].shape), env[o]
                    if want.dtype.kind in "biu":
                        np.testing.assert_array_equal(got.astype(want.dtype), want,
                                                      err_msg=f"{d.name} {legal[i].knobs}")
                    else:
                        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5,
                                                   err_msg=f"{d.name} {legal[i].knobs}")
                checked += 1
    return checked


# ------------------------------------------------------------------ integer reductions
REDUCE_OPS = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"]


def reduce_model(op, shape, axes, keepdims, dtype, opset=18, noop=0):
    ins, inits = ["x"], []
    if axes is not None:
        if opset >= 18 or op == "ReduceSum":
            ins.append("axes")
            inits.append(init("axes", np.array(axes, np.int64)))
            kw = {}
        else:
            kw = {"axes": axes}
    else:
        kw = {}
    node = h.make_node(op, ins, ["y"], keepdims=keepdims, **kw,
                       **({"noop_with_empty_axes": noop} if noop else {}))
    x = vi("x", list(shape), dtype)
    (ys,) = out_shape([node], [x], inits, opset)
    return model([node], [x], [vi("y", list(ys), dtype)], inits, opset)


def int_feeds(shape, dtype, op, seed):
    rng = np.random.default_rng(seed)
    lo, hi = (-1, 2) if op == "ReduceProd" else (-50, 50)  # products stay inside 32 bits
    return {"x": rng.integers(lo, hi, shape).astype(NP[dtype])}


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [I64, I32])
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([0], 0), ([0, 2], 1), (None, 0)])
def test_integer_reductions(op, dtype, axes, keepdims):
    m = reduce_model(op, (3, 4, 70), axes, keepdims, dtype)
    feeds = int_feeds((3, 4, 70), dtype, op, 0)
    g = assert_matches(m, feeds)
    assert {o.type.dtype for o in g.ops if o.is_reduction} == {"i32"}


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [[-1], [1], None])
def test_integer_reductions_in_gpusim(op, axes):
    """Integer accumulate with the right identity (0, 1, INT_MIN, INT_MAX) in the row
    kernel and the generic fallback; values reach both extremes' sides."""
    m = reduce_model(op, (4, 3, 130), axes, 1, I64)
    feeds = int_feeds((4, 3, 130), I64, op, 1)
    if op in ("ReduceMax", "ReduceMin"):  # all-negative / all-positive rows
        feeds["x"][0] = -feeds["x"][0].__abs__() - 7
        feeds["x"][1] = feeds["x"][1].__abs__() + 7
    g = assert_matches(m, feeds)
    assert assert_kernels_match(g, feeds) >= 4


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_bool_reduce_max_min_opset20(op):
    m = reduce_model(op, (3, 5), [1], 0, BOOL, opset=20)
    feeds = {"x": np.random.default_rng(2).integers(0, 2, (3, 5)).astype(bool)}
    feeds["x"][0] = True
    feeds["x"][1] = False
    assert_matches(m, feeds)


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_min_prod_float(opset):
    for op in ("ReduceMin", "ReduceProd"):
        m = reduce_model(op, (3, 4, 5), [1], 0, F32, opset=opset)
        assert_matches(m, tol=1e-5)


@SETTINGS
@given(op=st.sampled_from(REDUCE_OPS), dtype=st.sampled_from([I64, I32, F32]),
       shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data(),
       keepdims=st.integers(0, 1), seed=st.integers(0, 1000))
def test_reductions_property(op, dtype, shape, data, keepdims, seed):
    rank = len(shape)
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(-rank, rank - 1), min_size=1,
                                                   max_size=rank, unique_by=lambda a: a % rank)))
    m = reduce_model(op, shape, axes, keepdims, dtype)
    feeds = (int_feeds(shape, dtype, op, seed) if dtype != F32 else
             {"x": np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)})
    assert_matches(m, feeds, tol=1e-4)


# ------------------------------------------------------------------ ArgMax / ArgMin
def arg_model(op, shape, dtype, **kw):
    node = h.make_node(op, ["x"], ["y"], **kw)
    x = vi("x", list(shape), dtype)
    (ys,) = out_shape([node], [x])
    return model([node], [x], [vi("y", list(ys), I64)])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [F32, I64, F16])
@pytest.mark.parametrize("kw", [{}, {"axis": -1, "keepdims": 0}, {"axis": 1},
                                {"axis": -1, "select_last_index": 1},
                                {"axis": 0, "keepdims": 0, "select_last_index": 1}])
def test_arg_reductions_with_ties(op, dtype, kw):
    """Small integer-valued data, so rows hold ties: the first (or last) position wins."""
    m = arg_model(op, (3, 4, 6), dtype, **kw)
    x = np.random.default_rng(3).integers(-2, 3, (3, 4, 6)).astype(NP[dtype])
    assert_matches(m, {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("kw", [{"axis": -1}, {"axis": 1, "select_last_index": 1}])
def test_arg_reductions_in_gpusim(op, kw):
    m = arg_model(op, (5, 3, 100), F32, **kw)
    x = np.random.default_rng(4).integers(-3, 4, (5, 3, 100)).astype(np.float32)
    g = assert_matches(m, {"x": x})
    assert assert_kernels_match(g, {"x": x}) >= 2


@SETTINGS
@given(op=st.sampled_from(["ArgMax", "ArgMin"]), dtype=st.sampled_from([F32, I64, I32]),
       shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data(),
       seed=st.integers(0, 1000), spread=st.integers(1, 100))
def test_arg_reductions_property(op, dtype, shape, data, seed, spread):
    rank = len(shape)
    kw = {"axis": data.draw(st.integers(-rank, rank - 1)),
          "keepdims": data.draw(st.integers(0, 1)),
          "select_last_index": data.draw(st.integers(0, 1))}
    m = arg_model(op, shape, dtype, **kw)
    x = np.random.default_rng(seed).integers(-spread, spread + 1, shape).astype(NP[dtype])
    assert_matches(m, {"x": x})


# ------------------------------------------------------------------ 1-D convolution
def conv1d_model(n, c, length, o, k, bias=True, relu=True, filter_input=False, **kw):
    rng = np.random.default_rng(5)
    g = kw.get("group", 1)
    ins = ["x", "w"] + (["b"] if bias else [])
    nodes = [h.make_node("Conv", ins, ["c" if relu else "y"], **kw)]
    if relu:
        nodes.append(h.make_node("Relu", ["c"], ["y"]))
    inputs = [vi("x", [n, c, length])]
    inits = [init("b", rng.uniform(-1, 1, o).astype(np.float32))] if bias else []
    w = rng.uniform(-1, 1, (o, c // g, k)).astype(np.float32)
    feeds = {"x": rng.uniform(-1, 1, (n, c, length)).astype(np.float32)}
    if filter_input:
        inputs.append(vi("w", list(w.shape)))
        feeds["w"] = w
    else:
        inits.append(init("w", w))
    (ys,) = out_shape(nodes, inputs, inits, feeds=feeds)
    return model(nodes, inputs, [vi("y", list(ys))], inits), feeds


@pytest.mark.parametrize("kw", [
    {}, {"strides": [2], "pads": [1, 2]}, {"dilations": [3], "pads": [2, 2]},
    {"group": 4}, {"group": 8, "strides": [3]}, {"auto_pad": "SAME_UPPER", "strides": [2]},
    {"auto_pad": "SAME_LOWER"}, {"auto_pad": "VALID", "kernel_shape": [3]}])
def test_conv1d(kw):
    m, feeds = conv1d_model(2, 8, 33, 16, 3, **kw)
    g = assert_matches(m, feeds, tol=1e-4)
    assert [o.kind for o in g.ops].count("conv2d") == 1
    # the unit-height views fuse into the convolution's dispatch with its epilogue
    assert len(fuse(g).dispatches) == 1


@pytest.mark.parametrize("filter_input,bias", [(False, True), (True, False)])
def test_conv1d_in_gpusim(filter_input, bias):
    """Constant and computed filters, lowered (first legal schedule and the fallback) and
    run by gpusim against numpy."""
    m, feeds = conv1d_model(1, 16, 40, 32, 5, bias=bias, filter_input=filter_input,
                            strides=[2], pads=[2, 2])
    g = assert_matches(m, feeds, tol=1e-4)
    assert assert_kernels_match(g, feeds) >= 2


@SETTINGS
@given(c_per=st.integers(1, 4), groups=st.sampled_from([1, 2, 3]), o_per=st.integers(1, 4),
       length=st.integers(1, 24), k=st.integers(1, 5), stride=st.integers(1, 3),
       dil=st.integers(1, 3), pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
       bias=st.booleans())
def test_conv1d_property(c_per, groups, o_per, length, k, stride, dil, pads, bias):
    if length + sum(pads) < dil * (k - 1) + 1:
        return  # the window does not fit: ONNX shape inference refuses it too
    m, feeds = conv1d_model(2, c_per * groups, length, o_per * groups, k, bias=bias,
                            relu=False, group=groups, strides=[stride], dilations=[dil],
                            pads=list(pads))
    assert_matches(m, feeds, tol=1e-4)


def test_conv3d_is_refused_naming_the_supported_ranks():
    from compiler.ir.graph import UnsupportedError
    w = np.zeros((2, 1, 1, 1, 1), np.float32)
    m = model([h.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 1, 2, 2, 2])],
              [vi("y", [1, 2, 2, 2, 2])], [init("w", w)])
    with pytest.raises(UnsupportedError, match="only 1-D and 2-D convolutions"):
        from_model(m)


# ------------------------------------------------------------------ MaxPool Indices
def windows(shape, kernel, strides, dil, pads_begin, outs):
    """Per output position (spatial index tuple), the window's real input positions in
    window order (padding left out)."""
    out = {}
    for o in itertools.product(*(range(n) for n in outs)):
        taps = itertools.product(*(range(k) for k in kernel))
        pos = [tuple(oi * s + ti * d - p for oi, s, ti, d, p in
                     zip(o, strides, t, dil, pads_begin)) for t in taps]
        out[o] = [q for q in pos if all(0 <= qi < n for qi, n in zip(q, shape))]
    return out


def check_indices_by_definition(x, y, idx, kernel, strides, dil, pads_begin, storage=0):
    """ONNX's definition of MaxPool's Indices: the first maximum of each window, as a
    flat index over (N, C, *spatial) (the spatial part column-major with storage_order
    1); the pooled value is that element."""
    n, c, *spatial = x.shape
    per_channel = int(np.prod(spatial))
    wins = windows(spatial, kernel, strides, dil, pads_begin, y.shape[2:])
    for b in range(n):
        for ch in range(c):
            for o, win in wins.items():
                vals = [x[(b, ch) + q] for q in win]
                first = win[int(np.argmax(vals))]
                flat = (np.ravel_multi_index(first, spatial) if not storage else
                        np.ravel_multi_index(first[::-1], spatial[::-1]))
                assert idx[(b, ch) + o] == (b * c + ch) * per_channel + flat, (b, ch, o)
                assert y[(b, ch) + o] == max(vals)


def run_ours(m, feeds):
    g = from_model(m)
    got = evaluate(g, {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()})
    return [got[g.meta["onnx_outputs"][o.name]] for o in m.graph.output]


def maxpool_model(shape, **kw):
    node = h.make_node("MaxPool", ["x"], ["y", "i"], **kw)
    x = vi("x", list(shape))
    ref = ReferenceEvaluator(model([node], [x], [vi("y", None), vi("i", None)], opset=19))
    y, i = ref.run(None, {"x": np.zeros(shape, np.float32)})
    return model([node], [x], [vi("y", list(y.shape)), vi("i", list(i.shape), I64)], opset=19)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("kw", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 2]}])
def test_maxpool_indices(kw, storage_order):
    m = maxpool_model((2, 3, 9, 10), storage_order=storage_order, **kw)
    # integer-valued data: windows hold ties, and the first maximum must win
    x = np.random.default_rng(6).integers(-3, 4, (2, 3, 9, 10)).astype(np.float32)
    g = assert_matches(m, {"x": x})
    assert g.op(g.meta["onnx_outputs"]["i"]).type.dtype == "i32"


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_maxpool_indices_with_auto_pad_point_at_their_maxima(auto_pad):
    """onnx 1.23's ReferenceEvaluator gets auto_pad SAME wrong for MaxPool (on a 3x4
    arange, SAME_UPPER: value 5 at index 3; SAME_LOWER with stride 2 a wrong shape), so
    these check the definition instead: each index, flattened row-major over the unpadded
    input, holds the pooled value and is the first maximum of its output position's
    window (so the value is the window's maximum)."""
    shape = (2, 3, 7, 8)
    node = h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1],
                       auto_pad=auto_pad)
    m = model([node], [vi("x", list(shape))], [vi("y", [2, 3, 4, 8]),
                                               vi("i", [2, 3, 4, 8], I64)], opset=19)
    x = np.random.default_rng(9).integers(-3, 4, shape).astype(np.float32)
    y, idx = run_ours(m, {"x": x})
    check_indices_by_definition(x, y, idx, (3, 2), (2, 1), (1, 1),
                                (_same_begin(7, 3, 2, auto_pad), _same_begin(8, 2, 1, auto_pad)))


def _same_begin(size, k, stride, auto_pad):
    """Padding before the input under auto_pad SAME (the extra one goes after for UPPER)."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + k - size)
    return total // 2 if auto_pad == "SAME_UPPER" else total - total // 2


@pytest.mark.parametrize("shape,kw", [((2, 3, 11), {"kernel_shape": [3], "strides": [2]}),
                                      ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3],
                                                         "strides": [1, 2, 2]})])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices_1d_3d(shape, kw, storage_order):
    m = maxpool_model(shape, storage_order=storage_order, **kw)
    x = np.random.default_rng(7).uniform(-1, 1, shape).astype(np.float32)
    assert_matches(m, {"x": x})


def test_maxpool_indices_in_gpusim():
    m = maxpool_model((1, 4, 12, 12), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = np.random.default_rng(8).integers(-3, 4, (1, 4, 12, 12)).astype(np.float32)
    g = assert_matches(m, {"x": x})
    # the indices join the values' kernel: as many dispatches as MaxPool without them
    disp = fuse(g).dispatches
    assert len(disp) == 2 and any({"y", "i"} <= set(d.outputs) for d in disp)
    assert assert_kernels_match(g, {"x": x}) >= 2


@SETTINGS
@given(hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       d=st.tuples(st.integers(1, 2), st.integers(1, 2)), pad=st.integers(0, 1),
       ceil=st.integers(0, 1), storage_order=st.integers(0, 1), seed=st.integers(0, 100))
def test_maxpool_indices_property(hw, k, s, d, pad, ceil, storage_order, seed):
    """Against ReferenceEvaluator where its strided MaxPool runs; onnx 1.23 computes
    unit-stride, unit-dilation pools in another routine whose Indices leave out the
    channel offset and storage_order (x of shape (1, 2, 2, 2), kernel 1x1: channel 1
    reports 0..3), so those are checked against the definition."""
    if any(pad >= ki for ki in k) or any(n + 2 * pad < di * (ki - 1) + 1
                                         for n, ki, di in zip(hw, k, d)):
        return  # ONNX requires pads smaller than the kernel and a window that fits
    shape = (1, 2) + hw
    m = maxpool_model(shape, kernel_shape=list(k), strides=list(s), dilations=list(d),
                      pads=[pad] * 4, ceil_mode=ceil, storage_order=storage_order)
    inferred = onnx.shape_inference.infer_shapes(model(
        m.graph.node, m.graph.input, [vi("y", None), vi("i", None, I64)], opset=19))
    if [dim.dim_value for dim in inferred.graph.output[0].type.tensor_type.shape.dim] != [
            dim.dim_value for dim in m.graph.output[0].type.tensor_type.shape.dim]:
        return  # ceil_mode: onnx's shape inference keeps a window starting past the end
        # (H=2, k=1, s=2 gives 2), its evaluator and wavefuse drop it (1): no model is valid
    outs = [o.type.tensor_type.shape.dim for o in m.graph.output][0]
    outs = [dim.dim_value for dim in outs][2:]
    if not all(windows(hw, k, s, d, (pad, pad), outs).values()):
        return  # a window of padding only: ONNX leaves its value undefined (the reference 0)
    x = np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float32)
    if s == (1, 1) and d == (1, 1):
        y, idx = run_ours(m, {"x": x})
        check_indices_by_definition(x, y, idx, k, s, d, (pad, pad), storage_order)
    else:
        assert_matches(m, {"x": x})


# ------------------------------------------------------------------ zero-size inputs
def test_empty_axes_input_is_the_constant_empty_array():
    """A zero-size graph input can hold only the empty array: an empty `axes` input
    reduces every axis (or none with noop_with_empty_axes), as an empty initializer."""
    for noop in (0, 1):
        node = h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1,
                           noop_with_empty_axes=noop)
        shape = [3, 4] if noop else [1, 1]
        m = model([node], [vi("x", [3, 4]), vi("axes", [0], I64)], [vi("y", shape)])
        feeds = {"x": np.random.default_rng(10).uniform(-1, 1, (3, 4)).astype(np.float32),
                 "axes": np.zeros(0, np.int64)}
        g = assert_matches(m, feeds)
        assert list(g.meta["onnx_inputs"]) == ["x"]


def test_castlike_with_an_empty_like_input():
    m = model([h.make_node("CastLike", ["x", "like"], ["y"])],
              [vi("x", [2, 3]), vi("like", [0], F16)], [vi("y", [2, 3], F16)])
    assert_matches(m, {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                       "like": np.zeros(0, np.float16)})


# ------------------------------------------------------------------ op versions
def test_every_newer_op_version_is_accounted_for():
    """Each version (opset 14 to the newest the installed onnx defines) of a supported op
    is listed with its semantic change, or as only adding element types."""
    import onnx.defs
    from compiler.frontends.onnx import OP_VERSIONS, SUPPORTED_OPS, TYPES_ONLY
    top = onnx.defs.onnx_opset_version()
    assert not set(OP_VERSIONS) & TYPES_ONLY
    missing = sorted({(s.name, s.since_version) for s in onnx.defs.get_all_schemas_with_history()
                      if s.domain == "" and s.name in SUPPORTED_OPS
                      and 14 <= s.since_version <= top} - set(OP_VERSIONS) - TYPES_ONLY)
    assert not missing, f"check these op versions' changes and list them: {missing}"


def test_inputs_pinned_to_values_fold_like_initializers():
    """from_model(values=): a run-time `axes` / target-shape input pinned to an array
    folds; a name that is no input, or a wrongly shaped value, is one clear error."""
    from compiler.ir.graph import ModelError, UnsupportedError
    nodes = [h.make_node("ReduceMax", ["x", "axes"], ["r"], keepdims=1),
             h.make_node("Reshape", ["r", "shape"], ["y"])]
    m = model(nodes, [vi("x", [3, 4, 5]), vi("axes", [1], I64), vi("shape", [2], I64)],
              [vi("y", [3, 5])])
    with pytest.raises(UnsupportedError, match="'axes' is computed"):
        from_model(m)
    pins = {"axes": np.array([1], np.int64), "shape": np.array([3, 5], np.int64)}
    g = from_model(m, values=pins)
    assert list(g.meta["onnx_inputs"]) == ["x"]
    x = np.random.default_rng(11).uniform(-1, 1, (3, 4, 5)).astype(np.float32)
    got = evaluate(g, {g.meta["onnx_inputs"]["x"]: x})[g.meta["onnx_outputs"]["y"]]
    (want,) = ReferenceEvaluator(m).run(None, {"x": x, **pins})
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ModelError, match="no graph input of that name"):
        from_model(m, values={"nope": np.zeros(1)})
    with pytest.raises(ModelError, match="pinned for input 'shape' has shape"):
        from_model(m, values={**pins, "shape": np.array([3, 5, 1], np.int64)})
    with pytest.raises(ModelError, match="pinned for input 'axes' has dtype int32"):
        from_model(m, values={**pins, "axes": np.array([1], np.int32)})


def test_a_folded_output_of_an_unsupported_dtype_is_one_clear_error():
    """A graph output that folds to a constant of a refused dtype (double here) names
    the tensor (it used to crash while naming a node it does not have)."""
    from compiler.ir.graph import UnsupportedError
    from onnx import TensorProto
    m = model([h.make_node("Cast", ["c"], ["y"], to=TensorProto.DOUBLE)], [],
              [vi("y", [2], TensorProto.DOUBLE)], [init("c", np.ones(2, np.float32))])
    with pytest.raises(UnsupportedError, match="tensor 'y' has dtype float64"):
        from_model(m)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin"])
def test_reduction_over_an_empty_set_folds(op):
    """Data with a zero-size dimension is the constant empty array, so a reduction over
    that dimension folds at import to the reduction's identity (0, 1, -inf/+inf or the
    integer extremes, as onnx's evaluator gives), next to a computed input."""
    nodes = [h.make_node(op, ["data", "axes"], ["r"], keepdims=1),
             h.make_node("Add", ["r", "x"], ["y"])]
    m = model(nodes, [vi("data", [2, 0, 4]), vi("x", [2, 1, 4])], [vi("y", [2, 1, 4])],
              [init("axes", np.array([1], np.int64))])
    x = np.random.default_rng(12).uniform(-1, 1, (2, 1, 4)).astype(np.float32)
    g = assert_matches(m, {"data": np.zeros((2, 0, 4), np.float32), "x": x})
    assert list(g.meta["onnx_inputs"]) == ["x"]


# ------------------------------------------------------------------ Pad modes
@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads,axes", [([1, 2, 3, 2, 1, 0], None), ([2, 3], [-1]),
                                       ([0, 4, 2, 1, 2, 0], None)])
def test_pad_modes(mode, pads, axes):
    ins, inits = ["x", "p"], [init("p", np.array(pads, np.int64))]
    if axes is not None:
        ins += ["", "a"]
        inits.append(init("a", np.array(axes, np.int64)))
    node = h.make_node("Pad", ins, ["y"], mode=mode)
    x = vi("x", [2, 4, 5])
    (ys,) = out_shape([node], [x], inits)
    m = model([node], [x], [vi("y", list(ys))], inits)
    g = assert_matches(m)
    assert "gather" in {o.kind for o in g.ops}


def test_negative_pads_with_a_non_constant_mode_are_refused():
    from compiler.ir.graph import UnsupportedError
    m = model([h.make_node("Pad", ["x", "p"], ["y"], mode="edge")], [vi("x", [2, 4])],
              [vi("y", [2, 4])], [init("p", np.array([0, -1, 0, 1], np.int64))])
    with pytest.raises(UnsupportedError, match="negative pads with mode 'edge'.*Slice"):
        from_model(m)


def test_reflect_pad_then_conv1d_in_gpusim():
    """Reflect padding (audio models pad this way before a 1-D conv) as constant-index
    gathers: run by gpusim under every plan."""
    rng = np.random.default_rng(13)
    nodes = [h.make_node("Pad", ["x", "p"], ["xp"], mode="reflect"),
             h.make_node("Conv", ["xp", "w"], ["y"])]
    inits = [init("p", np.array([0, 0, 3, 0, 0, 3], np.int64)),
             init("w", rng.uniform(-1, 1, (8, 4, 7)).astype(np.float32))]
    m = model(nodes, [vi("x", [1, 4, 50])], [vi("y", [1, 8, 50])], inits)
    feeds = {"x": rng.uniform(-1, 1, (1, 4, 50)).astype(np.float32)}
    g = assert_matches(m, feeds, tol=1e-4)
    assert assert_kernels_match(g, feeds) >= 2


# ------------------------------------------------------------------ end to end
def test_integer_row_reductions_verify_end_to_end(tmp_path, capsys):
    """Sequence lengths from a padding mask, ArgMax and ReduceMax of int64 token ids:
    one row dispatch of three sibling integer reductions (aggressive), tuned, simulated
    and checked by `wavefuse verify` against numpy and onnx's evaluator."""
    import json

    from compiler import cli
    from onnx import TensorProto
    nodes = [h.make_node("Equal", ["ids", "pad"], ["m"]), h.make_node("Not", ["m"], ["nm"]),
             h.make_node("Cast", ["nm"], ["mi"], to=TensorProto.INT64),
             h.make_node("ReduceSum", ["mi", "ax"], ["len"], keepdims=0),
             h.make_node("ArgMax", ["ids"], ["am"], axis=1, keepdims=0),
             h.make_node("ReduceMax", ["ids", "ax"], ["mx"], keepdims=0)]
    m = model(nodes, [vi("ids", [4, 128], I64)],
              [vi("len", [4], I64), vi("am", [4], I64), vi("mx", [4], I64)],
              [init("pad", np.array(0, np.int64)), init("ax", np.array([1], np.int64))])
    path = tmp_path / "int_rows.onnx"
    onnx.save(m, str(path))
    code = cli.main(["verify", str(path), "--budget", "2", "--no-cache", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out
    fused = next(c for c in out["checks"] if c["name"] == "fused plan")
    assert "aggressive: 1 dispatch" in fused["detail"]
    assert next(c for c in out["checks"] if c["name"] == "simulated kernels")["status"] == "pass"
