"""Sin, Cos, Floor and Ceil end to end (issue 28): what a diffusion UNet's sinusoidal
timestep embedding, a decoder's rotary cos/sin from position ids and a Whisper-style
position table need. Each layer differentially: our ONNX import vs onnx's
ReferenceEvaluator, the simulated kernel vs the numpy reference, the JIT engine vs the
pure-Python engine, and the HIP export vs hipcc."""
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
from compiler.cli.commands import verify
from compiler.frontends.onnx import from_model
from compiler.fusion import fuse
from compiler.ir import errorbound
from compiler.ir.graph import Graph
from compiler.ir.reference import evaluate
from compiler.lower import lower
from compiler.lower.common import memory_image
from compiler.schedule import schedule_space
from compiler.tuning.search import tune
from gpusim.hw import get_arch
from gpusim.program import Buffer, Kernel, Load, Store, Var, block_id, ceil, cos, floor, sin, \
    thread_id, Assign

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
OPS = {"Sin": np.sin, "Cos": np.cos, "Floor": np.floor, "Ceil": np.ceil}

#: values a rounding op and a trig op must get right: halves and integers of both signs,
#: signed zeros, the tie points, arguments past f32 sin's small-argument reduction
#: (|x| >= 2^17 takes hipcc's Payne-Hanek path), infinities and NaN
SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 0.49999997,
                    -0.49999997, 3.0, -7.0, 1e-30, -1e-30, np.pi, -np.pi, np.pi / 2, 100.0,
                    999.0, 1e4 + 0.5, 131072.0, 2.0 ** 20 + 3, 3.4e38, -3.4e38, 2.0 ** 23 + 1,
                    np.inf, -np.inf, np.nan], np.float32)


def vi(name, shape, dtype=F32):
    return h.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "trig", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def ours_and_theirs(m, feeds):
    """(our import's reference outputs, onnx's ReferenceEvaluator outputs), by output."""
    g = from_model(m)
    ours = evaluate(g, {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()})
    names = [o.name for o in m.graph.output]
    with np.errstate(all="ignore"):
        theirs = ReferenceEvaluator(m).run(names, feeds)
    return g, [ours[g.meta["onnx_outputs"][n]] for n in names], theirs


# ------------------------------------------------------------------ (a) ONNX import
@pytest.mark.parametrize("opset", [13, 22])
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", sorted(OPS))
def test_import_agrees_with_onnx_reference(op, dtype, opset):
    """Each op on random values in [-10, 10] plus the special values: floor and ceil
    bit for bit (they are exact), sin and cos within a few ulp of the dtype."""
    npt = np.float32 if dtype == F32 else np.float16
    with np.errstate(over="ignore"):  # +-3.4e38 is +-inf in f16
        x = np.concatenate([np.random.default_rng(0).uniform(-10, 10, 34).astype(np.float32),
                            SPECIAL]).astype(npt).reshape(4, 16)
    m = model([h.make_node(op, ["x"], ["y"])], [vi("x", [4, 16], dtype)],
              [vi("y", [4, 16], dtype)], opset=opset)
    _, [got], [want] = ours_and_theirs(m, {"x": x})
    assert got.dtype == want.dtype == npt
    if op in ("Floor", "Ceil"):
        np.testing.assert_array_equal(got, want)  # NaN in the same places, -0.0 kept
        assert np.array_equal(np.signbit(got), np.signbit(want))
    else:
        tol = 4 * np.finfo(npt).eps
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol)
    with np.errstate(invalid="ignore"):  # sin/cos of +-inf: NaN
        assert np.array_equal(np.isnan(got), np.isnan(OPS[op](x)))


