"""The lessons' exercise checks, GPU-Puzzles style.

Each ``check_...`` takes the learner's answer (a kernel builder, an index function, a
schedule, a graph builder), runs it on the simulator, and returns a :class:`Verdict`:
whether it is right, why not, and the simulated time it achieves. Times are gpusim's
predictions in simulated microseconds, not measurements. ``tests/test_tutorials.py``
proves that each check rejects a wrong answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import gpusim
from gpusim import program


@dataclass
class Verdict:
    """The outcome of a check: ``ok``, the reasons it failed, and what the simulator saw
    (``time_us``: the kernel's simulated time without the launch overhead)."""
    ok: bool
    problems: list = field(default_factory=list)
    time_us: float | None = None
    facts: dict = field(default_factory=dict)

    def __str__(self):
        t = (f"kernel {self.time_us:.3f} simulated us, launch overhead not included"
             if self.time_us is not None else "not timed")
        facts = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in self.facts.items())
        head = f"{'PASS' if self.ok else 'FAIL'} ({t}; {facts})"
        return head + "".join(f"\n  - {p}" for p in self.problems)

    def __bool__(self):
        return self.ok


def _verdict(problems, res=None, **facts) -> Verdict:
    return Verdict(not problems, problems,
                   res.time_us_without_launch if res is not None else None, facts)


# ------------------------------------------------------------------ lesson 1: coalescing
def check_vector_copy(build, n: int = 64 * 1024, arch: str = "gfx942",
                      timed_n: int = 1 << 20) -> Verdict:
    """``build(n)`` returns a Kernel copying f32 buffer ``a`` to ``b`` (n elements).

    Right means: ``b == a`` (run on ``n`` elements); the fewest wave load instructions
    (16 B per lane, n / 256 of them); and the fewest cache lines (n * 4 / line size),
    i.e. 100 % coalescing. The verdict's time is of a ``timed_n``-element copy (4 MiB):
    a copy that large is bound by memory, so every correct copy takes about the same
    time, and what 16-byte accesses save shows as ``cu_cycles``, the cycles the CU needs
    to issue the copy (lesson 1's "slack").
    """
    try:
        k = build(n)
        a = np.arange(n, dtype=np.float32)
        res = gpusim.simulate(k, arch, inputs={"a": a})
        timed = gpusim.simulate(build(timed_n), arch, functional=False)
    except (gpusim.KernelError, KeyError, TypeError, ValueError) as e:
        return Verdict(False, [f"the kernel does not run: {e}"])
    c = res.counters
    line = gpusim.get_arch(arch).l1_line_bytes
    problems = []
    if not np.array_equal(np.asarray(res.outputs["b"]).reshape(-1), a):
        problems.append("b != a: some element is copied to the wrong place or not at all")
    if c["global_load_requests"] > n // 256:
        problems.append(f"{c['global_load_requests']:.0f} wave load instructions; "
                        f"16 B per lane needs only {n // 256}")
    if c["global_load_lines"] > n * 4 // line:
        problems.append(f"{c['global_load_lines']:.0f} cache lines loaded; the data spans "
                        f"{n * 4 // line} lines of {line} B")
    return _verdict(problems, timed, load_insts=c["global_load_requests"],
                    lines=c["global_load_lines"], coalescing_pct=c["coalescing_pct"],
                    cu_cycles=timed.bounds["cu"], memory_cycles=round(timed.bounds["hbm"]))


