"""MFMA (matrix core) statements: lane mappings against numpy, JIT == pure Python, timing
and counters, and where the validator refuses them."""
import numpy as np
import pytest

from gpusim import simulate
from gpusim import microbench as mb
from gpusim.errors import KernelError
from gpusim.hw import get_arch
from gpusim.program import (
    MFMA_PACK, MFMA_SHAPES, Assign, Buffer, If, Kernel, Load, Mfma, Store, Var, f32, lane,
    mfma_a_elem, mfma_acc_elem, mfma_b_elem,
)
from gpusim.validate import validate

from test_gpusim_functional import _same

SHAPES = [s for s in MFMA_SHAPES if MFMA_PACK[s][0] == 1]  # the f32 shapes (packed: test_gpusim_mfma_packed)


def one_mfma(shape, n_acc=None):
    """A single MFMA whose operands and accumulators are placed by the documented lane
    maps (the mfma_*_elem helpers, evaluated here in Python into index tables)."""
    M, N, K, nacc, _ = MFMA_SHAPES[shape]
    ia = np.array([mfma_a_elem(shape, l)[0] * K + mfma_a_elem(shape, l)[1] for l in range(64)])
    ib = np.array([mfma_b_elem(shape, l)[0] * N + mfma_b_elem(shape, l)[1] for l in range(64)])
    ic = np.array([[mfma_acc_elem(shape, l, r)[0] * N + mfma_acc_elem(shape, l, r)[1]
                    for r in range(nacc)] for l in range(64)])
    l = lane()
    a, b = Var("a"), Var("b")
    acc = tuple(Var(f"acc{r}") for r in range(n_acc or nacc))
    idx = Var("idx", "i32")
    body = [Load((idx,), "IA", l), Load((a,), "A", idx), Load((idx,), "IB", l), Load((b,), "B", idx)]
    for r, v in enumerate(acc):
        body += [Load((idx,), "IC", l * nacc + r), Load((v,), "C", idx)]
    body.append(Mfma(acc, a, b, shape))
    for r, v in enumerate(acc):
        body += [Load((idx,), "IC", l * nacc + r), Store("D", idx, (v,))]
    params = (Buffer("A", "f32", (M, K)), Buffer("B", "f32", (K, N)), Buffer("C", "f32", (M, N)),
              Buffer("IA", "i32", (64,)), Buffer("IB", "i32", (64,)), Buffer("IC", "i32", (64 * nacc,)),
              Buffer("D", "f32", (M, N), "out"))
    k = Kernel("one_mfma", params, 1, 64, tuple(body))
    return k, dict(IA=ia, IB=ib, IC=ic.reshape(-1))


@pytest.mark.parametrize("shape", SHAPES)
def test_lane_maps_cover_each_element_once(shape):
    M, N, K, nacc, _ = MFMA_SHAPES[shape]
    assert M * N == 64 * nacc and M * K == 64 and K * N == 64
    assert sorted(mfma_a_elem(shape, l) for l in range(64)) == [(i, k) for i in range(M) for k in range(K)]
    assert sorted(mfma_b_elem(shape, l) for l in range(64)) == [(k, j) for k in range(K) for j in range(N)]
    cells = sorted(mfma_acc_elem(shape, l, r) for l in range(64) for r in range(nacc))
    assert cells == [(i, j) for i in range(M) for j in range(N)]
    # the ISA's accumulator layout: column = lane % M; for 32x32 rows in groups of 4
    assert all(mfma_acc_elem(shape, l, r)[1] == l % N for l in range(64) for r in range(nacc))
    if M == 32:
        assert [mfma_acc_elem(shape, 0, r)[0] for r in range(8)] == [0, 1, 2, 3, 8, 9, 10, 11]
        assert [mfma_acc_elem(shape, 32, r)[0] for r in range(4)] == [4, 5, 6, 7]


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("shape", SHAPES)
def test_single_mfma_equals_numpy(shape, arch):
    M, N, K, _, _ = MFMA_SHAPES[shape]
    k, tables = one_mfma(shape)
    rng = np.random.default_rng(3)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (M, N)))
    r = simulate(k, arch, {**tables, "A": A, "B": B, "C": C})
    ref = C.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(r.outputs["D"], ref, rtol=1e-6, atol=1e-6)
    assert r.counters["mfma_insts"] == 1
    assert r.counters["mfma_flops"] == 2 * M * N * K