def test_bf16_floor_and_sin_import():
    """bfloat16 (Floor since opset 13, Sin since 22): computed in f32, rounded to bf16,
    against the same rounding of f32 numpy (onnx's evaluator has no bf16 sin)."""
    from compiler.ir.graph import round_bf16
    x = np.random.default_rng(3).uniform(-8, 8, (2, 32)).astype(np.float32)
    xb = round_bf16(x)
    for op in ("Floor", "Sin"):
        m = model([h.make_node(op, ["x"], ["y"])], [vi("x", [2, 32], BF16)],
                  [vi("y", [2, 32], BF16)], opset=22)
        g = from_model(m)
        got = evaluate(g, {g.meta["onnx_inputs"]["x"]: xb})[g.meta["onnx_outputs"]["y"]]
        np.testing.assert_array_equal(np.asarray(got, np.float32),
                                      round_bf16(OPS[op](xb).astype(np.float32)))


def test_rotary_cos_sin_from_runtime_position_ids():
    """A decoder's rotary tables at run time: int64 position ids, cast to float, times
    the inverse frequencies, then Cos and Sin (both outputs)."""
    inv = (1.0 / 10000 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)
    nodes = [h.make_node("Unsqueeze", ["pos", "ax"], ["p2"]),
             h.make_node("Cast", ["p2"], ["pf"], to=F32),
             h.make_node("Mul", ["pf", "inv"], ["ang"]),
             h.make_node("Cos", ["ang"], ["cos"]), h.make_node("Sin", ["ang"], ["sin"])]
    m = model(nodes, [vi("pos", [12], TensorProto.INT64)], [vi("cos", [12, 8]), vi("sin", [12, 8])],
              [numpy_helper.from_array(inv, "inv"),
               numpy_helper.from_array(np.array([1], np.int64), "ax")])
    pos = np.array([0, 1, 2, 3, 7, 100, 511, 2047, 4095, 8191, 30000, 131071], np.int64)
    g, ours, theirs = ours_and_theirs(m, {"pos": pos})
    assert {op.kind for op in g.ops} >= {"sin", "cos", "cast"}
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-7 * 131071)


