"""Known-answer microbenchmarks: each count below is derived by hand in its comment."""
import numpy as np
import pytest

from hypothesis import given, settings, strategies as st

from gpusim import KernelError, access_pattern, estimate_vgprs, occupancy, simulate
from gpusim import engine
from gpusim.hw import get_arch
from gpusim.sim import _group_tables
from gpusim import microbench as mb
from gpusim.program import BinOp, Buffer, Kernel, LdsArray, Store, block_id, f32, thread_id


def load_record(res, kind="global_load"):
    return next(r for r in res.per_inst if r["kind"] == kind)


# f32 loads, one wave64, lane l reads element l * stride. Bytes spanned = 64 * 4 * stride;
# lines = unique (4 * l * stride) // line. 128 B lines: stride 1 -> 256 B -> 2 lines; 2 -> 4;
# 4 -> 8; 16 -> lanes 64 B apart, two per line -> 32; 64 -> one per lane -> 64.
# 64 B lines: 4, 8, 16, then 64 and 64 (every lane its own line from stride 16 on).
# TCP accesses (unique lines per quad of lanes): a quad spans 12 * stride + 4 bytes.
LINES = {
    "gfx942": {1: (2, 16), 2: (4, 16), 4: (8, 16), 16: (32, 32), 64: (64, 64)},
    "gfx90a": {1: (4, 16), 2: (8, 16), 4: (16, 16), 16: (64, 64), 64: (64, 64)},
}


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("stride", [1, 2, 4, 16, 64])
def test_strided_f32_load_lines(arch, stride):
    r = simulate(mb.strided_load(stride), arch)
    rec = load_record(r)
    lines, tcp = LINES[arch][stride]
    assert rec["executions"] == 1
    assert rec["cache_lines"] == lines
    assert rec["tcp_accesses"] == tcp
    # coalescing = 100 * 16 quads / tcp accesses: 100% down to 25% (rocprof range)
    ap = access_pattern(mb.strided_load(stride), arch, rec["index"])
    assert ap["requests"] == lines
    assert ap["coalescing_pct"] == pytest.approx(100.0 * 16 / tcp)


