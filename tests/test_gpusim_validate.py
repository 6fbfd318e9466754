"""The validator and the hardware tables: impossible kernels fail early, with the fix named."""
import dataclasses

import numpy as np
import pytest

from gpusim import ARCHES, KernelError, get_arch, simulate, validate
from gpusim import microbench as mb
from gpusim.program import (
    Assign, Barrier, Buffer, For, If, Kernel, LdsArray, Load, Store, Var, block_id, f32,
    i32, lane, maximum, minimum, thread_id, wave_id,
)


def kern(body, n=64, block=64, grid=1, lds=(), extra=()):
    return Kernel("t", (Buffer("a", "f32", (n,)), Buffer("o", "f32", (n,), "out"),
                        Buffer("idx", "i32", (n,))) + extra,
                  grid=grid, block=block, body=tuple(body), lds=lds)


X, Y, G = Var("x"), Var("y"), Var("g", "i32")


def test_valid_kernels_pass():
    for k in (mb.tiled_matmul(32, 32, 32), mb.lds_transpose(64, 1), mb.saxpy(1000), mb.row_sum(4, 100)):
        validate(k, "gfx942")


@pytest.mark.parametrize("body,kw,match", [
    ([], dict(block=2048), "exceeds the limit of 1024"),
    ([], dict(block=0), "block must be > 0"),
    ([], dict(grid=0), "grid must be > 0"),
    ([], dict(lds=(LdsArray("s", "f32", (20000,)),)), "LDS use 80000 B exceeds"),
    ([Store("o", thread_id() * 4, (X, Y, X))], {}, "vector width 3"),  # 3: loads only
    ([Load(tuple(Var(f"v{i}") for i in range(5)), "a", thread_id() * 5)], dict(n=512),
     "vector width 5"),
    ([Load((X, Y), "a", thread_id() * 2 + 1)], dict(n=256), "provably a multiple of 1"),
    ([Load(tuple(Var(f"v{i}") for i in range(4)), "a", thread_id() * 2)], dict(n=256), "multiple of 2"),
    ([Load((X,), "a", thread_id() + 1)], {}, r"elements \[1, 64\] but it has 64"),
    ([Store("o", thread_id() - 1, (f32(0.0),))], {}, r"\[-1, 62\]"),
    ([If(thread_id() < 32, (Barrier(),))], {}, "Barrier sits inside an If"),
    ([Assign(X, f32(0.0)), If(lane() < 3, (Assign(X, f32(1.0)),)), If(X > 0.0, (Barrier(),))], {},
     "Barrier sits inside an If"),
    ([For(G, thread_id() * 0, thread_id(), 1, (Barrier(),))], {}, "bounds vary across lanes"),
    ([Assign(X, i32(1))], {}, "assigns a i32 value to f32"),
    ([Load((G,), "a", thread_id())], {}, "moves i32 through f32 buffer"),
    ([Store("o", thread_id(), (Y,))], {}, "'y' is read .* before it is assigned"),
    ([If(lane() < 3, (Assign(X, f32(1.0)),)), Store("o", thread_id(), (X,))], {}, "before it is assigned"),
    ([Load((X,), "nope", thread_id())], {}, "buffer 'nope'"),
    ([Assign(Var("z", "i32"), i32(0)), Assign(Var("z"), f32(0.0))], {}, "used as i32 and as f32"),
])
def test_validator_errors(body, kw, match):
    with pytest.raises(KernelError, match=match):
        validate(kern(body, **kw), "gfx942")


def test_messages_are_one_line():
    with pytest.raises(KernelError) as e:
        validate(kern([If(thread_id() < 32, (Barrier(),))]), "gfx942")
    assert "\n" not in str(e.value) and "move the barrier" in str(e.value)


def test_guarded_and_uniform_cases_are_accepted():
    validate(kern([If(thread_id() + 1 < 64, (Load((X,), "a", thread_id() + 1),))]), "gfx942")
    validate(kern([If(block_id() < 1, (Barrier(),)), If(wave_id() < 1, (Barrier(),))]), "gfx942")
    validate(kern([Load((X, Y), "a", thread_id() % 16 * 2)]), "gfx942")


