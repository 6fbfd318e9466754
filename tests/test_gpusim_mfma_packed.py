"""The packed MFMA shapes (int8 -> i32, bf16 -> f32; issue 28): lane maps, values against
numpy (hypothesis), the int8 byte and i32 wrap semantics, JIT == pure Python, the cycle
cost per arch and where the validator refuses them."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpusim import simulate
from gpusim.errors import KernelError
from gpusim.hw import get_arch
from gpusim.program import (
    MFMA_PACK, MFMA_SHAPES, Assign, Buffer, Kernel, Load, Mfma, Store, Var, f32, i32, lane,
    mfma_a_elem, mfma_acc_elem, mfma_b_elem,
)
from gpusim.validate import validate

from test_gpusim_functional import _same

PACKED = [s for s in MFMA_SHAPES if MFMA_PACK[s][0] > 1]
ARCH_OF = {s: ("gfx942" if s in get_arch("gfx942").mfma_passes else "gfx90a") for s in PACKED}


def one_packed_mfma(shape):
    """One MFMA whose kpack items per lane and accumulators sit where the documented lane
    maps put them (index tables evaluated in Python)."""
    M, N, K, nacc, _ = MFMA_SHAPES[shape]
    kp, kind, acc_dt = MFMA_PACK[shape]
    op_dt = "i32" if kind == "i8" else "f32"
    ia = np.array([[mfma_a_elem(shape, l, e)[0] * K + mfma_a_elem(shape, l, e)[1] for e in range(kp)]
                   for l in range(64)]).reshape(-1)
    ib = np.array([[mfma_b_elem(shape, l, e)[0] * N + mfma_b_elem(shape, l, e)[1] for e in range(kp)]
                   for l in range(64)]).reshape(-1)
    ic = np.array([[mfma_acc_elem(shape, l, r)[0] * N + mfma_acc_elem(shape, l, r)[1]
                    for r in range(nacc)] for l in range(64)]).reshape(-1)
    l = lane()
    a = tuple(Var(f"a{e}", op_dt) for e in range(kp))
    b = tuple(Var(f"b{e}", op_dt) for e in range(kp))
    acc = tuple(Var(f"acc{r}", acc_dt) for r in range(nacc))
    idx = Var("idx", "i32")
    body = []
    for e in range(kp):
        body += [Load((idx,), "IA", l * kp + e), Load((a[e],), "A", idx),
                 Load((idx,), "IB", l * kp + e), Load((b[e],), "B", idx)]
    for r, v in enumerate(acc):
        body += [Load((idx,), "IC", l * nacc + r), Load((v,), "C", idx)]
    body.append(Mfma(acc, a, b, shape))
    for r, v in enumerate(acc):
        body += [Load((idx,), "IC", l * nacc + r), Store("D", idx, (v,))]
    params = (Buffer("A", op_dt, (M, K)), Buffer("B", op_dt, (K, N)), Buffer("C", acc_dt, (M, N)),
              Buffer("IA", "i32", (64 * kp,)), Buffer("IB", "i32", (64 * kp,)),
              Buffer("IC", "i32", (64 * nacc,)), Buffer("D", acc_dt, (M, N), "out"))
    return Kernel("one_packed_mfma", params, 1, 64, tuple(body)), dict(IA=ia, IB=ib, IC=ic)


def _bf16(x):
    """Nearest-even bfloat16 of float32 values (the engine's and the packing's rule)."""
    from compiler.ir.graph import round_bf16
    return round_bf16(np.asarray(x, np.float32))


@pytest.mark.parametrize("shape", PACKED)
def test_packed_lane_maps_cover_each_element_once(shape):
    M, N, K, nacc, _ = MFMA_SHAPES[shape]
    kp = MFMA_PACK[shape][0]
    assert M * K == 64 * kp and K * N == 64 * kp and M * N == 64 * nacc
    assert sorted(mfma_a_elem(shape, l, e) for l in range(64) for e in range(kp)) == \
        [(i, k) for i in range(M) for k in range(K)]
    assert sorted(mfma_b_elem(shape, l, e) for l in range(64) for e in range(kp)) == \
        [(k, j) for k in range(K) for j in range(N)]


@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from([s for s in PACKED if MFMA_PACK[s][1] == "i8"]),
       seed=st.integers(0, 2**31 - 1))
def test_int8_mfma_is_exact(shape, seed):
    """i32 accumulation of int8 products equals numpy's int64 sum exactly."""
    M, N, K, _, _ = MFMA_SHAPES[shape]
    k, tables = one_packed_mfma(shape)
    rng = np.random.default_rng(seed)
    A = rng.integers(-128, 128, (M, K)).astype(np.int32)
    B = rng.integers(-128, 128, (K, N)).astype(np.int32)
    C = rng.integers(-2**20, 2**20, (M, N)).astype(np.int32)
    r = simulate(k, ARCH_OF[shape], {**tables, "A": A, "B": B, "C": C})
    ref = C.astype(np.int64) + A.astype(np.int64) @ B.astype(np.int64)
    np.testing.assert_array_equal(r.outputs["D"], ref)
    assert r.counters["mfma_insts"] == 1 and r.counters["mfma_flops"] == 2 * M * N * K