def test_a_constant_position_table_folds_at_import():
    """A Whisper-style sinusoidal table computed from constants (Range, Mul, Sin, Cos,
    Concat) folds to one constant through onnx's evaluator: no sin op is left."""
    nodes = [h.make_node("Range", ["start", "limit", "delta"], ["pos"]),
             h.make_node("Unsqueeze", ["pos", "ax"], ["p2"]),
             h.make_node("Mul", ["p2", "inv"], ["ang"]),
             h.make_node("Sin", ["ang"], ["s"]), h.make_node("Cos", ["ang"], ["c"]),
             h.make_node("Concat", ["s", "c"], ["table"], axis=1),
             h.make_node("Add", ["x", "table"], ["y"])]
    inv = np.exp(-np.log(10000.0) * np.arange(4) / 4).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("start", 0.0), ("limit", 6.0), ("delta", 1.0))]
    inits += [numpy_helper.from_array(inv, "inv"),
              numpy_helper.from_array(np.array([1], np.int64), "ax")]
    m = model(nodes, [vi("x", [6, 8])], [vi("y", [6, 8])], inits)
    x = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)
    g, [got], [want] = ours_and_theirs(m, {"x": x})
    assert not {op.kind for op in g.ops} & {"sin", "cos"}
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------- the engine, both paths
def _four_ops_kernel(n: int) -> Kernel:
    x, gid = Var("x"), Var("gid", "i32")
    outs = ("o_sin", "o_cos", "o_floor", "o_ceil")
    body = [Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid)]
    body += [Store(o, gid, (f(x),)) for o, f in zip(outs, (sin, cos, floor, ceil))]
    return Kernel("four", (Buffer("a", "f32", (n,)),) + tuple(Buffer(o, "f32", (n,), "out")
                                                              for o in outs),
                  grid=n // 64, block=64, body=tuple(body))


def test_jit_and_python_engines_agree_on_sin_cos_floor_ceil():
    """Bit for bit, with the same counters and cycles; floor/ceil equal numpy's exactly
    (signed zeros, infinities, NaN), sin/cos are the double result rounded once
    (within 1 ulp of numpy's float64 sin rounded to f32), NaN at +-inf."""
    rng = np.random.default_rng(2)
    a = np.concatenate([SPECIAL, rng.uniform(-1e3, 1e3, 98).astype(np.float32)])
    a = np.resize(a, 128).astype(np.float32)
    k = _four_ops_kernel(128)
    jit = gpusim.simulate(k, "gfx942", {"a": a}, jit=True)
    py = gpusim.simulate(k, "gfx942", {"a": a}, jit=False)
    assert jit.cycles == py.cycles and jit.counters == py.counters
    for o in jit.outputs:
        assert np.array_equal(jit.outputs[o], py.outputs[o], equal_nan=True), o
        assert np.array_equal(np.signbit(jit.outputs[o]), np.signbit(py.outputs[o])), o
    for o, f in (("o_floor", np.floor), ("o_ceil", np.ceil)):
        np.testing.assert_array_equal(jit.outputs[o], f(a))
        assert np.array_equal(np.signbit(jit.outputs[o]), np.signbit(f(a))), o
    for o, f in (("o_sin", np.sin), ("o_cos", np.cos)):
        with np.errstate(invalid="ignore"):
            want = f(a.astype(np.float64)).astype(np.float32)
        assert np.array_equal(np.isnan(jit.outputs[o]), np.isnan(want)), o
        fin = ~np.isnan(want)
        np.testing.assert_array_max_ulp(jit.outputs[o][fin], want[fin], maxulp=1)


def test_sin_issues_at_the_transcendental_rate_and_floor_at_full_rate():
    """The timing side of the IR table: a kernel of sin/cos spends more VALU cycles than
    the same kernel with floor/ceil in their place (quarter rate vs full rate)."""
    def kern(f, g):
        x, gid = Var("x"), Var("gid", "i32")
        body = (Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid),
                Store("o", gid, (f(g(f(g(x)))),)))
        return Kernel("k", (Buffer("a", "f32", (64,)), Buffer("o", "f32", (64,), "out")),
                      grid=1, block=64, body=body)
    trig = gpusim.simulate(kern(sin, cos), "gfx942", {"a": np.ones(64, np.float32)})
    step = gpusim.simulate(kern(floor, ceil), "gfx942", {"a": np.ones(64, np.float32)})
    assert trig.cycles > step.cycles


# ------------------------------------------- (b) fused kernels vs numpy, hypothesis
def _run_dispatches(g: Graph, inputs: dict, arch: str, knobs_of, jit=True) -> dict:
    """Every dispatch of the fused plan lowered with ``knobs_of(dispatch)`` and run in
    gpusim (``jit`` picks the engine), each reading what the previous ones wrote; the
    graph outputs."""
    plan = fuse(g)
    values = {n: np.asarray(v) for n, v in inputs.items()}
    for n in g.topo_order():
        if g.op(n).kind == "constant":
            values[n] = g.op(n).attrs["value"]
    for d in plan.dispatches:
        k = lower(g, d, knobs_of(d), arch)
        ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
               if b.intent == "in"}
        res = gpusim.simulate(k, arch, inputs=ins, jit=jit)
        for o in d.outputs:
            values[o] = np.asarray(res.outputs[o]).reshape(g.op(o).type.shape)
    return {o: values[o] for o in g.outputs}


def _assert_honest(g: Graph, inputs: dict, got: dict):
    """Within the rounding two honest evaluations may differ by (errorbound), NaN and
    inf in the same places."""
    ref, scales = errorbound.evaluate_with_scales(g, inputs)
    for o in g.outputs:
        ok, err, tol = verify.compare(got[o], ref[o], g.op(o).type.dtype, scales[o])
        assert ok, (o, err, tol)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40),
       kind=st.sampled_from(["sin", "cos", "floor", "ceil"]),
       c=st.sampled_from([1.0, 0.5, 3.0, 0.015625]),
       f16=st.booleans(), pick=st.integers(0, 1000),
       arch=st.sampled_from(["gfx942", "gfx90a"]), data=st.data())