def test_a_dwordx3_load_needs_dword_alignment_only():
    """Three 4-byte elements at any element index (global_load_dwordx3); values as three
    scalar loads would give them. Not for a 2-byte buffer (6 bytes is no dwordx3)."""
    regs = (X, Y, Var("z"))
    body = [Load(regs, "a", thread_id()),
            Store("o", thread_id(), ((X + Y) + Var("z"),))]
    k = kern(body, n=66)
    validate(k, "gfx942")
    a = np.arange(66, dtype=np.float32)
    out = simulate(k, "gfx942", inputs={"a": a}).outputs["o"]
    np.testing.assert_array_equal(out[:64], a[:64] + a[1:65] + a[2:66])
    python = simulate(k, "gfx942", inputs={"a": a}, jit=False).outputs["o"]
    np.testing.assert_array_equal(python, out)  # the pure-Python engine agrees
    half = Kernel("h", (Buffer("a", "f16", (66,)), Buffer("o", "f32", (66,), "out")), grid=1,
                  block=64, body=tuple(body))
    with pytest.raises(KernelError, match="vector width 3"):
        validate(half, "gfx942")


def test_a_loop_that_never_runs_is_dead_code():
    """A loop whose start is at least its stop on every workgroup (a per-workgroup K
    loop when every segment has one K tile) runs no trip: an index past the end in its
    body is no proof of an out-of-bounds access; a loop that may run one trip still is."""
    kt = Var("kt", "i32")
    dead = For(kt, maximum(i32(0), block_id()), minimum(i32(1), block_id() + 1) - 1, 1,
               (Load((X,), "a", (kt + 1) * 64 + thread_id()),))
    validate(kern([dead], grid=4), "gfx942")
    simulate(kern([dead], grid=4), "gfx942")
    live = For(kt, maximum(i32(0), block_id()), minimum(i32(1), block_id() + 1), 1,
               (Load((X,), "a", (kt + 1) * 64 + thread_id()),))
    with pytest.raises(KernelError, match=r"elements \[64, 127\] but it has 64"):
        validate(kern([live], grid=4), "gfx942")


def test_runtime_out_of_bounds_is_reported():
    body = [Load((G,), "idx", thread_id()), Load((X,), "a", G), Store("o", thread_id(), (X,))]
    idx = np.arange(64, dtype=np.int32)
    simulate(kern(body), "gfx942", {"idx": idx})
    idx[5] = 64
    with pytest.raises(KernelError, match="buffer 'a' at element 64"):
        simulate(kern(body), "gfx942", {"idx": idx})


def test_missing_scalar_and_bad_input_shape():
    with pytest.raises(KernelError, match="scalar 'n' needs a value"):
        simulate(mb.saxpy(100), "gfx942", scalars={"alpha": 1.0})
    with pytest.raises(KernelError, match="has 3 elements"):
        simulate(mb.strided_load(1), "gfx942", {"a": np.zeros(3)})


def test_get_arch_lists_known_arches():
    assert get_arch("gfx942").num_cus == 304 and get_arch("MI300X").name == "gfx942"
    with pytest.raises(KernelError, match="known arches: gfx1100, gfx90a, gfx942"):
        get_arch("gfx1234")


@pytest.mark.parametrize("name", sorted(ARCHES))
def test_every_constant_has_a_source(name):
    a = ARCHES[name]
    for f in dataclasses.fields(a):
        if f.name in ("name", "marketing_name", "sources"):
            continue
        assert a.sources.get(f.name), f"{name}.{f.name} has no source"
    # the LDS phase groups partition the wave
    for table in (a.lds_read_groups, a.lds_write_groups):
        for groups in table.values():
            assert sorted(l for g in groups for l in g) == list(range(a.wave_size))


def test_published_figures():
    assert get_arch("gfx942").peak_fp32_tflops == pytest.approx(163.4, rel=0.01)  # S2
    assert get_arch("gfx942").valu_cycles == 4 and get_arch("gfx1100").valu_cycles == 1
    assert get_arch("gfx90a").l1_line_bytes == 64 and get_arch("gfx942").l1_line_bytes == 128