@pytest.mark.parametrize("shape", SHAPES)
def test_mfma_gemm_equals_numpy(shape):
    k = mb.mfma_gemm(64, 64, 16, shape, waves=2)
    rng = np.random.default_rng(4)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((64, 16), (16, 64), (64, 64)))
    r = simulate(k, "gfx942", {"A": A, "B": B, "C": C})
    np.testing.assert_allclose(r.outputs["D"], C + A @ B, rtol=1e-5, atol=1e-5)
    M, N, K, _, _ = MFMA_SHAPES[shape]
    assert r.counters["mfma_insts"] == (64 // M) * (64 // N) * (16 // K)
    assert r.counters["mfma_flops"] == 2 * 64 * 64 * 16


@pytest.mark.parametrize("arch,make", [
    ("gfx942", lambda: mb.mfma_gemm(64, 64, 16, "32x32x2f32", waves=2)),
    ("gfx90a", lambda: mb.mfma_gemm(32, 64, 16, "16x16x4f32", waves=4)),
])
def test_jit_and_python_paths_agree_on_mfma(arch, make):
    k = make()
    _same(simulate(k, arch, trace=True, jit=True), simulate(k, arch, trace=True, jit=False))


@pytest.mark.parametrize("shape", SHAPES)
def test_dependent_mfma_chain_runs_at_the_matrix_core_rate(shape):
    """One wave, K/k MFMAs on the same accumulators: each waits for the previous one, so
    the chain takes at least n x passes x 4 cycles (S17) and the trace shows mfma issues."""
    arch = get_arch("gfx942")
    steps = 32
    M, N, K, _, _ = MFMA_SHAPES[shape]
    k = mb.mfma_gemm(M, N, K * steps, shape)
    r = simulate(k, arch, trace=True)
    cyc = arch.mfma_cycles(shape)
    assert cyc == {"32x32x2f32": 64, "16x16x4f32": 32}[shape]
    assert r.counters["mfma_insts"] == steps
    assert r.bounds["cu"] >= steps * cyc
    assert any(e["kind"] == "mfma" for e in r.trace)
    assert r.counters["valu_insts"] < r.wave_insts


def test_mfma_accumulators_count_as_vgprs():
    k32 = mb.mfma_gemm(32, 32, 4, "32x32x2f32")
    k16 = mb.mfma_gemm(16, 16, 8, "16x16x4f32")
    r32, r16 = simulate(k32, "gfx942"), simulate(k16, "gfx942")
    assert r32.vgprs - r16.vgprs == 16 - 4


def test_validator_rejects_mfma_on_rdna():
    k = mb.mfma_gemm(32, 32, 4)
    with pytest.raises(KernelError) as e:
        validate(k, "gfx1100")
    msg = str(e.value)
    assert "\n" not in msg and "gfx1100" in msg and "CDNA" in msg


def test_validator_rejects_bad_mfma_use():
    acc = tuple(Var(f"c{r}") for r in range(16))
    init = tuple(Assign(v, f32(0.0)) for v in acc)
    buf = (Buffer("o", "f32", (64,), "out"),)
    store = (Store("o", lane(), (acc[0],)),)
    bad = {
        "accumulator": Kernel("k", buf, 1, 64, init + (Mfma(acc[:4], f32(1.0), f32(1.0)),) + store),
        "whole waves": Kernel("k", buf, 1, 32, init + (Mfma(acc, f32(1.0), f32(1.0)),) + store),
        "varies across": Kernel("k", buf, 1, 64, init + (
            If(lane() < 7, (Mfma(acc, f32(1.0), f32(1.0)),)),) + store),
        "shape": Kernel("k", buf, 1, 64, init + (Mfma(acc, f32(1.0), f32(1.0), "4x4x1f32"),) + store),
    }
    for words, k in bad.items():
        with pytest.raises(KernelError, match=words):
            validate(k, "gfx942")