def test_fused_elementwise_kernel_equals_the_reference(shape, kind, c, f16, pick, arch, data):
    """y = kind(x * c) + x: one fused elementwise dispatch, lowered with a legal
    schedule picked at random, on values hypothesis draws (halves, integers, large
    arguments), equals the numpy reference within the honest rounding allowance; floor
    and ceil of an exactly scaled input bit for bit."""
    dtype = "f16" if f16 else "f32"
    npt = np.float16 if f16 else np.float32
    bound = 2e4 if f16 else 3e5  # x * 3 stays below f16's largest finite 65504
    x = data.draw(hnp.arrays(npt, shape, elements=st.floats(
        -bound, bound, width=16 if f16 else 32) | st.sampled_from(
        [0.5, -0.5, 1.0, -1.0, 2.5, 0.0, -0.0, 100.0])))
    g = Graph("unary_fused")
    xv = g.input("x", shape, dtype)
    g.output(g.add(g.unary(kind, g.mul(xv, c)), xv))
    assert len(fuse(g).dispatches) == 1

    def knobs(d):
        legal = [p for p in schedule_space(g, d, get_arch(arch)) if p.legal and not p.opt_in]
        return legal[pick % len(legal)].knobs
    got = _run_dispatches(g, {"x": x}, arch, knobs)
    _assert_honest(g, {"x": x}, got)
    # x * c exact (a power of two in f32, where the kernel also rounds it; f16 rounds
    # the product to f16 in the reference only): the step is exact too
    if kind in ("floor", "ceil") and (c == 1.0 or (c != 3.0 and not f16)):
        want = evaluate(g, {"x": x})[g.outputs[0]]
        np.testing.assert_array_equal(got[g.outputs[0]], want)


@pytest.mark.parametrize("kind", ["floor", "ceil"])
def test_a_step_after_an_f16_underflow_is_within_the_allowance(kind):
    """f16 x * 0.5 of the smallest subnormals: the reference rounds the product to f16
    (+-0), the fused kernel keeps it in f32 (+-3e-8), so floor/ceil land one apart. Both
    are honest; the error bound's underflow term (errorbound.UNDERFLOW) allows it, where
    a purely relative rounding model called it a mismatch (hypothesis found it)."""
    g = Graph("underflow")
    xv = g.input("x", (4,), "f16")
    g.output(g.add(g.unary(kind, g.mul(xv, 0.5)), xv))
    x = np.array([-6e-8, 6e-8, 0.0, 2.0], np.float16)

    def knobs(d):
        return next(p for p in schedule_space(g, d, get_arch("gfx942"))
                    if p.legal and not p.opt_in).knobs
    got = _run_dispatches(g, {"x": x}, "gfx942", knobs)[g.outputs[0]]
    want = evaluate(g, {"x": x})[g.outputs[0]]
    assert np.abs(got.astype(np.float32) - want.astype(np.float32)).max() == pytest.approx(1.0, abs=1e-3)
    _assert_honest(g, {"x": x}, {g.outputs[0]: got})


# --------------------------------- (c) the sinusoidal timestep embedding, tuned
def timestep_embedding(n=8, dim=64, dtype=F32):
    """A diffusion UNet's timestep embedding on a run-time timestep: emb = t[:, None] *
    freqs; cat(sin(emb), cos(emb)) (diffusers' get_timestep_embedding)."""
    half = dim // 2
    freqs = np.exp(-np.log(10000.0) * np.arange(half) / half).astype(np.float32)[None, :]
    nodes = [h.make_node("Unsqueeze", ["t", "ax"], ["t2"]),
             h.make_node("Mul", ["t2", "freqs"], ["emb"]),
             h.make_node("Sin", ["emb"], ["s"]), h.make_node("Cos", ["emb"], ["c"]),
             h.make_node("Concat", ["s", "c"], ["y"], axis=1)]
    return model(nodes, [vi("t", [n], dtype)], [vi("y", [n, dim], dtype)],
                 [numpy_helper.from_array(freqs, "freqs"),
                  numpy_helper.from_array(np.array([1], np.int64), "ax")])