# ---------------------------------------------------------------- lesson 2: LDS banks
def transpose_kernel(swizzle=None, pad: int = 0, n: int = 64) -> program.Kernel:
    """out = inp.T for an n x n f32 matrix through a 32 x 32 LDS tile per workgroup.

    Thread (r, c) of the 1024-thread workgroup writes tile row r, column ``swizzle(r, c)``
    (``c`` when ``swizzle`` is None), then reads element (c, r) of the tile back at
    column ``swizzle(c, r)``; ``pad`` extra floats end every tile row.
    """
    T = 32
    tiles = n // T
    sw = swizzle or (lambda row, col: col)
    tid, r, c, bi, bj = (program.Var(x, "i32") for x in ("tid", "r", "c", "bi", "bj"))
    x = program.Var("x")
    body = (
        program.Assign(tid, program.thread_id()), program.Assign(r, tid // T), program.Assign(c, tid % T),
        program.Assign(bi, program.block_id() // tiles), program.Assign(bj, program.block_id() % tiles),
        program.Load((x,), "inp", (bi * T + r) * n + bj * T + c),
        program.LdsStore("tile", r * (T + pad) + sw(r, c), (x,)),
        program.Barrier(),
        program.LdsLoad((x,), "tile", c * (T + pad) + sw(c, r)),
        program.Store("out", (bj * T + r) * n + bi * T + c, (x,)),
    )
    return program.Kernel(f"transpose_pad{pad}{'_swizzled' if swizzle else ''}",
                    (program.Buffer("inp", "f32", (n, n)), program.Buffer("out", "f32", (n, n), "out")),
                    grid=tiles * tiles, block=T * T, body=body,
                    lds=(program.LdsArray("tile", "f32", (T, T + pad), padding=pad),))


def check_transpose_swizzle(swizzle, arch: str = "gfx942") -> Verdict:
    """``swizzle(row, col)`` -> the tile column (an i32 expression) where element
    (row, col) is stored. Right means: a correct transpose, no padding (4 KiB of LDS),
    and zero bank-conflict cycles for both the row writes and the column reads."""
    try:
        k = transpose_kernel(swizzle, pad=0)
        inp = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
        res = gpusim.simulate(k, arch, inputs={"inp": inp})
    except (gpusim.KernelError, TypeError, ValueError) as e:
        return Verdict(False, [f"the kernel does not run: {e}"])
    c = res.counters
    problems = []
    if not np.array_equal(res.outputs["out"], inp.T):
        problems.append("out != inp.T: the swizzle must map each row's 32 columns to 32 "
                        "distinct columns of the same row (a permutation)")
    if c["lds_bank_conflict_cycles"] > 0:
        problems.append(f"{c['lds_bank_conflict_cycles']:.0f} bank-conflict cycles; "
                        "a conflict-free swizzle has 0")
    return _verdict(problems, res, conflict_cycles=c["lds_bank_conflict_cycles"],
                    lds_bytes=k.lds_bytes)


# ------------------------------------------------------- lesson 3: occupancy and latency
GATHER_GRID, GATHER_BLOCK, GATHER_LOADS = 304 * 8, 256, 4
GATHER_N = GATHER_GRID * GATHER_BLOCK  # out[i] = sum_j a[i + j * GATHER_N]


def gather_serial(lds_kib: int = 0) -> program.Kernel:
    """out[i] = sum of a[i + j * N], j < 4, each load used right after it is issued.

    ``lds_kib`` declares an LDS array of that size (touched by one lane so it is real): a
    stand-in for a kernel that needs LDS, and what limits its occupancy.
    """
    i, j = program.Var("i", "i32"), program.Var("j", "i32")
    x, acc = program.Var("x"), program.Var("acc")
    body = [program.Assign(i, program.block_id() * GATHER_BLOCK + program.thread_id()), program.Assign(acc, program.f32(0.0)),
            program.For(j, 0 * program.block_id(), GATHER_LOADS + 0 * program.block_id(), 1,
                  (program.Load((x,), "a", j * GATHER_N + i), program.Assign(acc, acc + x)))]
    return gather_kernel("gather_serial", body, acc, i, lds_kib)


def gather_kernel(name, body, acc, i, lds_kib):
    """Adds the LDS stand-in and the store, and declares the buffers."""
    body = list(body)
    lds = ()
    if lds_kib:
        lds = (program.LdsArray("scratch", "f32", (lds_kib * 256,)),)
        body.append(program.If(program.thread_id().eq(0), (program.LdsStore("scratch", program.thread_id(), (acc,)),)))
    body.append(program.Store("out", i, (acc,)))
    return program.Kernel(f"{name}_lds{lds_kib}",
                    (program.Buffer("a", "f32", (GATHER_LOADS * GATHER_N,)),
                     program.Buffer("out", "f32", (GATHER_N,), "out")),
                    grid=GATHER_GRID, block=GATHER_BLOCK, body=tuple(body), lds=lds)


def check_latency_hiding(build, arch: str = "gfx942") -> Verdict:
    """``build(lds_kib)`` returns a gather kernel like :func:`gather_serial`. Right means:
    the same sums, the 33 KiB LDS array kept (so one wave per SIMD), and at most half the
    simulated time of ``gather_serial(33)``."""
    try:
        k = build(33)
        a = np.random.default_rng(1).random(GATHER_LOADS * GATHER_N, dtype=np.float32)
        res = gpusim.simulate(k, arch, inputs={"a": a})
        timed = gpusim.simulate(k, arch, functional=False)
    except (gpusim.KernelError, TypeError, ValueError, KeyError) as e:
        return Verdict(False, [f"the kernel does not run: {e}"])
    serial = gpusim.simulate(gather_serial(33), arch, functional=False)
    want = a.reshape(GATHER_LOADS, GATHER_N).sum(axis=0)
    problems = []
    if not np.allclose(res.outputs["out"], want, rtol=1e-5):
        problems.append("out is not the sum of the 4 gathered elements")
    if k.lds_bytes < 33 * 1024:
        problems.append(f"the kernel declares {k.lds_bytes} B of LDS; keep the 33 KiB array "
                        "(the point is to hide latency at low occupancy)")
    if timed.time_us_without_launch > 0.5 * serial.time_us_without_launch:
        problems.append(f"{timed.time_us_without_launch:.2f} simulated us is more than half of "
                        f"the serial gather's {serial.time_us_without_launch:.2f} us")
    v = _verdict(problems, timed, waves_per_simd=timed.occupancy_waves_per_simd,
                 vgprs=timed.vgprs, serial_us=round(serial.time_us_without_launch, 3))
    return v


# --------------------------------------------------- lesson 4: an elementwise schedule
def check_schedule(graph, knobs: dict, arch: str = "gfx942", slack: float = 1.2,
                   budget: int | None = None) -> Verdict:
    """``knobs``: a schedule for the single dispatch of ``graph``'s aggressive plan.
    Right means: legal, functionally equal to the numpy reference, and within ``slack``
    times the simulated kernel time of the best candidate of the schedule space (all of
    it, or a seeded sample of ``budget`` candidates)."""
    from compiler.lower import LoweringError, lower
    from compiler.fusion import fuse
    from compiler.tuning.search import tune_dispatches, verify_dispatches

    arch = gpusim.get_arch(arch)  # the checker is an entry point: resolved once, here
    plan = fuse(graph, aggressive=True)
    if plan.num_dispatches != 1:
        return Verdict(False, [f"the graph fuses into {plan.num_dispatches} dispatches, not 1"])
    d = plan.dispatches[0]
    best = tune_dispatches(graph, [d], arch, budget=budget)[0]
    try:
        kernel = lower(graph, d, dict(knobs), arch)
        res = gpusim.simulate(kernel, arch, functional=False)
    except (LoweringError, gpusim.KernelError) as e:
        return Verdict(False, [f"illegal schedule {knobs}: {e}"])
    mine = type(best)(best.name, best.kind, d, best.best, best.candidates, best.illegal, kernel)
    verify_dispatches(graph, [mine], arch)
    problems = []
    if not mine.verified:
        problems.append(f"wrong values: max error {mine.max_error:g} against numpy")
    lo = res.launch_overhead_us  # compare kernel times: the launch costs every schedule the same
    best_us = best.best.time_us - lo
    if res.time_us_without_launch > slack * best_us:
        problems.append(f"{res.time_us_without_launch:.3f} simulated us is over {slack} x the "
                        f"best schedule's {best_us:.3f} us ({best.best.knobs})")
    rank = 1 + sum(c.time_us < res.time_us for c in best.candidates)
    return _verdict(problems, res, rank=f"{rank} of {len(best.candidates)}",
                    best_us=round(best_us, 3))


def check_elementwise_schedule(graph, knobs: dict, arch: str = "gfx942",
                               slack: float = 1.1) -> Verdict:
    """Lesson 4's check: :func:`check_schedule` over the whole space, within 1.1x of the
    best (the lesson's starting point, four scalar elements per thread, is 1.41x)."""
    return check_schedule(graph, knobs, arch, slack=slack)


# --------------------------------------------------------------- lesson 6: layer norm
def check_layer_norm(build, rows: int = 64, cols: int = 1024, arch: str = "gfx942",
                     budget: int = 8) -> Verdict:
    """``build(g, x, res, gamma, beta)`` adds primitive ops to Graph ``g`` and returns
    the value ``layer_norm(x + res) * gamma + beta`` (eps 1e-5, over the last axis).
    Right means: numpy-equal to that formula, one dispatch under aggressive fusion, and
    the tuned kernel verified by gpusim; the verdict's time is the tuned kernel's."""
    from compiler.ir.graph import Graph, GraphError
    from compiler.fusion import fuse
    from compiler.ir.reference import evaluate, random_inputs
    from compiler.tuning.search import tune

    g = Graph("learner_layer_norm")
    x, res = g.input("x", (rows, cols)), g.input("res", (rows, cols))
    gamma, beta = g.input("gamma", (cols,)), g.input("beta", (cols,))
    try:
        g.output(build(g, x, res, gamma, beta))
        inputs = random_inputs(g, seed=3)
        got = np.asarray(next(iter(evaluate(g, inputs).values())), np.float64)
    except (GraphError, TypeError, ValueError) as e:
        return Verdict(False, [f"the graph does not build or run: {e}"])
    h = inputs["x"].astype(np.float64) + inputs["res"]
    mu = h.mean(-1, keepdims=True)
    want = (h - mu) / np.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = want * inputs["gamma"] + inputs["beta"]
    if got.shape != want.shape or not np.allclose(got, want, atol=1e-3):
        return Verdict(False, ["the graph does not compute layer_norm(x + res) * gamma + beta"])
    plan = fuse(g, aggressive=True)
    if plan.num_dispatches != 1:
        return Verdict(False, [f"{plan.num_dispatches} dispatches under aggressive fusion, not 1"])
    t = tune(g, arch, budget=budget, mode="aggressive", baseline=False)
    d = t.dispatches[0]
    problems = [] if d.verified else [f"the tuned kernel differs from numpy by {d.max_error:g}"]
    return Verdict(not problems, problems, d.best.time_us - t.launch_overhead_us,
                   dict(dispatches=1, schedule=" ".join(f"{k}={v}" for k, v in d.best.knobs.items())))


# ----------------------------------------------------------- lesson 10: HIP and the ISA
def check_isa_vector_loads(build, n: int = 64 * 1024, arch: str = "gfx90a") -> Verdict:
    """``build(n)`` returns a copy kernel as in lesson 1. Right means: gpusim copies
    correctly, and hipcc compiles the emitted HIP for ``arch`` into 16-byte global loads
    and stores only (``global_load_dwordx4``), with no scratch. Needs hipcc."""
    import tempfile
    from pathlib import Path

    from codegen_hip import emit_kernel, parse_asm
    from codegen_hip.check import compile_to_asm, hipcc_path

    if hipcc_path() is None:
        return Verdict(False, ["hipcc is not installed: the ISA cannot be checked here"])
    first = check_vector_copy(build, n)
    problems = [p for p in first.problems if "b != a" in p]
    k = build(n)
    with tempfile.TemporaryDirectory(prefix="wavefuse-lesson10-") as tmp:
        src, asm = Path(tmp) / "copy.hip", Path(tmp) / "copy.s"
        src.write_text(emit_kernel(k, arch))
        res = compile_to_asm(src, arch, asm)
        if res["rc"] != 0:
            return Verdict(False, [f"hipcc failed: {res['stderr'][:300]}"])
        isa = parse_asm(asm.read_text())
    loads, stores = isa["widths"]["global_load"], isa["widths"]["global_store"]
    if set(loads) != {16} or set(stores) != {16}:
        problems.append(f"hipcc emitted global loads of {sorted(loads)} B and stores of "
                        f"{sorted(stores)} B per lane; want only 16 B (dwordx4)")
    if isa["scratch_insts"]:
        problems.append(f"{isa['scratch_insts']} scratch instructions (register spills)")
    return Verdict(not problems, problems, first.time_us,
                   dict(isa_loads=loads, isa_stores=stores, vgprs=isa.get("vgprs")))


# ------------------------------------------------------- lesson 9: the output swizzle
SWIZZLE_TILE = dict(BM=16, BN=32, BK=64, TM=2, TN=4, KW=8, lds_pad=4, vec_a=4, vec_b=4)


def swizzle_run(model: str, swizzle: str, arch: str = "gfx942"):
    """(kernel, timing-mode SimResult) of ``model`` (a built-in conv model) with the fixed
    tile ``SWIZZLE_TILE`` and the given output-swizzle placement."""
    from compiler.lower import lower
    from compiler.ir.models import load_model
    from compiler.fusion import fuse

    g = load_model(model)
    d = fuse(g, aggressive=True).dispatches[0]
    k = lower(g, d, {**SWIZZLE_TILE, "swizzle": swizzle}, arch)
    return k, gpusim.simulate(k, arch, functional=False)


def check_swizzle_placement(swizzle: str, arch: str = "gfx942") -> Verdict:
    """For ``conv_add_relu`` (residual in the output's layout) with ``SWIZZLE_TILE``: right
    means every global access is fully coalesced (100 %) and the kernel is predicted
    faster than with the swizzle after the fused epilogue."""
    from compiler.lower import LoweringError
    try:
        _, mine = swizzle_run("conv_add_relu", swizzle, arch)
    except (LoweringError, gpusim.KernelError) as e:
        return Verdict(False, [f"swizzle={swizzle!r} does not lower: {e}"])
    _, after = swizzle_run("conv_add_relu", "after_fusion", arch)
    c = mine.counters
    problems = []
    if c["coalescing_pct"] < 100.0:
        problems.append(f"coalescing {c['coalescing_pct']:.1f} %: some global access is split "
                        "over more lines than it needs")
    if mine.time_us >= after.time_us:
        problems.append(f"{mine.time_us_without_launch:.3f} simulated us is not faster than "
                        f"after_fusion's {after.time_us_without_launch:.3f} us")
    return _verdict(problems, mine, coalescing_pct=round(c["coalescing_pct"], 1),
                    vmem_insts=c["vmem_insts"])


# ------------------------------------------------------ lesson 8: attention in one dispatch
def check_online_softmax(update, seed: int = 0) -> Verdict:
    """``update(m, l, acc, x, v)`` folds one block of keys into a row's running state:
    ``m`` the running maximum, ``l`` the running sum of exp(x - m), ``acc`` the running
    sum of exp(x - m) * v (a vector over the head dim); ``x`` the block's scores and ``v``
    its (keys x head dim) block of V. It returns the new ``(m, l, acc)``.

    Right means: starting from (-inf, 0, 0) and folding blocks in order, ``acc / l``
    equals ``softmax(x) @ V`` of the whole row to 1e-6 relative, for rows whose maximum
    rises from block to block (every rescale is exercised), falls, or sits behind a
    -1e4 additive mask, and for blocks of 1 to 64 keys.
    """
    rng = np.random.default_rng(seed)
    problems = []
    cases = {"rising maxima": np.linspace(-8, 8, 96) + rng.normal(0, 0.1, 96),
             "falling maxima": np.linspace(8, -8, 96) + rng.normal(0, 0.1, 96),
             "random": rng.normal(0, 3, 96),
             "masked tail": np.concatenate([rng.normal(0, 1, 40), rng.normal(0, 1, 56) - 1e4])}
    for name, x in cases.items():
        v = rng.normal(0, 1, (x.size, 16))
        p = np.exp(x - x.max())
        want = (p / p.sum()) @ v
        for block in (1, 7, 32, 64):
            m, l, acc = -np.inf, 0.0, np.zeros(16)
            try:
                for s in range(0, x.size, block):
                    m, l, acc = update(m, l, acc, x[s:s + block], v[s:s + block])
                got = np.asarray(acc, np.float64) / l
            except (ValueError, TypeError, ZeroDivisionError, FloatingPointError) as e:
                problems.append(f"{name}, blocks of {block}: the update fails: {e}")
                break
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-9):
                err = float(np.max(np.abs(np.resize(got, want.shape) - want)))
                problems.append(f"{name}, blocks of {block}: acc / l differs from softmax(x) @ V "
                                f"by {err:.3g} (is everything accumulated so far rescaled "
                                f"by exp(m_old - m_new)?)")
                break
    return Verdict(not problems, problems, None, {"cases": len(cases), "block sizes": 4})


# ---------------------------------------------------------- lesson 7: GEMM and matrix cores
def check_gemm_schedule(knobs: dict, arch: str = "gfx942", speedup: float = 2.0) -> Verdict:
    """``knobs``: a contraction schedule (``compiler.lessons.gemm.BASE`` updated with
    them) for lesson 7's 2048 x 2048 x 512 GEMM. Right means: it lowers; on a 128 x 128 x
    64 GEMM of the same schedule gpusim's values equal numpy's within f32 rounding; and at
    full size it is predicted at least ``speedup`` times faster than the lesson's FMA
    micro-tile kernel (64 x 64 tiles, 4 x 4 per thread)."""
    from compiler.lessons import gemm
    from compiler.lower import LoweringError

    try:
        small = gemm.lowered(knobs, 128, 128, 64, arch)
        full = gemm.lowered(knobs, arch=arch)
    except (LoweringError, gpusim.KernelError, TypeError, ValueError, KeyError) as e:
        return Verdict(False, [f"the schedule {knobs} does not lower: {e}"])
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64), dtype=np.float32)
    b = rng.standard_normal((64, 128), dtype=np.float32)
    res = gpusim.simulate(small, arch, inputs={"a": a, "b": b})
    out = next(v for name, v in res.outputs.items() if name not in ("a", "b"))
    problems = []
    want = a.astype(np.float64) @ b
    err = float(np.max(np.abs(np.asarray(out, np.float64).reshape(want.shape) - want)))
    if err > 1e-3:
        problems.append(f"wrong values on a 128 x 128 x 64 GEMM: max error {err:.3g}")
    mine = gemm.simulate(full, arch)
    ref = gemm.simulate(gemm.lowered(dict(BM=64, BN=64, TM=4, TN=4), arch=arch), arch)
    t, t_ref = mine.time_us_without_launch, ref.time_us_without_launch
    if t * speedup > t_ref:
        problems.append(f"{t:.1f} simulated us is not {speedup:g}x faster than the FMA "
                        f"micro-tiles' {t_ref:.1f} us")
    return _verdict(problems, mine, speedup=round(t_ref / t, 2),
                    waves_per_simd=mine.occupancy_waves_per_simd, vgprs=mine.vgprs)


