"""Functional correctness against numpy, determinism, and JIT == pure-Python."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpusim import simulate
from gpusim import microbench as mb
from gpusim.program import (
    IR_UNARY, Assign, Buffer, Kernel, Load, Store, UnOp, Var, block_id, fabs, fma, maximum,
    minimum, relu, select, thread_id,
)
from gpusim.errors import KernelError
from gpusim.sim import BUFFER_ALIGN

RNG = np.random.default_rng(1)


def test_elementwise_saxpy_with_guard_and_scalars():
    n = 1000  # grid rounded up to 4 x 256: the If guards the tail
    x = RNG.standard_normal(n).astype(np.float32)
    y = RNG.standard_normal(n).astype(np.float32)
    r = simulate(mb.saxpy(n), "gfx942", {"x": x, "y": y}, {"n": n, "alpha": 2.5})
    np.testing.assert_allclose(r.outputs["y"], np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)  # fma rounds once


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_row_sum_reduction(shuffle, arch):
    wave = 64 if arch != "gfx1100" else 32
    a = RNG.standard_normal((6, 777)).astype(np.float32)
    r = simulate(mb.row_sum(6, 777, use_shuffle=shuffle, wave=wave), arch, {"a": a})
    np.testing.assert_allclose(r.outputs["out"], a.sum(axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pad", [0, 1])
def test_lds_transpose_values(pad):
    a = RNG.standard_normal((96, 96)).astype(np.float32)
    r = simulate(mb.lds_transpose(96, pad), "gfx90a", {"inp": a})
    assert np.array_equal(r.outputs["out"], a.T)


def test_tiled_matmul():
    A = RNG.standard_normal((48, 64)).astype(np.float32)
    B = RNG.standard_normal((64, 80)).astype(np.float32)
    r = simulate(mb.tiled_matmul(48, 80, 64), "gfx942", {"A": A, "B": B})
    np.testing.assert_allclose(r.outputs["C"], A @ B, rtol=1e-4, atol=1e-4)


def test_f16_buffers_round_on_store():
    x, gid = Var("x"), Var("gid", "i32")
    k = Kernel("h", (Buffer("a", "f16", (128,)), Buffer("b", "f16", (128,), "out")), grid=2, block=64,
               body=(Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid),
                     Store("b", gid, (x * 3.0 + 0.1,))))
    a = RNG.standard_normal(128).astype(np.float16)
    r = simulate(k, "gfx942", {"a": a})
    expect = (a.astype(np.float32) * np.float32(3.0) + np.float32(0.1)).astype(np.float16)
    assert r.outputs["b"].dtype == np.float16
    assert np.array_equal(r.outputs["b"], expect)


def test_random_inputs_and_determinism():
    k = mb.tiled_matmul(32, 32, 32)
    r1 = simulate(k, "gfx942", trace=True)
    r2 = simulate(k, "gfx942", trace=True)
    assert r1.counters == r2.counters and r1.cycles == r2.cycles and r1.trace == r2.trace
    assert all(np.array_equal(r1.outputs[n], r2.outputs[n]) for n in r1.outputs)
    assert np.abs(r1.outputs["C"]).sum() > 0  # "in" buffers got random values


def test_trace_kinds_and_per_inst_records():
    r = simulate(mb.tiled_matmul(32, 32, 32), "gfx942", trace=True)
    kinds = {e["kind"] for e in r.trace}
    assert {"valu", "vmem", "lds", "salu", "barrier_wait", "mem_stall"} <= kinds
    assert all(e["end"] >= e["start"] for e in r.trace)
    loads = [p for p in r.per_inst if p["kind"] == "global_load"]
    assert len(loads) == 2 and all(p["stall_cycles"] > 0 for p in loads)
    assert [p["index"] for p in r.per_inst] == sorted(p["index"] for p in r.per_inst)


def _same(a, b):
    assert a.counters == b.counters
    assert a.cycles == b.cycles
    strip = lambda recs: [{k: v for k, v in p.items() if k != "stmt"} for p in recs]  # noqa: E731
    assert strip(a.per_inst) == strip(b.per_inst)
    assert a.trace == b.trace
    for n in a.outputs:
        assert np.array_equal(a.outputs[n], b.outputs[n], equal_nan=True)


AGREE = [
    ("gfx942", lambda: mb.strided_load(1), None, None),
    ("gfx90a", lambda: mb.strided_load(16), None, None),
    ("gfx942", lambda: mb.strided_load(4, width=4), None, None),
    ("gfx942", lambda: mb.lds_transpose(32, 0), None, None),
    ("gfx942", lambda: mb.lds_transpose(32, 1), None, None),
    ("gfx1100", lambda: mb.lds_transpose(32, 0), None, None),
    ("gfx942", lambda: mb.lds_broadcast(), None, None),
    ("gfx942", lambda: mb.lds_b128_pattern(False), None, None),
    ("gfx942", lambda: mb.lds_b128_pattern(True), None, None),
    ("gfx942", lambda: mb.barrier_imbalance(40), None, None),
    ("gfx942", lambda: mb.barrier_loop(10), None, None),
    ("gfx942", lambda: mb.row_sum(2, 300, use_shuffle=True), None, None),
    ("gfx942", lambda: mb.row_sum(2, 300), None, None),
    ("gfx942", lambda: mb.tiled_matmul(32, 32, 32), None, None),
    ("gfx942", lambda: mb.saxpy(300), None, {"n": 300, "alpha": -1.5}),
    ("gfx942", lambda: mb.stream_copy(1 << 14), None, None),
]


@pytest.mark.parametrize("arch,make,inputs,scalars", AGREE)
def test_jit_and_python_paths_agree(arch, make, inputs, scalars):
    k = make()
    a = simulate(k, arch, inputs, scalars, trace=True, jit=True)
    b = simulate(k, arch, inputs, scalars, trace=True, jit=False)
    _same(a, b)


def test_sampled_mode_agrees_between_paths():
    k = mb.stream_copy(1 << 22)
    _same(simulate(k, "gfx942", functional=False, jit=True),
          simulate(k, "gfx942", functional=False, jit=False))


# ------------------------------------------------------------------------ property tests
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stride=st.integers(1, 40), offset=st.integers(0, 64), width=st.sampled_from([1, 2, 4]),
       arch=st.sampled_from(["gfx90a", "gfx942"]))
def test_lines_equal_numpy_unique_lines(stride, offset, width, arch):
    stride *= width
    offset *= width
    r = simulate(mb.strided_load(stride, width, offset), arch, functional=False)
    rec = next(p for p in r.per_inst if p["kind"] == "global_load")
    line = 64 if arch == "gfx90a" else 128
    first = BUFFER_ALIGN + 4 * (offset + np.arange(64) * stride)
    last = first + 4 * width - 1
    expect = np.unique(np.concatenate([first // line, last // line])).size
    assert rec["cache_lines"] == expect


OPS = ["add", "sub", "mul", "max", "min", "fma", "relu", "abs", "neg", "select"]


@st.composite
def expr_trees(draw, depth=0):
    x, y = Var("x"), Var("y")
    if depth >= 3 or draw(st.booleans()) and depth > 0:
        leaf = draw(st.sampled_from(["x", "y", "c"]))
        if leaf == "c":
            c = draw(st.floats(-4, 4, width=32))
            return (lambda a, b, c=c: np.float32(c)), (lambda c=c: __import__("gpusim.program", fromlist=["f32"]).f32(c))
        return ((lambda a, b: a) if leaf == "x" else (lambda a, b: b)), (lambda v=(x if leaf == "x" else y): v)
    op = draw(st.sampled_from(OPS))
    fa, ea = draw(expr_trees(depth=depth + 1))
    fb, eb = draw(expr_trees(depth=depth + 1))
    f32 = np.float32
    table = {
        "add": (lambda a, b: f32(fa(a, b) + fb(a, b)), lambda: ea() + eb()),
        "sub": (lambda a, b: f32(fa(a, b) - fb(a, b)), lambda: ea() - eb()),
        "mul": (lambda a, b: f32(fa(a, b) * fb(a, b)), lambda: ea() * eb()),
        "max": (lambda a, b: np.maximum(fa(a, b), fb(a, b)), lambda: maximum(ea(), eb())),
        "min": (lambda a, b: np.minimum(fa(a, b), fb(a, b)), lambda: minimum(ea(), eb())),
        "fma": (lambda a, b: f32(fa(a, b) * fb(a, b) + fa(a, b)), lambda: fma(ea(), eb(), ea())),
        "relu": (lambda a, b: np.maximum(fa(a, b), f32(0)), lambda: relu(ea())),
        "abs": (lambda a, b: np.abs(fa(a, b)), lambda: fabs(ea())),
        "neg": (lambda a, b: -fa(a, b), lambda: -ea()),
        "select": (lambda a, b: np.where(fa(a, b) < fb(a, b), fa(a, b), fb(a, b) * f32(2)),
                   lambda: select(ea() < eb(), ea(), eb() * 2.0)),
    }
    return table[op]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=expr_trees())
def test_random_elementwise_kernels_match_numpy(tree):
    ref, build = tree
    n = 256
    x, y, o, gid = Var("x"), Var("y"), Var("o"), Var("gid", "i32")
    k = Kernel("ew", (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n,)), Buffer("c", "f32", (n,), "out")),
               grid=2, block=128,
               body=(Assign(gid, block_id() * 128 + thread_id()), Load((x,), "a", gid),
                     Load((y,), "b", gid), Assign(o, build()), Store("c", gid, (o,))))
    a = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    expect = np.broadcast_to(ref(a, b), (n,)).astype(np.float32)
    got = simulate(k, "gfx942", {"a": a, "b": b}).outputs["c"]
    np.testing.assert_allclose(got, expect, rtol=2e-6, atol=2e-6)


def _int_div_kernel(n):
    x, y, q, r, gid = (Var(v, "i32") for v in ("x", "y", "q", "r", "gid"))
    return Kernel("idiv", (Buffer("a", "i32", (n,)), Buffer("b", "i32", (n,)),
                           Buffer("q", "i32", (n,), "out"), Buffer("r", "i32", (n,), "out")),
                  grid=n // 64, block=64,
                  body=(Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid),
                        Load((y,), "b", gid), Assign(q, x // y), Assign(r, x % y),
                        Store("q", gid, (q,)), Store("r", gid, (r,))))


I32 = st.integers(-2**31, 2**31 - 1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.lists(I32, min_size=128, max_size=128),
       b=st.lists(I32.filter(lambda v: v != 0) | st.sampled_from([1, -1, 2, 32, -7]),
                  min_size=128, max_size=128))
def test_integer_division_truncates_like_c(a, b):
    """i32 // and % of full waves (the engine divides through float64 there) equal C's
    truncating division, wrapped to 32 bits, on both paths."""
    a64, b64 = np.array(a, np.int64), np.array(b, np.int64)
    q = np.abs(a64) // np.abs(b64) * np.sign(a64) * np.sign(b64)
    r = a64 - q * b64
    wrap = lambda v: ((v + 2**31) % 2**32 - 2**31).astype(np.int32)  # noqa: E731
    k = _int_div_kernel(128)
    inputs = {"a": np.array(a, np.int32), "b": np.array(b, np.int32)}
    for jit in (True, False):
        out = simulate(k, "gfx942", inputs, jit=jit).outputs
        np.testing.assert_array_equal(out["q"], wrap(q))
        np.testing.assert_array_equal(out["r"], wrap(r))


def test_integer_division_by_zero_is_reported():
    k = _int_div_kernel(64)
    b = np.ones(64, np.int32)
    b[17] = 0
    with pytest.raises(KernelError, match="divides an integer by zero"):
        simulate(k, "gfx942", {"a": np.arange(64, dtype=np.int32), "b": b})


@pytest.mark.parametrize("name", [k for k, o in IR_UNARY.items() if o.kind in ("float", "any")])
def test_jit_and_python_paths_agree_on_every_float_unary_op(name):
    """Each f32 unary IR operator (engine.fun's branches) gives the same bits on both
    paths, on ordinary values and the special ones (signed zeros, halves, large
    arguments, +-inf, NaN)."""
    x, gid = Var("x"), Var("gid", "i32")
    k = Kernel("u", (Buffer("a", "f32", (128,)), Buffer("o", "f32", (128,), "out")), grid=2,
               block=64, body=(Assign(gid, block_id() * 64 + thread_id()), Load((x,), "a", gid),
                               Store("o", gid, (UnOp(name, x),))))
    special = [0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 1e-30, 88.0, -104.0, 131072.5, 3.4e38,
               np.inf, -np.inf, np.nan]
    a = np.resize(np.r_[special, RNG.uniform(-20, 20, 114)], 128).astype(np.float32)
    jit = simulate(k, "gfx942", {"a": a}, jit=True).outputs["o"]
    py = simulate(k, "gfx942", {"a": a}, jit=False).outputs["o"]
    assert np.array_equal(jit, py, equal_nan=True) and np.array_equal(np.signbit(jit), np.signbit(py))