# The vL1D pipe is paced by TCP accesses (distinct lines per quad), not by the wave's
# unique lines. Both patterns below touch the same 4 lines (rows 0-3 of a 32-float
# matrix, 16 floats each); "rows" keeps each quad in one row -> 16 accesses per load,
# "columns" spreads each quad over the 4 rows -> 64. With the lines warm in the L1, each
# further load costs exactly its accesses in cycles: 8 more loads = 8 x 16 or 8 x 64.
@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("pattern,tcp", [("rows", 16), ("columns", 64)])
def test_l1_pipe_time_is_tcp_accesses(arch, pattern, tcp):
    offs = {"rows": [(l // 16) * 32 + l % 16 for l in range(64)],
            "columns": [(l % 4) * 32 + l // 4 for l in range(64)]}[pattern]
    inputs = {"offsets": np.array(offs, np.int32)}
    r8, r16 = (simulate(mb.quad_gather(offs, n), arch, inputs=inputs) for n in (8, 16))
    loads = [x for x in r16.per_inst if x["kind"] == "global_load"][2:]
    assert all(x["cache_lines"] == 4 and x["tcp_accesses"] == tcp for x in loads)
    assert r16.cycles - r8.cycles == 8 * tcp


def test_coalescing_pct_counter_range():
    best = simulate(mb.stream_copy(64 * 256, width=1), "gfx942").counters["coalescing_pct"]
    worst_k = mb.strided_load(64)
    r = simulate(worst_k, "gfx942")
    assert best == 100.0
    # load 25% (64 tcp) and the stride-1 store 100% (16 tcp): 100 * 32 / 80
    assert r.counters["coalescing_pct"] == pytest.approx(40.0)


@pytest.mark.parametrize("arch,lines", [("gfx942", 8), ("gfx90a", 16)])
def test_dwordx4_load(arch, lines):
    # lane l loads 16 B at 16 * l: 1024 contiguous bytes -> 8 lines of 128 B / 16 of 64 B;
    # each quad covers 64 B inside one line -> 16 TCP accesses -> 100 %.
    r = simulate(mb.strided_load(4, width=4), arch)
    rec = load_record(r)
    assert rec["cache_lines"] == lines and rec["tcp_accesses"] == 16


def test_dword_vs_dwordx4_same_bytes():
    n = 256 * 64
    d1 = simulate(mb.stream_copy(n, width=1), "gfx942", functional=False).counters
    d4 = simulate(mb.stream_copy(n, width=4), "gfx942", functional=False).counters
    assert d1["global_load_requests"] == 4 * d4["global_load_requests"] == n // 64
    assert d1["global_load_lines"] == d4["global_load_lines"] == n * 4 // 128
    assert d1["hbm_bytes_read"] == d4["hbm_bytes_read"] == n * 4


# 32 x 32 f32 tile through LDS. Row writes: lanes 0-31 of a phase hit 32 banks -> 0.
# Column reads, no padding: dword c * 32 + r, bank = r: 32 lanes of a phase on one bank at
# distinct addresses -> 31 conflict cycles per phase, 62 per wave instruction (the "fully
# conflicted b32" figure of S11); 16 waves -> 992. Index cycles: 2 per instruction plus
# conflicts: 16 * 2 (writes) + 16 * 64 (reads) = 1056. Rate = 3.125 * 992 / 64 = 48.4375 %.
# +1 padding: bank = (c + r) % 32, all distinct -> 0 conflicts, 64 index cycles.
@pytest.mark.parametrize("pad,conf,idx,rate", [(0, 992, 1056, 48.4375), (1, 0, 64, 0.0)])
def test_lds_transpose_bank_conflicts(pad, conf, idx, rate):
    r = simulate(mb.lds_transpose(32, pad), "gfx942")
    c = r.counters
    assert c["lds_bank_conflict_cycles"] == conf
    assert c["lds_idx_active_cycles"] == idx
    assert c["lds_bank_conflict_rate_pct"] == pytest.approx(rate)
    assert load_record(r, "lds_store")["conflict_cycles"] == 0
    assert load_record(r, "lds_load")["conflict_cycles"] == conf


# pyhip's LDS bank sweep (one 1024-thread workgroup: 16 waves), shortened to 20 reads per
# thread. Lane l reads dword l * stride: per 32-lane phase a stride of 2^k puts 2^k distinct
# dwords on each bank it uses (broadcast for stride 0, 32-way from 32 on), so a read costs
# 2 * (w - 1) conflict cycles: 16 waves * 20 reads * 2 * (w - 1). Thread 0 (lane 0) reads
# dword 0 every time: its sum is 20 * data[0].
@pytest.mark.parametrize("stride,ways", [(0, 1), (1, 1), (3, 1), (2, 2), (8, 8), (32, 32), (64, 32)])
def test_lds_bank_sweep_conflicts_and_sum(stride, ways):
    data = np.arange(7, 7 + mb.PYHIP_WORDS, dtype=np.int32)
    r = simulate(mb.lds_bank_sweep(iters=20), "gfx942",
                 inputs={"data": data, "indices": mb.bank_sweep_indices(stride)})
    assert r.counters["lds_bank_conflict_cycles"] == 16 * 20 * 2 * (ways - 1)
    assert r.outputs["out"][0] == 20 * 7


def test_lds_transpose_wave32_single_phase():
    # gfx1100: one phase of 32 lanes; 32 waves each fully conflicted (31) -> 992, and
    # index cycles 32 * 1 (writes) + 32 * 32 (reads) = 1056.
    c = simulate(mb.lds_transpose(32, 0), "gfx1100").counters
    assert c["lds_bank_conflict_cycles"] == 992 and c["lds_idx_active_cycles"] == 1056


def test_lds_access_pattern_view_matches_counts():
    k = mb.lds_transpose(32, 0)
    ap = access_pattern(k, "gfx942", 8, wave=3)  # statement 8 is the column LdsLoad
    assert ap["kind"] == "lds" and ap["conflict_cycles"] == 62
    assert ap["group_max_multiplicity"] == [32, 32]
    assert len({tuple(b) for b in ap["lane_banks"][:32]}) == 1  # all on one bank
    assert access_pattern(mb.lds_transpose(32, 1), "gfx942", 8)["conflict_cycles"] == 0


def test_same_address_broadcast():
    r = simulate(mb.lds_broadcast(), "gfx942")
    rec = load_record(r, "lds_load")
    assert rec["conflict_cycles"] == 0 and rec["lds_idx_cycles"] == 2  # calibration: 2 cycles
    assert np.all(r.outputs["out"] == 3.0)


def test_ds_read_b128_measured_phase_groups():
    # see mb.lds_b128_pattern: 0 conflicts with the measured read grouping, 1 per
    # contiguous 8-lane write group (8 groups) -> 8. Index cycles = 8 groups + conflicts.
    rd = load_record(simulate(mb.lds_b128_pattern(False), "gfx942"), "lds_load")
    wr = load_record(simulate(mb.lds_b128_pattern(True), "gfx942"), "lds_store")
    assert (rd["conflict_cycles"], rd["lds_idx_cycles"]) == (0, 8)
    assert (wr["conflict_cycles"], wr["lds_idx_cycles"]) == (8, 16)


def _one_wave_kernel(lds_bytes=0, block=64):
    lds = (LdsArray("s", "f32", (lds_bytes // 4,)),) if lds_bytes else ()
    return Kernel("k", (Buffer("o", "f32", (block,), "out"),), grid=1, block=block,
                  body=(Store("o", thread_id(), (f32(1.0),)),), lds=lds)


# waves per SIMD = min(8, 512 // roundup(v, 8)) on CDNA (S9).
@pytest.mark.parametrize("v,waves", [(1, 8), (64, 8), (65, 7), (72, 7), (80, 6), (96, 5), (128, 4),
                                     (129, 3), (168, 3), (170, 2), (256, 2), (257, 1), (512, 1)])
def test_vgpr_occupancy_table_cdna(v, waves):
    occ = occupancy(_one_wave_kernel(block=256), "gfx942", vgprs=v)  # 4 waves: no barrier limit
    assert occ.waves_per_simd == waves
    assert occ.limiter == ("wave slots" if v <= 64 else "VGPRs")


# gfx1100: min(16, 1536 // roundup(v, 24)) (S9)
@pytest.mark.parametrize("v,waves", [(24, 16), (96, 16), (97, 12), (192, 8), (256, 5)])
def test_vgpr_occupancy_table_rdna3(v, waves):
    assert occupancy(_one_wave_kernel(block=64), "gfx1100", vgprs=v).waves_per_simd == waves


def test_occupancy_lds_and_barrier_limits():
    occ = occupancy(_one_wave_kernel(lds_bytes=40 * 1024, block=256), "gfx942", vgprs=8)
    assert (occ.workgroups_per_cu, occ.waves_per_simd, occ.limiter) == (1, 1.0, "LDS")
    occ = occupancy(_one_wave_kernel(block=64), "gfx942", vgprs=8)
    # one-wave workgroups use no barrier (LLVM getMaxWorkGroupsPerCU, D138443): 32 fit
    assert (occ.workgroups_per_cu, occ.waves_per_simd) == (32, 8.0)
    assert occ.limiter == "wave slots"
    occ = occupancy(_one_wave_kernel(block=128), "gfx942", vgprs=8)
    # two-wave workgroups do use barriers: 16 per CU, as many as the wave slots hold
    assert (occ.workgroups_per_cu, occ.waves_per_simd) == (16, 8.0)
    assert occ.limits["workgroups per CU (barriers)"] == 8.0
    with pytest.raises(KernelError, match="does not fit"):
        occupancy(_one_wave_kernel(block=1024), "gfx942", vgprs=256)


def test_vgpr_estimate_live_ranges():
    # strided_load: gid (per-lane) + x0 + acc live at once = 3, plus 1 index temporary at
    # the load is also 3; + v0 + 1 address VGPR = 5.
    assert estimate_vgprs(mb.strided_load(1), "gfx942") == 5
    # each extra live accumulator in a loop costs exactly one VGPR
    from gpusim.program import Assign, For, Load, Var, block_id, fma
    def accs(n):
        acc = [Var(f"a{i}") for i in range(n)]
        x, k, tot = Var("x"), Var("k", "i32"), Var("tot")
        body = tuple(Assign(a, f32(0.0)) for a in acc) + (
            For(k, 0 * block_id(), 8 + 0 * block_id(), 1,
                (Load((x,), "i", k * 64 + thread_id()),) + tuple(Assign(a, fma(x, x, a)) for a in acc)),
            Assign(tot, f32(0.0))) + tuple(Assign(tot, tot + a) for a in acc) + (
            Store("o", thread_id(), (tot,)),)
        return Kernel("accs", (Buffer("i", "f32", (512,)), Buffer("o", "f32", (64,), "out")),
                      grid=1, block=64, body=body)
    est = [estimate_vgprs(accs(n), "gfx942") for n in (4, 5, 6, 32)]
    assert est[1] - est[0] == 1 and est[2] - est[1] == 1 and est[3] - est[0] == 28


def test_vgpr_estimate_index_tree_needs_its_sethi_ullman_number():
    # a gather through a chain of views: ((((g / 32) % 8) * 8 + (g / 32) / 8) * 32 + ...
    # 24 levels, each one operator over the chain and a constant, except every third
    # level adds a second subtree of its own (two registers while it is computed). The
    # tree needs 2 registers (Sethi & Ullman 1970), not one per node: loaded value + g +
    # 2 = 4 live, + v0 + the address VGPR = 6; counting nodes gave 68
    from gpusim.program import Assign, Load, Var
    g, x = Var("g", "i32"), Var("x")
    idx = g
    for level in range(24):
        idx = (idx // 2 + (g % 8) * 4) if level % 3 == 0 else (idx * 3 + 1)
    body = (Assign(g, block_id() * 64 + thread_id()), Load((x,), "i", idx % 4096),
            Store("o", g, (x,)))
    k = Kernel("gather", (Buffer("i", "f32", (4096,)), Buffer("o", "f32", (64,), "out")),
               grid=1, block=64, body=body)
    assert estimate_vgprs(k, "gfx942") == 6


def test_vgpr_estimate_keeps_guards_on_the_workgroup_id():
    # LLVM knows the work-item id's range from the workgroup size (launch bounds), never
    # the grid's: a guard on block_id stays, with the registers it guards, although the
    # grid of one workgroup makes it always false (a split-K reduce's column guards)
    from gpusim.program import Assign, If, Load, Var
    xs = [Var(f"x{i}") for i in range(16)]
    col = block_id() * 64 + thread_id() + 64
    body = tuple(Load((x,), "i", thread_id() + 64 * i) for i, x in enumerate(xs)) + (
        If(col < 64, tuple(Store("o", thread_id() + 64 * i, (x,)) for i, x in enumerate(xs))),)
    k = Kernel("guarded", (Buffer("i", "f32", (1024,)), Buffer("o", "f32", (1024,), "out")),
               grid=1, block=64, body=body)
    # at the guard: 16 loaded values + 1 for the per-lane column it compares + v0 + the
    # address VGPR (deciding the guard on the grid made the loads dead: 2)
    assert estimate_vgprs(k, "gfx942") == 19


def test_vgpr_estimate_sinks_values_used_in_one_guarded_block():
    # a split-K reduce in miniature: 16 partials summed 4 by 4 (acc = 0, then one sum),
    # then 4 guarded bias loads, then 4 guarded stores of acc + bias. LLVM sinks each
    # sum into the one guarded block that reads it (Sink.cpp), so all 16 partials stay
    # live across the bias loads: 16 + 3 earlier biases + the loaded one + 1 for the
    # per-lane guard = 21, + v0 + the address VGPR = 23 (12 with the sums where the IR
    # puts them). A guard that one side decides (``t + 64 < 64 && block_id < 1``) is
    # dead code although the workgroup id's side is unknown: the 8 values only its
    # store reads take no register (31 if they did).
    from gpusim.program import Assign, If, Load, Var
    t = thread_id()
    ps = [Var(f"p{i}") for i in range(16)]
    accs, bias = [Var(f"acc{j}") for j in range(4)], [Var(f"b{j}") for j in range(4)]
    body = tuple(Load((p,), "part", t + 64 * i) for i, p in enumerate(ps))
    body += tuple(Assign(a, f32(0.0)) for a in accs) + tuple(
        Assign(a, ps[4 * j] + ps[4 * j + 1] + ps[4 * j + 2] + ps[4 * j + 3])
        for j, a in enumerate(accs))
    body += tuple(Assign(b, f32(0.0)) for b in bias) + tuple(
        If(t < 60 + j, (Load((b,), "bias", t + j),)) for j, b in enumerate(bias))
    body += tuple(If(t < 60 + j, (Store("o", t + 64 * j, (a + b,)),))
                  for j, (a, b) in enumerate(zip(accs, bias)))
    qs = [Var(f"q{i}") for i in range(8)]  # read only by the dead store: dead code too
    body = tuple(Load((q,), "part", t + 64 * i + 1) for i, q in enumerate(qs)) + body
    dead = If(BinOp("land", t + 64 < 64, block_id() < 1),
              tuple(Store("o", t + 64 * j, (q,)) for j, q in enumerate(qs)))
    k = Kernel("reduce", (Buffer("part", "f32", (1024,)), Buffer("bias", "f32", (128,)),
                          Buffer("o", "f32", (1024,), "out")), grid=1, block=64,
               body=body + (dead,))
    assert estimate_vgprs(k, "gfx942") == 23


def test_vgpr_estimate_of_a_free_tile_meets_the_schedulers_occupancy_target():
    # one straight-line K tile between barriers: 16 fragment tuples read, then 64 FMAs
    # into 16 accumulators, then the stores. In program order 64 fragment VGPRs and 16
    # accumulators are among the 81 live at the peak (83 with v0 and the address VGPR).
    # 10 KiB of LDS allow 6 workgroups
    # of 4 waves per CU, 6 waves per SIMD, so LLVM's scheduler reorders the reads into
    # the tuples the FMAs free down to 512 / 6 -> 80 VGPRs (hipcc: 75 for the split-K
    # partial tile this stands for). With 16 KiB the target is 4 waves (128 VGPRs): the
    # program order fits, nothing is reordered (83).
    from gpusim.program import Assign, Barrier, LdsLoad, Var, fma
    t = thread_id()
    acc = [[Var(f"acc{i}_{j}") for j in range(4)] for i in range(4)]
    a = [[[Var(f"a{g}_{i}_{c}") for c in range(4)] for i in range(4)] for g in range(4)]
    b = [[[Var(f"b{g}_{j}_{c}") for c in range(4)] for j in range(4)] for g in range(4)]
    body = [Assign(x, f32(0.0)) for row in acc for x in row] + [Barrier()]
    for g in range(4):
        body += [LdsLoad(tuple(a[g][i]), "lds", (t % 16 + 16 * i) * 20 + 4 * g)
                 for i in range(4)]
        body += [LdsLoad(tuple(b[g][j]), "lds", 1280 + (t // 16 + 16 * j) * 20 + 4 * g)
                 for j in range(4)]
        if g:
            body += [Assign(acc[i][j], fma(a[g - 1][i][c], b[g - 1][j][c], acc[i][j]))
                     for c in range(4) for i in range(4) for j in range(4)]
    body += [Assign(acc[i][j], fma(a[3][i][c], b[3][j][c], acc[i][j]))
             for c in range(4) for i in range(4) for j in range(4)]
    body += [Barrier()] + [Store("o", t + 256 * (4 * i + j), (acc[i][j],))
                           for i in range(4) for j in range(4)]

    def tile(lds_floats):
        return Kernel("tile", (Buffer("o", "f32", (4096,), "out"),), grid=1, block=256,
                      body=tuple(body), lds=(LdsArray("lds", "f32", (lds_floats,)),))
    assert estimate_vgprs(tile(2560), "gfx942") == 80
    assert estimate_vgprs(tile(4096), "gfx942") == 83


@pytest.mark.parametrize("arch,valu", [("gfx942", 4), ("gfx1100", 1)])
def test_barrier_bound_imbalance(arch, valu):
    # wave 0 runs `work` dependent fma (4 cycles each on SIMD16, 1 on SIMD32) before the
    # barrier; the other waves wait for it: their wait grows by exactly work * valu cycles.
    def waits(work):
        r = simulate(mb.barrier_imbalance(work), arch, trace=True)
        return sorted(e["end"] - e["start"] for e in r.trace if e["kind"] == "barrier_wait"), r.cycles
    (w0, c0), (w1, c1) = waits(0), waits(500)
    assert w1[-1] - w0[-1] == 500 * valu
    assert c1 - c0 == 500 * valu


def test_barrier_loop_counts_and_linear_time():
    rs = [simulate(mb.barrier_loop(n), "gfx942") for n in (100, 200, 300)]
    assert [r.counters["barriers"] for r in rs] == [400, 800, 1200]  # 4 waves each
    d1, d2 = rs[1].cycles - rs[0].cycles, rs[2].cycles - rs[1].cycles
    assert d1 == d2 > 0


def test_stream_approaches_achievable_bandwidth():
    # 2^24 f32 per array (128 MiB together) fits MI300X's 256 MB MALL: the copy runs at
    # the MALL's measured read/write rates (mt4g), not at HBM's 5.3 TB/s datasheet peak
    from gpusim.hw import get_arch
    a = get_arch("gfx942")
    ratios = []
    for n in (1 << 16, 1 << 20, 1 << 24):
        r = simulate(mb.stream_copy(n), a, functional=False)
        ideal_us = 2 * n * 4 / a.stream_bytes_per_s(2 * n * 4) * 1e6
        ratios.append(r.time_us_without_launch / ideal_us)
        assert r.counters["hbm_bytes"] == pytest.approx(2 * n * 4)
        assert "MALL bandwidth" in r.method or n < (1 << 24)
    assert ratios[0] > ratios[1] >= ratios[2]
    assert ratios[2] == pytest.approx(1.0, abs=0.05)
    assert r.time_us == pytest.approx(r.time_us_without_launch + 3.5)


def test_launch_overhead_is_a_parameter():
    k = mb.strided_load(1)
    a = simulate(k, "gfx942", launch_overhead_us=0.0)
    b = simulate(k, "gfx942", launch_overhead_us=7.0)
    assert b.time_us - a.time_us == pytest.approx(7.0)
    assert a.time_us == a.time_us_without_launch


@settings(max_examples=60, deadline=None)
@given(data=st.data(), es=st.sampled_from([4, 8]), width=st.sampled_from([1, 2, 4]),
       wc_store=st.tuples(st.integers(0, 2), st.booleans()), shift=st.integers(-64, 64))
def test_lds_conflicts_depend_only_on_the_relative_pattern(data, es, width, wc_store, shift):
    """The engine memoises an LDS instruction's bank conflicts by its lanes' element indices
    relative to the first active lane (``engine.exec_lds``), valid when elements are whole
    dwords: shifting every lane's index by the same amount must not change the count."""
    arch = get_arch("gfx942")
    W = arch.wave_size
    _, n_groups, group_lanes = _group_tables(arch)
    wc, store = wc_store
    rw = 1 if store else 0
    ng = int(n_groups[rw, wc])
    idx = np.array(data.draw(st.lists(st.integers(-1, 300), min_size=W, max_size=W)), np.int64)
    active = idx >= 0  # -1: an inactive lane

    def count(offset):
        return engine.lds_conflicts(np.where(active, idx + offset, -1), 64, es, width * es, arch.lds_banks,
                               ng, W // ng, group_lanes[rw, wc], np.zeros(4 * W, np.int64),
                               np.zeros(arch.lds_banks, np.int64))

    assert count(100) == count(100 + shift)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), line=st.sampled_from([64, 128]), nbytes=st.sampled_from([2, 4, 8, 16]),
       shift=st.integers(-50, 50))
def test_coalescing_memo_equals_the_direct_count(data, line, nbytes, shift):
    """The engine memoises a VMEM instruction's coalescing (unique lines, TCP accesses,
    active quads and the sorted lines) by its lanes' lines relative to the first active
    lane's (``engine.exec_vmem``): the direct count of a pattern shifted by whole lines
    must equal the memoised one, the stored lines shifted back."""
    W = 64
    addrs = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 4096)), min_size=W, max_size=W))

    def direct(offset):
        lo, hi = np.full(W, -1, np.int64), np.zeros(W, np.int64)
        lines, n = np.zeros(2 * W, np.int64), 0
        for l, a in enumerate(addrs):
            if a is None:
                continue
            a += offset * line
            lo[l], hi[l] = a // line, (a + nbytes - 1) // line
            lines[n] = lo[l]
            n += 1
            if hi[l] != lo[l]:
                lines[n] = hi[l]
                n += 1
        nu, tcp, quads = engine.coalesce(lo, hi, W, lines, n, np.zeros(8, np.int64))
        return nu, tcp, quads, lines[:nu]

    base = 200
    nu, tcp, quads, lines = direct(base)  # what the memo stores, relative to the first lane
    first = next((a for a in addrs if a is not None), None)
    lo0 = 0 if first is None else (first + base * line) // line
    rel = lines - lo0
    nu2, tcp2, quads2, lines2 = direct(base + shift)
    lo0_2 = 0 if first is None else (first + (base + shift) * line) // line
    assert (nu2, tcp2, quads2) == (nu, tcp, quads)
    assert np.array_equal(lines2, lo0_2 + rel)
    if first is not None:
        assert nu >= 1 and quads >= 1 and tcp >= nu
