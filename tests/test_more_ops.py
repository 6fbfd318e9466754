"""Sign, IsNaN, IsInf, Mod and GatherElements end to end (issue 28: onnx's backend node
tests and real exports). The importer composes each from graph ops that exist (compares,
selects, integer div/mul/sub, the data-dependent gather): exact compositions, so no new
IR op, engine branch or error rule. Checked differentially at each layer: our import vs
onnx's ReferenceEvaluator, the simulated fused kernels vs the reference, the JIT engine
vs the pure-Python engine, and the HIP export vs hipcc."""
import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import gpusim
from compiler.frontends.onnx import from_model
from compiler.fusion import fuse
from compiler.ir.graph import Graph, ShapeError, UnsupportedError
from compiler.ir.reference import evaluate
from compiler.schedule import schedule_space
from gpusim.hw import get_arch

F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL
I64, I32, I8, U8 = TensorProto.INT64, TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8

#: signed zeros, infinities, NaN, the extremes and small values of both signs
SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1e-30, -1e-30, 1e-45, -1e-45, 3.4e38,
                    -3.4e38, np.inf, -np.inf, np.nan, -np.nan], np.float32)


# the model builders and the import-vs-onnx comparison of the Sin/Cos/Floor/Ceil tests
from test_trig_ops import model, ours_and_theirs, vi  # noqa: E402