def test_timestep_embedding_imports_tunes_and_its_kernels_compute_it():
    """Imported, fused (the concat reads its operands through a non-projection map,
    so sin and cos stay two dispatches feeding a concat: the fusion rules' limit, not
    the ops'), tuned at a budget of 2, and the tuned kernels on real timesteps (0 to
    999, so sin/cos arguments up to 999) equal onnx's ReferenceEvaluator within the
    rounding allowance."""
    m = timestep_embedding()
    g = from_model(m)
    assert {op.kind for op in g.ops} >= {"sin", "cos", "concat"}
    plan = fuse(g)
    assert len(plan.dispatches) == 3, [d.ops for d in plan.dispatches]
    result = tune(g, "gfx942", budget=2, baseline=False, verify=True)
    assert not result.mismatches and all(d.verified for d in result.dispatches)
    chosen = {d.name: d.best.knobs for d in result.dispatches}
    t = np.array([0, 1, 10, 99, 250, 500, 981, 999], np.float32)
    tin = g.meta["onnx_inputs"]["t"]
    got = _run_dispatches(g, {tin: t}, "gfx942", lambda d: chosen[d.name])
    [want] = ReferenceEvaluator(m).run(["y"], {"t": t})
    out = g.meta["onnx_outputs"]["y"]
    _, scales = errorbound.evaluate_with_scales(g, {tin: t})
    ok, err, tol = verify.compare(got[out], want, "f32", scales[out])
    assert ok, (err, tol)
    assert np.abs(got[out] - want).max() < 1e-3  # emb up to 999: a few f32 ulps of it
    # sin(0) = 0 and cos(0) = 1 at t = 0, exactly
    np.testing.assert_array_equal(got[out][0], np.r_[np.zeros(32), np.ones(32)])


def test_timestep_embedding_passes_wavefuse_verify():
    """Every check of `wavefuse verify` (reference, onnx, fused plan, simulated kernels)."""
    g = from_model(timestep_embedding())
    results = verify.run_checks("timestep_embedding", g, budget=2)
    assert all(r.status != "fail" for r in results), [(r.name, r.detail) for r in results]
    assert sum(r.status == "pass" for r in results) >= 4


# ------------------------------------------------------------ (d) HIP export, hipcc
@pytest.mark.hip
def test_timestep_embedding_export_compiles_for_gfx90a_and_gfx940(tmp_path, capsys):
    """The export prints sinf/cosf; hipcc compiles every kernel for gfx90a and gfx940
    (gfx942 checked as gfx940) and `wavefuse check` finds no disagreement. hipcc's sinf
    needs ~12 more VGPRs than the estimate counts (a range reduction, gpusim/program.py's
    IR table): a warning while the occupancy agrees, as it does here."""
    from compiler.cli import main
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed (Debian package 'hipcc')")
    path = tmp_path / "te.onnx"
    path.write_bytes(timestep_embedding().SerializeToString())
    out = tmp_path / "proj"
    assert main(["export", str(path), "-o", str(out), "--arch", "gfx942", "--budget", "2",
                 "--no-baseline", "--no-cache", "--json"]) == 0
    capsys.readouterr()
    src = "".join(p.read_text() for p in out.glob("*.hip"))
    assert "sinf(" in src and "cosf(" in src
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"] for d in report["disagreements"]]
    assert {"gfx90a", "gfx940"} <= set(report["archs"])
    assert all(k["rc"] == 0 for k in report["kernels"])
