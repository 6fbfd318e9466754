"""Byte buffers (i8/u8, issue 28): values, bytes moved, cache lines and LDS banks."""
import numpy as np
import pytest

from gpusim import simulate
from gpusim.program import (
    Assign, Barrier, Buffer, Kernel, LdsArray, LdsLoad, LdsStore, Load, Store, Var, block_id,
    lane, thread_id,
)

RNG = np.random.default_rng(7)


def _copy(dtype_in: str, dtype_out: str, n: int, width: int, add: int = 0) -> Kernel:
    """out[i] = in[i] + add, ``width`` consecutive elements per lane (one vector access)."""
    gid = Var("gid", "i32")
    xs = tuple(Var(f"x{v}", "i32") for v in range(width))
    ys = tuple(x + add for x in xs) if add else xs
    block = 256  # a workgroup's bytes are whole lines (workgroups spread over gfx942's L2s)
    return Kernel(f"copy_{dtype_in}_{dtype_out}_x{width}",
                  (Buffer("a", dtype_in, (n,)), Buffer("b", dtype_out, (n,), "out")),
                  grid=n // (block * width), block=block,
                  body=(Assign(gid, (block_id() * block + thread_id()) * width),
                        Load(xs, "a", gid), Store("b", gid, ys)))


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("jit", [True, False])
def test_byte_loads_extend_and_byte_stores_keep_the_low_byte(width, jit):
    n = 256 * width
    a = RNG.integers(-128, 128, n).astype(np.int8)
    # i8 -> i32 register (sign-extended) + 100 -> u8 store keeps the low byte
    r = simulate(_copy("i8", "u8", n, width, add=100), "gfx942", {"a": a}, jit=jit)
    assert np.array_equal(r.outputs["b"], ((a.astype(np.int64) + 100) & 255))
    # u8 -> i32 (zero-extended) + 100 -> i8 store wraps to a signed byte
    u = RNG.integers(0, 256, n).astype(np.uint8)
    r = simulate(_copy("u8", "i8", n, width, add=100), "gfx942", {"a": u}, jit=jit)
    assert np.array_equal(r.outputs["b"], (u.astype(np.int64) + 100).astype(np.uint8).view(np.int8))
    # and into an i32 buffer: the extended value itself
    r = simulate(_copy("i8", "i32", n, width), "gfx942", {"a": a}, jit=jit)
    assert np.array_equal(r.outputs["b"], a.astype(np.int32))


def test_byte_inputs_given_out_of_range_wrap_like_the_bytes_in_memory():
    r = simulate(_copy("u8", "i32", 256, 1), "gfx942", {"a": np.arange(256) + 250})
    assert np.array_equal(r.outputs["b"], (np.arange(256) + 250) & 255)


@pytest.mark.parametrize("arch,line", [("gfx942", 128), ("gfx90a", 64)])
@pytest.mark.parametrize("width", [1, 4])
def test_a_byte_copy_moves_a_quarter_of_the_i32_bytes(arch, line, width):
    n = 1 << 14
    c8 = simulate(_copy("u8", "u8", n, width), arch, functional=False).counters
    c32 = simulate(_copy("i32", "i32", n, width), arch, functional=False).counters
    assert c8["global_load_requests"] == c32["global_load_requests"] == n // (64 * width)
    # one wave's lanes read 64 * width contiguous bytes
    assert c8["global_load_lines"] == c8["global_load_requests"] * max(1, 64 * width // line)
    assert c8["hbm_bytes_read"] == n and c32["hbm_bytes_read"] == 4 * n
    assert c8["hbm_bytes_written"] == n and c32["hbm_bytes_written"] == 4 * n


def _lds_bytes(stride: int, width: int = 1) -> Kernel:
    """One wave stores 64 * width bytes into a u8 LDS array, then lane l reads ``width``
    bytes at byte l * stride * width (modulo the array)."""
    size = 64 * 64 * width
    xs = tuple(Var(f"x{v}", "i32") for v in range(width))
    t = Var("t", "i32")
    return Kernel(f"lds_u8_s{stride}_x{width}",
                  (Buffer("a", "u8", (size,)), Buffer("b", "i32", (64 * width,), "out")),
                  grid=1, block=64, lds=(LdsArray("s", "u8", (size,)),),
                  body=(Assign(t, thread_id() * width),
                        *[x for i in range(64)
                          for x in (Load(xs, "a", t + i * 64 * width),
                                    LdsStore("s", t + i * 64 * width, xs))],
                        Barrier(),
                        LdsLoad(xs, "s", (lane() * stride * width) % size),
                        Store("b", t, xs)))


# Lane l reads byte l * stride. stride 1: 64 bytes in 16 dwords, lanes sharing a dword
# broadcast: no conflict. stride 4: one dword per lane, 32 consecutive dwords per half:
# none. stride 128: every lane's byte in dword 32 l, all on bank 0, 32 distinct dwords per
# 32-lane phase: 31 conflict cycles each half (as a fully conflicted ds_read_b32).
@pytest.mark.parametrize("stride,conflicts", [(1, 0), (4, 0), (2, 0), (128, 62)])
def test_byte_lds_reads_conflict_by_the_dwords_they_touch(stride, conflicts):
    a = RNG.integers(0, 256, 64 * 64).astype(np.uint8)
    r = simulate(_lds_bytes(stride), "gfx942", {"a": a})
    rec = next(p for p in r.per_inst if p["kind"] == "lds_load")
    assert rec["conflict_cycles"] == conflicts
    assert np.array_equal(r.outputs["b"], a[(np.arange(64) * stride) % a.size].astype(np.int32))


def test_byte_lds_array_takes_one_byte_per_element():
    k = _lds_bytes(1, 4)
    assert k.lds_bytes == 64 * 64 * 4
    a = RNG.integers(0, 256, 64 * 64 * 4).astype(np.uint8)
    r = simulate(k, "gfx90a", {"a": a})
    idx = (np.arange(64)[:, None] * 4 + np.arange(4)[None, :]).reshape(-1)
    assert np.array_equal(r.outputs["b"], a[idx].astype(np.int32))
    rec = next(p for p in r.per_inst if p["kind"] == "lds_load")
    assert rec["conflict_cycles"] == 0  # 4 bytes per lane: one dword each, consecutive


def test_jit_and_python_agree_on_byte_memory():
    a = RNG.integers(0, 256, 64 * 64).astype(np.uint8)
    for k in (_lds_bytes(128), _copy("i8", "u8", 1024, 4, add=3)):
        x = simulate(k, "gfx942", {"a": a[:k.buffer("a").size]}, trace=True, jit=True)
        y = simulate(k, "gfx942", {"a": a[:k.buffer("a").size]}, trace=True, jit=False)
        assert x.counters == y.counters and x.cycles == y.cycles
        assert all(np.array_equal(x.outputs[n], y.outputs[n]) for n in x.outputs)