def test_int8_mfma_reads_the_low_byte_and_wraps_at_32_bits():
    """The hardware reads each operand's low byte (300 is 44, -129 is 127) and the i32
    accumulator wraps."""
    shape = "32x32x8i8"
    M, N, K, _, _ = MFMA_SHAPES[shape]
    k, tables = one_packed_mfma(shape)
    A = np.full((M, K), 300, np.int32)
    A[0, 0] = -129
    B = np.ones((K, N), np.int32)
    C = np.zeros((M, N), np.int32)
    C[1, 1] = 2**31 - 100
    r = simulate(k, "gfx90a", {**tables, "A": A, "B": B, "C": C})
    wrap = lambda x: ((x + 2**31) % 2**32) - 2**31
    A8 = ((A.astype(np.int64) + 128) % 256) - 128
    np.testing.assert_array_equal(r.outputs["D"], wrap(C.astype(np.int64) + A8 @ B))
    assert r.outputs["D"][1, 1] < 0  # wrapped


@settings(max_examples=10, deadline=None)
@given(shape=st.sampled_from([s for s in PACKED if MFMA_PACK[s][1] == "bf16"]),
       arch=st.sampled_from(["gfx90a", "gfx942"]), seed=st.integers(0, 2**31 - 1))
def test_bf16_mfma_accumulates_in_f32(shape, arch, seed):
    """bf16 operands (rounded to bf16 on packing), products exact, one rounding to f32."""
    M, N, K, _, _ = MFMA_SHAPES[shape]
    k, tables = one_packed_mfma(shape)
    rng = np.random.default_rng(seed)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (M, N)))
    r = simulate(k, arch, {**tables, "A": A, "B": B, "C": C})
    ref = (C.astype(np.float64) + _bf16(A).astype(np.float64) @ _bf16(B).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(r.outputs["D"], ref)


@pytest.mark.parametrize("shape", ["32x32x16i8", "16x16x16bf16"])
def test_jit_and_python_paths_agree_on_packed_mfma(shape):
    k, tables = one_packed_mfma(shape)
    M, N, K, _, _ = MFMA_SHAPES[shape]
    rng = np.random.default_rng(1)
    if MFMA_PACK[shape][1] == "i8":
        A, B, C = (rng.integers(-128, 128, s).astype(np.int32) for s in ((M, K), (K, N), (M, N)))
    else:
        A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((M, K), (K, N), (M, N)))
    inputs = {**tables, "A": A, "B": B, "C": C}
    _same(simulate(k, "gfx942", inputs, trace=True, jit=True),
          simulate(k, "gfx942", inputs, trace=True, jit=False))


def test_packed_mfma_cycles_follow_the_published_peaks():
    """Matrix ops per CU per clock from the passes (4 SIMDs, 4 cycles a pass) equal the
    peaks the hardware tables cite: MI250X bf16 and int8 1024 (S3), MI300X bf16 2048 and
    int8 4096 (S2)."""
    peaks = {("gfx90a", "bf16"): 1024, ("gfx90a", "i8"): 1024,
             ("gfx942", "bf16"): 2048, ("gfx942", "i8"): 4096}
    for arch_name in ("gfx90a", "gfx942"):
        arch = get_arch(arch_name)
        for shape in PACKED:
            if shape not in arch.mfma_passes:
                continue
            M, N, K, _, _ = MFMA_SHAPES[shape]
            per_clk = 2 * M * N * K * 4 / arch.mfma_cycles(shape)
            assert per_clk == peaks[(arch_name, MFMA_PACK[shape][1])], (arch_name, shape)
    # each arch has one int8 form per block size: CDNA3 dropped CDNA2's 4-byte ones
    assert "32x32x8i8" not in get_arch("gfx942").mfma_passes
    assert "32x32x16i8" not in get_arch("gfx90a").mfma_passes


def test_validator_rejects_bad_packed_operands():
    acc_i = tuple(Var(f"c{r}", "i32") for r in range(16))
    acc_f = tuple(Var(f"c{r}") for r in range(16))
    buf = (Buffer("o", "f32", (64,), "out"),)
    init_i = tuple(Assign(v, i32(0)) for v in acc_i)
    init_f = tuple(Assign(v, f32(0.0)) for v in acc_f)
    four_i, four_f = (i32(1),) * 4, (f32(1.0),) * 4
    bad = {
        ("gfx942", "has no v_mfma_i32_32x32x8i8"): init_i + (Mfma(acc_i, four_i, four_i, "32x32x8i8"),),
        ("gfx90a", "takes 4 element"): init_i + (Mfma(acc_i, four_i[:2], four_i, "32x32x8i8"),),
        ("gfx90a", "must be i32"): init_i + (Mfma(acc_i, four_f, four_f, "32x32x8i8"),),
        ("gfx90a", "accumulators must be i32"): init_f + (Mfma(acc_f, four_i, four_i, "32x32x8i8"),),
        ("gfx942", "accumulators must be f32"): init_i + (Mfma(acc_i, four_f, four_f, "32x32x8bf16"),),
    }
    for (arch, words), body in bad.items():
        with pytest.raises(KernelError, match=words):
            validate(Kernel("k", buf, 1, 64, body + (Store("o", lane(), (f32(0.0),)),)), arch)