def same(got, want):
    """Equal values (NaN where NaN, zeros of the same sign), the integer dtypes compared
    as values (int64 is held in int32)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    else:
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))


# ------------------------------------------------------------------ (a) ONNX import
@pytest.mark.parametrize("dtype,opset", [(F32, 13), (F32, 20), (F16, 20)])
def test_sign_isnan_isinf_import_agree_with_onnx_reference(dtype, opset):
    """IsInf takes float16 from opset 20 on (IsInf-20)."""
    npt = np.float32 if dtype == F32 else np.float16
    with np.errstate(over="ignore"):
        x = np.concatenate([SPECIAL, np.random.default_rng(0).uniform(-9, 9, 16)]
                           ).astype(npt).reshape(4, 8)
    nodes = [h.make_node("Sign", ["x"], ["s"]), h.make_node("IsNaN", ["x"], ["n"])]
    outs = [vi("s", [4, 8], dtype), vi("n", [4, 8], BOOL)]
    for i, (p, q) in enumerate([(1, 1), (1, 0), (0, 1), (0, 0)]):
        nodes.append(h.make_node("IsInf", ["x"], [f"i{i}"], detect_positive=p,
                                 detect_negative=q))
        outs.append(vi(f"i{i}", [4, 8], BOOL))
    g, ours, theirs = ours_and_theirs(model(nodes, [vi("x", [4, 8], dtype)], outs,
                                            opset=opset), {"x": x})
    for got, want in zip(ours, theirs):
        same(got, want)
    np.testing.assert_array_equal(ours[2], np.isinf(x))  # f16: +-3.4e38 is +-inf there
    np.testing.assert_array_equal(ours[3], np.isposinf(x))
    np.testing.assert_array_equal(ours[4], np.isneginf(x))
    assert ours[3].any() and ours[4].any() and not ours[5].any()
    assert {op.kind for op in g.ops} <= {"input", "constant", "eq", "lt", "gt", "not", "or", "sub",
                                        "select"}


@pytest.mark.parametrize("dtype,npt", [(I64, np.int64), (I32, np.int32), (I8, np.int8)])
def test_integer_sign_import(dtype, npt):
    x = np.array([-128 if npt == np.int8 else -2 ** 31, -5, -1, 0, 1, 7, 127], npt)
    m = model([h.make_node("Sign", ["x"], ["y"])], [vi("x", [7], dtype)],
              [vi("y", [7], dtype)])
    _, [got], [want] = ours_and_theirs(m, {"x": x})
    same(got, want)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype,npt", [(I64, np.int64), (I32, np.int32), (I8, np.int8),
                                       (U8, np.uint8)])
def test_integer_mod_import_agrees_with_onnx_reference(dtype, npt, fmod):
    """Every sign pair, divisors of 1, equal magnitudes and a zero divisor: onnx's
    evaluator (np.mod / np.fmod) gives 0 for a zero divisor and so do we."""
    lo = 0 if npt == np.uint8 else -9
    a = np.arange(lo, 10).astype(npt).reshape(-1, 1)
    b = np.array([v for v in (-4, -3, -1, 0, 1, 2, 5, 9) if v >= lo], npt)
    m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              [vi("a", list(a.shape), dtype), vi("b", list(b.shape), dtype)],
              [vi("y", [a.shape[0], b.shape[0]], dtype)])
    with np.errstate(divide="ignore"):
        g, [got], [want] = ours_and_theirs(m, {"a": a, "b": b})
    same(got, want)
    assert (want[:, list(b).index(0)] == 0).all()
    if fmod == 0 and lo < 0:  # the sign of the divisor, not the dividend's
        assert got[0, 0] == -1 and got[0, -1] == 0 and got[1, -2] == 2


def test_integer_mod_of_large_values():
    """int32's extremes, INT_MIN mod -1 included (INT_MIN / -1 overflows a C division:
    the rule never divides by -1)."""
    a = np.array([2 ** 31 - 1, -2 ** 31 + 1, 123456789, -987654321, -2 ** 31, -2 ** 31],
                 np.int32)
    b = np.array([7, -2 ** 30, -10, 2 ** 31 - 1, -1, 3], np.int32)
    for fmod in (0, 1):
        m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                  [vi("a", [6], I32), vi("b", [6], I32)], [vi("y", [6], I32)])
        _, [got], [want] = ours_and_theirs(m, {"a": a, "b": b})
        same(got, want)


@pytest.mark.parametrize("fmod", [1, 0])
@pytest.mark.parametrize("dtype,npt", [(F32, np.float32), (F16, np.float16)])
def test_float_mod_import_agrees_with_onnx_reference(dtype, npt, fmod):
    """fmod=1 on floats is the IR's fmod (C's fmodf, exact); fmod=0 (opset 28) is
    numpy's np.mod built on it. Bit for bit with onnx's evaluator, signed zeros, zero
    and infinite divisors, NaN included."""
    with np.errstate(over="ignore"):
        a = np.r_[SPECIAL, 7.25, -7.25, 1e30, 65504.0, 3.0].astype(npt).reshape(-1, 1)
        b = np.array([2.0, -2.0, 0.0, -0.0, np.inf, -np.inf, 1e-3, 3.25, -0.75, np.nan],
                     npt)
    m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              [vi("a", list(a.shape), dtype), vi("b", [10], dtype)],
              [vi("y", [a.shape[0], 10], dtype)], opset=28)
    g, [got], [want] = ours_and_theirs(m, {"a": a, "b": b})
    same(got, want)
    kinds = [op.kind for op in g.ops if op.kind not in ("input", "constant")]
    assert kinds == ["fmod"] if fmod else "fmod" in kinds


def test_mod_with_a_bad_fmod_is_one_clear_error():
    from compiler.ir.graph import ModelError
    m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=2)],
              [vi("a", [4], I32), vi("b", [4], I32)], [vi("y", [4], I32)])
    with pytest.raises(ModelError, match=r"fmod is 2; ONNX allows 0 or 1"):
        from_model(m)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("static", [False, True])
def test_gather_elements_import(axis, static):
    """Indices along each axis, negative ones included, as a run-time input or an
    initializer: onnx's evaluator (which needs the indices' shape equal to the data's
    off the axis, and a non-negative axis) or np.take_along_axis where it cannot."""
    rng = np.random.default_rng(axis + 3 + 10 * static)
    d = rng.standard_normal((3, 5, 4)).astype(np.float32)
    ishape = list(d.shape)
    ishape[axis] = 6
    n = d.shape[axis]
    idx = rng.integers(-n, n, ishape).astype(np.int64)
    idx.flat[:2] = [-n, n - 1]
    inputs = [vi("d", list(d.shape))] + ([] if static else [vi("i", ishape, I64)])
    inits = [numpy_helper.from_array(idx, "i")] if static else []
    m = model([h.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)], inputs,
              [vi("y", ishape)], inits)
    feeds = {"d": d} if static else {"d": d, "i": idx}
    g = from_model(m)
    got = evaluate(g, {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()})[
        g.meta["onnx_outputs"]["y"]]
    want = np.take_along_axis(d, np.where(idx < 0, idx + n, idx), axis=axis)
    np.testing.assert_array_equal(got, want)
    if axis >= 0:
        np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(["y"], feeds)[0])
    assert "gather" in {op.kind for op in g.ops}
    if not static:
        assert g.meta["index_bounds"][g.meta["onnx_inputs"]["i"]] == n


def test_gather_elements_window_of_smaller_indices():
    """Indices smaller than the data off the axis (BERT's position-id window): onnx's
    evaluator refuses this shape, np.take_along_axis on the window is the reference."""
    d = np.arange(2 * 7 * 5, dtype=np.int32).reshape(2, 7, 5)
    idx = np.array([[[4, -1, 0], [2, 3, -5]]], np.int64)  # (1, 2, 3), axis 2
    m = model([h.make_node("GatherElements", ["d", "i"], ["y"], axis=2)],
              [vi("d", [2, 7, 5], I32), vi("i", [1, 2, 3], I64)], [vi("y", [1, 2, 3], I32)])
    g = from_model(m)
    got = evaluate(g, {g.meta["onnx_inputs"]["d"]: d, g.meta["onnx_inputs"]["i"]: idx})[
        g.meta["onnx_outputs"]["y"]]
    want = np.take_along_axis(d[:1, :2, :], np.where(idx < 0, idx + 5, idx), axis=2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ishape,idx,match", [
    ([3, 4], None, "one rank"),
    ([2, 9, 4], None, "reach past"),
    ([2, 5, 4], 5, r"outside \[-3, 3\)"),
])
def test_gather_elements_bad_input_is_one_clear_error(ishape, idx, match):
    inits = []
    inputs = [vi("d", [3, 5, 4])]
    if idx is None:
        inputs.append(vi("i", ishape, I64))
    else:
        arr = np.zeros(ishape, np.int64)
        arr.flat[0] = idx
        inits.append(numpy_helper.from_array(arr, "i"))
    m = model([h.make_node("GatherElements", ["d", "i"], ["y"], axis=0)], inputs,
              [vi("y", ishape)], inits)
    with pytest.raises(ShapeError, match=match):
        from_model(m)


# ------------------------------- (b) fused kernels vs the reference, both engines
from test_trig_ops import _run_dispatches  # noqa: E402  (fused plan run in gpusim)


def _kernels_equal_reference(m, feeds, pick, arch):
    """The imported model's fused kernels, on a legal schedule picked by ``pick``, on
    both engines: bit for bit the same, and equal to onnx's evaluator exactly (every op
    here is exact)."""
    g = from_model(m)
    ins = {g.meta["onnx_inputs"][k]: (v.astype(np.int32) if v.dtype == np.int64 else v)
           for k, v in feeds.items()}

    def knobs(d):
        legal = [p for p in schedule_space(g, d, get_arch(arch)) if p.legal and not p.opt_in]
        return legal[pick % len(legal)].knobs
    jit = _run_dispatches(g, ins, arch, knobs, jit=True)
    py = _run_dispatches(g, ins, arch, knobs, jit=False)
    names = [o.name for o in m.graph.output]
    with np.errstate(all="ignore"):
        theirs = ReferenceEvaluator(m).run(names, feeds)
    for name, want in zip(names, theirs):
        out = g.meta["onnx_outputs"][name]
        assert np.array_equal(jit[out], py[out], equal_nan=jit[out].dtype.kind == "f"), name
        got = jit[out]
        if want.dtype == np.bool_:
            got = got.astype(np.bool_)
        same(got, want)
    return g


def sign_inf_nan_model(shape, dtype=F32):
    """y = Sign(x) * |x|-free clamp: s = Sign(x); c = Where(IsNaN(x) or IsInf(x), 0, x)
    (the clean-up an exporter writes before a loss); p = IsInf(x, negative only)."""
    z = numpy_helper.from_array(np.zeros(1, np.float32 if dtype == F32 else np.float16),
                                "zero")
    nodes = [h.make_node("Sign", ["x"], ["s"]), h.make_node("IsNaN", ["x"], ["n"]),
             h.make_node("IsInf", ["x"], ["i"]),
             h.make_node("Or", ["n", "i"], ["bad"]),
             h.make_node("Where", ["bad", "zero", "x"], ["c"]),
             h.make_node("IsInf", ["x"], ["p"], detect_positive=0),
             h.make_node("Cast", ["p"], ["pf"], to=dtype),
             h.make_node("Add", ["c", "pf"], ["cp"])]
    return model(nodes, [vi("x", list(shape), dtype)],
                 [vi("s", list(shape), dtype), vi("cp", list(shape), dtype)], [z], opset=20)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=24),
       f16=st.booleans(), pick=st.integers(0, 1000),
       arch=st.sampled_from(["gfx942", "gfx90a"]), data=st.data())
def test_sign_isnan_isinf_kernels_equal_the_reference(shape, f16, pick, arch, data):
    npt = np.float16 if f16 else np.float32
    x = data.draw(hnp.arrays(npt, shape, elements=st.floats(
        allow_nan=True, allow_infinity=True, width=16 if f16 else 32)))
    _kernels_equal_reference(sign_inf_nan_model(shape, F16 if f16 else F32), {"x": x},
                             pick, arch)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=24),
       fmod=st.sampled_from([0, 1]), pick=st.integers(0, 1000),
       arch=st.sampled_from(["gfx942", "gfx90a"]), data=st.data())
def test_integer_mod_kernels_equal_the_reference(shape, fmod, pick, arch, data):
    """Mod of int64 tensors (held in i32) with zero and -1 divisors among them (the
    simulator traps on an integer division by zero: hypothesis found the first version
    of the rule dividing by the zero it then discarded)."""
    ints = st.integers(-2 ** 31, 2 ** 31 - 1) | st.integers(-12, 12)
    a = data.draw(hnp.arrays(np.int64, shape, elements=ints))
    b = data.draw(hnp.arrays(np.int64, shape, elements=ints))
    m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              [vi("a", list(shape), I64), vi("b", list(shape), I64)],
              [vi("y", list(shape), I64)])
    with np.errstate(divide="ignore"):
        _kernels_equal_reference(m, {"a": a, "b": b}, pick, arch)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=24),
       f16=st.booleans(), fmod=st.sampled_from([0, 1]), pick=st.integers(0, 1000),
       arch=st.sampled_from(["gfx942", "gfx90a"]), data=st.data())
def test_float_mod_kernels_equal_the_reference(shape, f16, fmod, pick, arch, data):
    """Float Mod on values hypothesis draws, infinities, NaN and zero divisors among
    them: the kernel's fmodf bit for bit with np.fmod, and fmod=0's composition with
    np.mod, on both engines."""
    npt = np.float16 if f16 else np.float32
    dtype = F16 if f16 else F32
    floats = st.floats(allow_nan=True, allow_infinity=True, width=16 if f16 else 32)
    a = data.draw(hnp.arrays(npt, shape, elements=floats))
    b = data.draw(hnp.arrays(npt, shape, elements=floats | st.sampled_from([0.0, 0.5, -3.0])))
    m = model([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              [vi("a", list(shape), dtype), vi("b", list(shape), dtype)],
              [vi("y", list(shape), dtype)], opset=28)
    _kernels_equal_reference(m, {"a": a, "b": b}, pick, arch)


def test_fmod_error_bound_covers_the_jump_at_a_multiple_of_the_divisor():
    """fmod(x * 3, 1.5): the product carries its rounding error, and at x = 0.5 (x * 3 =
    1.5, a multiple of the divisor) an honest evaluation may land on either side of the
    jump (0 or just under 1.5): errorbound's fmod rule allows that there, and away from
    the jump (x = 0.25: 0.75) allows no more than the rounding."""
    from compiler.cli.commands import verify
    from compiler.ir import errorbound
    g = Graph("fmod_jump")
    x = g.input("x", (2,), "f16")
    g.output(g.fmod(g.mul(x, 3.0), g.constant(np.array([1.5], np.float16), dtype="f16")))
    xs = np.array([0.5, 0.25], np.float16)
    ref, scales = errorbound.evaluate_with_scales(g, {"x": xs})
    out = g.outputs[0]
    np.testing.assert_array_equal(ref[out], np.array([0.0, 0.75], np.float16))
    assert scales[out][0] > 100 * scales[out][1] > 0
    jumped = np.array([1.499, 0.75], np.float16)
    assert verify.compare(jumped, ref[out], "f16", scales[out])[0]
    wrong = np.array([0.0, 1.0], np.float16)  # beyond the constant tolerance too
    assert not verify.compare(wrong, ref[out], "f16", scales[out])[0]


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(dshape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=12),
       axis_pick=st.integers(0, 2), rows=st.integers(1, 12), pick=st.integers(0, 1000),
       arch=st.sampled_from(["gfx942", "gfx90a"]), data=st.data())
def test_gather_elements_kernels_equal_the_reference(dshape, axis_pick, rows, pick, arch,
                                                      data):
    """GatherElements on run-time data and indices (negative ones included), then a
    multiply so the gather feeds a fused elementwise op."""
    axis = axis_pick % len(dshape)
    n = dshape[axis]
    ishape = list(dshape)
    ishape[axis] = rows
    d = data.draw(hnp.arrays(np.float32, dshape, elements=st.floats(-1e3, 1e3, width=32)))
    idx = data.draw(hnp.arrays(np.int64, ishape, elements=st.integers(-n, n - 1)))
    two = numpy_helper.from_array(np.array([2.0], np.float32), "two")
    m = model([h.make_node("GatherElements", ["d", "i"], ["gd"], axis=axis),
               h.make_node("Mul", ["gd", "two"], ["y"])],
              [vi("d", list(dshape)), vi("i", ishape, I64)], [vi("y", ishape)], [two])
    _kernels_equal_reference(m, {"d": d, "i": idx}, pick, arch)


def test_a_kernel_keeps_minus_zero_and_plus_zero_constants_apart():
    """gpusim's compiler interned float constants by value, and 0.0 == -0.0: a kernel
    holding both read +0.0 for the -0.0 (the float Mod's signed zero found it). Both
    engines, both constants."""
    from gpusim.program import Buffer, Const, Kernel, Load, Select, Store, Var, Assign, \
        block_id, thread_id
    from gpusim.program import BinOp
    x, gid = Var("x"), Var("gid", "i32")
    pick = BinOp("lt", x, Const(0.0, "f32"))
    body = (Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid),
            Store("o", gid, (Select(pick, Const(-0.0, "f32"), Const(0.0, "f32")),)))
    k = Kernel("zeros", (Buffer("a", "f32", (64,)), Buffer("o", "f32", (64,), "out")),
               grid=1, block=64, body=body)
    a = np.resize(np.array([-1.0, 1.0], np.float32), 64)
    for jit in (True, False):
        o = gpusim.simulate(k, "gfx942", {"a": a}, jit=jit).outputs["o"]
        np.testing.assert_array_equal(o, np.zeros(64, np.float32))
        np.testing.assert_array_equal(np.signbit(o), a < 0)


# ------------------------------------------------------------ (c) HIP export, hipcc
def more_ops_model():
    """Sign, the NaN/inf clean-up, an int64 Mod, a float fmod and a GatherElements in
    one model (16
    entries along the gathered axis: onnx 1.23's evaluator gathers through np.choose,
    which takes at most 32 choices, and its fallback is wrong beyond)."""
    nodes = [h.make_node("Sign", ["x"], ["s"]), h.make_node("IsNaN", ["x"], ["n"]),
             h.make_node("IsInf", ["x"], ["i"], detect_negative=0),
             h.make_node("Or", ["n", "i"], ["bad"]),
             h.make_node("Where", ["bad", "zero", "s"], ["y"]),
             h.make_node("Mod", ["a", "b"], ["r"]),
             h.make_node("GatherElements", ["x", "r"], ["gx"], axis=1),
             h.make_node("Mod", ["gx", "x"], ["fx"], fmod=1)]
    return model(nodes, [vi("x", [8, 16]), vi("a", [8, 16], I64), vi("b", [8, 16], I64)],
                 [vi("y", [8, 16]), vi("r", [8, 16], I64), vi("fx", [8, 16])],
                 [numpy_helper.from_array(np.zeros(1, np.float32), "zero")], opset=20)


def test_more_ops_model_on_both_engines():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    x.flat[:len(SPECIAL)] = SPECIAL
    a = rng.integers(-1000, 1000, (8, 16))
    b = np.resize(np.arange(1, 17), (8, 16)).astype(np.int64)  # a mod b in [0, 16)
    g = _kernels_equal_reference(more_ops_model(), {"x": x, "a": a, "b": b}, 0, "gfx942")
    assert "gather" in {op.kind for op in g.ops}


@pytest.mark.hip
def test_more_ops_export_compiles_for_gfx90a_and_gfx940(tmp_path, capsys):
    """The export of the model above (fmodf, the integer Mod's guarded division, the
    flat gather) compiles with hipcc for gfx90a and gfx940 and `wavefuse check` finds no
    disagreement."""
    from compiler.cli import main
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed (Debian package 'hipcc')")
    path = tmp_path / "more.onnx"
    path.write_bytes(more_ops_model().SerializeToString())
    out = tmp_path / "proj"
    assert main(["export", str(path), "-o", str(out), "--arch", "gfx942", "--budget", "2",
                 "--no-baseline", "--no-cache", "--json"]) == 0
    capsys.readouterr()
    src = "".join(p.read_text() for p in out.glob("*.hip"))
    assert "fmodf(" in src  # the float Mod; the integer one is div/mul/sub and selects
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"] for d in report["disagreements"]]
    assert {"gfx90a", "gfx940"} <= set(report["archs"])
    assert all(k["rc"] == 0 for k in report["kernels"])