def check_isa_fma(build, n: int = 64 * 1024, arch: str = "gfx90a") -> Verdict:
    """``build(n)`` returns a kernel computing ``out = a * b + c`` over ``n`` f32 elements
    (buffers ``a``, ``b``, ``c`` and ``out``), 256 threads per workgroup, 8 elements per
    thread (``grid = n // 2048``). Right means: gpusim's values equal numpy's, and hipcc
    compiles the emitted HIP for ``arch`` into exactly six 16-byte global loads (two per
    input) and two 16-byte stores per thread, with no scratch. Needs hipcc."""
    import tempfile
    from pathlib import Path

    from codegen_hip import emit_kernel, parse_asm
    from codegen_hip.check import compile_to_asm, hipcc_path

    if hipcc_path() is None:
        return Verdict(False, ["hipcc is not installed: the ISA cannot be checked here"])
    rng = np.random.default_rng(5)
    ins = {x: rng.standard_normal(n, dtype=np.float32) for x in "abc"}
    try:
        k = build(n)
        res = gpusim.simulate(k, "gfx942", inputs=ins)
    except (gpusim.KernelError, KeyError, TypeError, ValueError) as e:
        return Verdict(False, [f"the kernel does not run: {e}"])
    problems = []
    want = ins["a"] * ins["b"] + ins["c"]
    if not np.allclose(np.asarray(res.outputs["out"]).reshape(-1), want, rtol=1e-6, atol=1e-6):
        problems.append("out != a * b + c")
    if k.grid != n // 2048 or k.block != 256:
        problems.append(f"grid {k.grid} x block {k.block}: want {n // 2048} x 256 "
                        "(8 elements per thread)")
    with tempfile.TemporaryDirectory(prefix="wavefuse-lesson10-") as tmp:
        src, asm = Path(tmp) / "fma.hip", Path(tmp) / "fma.s"
        src.write_text(emit_kernel(k, arch))
        out = compile_to_asm(src, arch, asm)
        if out["rc"] != 0:
            return Verdict(False, [f"hipcc failed: {out['stderr'][:300]}"])
        isa = parse_asm(asm.read_text())
    loads, stores = isa["widths"]["global_load"], isa["widths"]["global_store"]
    if loads != {16: 6} or stores != {16: 2}:
        problems.append(f"hipcc emitted global loads {loads} and stores {stores} "
                        "(bytes per lane: count); want {16: 6} and {16: 2}")
    if isa["scratch_insts"]:
        problems.append(f"{isa['scratch_insts']} scratch instructions (register spills)")
    return _verdict(problems, res, isa_loads=loads, isa_stores=stores, vgprs=isa.get("vgprs"))
