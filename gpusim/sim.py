"""``simulate``: runs a kernel on a modelled GPU and reports values, time and counters.

Workgroup placement: workgroup ``w`` runs on CU ``w % num_cus`` (the dispatcher deals
workgroups round-robin; on gfx942 this also deals them round-robin to XCDs, S2). CU 0
gets the most workgroups (``ceil(grid / num_cus)``) and is the *timed* CU.

Sessions. The engine simulates one CU at a time ("session"): CU 0 first, with a cold L1
and cold L2, then (functional mode) every other CU with the workgroups it owns, each
with a cold L1 and the L2 state left by the CUs before it. Every workgroup's values are
computed in functional mode; with ``functional=False`` only CU 0 runs, and only its
first ``sample`` workgroups when it owns more (3 rounds of resident workgroups), so the
outputs are then partial.

Atomics (``AtomicAdd``: split-K's arrival counters). Global memory is one array that
every executed instruction reads and writes at once, so an atomic's old value is the
counter's value when the engine executes it: the order of arrival is the engine's order
(sessions in turn, issue time within a session), deterministic. A kernel with atomics
runs every other CU's workgroups first (values only, their timing dropped) and the timed
CU 0 last, on the same memory: CU 0's workgroups then arrive last at every counter they
share with other CUs and run the last-arrival tail (the reduction and the epilogue),
which is the dispatch's critical path (SIMPLIFICATION: on hardware the last arrival is
whichever workgroup finishes its partial last; the model charges the tail after CU 0's
own partial, and CU 0 starts with a cold L2 as always, so the tail reads the other CUs'
partials from the memory level). In timing mode the other CUs run only their arrivals
(the kernel's slice that writes the counters, ``gpusim.arrivals``) and their counters
are estimated from CU 0's; ``exact_arrivals=True`` runs them whole, as functional mode
does. ``workgroups=`` runs all of them.

Memory level. Behind the L2 sits HBM, or, when every buffer of the kernel fits it, the
memory-side cache (MI300X's 256 MB MALL, RDNA3's Infinity Cache): SIMPLIFICATION, by
footprint and warm, as in a benchmark that runs the kernel repeatedly (the seed's
measurements, BabelStream, mt4g); an L2 miss then costs the MALL's latency and bandwidth.

Whole-GPU time (in cycles), the combination rule:
  T_cu   = CU 0's simulated time; when sampled, the time of the first K workgroups plus
           (n - K) times the steady per-workgroup time of the last sampled round. K is 3
           rounds of resident workgroups, doubled (up to 12 rounds) until the bound
           (n - K) x |last round's - previous round's per-workgroup time| is within 5% of
           T_cu; ``method`` states the rounds and the bound;
  T_mem  = bytes read / achievable read bandwidth + bytes written / achievable write
           bandwidth of the memory level (measured rates, ``Arch.memory_bytes_per_s``,
           not the datasheet peak: a stream reaches ~75-83% of MI300X's 5.3 TB/s);
  T_l2   = L2 read requests x L1 line / achievable L2 read bandwidth + L2 write requests
           x L1 line / achievable L2 write bandwidth (all L2s; one request per L1 line,
           64 B on gfx90a, 128 B on gfx942);
  cycles = max(T_cu, T_mem, T_l2); time_us = cycles / clock + launch overhead.
With ``extrapolate_loops=True`` (the search's scoring) a kernel's one long loop is cut to
a few trips and T_cu, the counters and the per-instruction records are extrapolated to
its full trip count from three such runs (``gpusim.steady``: rule, bound, when it falls
back to every trip); ``method`` names the cuts and ``loop_error_bound`` is the bound.
Inside T_cu each CU already gets only its share of the memory level's read bandwidth
(divided by the number of CUs that have work) and of its L2 instance's read bandwidth,
so a bandwidth-bound kernel's CU time approaches T_mem as the grid grows.

Counters are summed over every simulated workgroup; with sampling they are scaled by
grid / simulated workgroups (exact for workgroups that do the same work; L2 reuse between
workgroups on different CUs is then not seen, so HBM bytes are an upper bound). A kernel
with atomics: CU 0's sample is scaled to CU 0's workgroups (each of which runs its tile's
tail, unlike most of the others), and the other CUs' counters are CU 0's work outside the
tails per workgroup plus CU 0's cost per tail times the tails they run (``gpusim.arrivals``;
with ``exact_arrivals`` they are counted from a whole run, with the L2 reuse between them).
Model simplifications beyond the engine's: the memory-side cache is all-or-nothing by
footprint (above); the timed CU sees the L2 as if it were the first CU to touch every line
(pessimistic for data shared across CUs).
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gpusim import engine
from gpusim import arrivals, steady
from gpusim.compile import MEM_KIND, compile_kernel
from gpusim.errors import KernelError
from gpusim.hw import DEFAULT_ARCH, get_arch
from gpusim.occupancy import occupancy
from gpusim.program import (DTYPE_BYTES, Assign, AtomicAdd, Kernel, KernelSequence, LdsLoad,
                            LdsStore, Load, Mfma, Shuffle, Store, WaveReduce, walk)
from gpusim.validate import validate

TRACE_KINDS = ("valu", "vmem", "lds", "salu", "barrier_wait", "mem_stall", "mfma")
BUFFER_ALIGN = 4096  # ASSUMPTION: each buffer starts on a 4 KiB boundary (hipMalloc gives >= 256 B)
LDS_ALIGN = 16       # LDS arrays laid out in declaration order, 16 B aligned
SAMPLE_ROUNDS = 4       # full rounds first sampled: the fewest that give a period and its change
MAX_SAMPLE_ROUNDS = 12  # timing doubles the sampled rounds up to this until steady
STEADY_TOL = 0.05       # steady: the extrapolation's error bound is within 5% of CU time
DEFAULT_TRACE_CAP = 200_000


@dataclass
class SimResult:
    """What one simulated launch produced. Times are for the whole GPU."""
    kernel: str
    arch: str
    outputs: dict
    cycles: float
    time_us: float
    time_us_without_launch: float
    launch_overhead_us: float
    method: str
    occupancy_waves_per_simd: float
    occupancy_limiter: str
    vgprs: int
    workgroups_per_cu: int
    counters: dict
    per_inst: list
    trace: list | None = None
    bounds: dict = field(default_factory=dict)  # T_cu, T_hbm, T_l2 in cycles
    # relative error bound of ``cycles`` from a long loop timed from truncated runs
    # (``simulate(extrapolate_loops=True)``, ``gpusim.steady``); 0 when every trip ran
    loop_error_bound: float = 0.0
    # a KernelSequence: each kernel's own result, in launch order (empty for one kernel)
    parts: list = field(default_factory=list)

    @property
    def wave_insts(self) -> float:
        c = self.counters
        return (c["valu_insts"] + c["vmem_insts"] + c["lds_insts"] + c["salu_insts"]
                + c["branch_insts"] + c["mfma_insts"])


_PROGRAM_CACHE: dict = {}


def _program(kernel: Kernel, arch):
    key = (id(kernel), arch.name)
    hit = _PROGRAM_CACHE.get(key)
    if hit is not None and hit[0] is kernel:
        return hit[1]
    prog = compile_kernel(kernel, arch)
    if len(_PROGRAM_CACHE) > 256:
        _PROGRAM_CACHE.clear()
    _PROGRAM_CACHE[key] = (kernel, prog)
    return prog


_CHECKED: dict = {}


def _checked(kernel: Kernel, arch, scalars, vgprs: int | None = None):
    """``validate`` then ``occupancy``, remembered per kernel and arch object (both are
    immutable) and scalar values: a tuning loop or the bench simulates one kernel many
    times, and the two walks of its tree were a millisecond per call. ``vgprs``: the
    kernel's ``estimate_vgprs`` count made before (``simulate``), not made again."""
    try:
        skey = tuple(sorted((scalars or {}).items()))
        hash(skey)
    except TypeError:  # unhashable scalar values: check every time
        validate(kernel, arch, scalars)
        return occupancy(kernel, arch, vgprs)
    key = (id(kernel), id(arch), skey)
    hit = _CHECKED.get(key)
    if hit is not None and hit[0] is kernel and hit[1] is arch:
        return hit[2]
    validate(kernel, arch, scalars)
    occ = occupancy(kernel, arch, vgprs)
    if len(_CHECKED) > 256:
        _CHECKED.clear()
    _CHECKED[key] = (kernel, arch, occ)
    return occ


def _engine(jit: bool):
    if jit:
        from gpusim import engine_jit  # lazy: numba takes ~1 s to import; jit=False never needs it
        return engine_jit.run
    return engine.run


def _as_memory(vals, kind: int) -> np.ndarray:
    """Float values as a float buffer of element kind ``kind`` holds them: f16 rounded by
    numpy, bf16 to the nearest bfloat16 (ties to even, NaN kept: the rule of
    ``engine.round_bf16`` on whole arrays), f32 as they are."""
    if kind == 1:
        return np.asarray(vals).astype(np.float16, copy=False)
    a = np.ascontiguousarray(vals, np.float32)
    if kind != 3:
        return a
    bits = a.view(np.uint32).astype(np.uint64)
    kept = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return np.where(np.isnan(a), a, kept.view(np.float32))


def _as_int_memory(vals, kind: int):
    """Integer values as an integer buffer of element kind ``kind`` holds them: i32 as they
    are, i8/u8 wrapped to their byte (what a byte buffer holding the low bytes reads
    back), still int32 elements."""
    if kind == 4:
        return np.asarray(vals).astype(np.int8)
    if kind == 5:
        return np.asarray(vals).astype(np.uint8)
    return vals


def _memory_table(arrays, align: int, start: int = 0, gap: int = 0):
    """Places global buffers or LDS arrays: f32/f16/bf16 in one float array and i32/i8/u8
    in one int array (element offsets; a byte buffer's element is its int32 value), with aligned byte addresses for the cache and bank models.
    Returns (table of (kind, element offset, size, byte address, element bytes), float
    elements, int elements)."""
    tab = np.zeros((max(len(arrays), 1), 5), np.int64)
    nf = ni = 0
    addr = start
    for i, a in enumerate(arrays):
        kind = MEM_KIND[a.dtype]
        es = DTYPE_BYTES[a.dtype]
        off = ni if engine.int_kind(kind) else nf
        if engine.int_kind(kind):
            ni += a.size
        else:
            nf += a.size
        tab[i] = (kind, off, a.size, addr, es)
        addr += -(-a.size * es // align) * align + gap
    return tab, nf, ni


def _log2_exact(n: int) -> int:
    """log2 of a power of two, -1 for any other count (``engine.pdiv`` then divides)."""
    n = int(n)
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else -1


def _group_tables(arch):
    W = arch.wave_size
    group_of = np.zeros((2, 3, W), np.int64)
    n_groups = np.zeros((2, 3), np.int64)
    group_lanes = np.zeros((2, 3, 8, W), np.int64)
    for rw, write in enumerate((False, True)):
        for wc, nbytes in enumerate((4, 8, 16)):
            groups = arch.lds_groups(nbytes, write)
            n_groups[rw, wc] = len(groups)
            for gi, lanes in enumerate(groups):
                for k, l in enumerate(lanes):
                    group_of[rw, wc, l] = gi
                    group_lanes[rw, wc, gi, k] = l
    return group_of, n_groups, group_lanes


SMALL_PAGES_BYTES = 16 << 20  # larger memory images are mapped with small pages (_zeros)


def _zeros(n: int, dtype) -> np.ndarray:
    """A zero-filled array; a large one on a private anonymous mapping with transparent
    huge pages turned off. A timing run or a sampled check touches a few rows of a buffer
    that may be a 512 MiB score tensor, and with huge pages (numpy asks for them on large
    arrays) each first touch had the kernel zero 2 MiB: that was most of a sampled
    softmax's cost. Untouched pages cost nothing either way. Below 16 MiB huge pages win:
    zeroing all of it takes under 2 ms, while a functional run that touches every small
    page faulted 4 ms per 4 MiB (a shared mapping's page faults cost nearly twice a
    private one's; issue 14)."""
    nbytes = n * np.dtype(dtype).itemsize
    advise = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if nbytes < SMALL_PAGES_BYTES or advise is None:
        return np.zeros(n, dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.madvise(advise)
    return np.frombuffer(buf, dtype, n)


_CACHE_POOL: dict = {}  # cache-model arrays by shape, kept for the next launch


def _cold_cache(shape) -> "engine.Cache":
    """Empty (cold) tag, LRU, ready and sector arrays of one cache level. The L2 arrays
    are 6.5 MB on gfx942; filling a kept set costs a tenth of what allocating and
    page-faulting new ones did on every simulate call (issue 14). Taken from and given
    back to ``_CACHE_POOL`` (list pop and append are atomic, so threads never share one)."""
    free = _CACHE_POOL.setdefault(shape, [])
    try:
        c = free.pop()
    except IndexError:
        return engine.Cache(np.full(shape, -1, np.int64), np.zeros(shape, np.int64),
                       np.zeros(shape, np.float64), np.zeros(shape, np.uint8))
    del free[1:]  # keep at most two of a shape (threads) in the pool
    c.tag.fill(-1)
    c.lru.fill(0)
    c.rdy.fill(0.0)
    c.dirty.fill(0)
    return c


class Partial(NamedTuple):
    """A buffer given at some elements only (flat memory indices and their values); the
    others stay zero and untouched, so a sampled check of a 512 MiB tensor holds only the
    pages it fills (``simulate(inputs=)``)."""
    index: np.ndarray
    values: np.ndarray


class _Launch:
    """Everything the engine needs for one launch, built once per simulate call."""

    def __init__(self, kernel, arch, prog, inputs, scalars, occ, random_fill=True):
        self.kernel, self.arch, self.prog = kernel, arch, prog
        self._bind_constants(scalars)
        self._fill_memory(inputs or {}, random_fill)
        lds_tab, nlf, nli = _memory_table(kernel.lds, LDS_ALIGN)
        self.lds_tab = lds_tab
        self.group_of, self.n_groups, self.group_lanes = _group_tables(arch)
        self.tables = engine.Prog(prog.code, prog.srcs, prog.mfma_regs, self.fconst_reg, self.fconst_val,
                             self.iconst_reg, self.iconst_val, self.buf_tab, lds_tab, self.group_of,
                             self.n_groups, self.group_lanes)
        self.params = self._params(occ, nlf, nli)

    def _bind_constants(self, scalars) -> None:
        """The constant registers: the program's literals and the kernel's scalar arguments."""
        kernel, prog = self.kernel, self.prog
        scalars = dict(scalars or {})
        for p in kernel.scalars:
            if p.name not in scalars:
                raise KernelError(f"{kernel.name}: scalar {p.name!r} needs a value; pass scalars={{{p.name!r}: ...}}")
        fregs = {r: np.uint32(bits).view(np.float32) for bits, r in prog.fconst.items()}
        iregs = {r: v for v, r in prog.iconst.items()}
        for name, (isf, r) in prog.scalar_regs.items():
            if isf:
                fregs[r] = float(np.float32(scalars[name]))
            else:
                iregs[r] = int(scalars[name])
        self.fconst_reg = np.array(list(fregs.keys()), np.int64)
        self.fconst_val = np.array(list(fregs.values()), np.float32)
        self.iconst_reg = np.array(list(iregs.keys()), np.int64)
        self.iconst_val = np.array(list(iregs.values()), np.int32)

    def _fill_memory(self, inputs: dict, random_fill: bool) -> None:
        """Global memory: every buffer at its aligned offset, given inputs copied in (a
        ``Partial`` at its elements only), other inputs drawn uniformly in [-1, 1) (i32: 0
        to 15) unless ``random_fill`` is off, outputs zero."""
        kernel = self.kernel
        # global memory: f32/f16 buffers in one float32 array, i32 in one int32 array
        rng = np.random.default_rng(0)
        buf_tab, nf, ni = _memory_table(kernel.buffers, BUFFER_ALIGN, start=BUFFER_ALIGN,
                                        gap=BUFFER_ALIGN)
        self.layout = [(b, int(buf_tab[i, 0]), int(buf_tab[i, 1]))
                       for i, b in enumerate(kernel.buffers)]
        self.gmem_f = _zeros(max(nf, 1), np.float32)
        self.gmem_i = _zeros(max(ni, 1), np.int32)
        for b, kind, off in self.layout:
            given = inputs.get(b.name)
            if isinstance(given, Partial):  # only these elements; the rest stays zero
                idx = np.asarray(given.index, np.int64).reshape(-1)
                vals = np.asarray(given.values).reshape(-1)
                if idx.size != vals.size or (idx.size and not 0 <= idx.min() <= idx.max() < b.size):
                    raise KernelError(f"{kernel.name}: partial input {b.name!r} needs as many values as "
                                      f"indices, each index in [0, {b.size})")
                if engine.int_kind(kind):
                    self.gmem_i[off + idx] = _as_int_memory(vals, kind)
                else:
                    self.gmem_f[off + idx] = _as_memory(vals, kind)
                continue
            if b.name in inputs:
                arr = np.asarray(inputs[b.name])
                if arr.size != b.size:
                    raise KernelError(f"{kernel.name}: input {b.name!r} has {arr.size} elements, the buffer "
                                      f"has {b.size}; pass an array of shape {tuple(b.shape)}")
                flat = arr.reshape(-1)
            elif b.intent == "out" or b.zeroed or not random_fill:
                continue  # already zero
            elif engine.int_kind(kind):
                flat = rng.integers(0, 16, b.size)
            elif kind == 0:  # uniform in [-1, 1), drawn in place (no temporaries)
                dst = self.gmem_f[off:off + b.size]
                rng.random(dtype=np.float32, out=dst)
                dst *= 2
                dst -= 1
                continue
            else:
                flat = rng.random(b.size, dtype=np.float32) * 2 - 1  # uniform in [-1, 1)
            # assigned in place (cast on the way), no temporary copy of a large input
            if engine.int_kind(kind):
                self.gmem_i[off:off + b.size] = _as_int_memory(flat, kind)
            elif kind in (1, 3):
                self.gmem_f[off:off + b.size] = _as_memory(flat, kind)
            else:
                self.gmem_f[off:off + b.size] = flat
        self.buf_tab = buf_tab

    def _params(self, occ, nlf: int, nli: int) -> "engine.Params":
        """The engine's parameter record: the arch's timing figures, this launch's sizes,
        and each CU's share of the bandwidths of the memory level the footprint lands in."""
        kernel, arch, prog = self.kernel, self.arch, self.prog
        # parameters: one typed record (``engine.Params``); ints stay Python ints, cycle
        # costs per line Python floats, so Numba sees one fixed record type
        l1_lines = arch.l1_bytes // arch.l1_line_bytes
        l2_lines = arch.l2_bytes // arch.l2_line_bytes
        footprint = sum(b.size * DTYPE_BYTES[b.dtype] for b in kernel.buffers)
        self.level = arch.memory_level(footprint)
        active_cus = min(arch.num_cus, kernel.grid)
        cus_per_l2 = max(1, -(-active_cus // arch.l2_instances))
        # each CU's share of the achievable L2 read bandwidth of its L2 instance, per
        # L1-line request (64 B on gfx90a, 128 B on gfx942), of its write bandwidth, and of
        # the memory level's read and write bandwidths
        l2_bpc_cu = min(arch.l2_read_bytes_per_clk / arch.l2_instances / cus_per_l2,
                        arch.l1_bytes_per_clk_per_cu)
        l2w_bpc_cu = min(arch.l2_write_bytes_per_clk / arch.l2_instances / cus_per_l2,
                         arch.l1_bytes_per_clk_per_cu)
        clk = arch.clock_ghz * 1e9
        hbm_bpc_cu = min(arch.memory_bytes_per_s(self.level) / clk / active_cus,
                         arch.l1_bytes_per_clk_per_cu)
        hbmw_bpc_cu = min(arch.memory_bytes_per_s(self.level, True) / clk / active_cus,
                          arch.l1_bytes_per_clk_per_cu)
        return engine.Params(
            W=int(arch.wave_size), block=int(kernel.block), grid=int(kernel.grid), nsimd=int(arch.simds_per_cu),
            period=int(arch.issue_period_cycles), valu=int(arch.valu_cycles), nf=int(prog.nf),
            ni=int(prog.ni), depth=int(prog.depth), nlf=int(nlf), nli=int(nli),
            wgs=int(occ.workgroups_per_cu), wpw=int(occ.waves_per_workgroup),
            l1_line=int(arch.l1_line_bytes), l2_line=int(arch.l2_line_bytes),
            l1_sets=int(max(1, l1_lines // arch.l1_ways)), l1_ways=int(arch.l1_ways),
            l2_sets=int(max(1, l2_lines // arch.l2_ways)), l2_ways=int(arch.l2_ways),
            n_l2=int(arch.l2_instances), lds_lat=int(arch.lds_latency_cycles),
            l1_lat=int(arch.l1_hit_latency_cycles), l2_lat=int(arch.l2_hit_latency_cycles),
            hbm_lat=int(arch.memory_latency_cycles(self.level)), bar_cyc=int(arch.barrier_cycles),
            launch=int(arch.wave_launch_cycles), nbanks=int(arch.lds_banks),
            lds_port=int(arch.lds_port_bytes_per_clk), lds_addr=int(arch.lds_address_bytes), trace_cap=0,
            probe_pc=-1, probe_wg=0, probe_wave=0,
            l2_cyc=float(arch.l1_line_bytes / l2_bpc_cu),
            l2w_cyc=float(arch.l1_line_bytes / l2w_bpc_cu),
            hbm_cyc=float(arch.l2_line_bytes / hbm_bpc_cu),
            hbmw_cyc=float(arch.l2_line_bytes / hbmw_bpc_cu),
            l1_sh=_log2_exact(arch.l1_line_bytes), l2_sh=_log2_exact(arch.l2_line_bytes))

    def sessions(self, functional: bool, sample: int, only=None):
        C = self.arch.num_cus
        grid = self.kernel.grid
        cu0 = list(range(0, grid, C))
        n0 = len(cu0)
        if only is not None:  # functional values of these workgroups only, on their CUs
            chosen = sorted(set(int(w) for w in only))
            cus = sorted({w % C for w in chosen})
            lists = [[w for w in chosen if w % C == c] for c in cus]
            n0 = k = len(lists[0])
        elif functional:
            lists = [cu0] + [list(range(c, grid, C)) for c in range(1, min(C, grid))]
            cus = list(range(min(C, grid)))
            k = n0
        else:
            k = min(n0, sample)
            lists = [cu0[:k]]
            cus = [0]
        wgs = np.array([w for lst in lists for w in lst], np.int64)
        off = np.zeros(len(lists) + 1, np.int64)
        off[1:] = np.cumsum([len(lst) for lst in lists])
        return wgs, off, np.array(cus, np.int64), n0, k

    def run(self, jit, functional, sample, trace_cap=0, probe=None, only=None):
        arch = self.arch
        prog = self.prog
        params = self.params._replace(trace_cap=int(trace_cap))
        W = arch.wave_size
        probe_arr = np.zeros((W + 1, 3), np.int64)
        if probe is not None:
            params = params._replace(probe_pc=int(probe[0]), probe_wg=int(probe[1]), probe_wave=int(probe[2]))
            wgs = np.array([probe[1]], np.int64)
            off = np.array([0, 1], np.int64)
            cus = np.array([probe[1] % arch.num_cus], np.int64)
            n0 = k = 1
        else:
            wgs, off, cus, n0, k = self.sessions(functional, sample, only)
        counters = np.zeros(engine.NCNT, np.float64)
        per_inst = np.zeros((prog.code.shape[0], engine.NREC), np.float64)
        sess_cycles = np.zeros(len(cus), np.float64)
        wg_done = np.zeros(k, np.float64)
        trace = np.zeros((max(trace_cap, 1), 6), np.float64)
        trace_n = np.zeros(1, np.int64)
        err = np.zeros(4, np.int64)
        l1_lines = arch.l1_bytes // arch.l1_line_bytes
        l1_shape = (1, max(1, l1_lines // arch.l1_ways), arch.l1_ways)
        l2_shape = (arch.l2_instances, params.l2_sets, arch.l2_ways)
        l1 = _cold_cache(l1_shape)
        l2 = _cold_cache(l2_shape)
        gmem_f = self.gmem_f  # one launch per _Launch: run in place
        gmem_i = self.gmem_i
        out = engine.Out(counters, per_inst, sess_cycles, wg_done, trace, trace_n, probe_arr, err)
        try:
            _engine(jit)(params, self.tables, engine.Sessions(wgs, off, cus), gmem_f, gmem_i,
                         *engine.new_state(params, prog.code.shape[0]), l1, l2, out)
        finally:
            _CACHE_POOL[l1_shape].append(l1)
            _CACHE_POOL[l2_shape].append(l2)
        if err[0] != engine.E_OK:
            self._raise(err)
        return dict(gmem_f=gmem_f, gmem_i=gmem_i, counters=counters, per_inst=per_inst,
                    sess_cycles=sess_cycles, wg_done=wg_done, trace=trace[:min(trace_n[0], trace_cap)],
                    trace_total=int(trace_n[0]), n0=n0, k=k, probe=probe_arr)

    def _raise(self, err):
        code, pc, idx, which = (int(x) for x in err)
        si = int(self.prog.inst_stmt[pc])
        if code == engine.E_OOB_GLOBAL:
            b = self.kernel.buffers[which]
            raise KernelError(f"{self.kernel.name}: statement {si} reads/writes buffer {b.name!r} at element "
                              f"{idx}, outside its {b.size} elements; guard or fix the index")
        if code == engine.E_OOB_LDS:
            a = self.kernel.lds[which]
            raise KernelError(f"{self.kernel.name}: statement {si} accesses LDS array {a.name!r} at element "
                              f"{idx}, outside its {a.size} elements; fix the index or the array shape")
        raise KernelError(f"{self.kernel.name}: statement {si} divides an integer by zero; guard the divisor")

    def outputs(self, raw):
        out = {}
        for b, kind, off in self.layout:
            src = raw["gmem_i"] if engine.int_kind(kind) else raw["gmem_f"]
            arr = src[off:off + b.size]  # a view: this launch's memory is not reused
            if kind == 1:
                arr = arr.astype(np.float16)
            out[b.name] = arr.reshape(tuple(b.shape))
        return out


COUNTER_NAMES = {
    "valu_insts": engine.N_VALU, "vmem_insts": engine.N_VMEM, "lds_insts": engine.N_LDS, "salu_insts": engine.N_SALU,
    "branch_insts": engine.N_BRANCH, "global_load_requests": engine.N_GLD_REQ,
    "global_store_requests": engine.N_GST_REQ, "global_load_lines": engine.N_GLD_LINES,
    "global_store_lines": engine.N_GST_LINES, "tcp_accesses": engine.N_TCP, "hbm_bytes_read": engine.N_HBM_RD,
    "hbm_bytes_written": engine.N_HBM_WR, "l2_hits": engine.N_L2_HIT, "l2_accesses": engine.N_L2_ACC,
    "l1_hits": engine.N_L1_HIT, "l1_accesses": engine.N_L1_ACC,
    "lds_bank_conflict_cycles": engine.N_LDS_CONF, "lds_idx_active_cycles": engine.N_LDS_IDX,
    "barriers": engine.N_BARRIERS, "global_load_bytes": engine.N_GLD_BYTES,
    "global_store_bytes": engine.N_GST_BYTES, "waves": engine.N_WAVES, "stall_cycles": engine.N_STALL,
    "mfma_insts": engine.N_MFMA, "mfma_flops": engine.N_MFMA_FLOPS,
}


def _counters(c, arch, occ, time_s):
    """The named counters from the engine's (scaled) counter array."""
    out = {name: float(c[i]) for name, i in COUNTER_NAMES.items()}
    quads = c[engine.N_QUADS]
    tcp = c[engine.N_TCP]
    out["coalescing_pct"] = (min(100.0, max(25.0, 100.0 * quads / tcp)) if tcp > 0 else 100.0)
    out["hbm_bytes"] = out["hbm_bytes_read"] + out["hbm_bytes_written"]
    out["l2_hit_pct"] = 100.0 * out["l2_hits"] / out["l2_accesses"] if out["l2_accesses"] else 0.0
    out["l1_hit_pct"] = 100.0 * out["l1_hits"] / out["l1_accesses"] if out["l1_accesses"] else 0.0
    conf, act = out["lds_bank_conflict_cycles"], out["lds_idx_active_cycles"]
    out["lds_bank_conflict_rate_pct"] = 3.125 * conf / (act - conf) if act > conf else 0.0
    out["lds_bank_conflicts_per_access"] = conf / (act - conf) if act > conf else 0.0
    out["occupancy_waves_per_simd"] = occ.waves_per_simd
    out["achieved_bandwidth_gbs"] = out["hbm_bytes"] / time_s / 1e9 if time_s > 0 else 0.0
    return out


def _cu_time(raw, n0, k, wgs_resident):
    """(T_cu, method, relative error bound of T_cu).

    CU 0 runs its workgroups in rounds of ``wgs_resident``: a workgroup starts when one
    of the previous round ends, so rounds overlap. CU 0's last round is partial when its
    share is not a whole number of rounds, yet can cost as much as a full one (its
    workgroups wait on the same latencies; issue 14). So the sample (``_time``) ends
    with a partial round as large as CU 0's last, the workgroups left out are whole
    rounds, and they are inserted at the mean period of the sample's full rounds after
    the first (the period: from one round's last workgroup to the next's). The periods
    vary from round to round (warm-up, rounds that do not end together, the sample's
    last round draining without a successor) and may keep drifting past the sample
    (warm-up), so the bound is twice their spread times the rounds inserted plus one
    (for the end of the sample, which stands for CU 0's end): unknown with fewer than 3 full rounds, 0 when every workgroup ran. Measured against
    the full CU 0 simulation in tests/test_wg_sampling.py. A sample that leaves out a
    partial round (another caller) has it extrapolated per workgroup, and the bound
    grows by what it would cost as a full round instead."""
    t_k = float(raw["sess_cycles"][0])
    if k >= n0:
        return t_k, f"CU 0 simulated with all {n0} of its workgroups", 0.0
    done = np.sort(raw["wg_done"][:k])
    w = max(1, min(wgs_resident, k))
    tail = k % w                             # the sample's own last, partial round
    ends = done[w - 1:k - tail:w]            # when each full round of the sample ended
    full = len(ends)
    floor = t_k / k * w * 0.25
    periods = np.diff(ends)
    per_round = max(float(periods.mean()), floor) if full >= 2 else max(t_k / k * w, floor)
    spread = float(periods.max() - periods.min()) if full >= 3 else float("inf")
    rounds, rest = divmod(n0 - k, w)
    t = t_k + rounds * per_round + rest * per_round / w
    bound = 2 * (rounds + (rest > 0) + 1) * spread / t
    bound += (per_round - rest * per_round / w) / t if rest else 0.0
    tail_txt = f", ending with a partial round of {tail} like CU 0's last," if tail else ""
    return t, (f"CU 0 simulated for {k} of its {n0} workgroups{tail_txt} then extrapolated "
               f"by {rounds} rounds of {w} workgroups at {per_round:.0f} cycles per round "
               f"(the mean of {full - 1})"
               + (f" and {rest} workgroups at {per_round / w:.0f} cycles each" if rest else "")), \
        bound


class _Timed(NamedTuple):
    """One timing of a launch, from which ``simulate`` reports."""
    launch: "_Launch"
    raw: dict
    t_cu: float
    method: str            # how T_cu was found
    k: int                 # CU 0's workgroups simulated
    scale: float           # counters and records below are scaled by this
    counters: np.ndarray   # engine counters (``engine.N_*``), scaled
    per_inst: np.ndarray   # per-instruction records (``engine.I_*``), scaled


def _time(kernel, arch, prog, occ, inputs, scalars, jit, functional, trace_cap, workgroups,
          exact_arrivals=False):
    """Runs the launch. Timing samples SAMPLE_ROUNDS rounds of CU 0's resident workgroups
    (then a partial round like CU 0's last) and stops there when the extrapolation's
    error bound (``_cu_time``) is within STEADY_TOL (steady state);
    otherwise it doubles the rounds, up to MAX_SAMPLE_ROUNDS, on a fresh launch (cold
    caches again). A timing run of a kernel with atomics runs the other CUs' arrivals
    only and estimates their counters (``gpusim.arrivals``) unless ``exact_arrivals``."""
    rounds = SAMPLE_ROUNDS
    atomics = has_atomics(kernel)
    while True:
        launch = _Launch(kernel, arch, prog, inputs, scalars, occ, random_fill=functional)
        # the sample ends with a partial round as large as CU 0's last one, so the
        # workgroups left out are whole rounds (``_cu_time``)
        n0 = -(-kernel.grid // arch.num_cus)
        sample = rounds * occ.workgroups_per_cu + n0 % occ.workgroups_per_cu
        first = None
        if atomics and not functional and not exact_arrivals:
            raw, first = _time_last_arrival(kernel, arch, prog, occ, inputs, scalars, jit,
                                            launch, sample, trace_cap)
        elif atomics:  # the other CUs first (values only), then the timed CU: it arrives last
            others = [w for w in range(kernel.grid) if w % arch.num_cus]
            if others:
                first = launch.run(jit, True, sample, 0, only=others)
            raw = launch.run(jit, functional, sample, trace_cap,
                             only=range(0, kernel.grid, arch.num_cus) if functional else None)
            if functional and first is not None:
                raw["counters"] = raw["counters"] + first["counters"]
                raw["per_inst"] = raw["per_inst"] + first["per_inst"]
        else:
            raw = launch.run(jit, functional, sample, trace_cap, only=workgroups)
        n0, k = raw["n0"], raw["k"]
        t_cu, method, bound = _cu_time(raw, n0, k, occ.workgroups_per_cu)
        if functional or k >= n0 or bound <= STEADY_TOL or rounds >= MAX_SAMPLE_ROUNDS:
            break
        rounds = min(2 * rounds, MAX_SAMPLE_ROUNDS)
    if k < n0:
        steady_txt = "steady" if bound <= STEADY_TOL else f"not steady after {rounds} rounds"
        method += (f" ({rounds} rounds sampled, {steady_txt}: error bound "
                   f"{'unknown' if bound == float('inf') else f'+-{100 * bound:.1f}%'} of "
                   f"the CU time)")
    scale = 1.0 if functional else kernel.grid / k
    counters, per_inst = raw["counters"] * scale, raw["per_inst"] * scale
    if atomics and not functional and first is not None:
        # the other CUs ran whole (values only, counted too): only CU 0's sample is
        # scaled, to CU 0's workgroups. Scaling it to the grid charged every workgroup
        # CU 0's tails (it arrives last, so each of its workgroups runs its tile's tail)
        scale = n0 / k
        counters = first["counters"] + raw["counters"] * scale
        per_inst = first["per_inst"] + raw["per_inst"] * scale
    return _Timed(launch, raw, t_cu, method, k, scale, counters, per_inst)


def _time_last_arrival(kernel, arch, prog, occ, inputs, scalars, jit, launch, sample,
                       trace_cap):
    """CU 0's timing run after the other workgroups' arrivals (their ``arrival_slice``
    on ``launch``'s memory), and the others' counters and per-instruction records
    estimated from a second run of CU 0's sample arriving first (``gpusim.arrivals``)."""
    counters = arrivals.counter_buffers(kernel)
    others = [w for w in range(kernel.grid) if w % arch.num_cus]
    alone = _Launch(kernel, arch, prog, inputs, scalars, occ, random_fill=False)
    early = alone.run(jit, False, sample, 0)
    other_tails = 0.0
    if others:
        sl = arrivals.arrival_slice(kernel)
        sprog = _program(sl, arch)
        sliced = _Launch(sl, arch, sprog, inputs, scalars, occ, random_fill=False)
        sliced.gmem_f, sliced.gmem_i = launch.gmem_f, launch.gmem_i  # the same layout
        ran = sliced.run(jit, True, sample, 0, only=others)
        other_tails, _ = arrivals.tails_and_arrivals(sprog, ran["per_inst"], counters)
    raw = launch.run(jit, False, sample, trace_cap)
    if not others:
        return raw, None
    t1, _ = arrivals.tails_and_arrivals(prog, early["per_inst"], counters)
    t2, _ = arrivals.tails_and_arrivals(prog, raw["per_inst"], counters)
    k = raw["k"]
    est = {key: arrivals.others_estimate(early[key], t1, raw[key], t2, k, len(others),
                                         other_tails)
           for key in ("counters", "per_inst")}
    return raw, est


def _scaled_how(kernel, arch, k, scale, exact_arrivals=False) -> str:
    """How a timing run's counters stand for the launch (``_time``)."""
    if has_atomics(kernel) and kernel.grid > 1:
        n = kernel.grid - -(-kernel.grid // arch.num_cus)
        how = ("counted whole" if exact_arrivals else
               "estimated from CU 0's (their arrivals run, gpusim.arrivals)")
        return f"of the other CUs' {n} workgroups {how}, CU 0's scaled by {scale:.3g} from {k} sampled"
    return f"scaled by {scale:.3g} from {k} sampled workgroups"


def has_atomics(kernel) -> bool:
    """Whether ``kernel`` counts arrivals with atomics (then its timed CU runs last)."""
    return any(isinstance(s, AtomicAdd) for s in walk(kernel.body))


def _memory_times(c, arch, level) -> tuple[float, float]:
    """(T_mem, T_l2) in cycles from the launch's (scaled) counters."""
    clk = arch.clock_ghz * 1e9
    t_hbm = (c[engine.N_HBM_RD] / (arch.memory_bytes_per_s(level) / clk)
             + c[engine.N_HBM_WR] / (arch.memory_bytes_per_s(level, True) / clk))
    l2_writes = c[engine.N_GST_LINES]  # stores write through to the L2, one request per line
    l2_reads = max(c[engine.N_L2_ACC] - l2_writes, 0.0)
    t_l2 = (l2_reads / arch.l2_read_bytes_per_clk
            + l2_writes / arch.l2_write_bytes_per_clk) * arch.l1_line_bytes
    return t_hbm, t_l2


def _time_loop(kernel, loop, arch, prog, occ, inputs, scalars, jit, exact_arrivals=False):
    """(timing, note, relative error bound) with ``loop`` timed from truncated runs
    (``gpusim.steady``); the timing is None when no cut was steady (the note then says
    so). The cut kernels differ from ``kernel`` in one constant only, so the validation
    and occupancy are the original's and their instructions line up with its program."""
    runs: dict = {}
    name = loop.stmt.var.name
    tried = 0
    short = [b for b in steady.broadcast_advances(kernel, loop)
             if b is None or b < arch.l1_line_bytes / steady.MAX_PERIOD]
    if short:
        walk = "an advance its index does not show" if None in short else \
            f"{min(short)} bytes per trip"
        return None, (f"; every trip of the loop {name!r} simulated (a broadcast load walks "
                      f"{walk}: its trips share cache lines over more than "
                      f"{steady.MAX_PERIOD} trips)"), 0.0
    for ns in steady.CUTS:
        if 2 * sum(ns) > loop.trips:
            break
        for n in ns:
            if n not in runs:
                k = steady.cut(kernel, {loop.stmt: n})
                p = compile_kernel(k, arch)
                if p.code.shape != prog.code.shape:
                    return None, "", 0.0
                runs[n] = _time(k, arch, p, occ, inputs, scalars, jit, False, 0, None,
                                exact_arrivals)
        tried = ns[-1]
        ts = [runs[n] for n in ns]
        per_trip = (ts[2].counters - ts[1].counters) / (ns[2] - ns[1])
        lines = per_trip[engine.N_GLD_LINES]
        if lines > 0 and per_trip[engine.N_GLD_BYTES] / lines < arch.l1_line_bytes / steady.MAX_PERIOD:
            continue  # trips share cache lines over a period the cuts may not span
        level = ts[-1].launch.level
        times = [np.array([t.t_cu, *_memory_times(t.counters, arch, level)]) for t in ts]
        fit = steady.extrapolate(ns, times, loop.trips)
        cycles = float(fit.value.max())
        bound = float(fit.bound.max()) / cycles if cycles > 0 else float("inf")
        if bound > steady.LOOP_TOL:
            continue
        counters = steady.extrapolate(ns, [t.counters for t in ts], loop.trips).value
        per_inst = steady.extrapolate(ns, [t.per_inst for t in ts], loop.trips).value
        last = ts[-1]
        note = (f"; the loop {name!r} cut to {ns[0]}, {ns[1]} and {ns[2]} of its "
                f"{loop.trips} trips, time and counters extrapolated to {loop.trips} trips "
                f"at {fit.slope[0]:.0f} CU cycles per trip (steady: error bound "
                f"+-{100 * bound:.1f}% of the time)")
        return last._replace(t_cu=float(fit.value[0]), counters=np.maximum(counters, 0.0),
                             per_inst=np.maximum(per_inst, 0.0)), note, bound
    if not tried:
        return None, "", 0.0
    return None, (f"; every trip of the loop {name!r} simulated (cuts of up to {tried} "
                  f"trips were not steady within {100 * steady.LOOP_TOL:.0f}%, or its trips "
                  f"share cache lines over more than {steady.MAX_PERIOD} trips)"), 0.0


def simulate(kernel: Kernel, arch=DEFAULT_ARCH, inputs: dict | None = None, scalars: dict | None = None,
             *, functional: bool = True, trace: bool = False, jit: bool = True,
             launch_overhead_us: float | None = None, trace_cap: int = DEFAULT_TRACE_CAP,
             workgroups=None, extrapolate_loops: bool = False, vgprs=None,
             exact_arrivals: bool = False) -> SimResult:
    """Runs ``kernel`` on the modelled ``arch``.

    ``inputs`` maps buffer names to arrays, or to ``Partial`` (some elements, the rest
    zero) (absent "in"/"inout" buffers get seeded random
    values in functional mode, zeros with ``functional=False``; "out" buffers zeros); ``scalars`` gives scalar parameters. With
    ``functional=False`` only a sample of CU 0's workgroups runs (fast; outputs partial).
    ``trace=True`` records per-wave events of the timed CU. ``jit=False`` runs the
    pure-Python engine (the reference; slow). ``workgroups`` (functional mode): run only
    these workgroup ids, each on its own CU, for checking the values of the output tiles
    they write (elements no chosen workgroup writes keep what ``inputs`` put there); the
    time and counters then describe those workgroups alone, not the launch.
    ``extrapolate_loops`` (timing mode, no trace): time the kernel's one long loop from
    runs cut to a few trips when its trips are steady (``gpusim.steady``; ``method``
    states the cuts and the error bound); outputs are then those of the longest cut.
    A ``KernelSequence`` (one dispatch lowered to several launches) runs kernel by kernel
    in order (``_simulate_sequence``): its time is the sum of the kernels' times, each
    with its launch overhead.
    ``vgprs``: the VGPRs per lane ``occupancy.estimate_vgprs`` counted for this kernel on
    this arch before (a sequence: one count or None per kernel, in launch order), used
    instead of counting again; the caller vouches that the count is this kernel's (the
    tuner hands the count its exact analytic estimate made of the same lowering: a count
    is a few times the cost of lowering the kernel). None: counted here.
    ``exact_arrivals`` (timing mode, a kernel with atomics): run the other CUs' workgroups
    whole before the timed CU, as the reference, instead of their arrivals only with
    their counters estimated (``gpusim.arrivals``; CU 0's time is the same either way).
    """
    arch = get_arch(arch)
    if isinstance(kernel, KernelSequence):
        return _simulate_sequence(kernel, arch, inputs, scalars, functional=functional,
                                  trace=trace, jit=jit, launch_overhead_us=launch_overhead_us,
                                  trace_cap=trace_cap, workgroups=workgroups,
                                  extrapolate_loops=extrapolate_loops, vgprs=vgprs,
                                  exact_arrivals=exact_arrivals)
    occ = _checked(kernel, arch, scalars, None if vgprs is None else int(vgprs))
    prog = _program(kernel, arch)
    if workgroups is not None:
        bad = [w for w in workgroups if not 0 <= int(w) < kernel.grid]
        if not functional or not len(workgroups) or bad:
            raise KernelError(f"{kernel.name}: workgroups= needs functional=True and ids from "
                              f"0 to {kernel.grid - 1}" + (f" (got {bad[0]})" if bad else ""))
    timed, note, loop_bound = None, "", 0.0
    if workgroups is not None and has_atomics(kernel):
        # the tail a chosen workgroup may run waits on every other arrival: run them all
        workgroups, note = None, " (workgroups= widened: arrival counters need them all)"
    loop = steady.long_loop(kernel) if extrapolate_loops and not functional and not trace \
        else None
    if loop is not None:
        timed, note, loop_bound = _time_loop(kernel, loop, arch, prog, occ, inputs, scalars,
                                             jit, exact_arrivals)
    if timed is None:
        timed = _time(kernel, arch, prog, occ, inputs, scalars, jit, functional,
                      trace_cap if trace else 0, workgroups, exact_arrivals)
    launch, raw, t_cu, method, k, scale, c = timed[:7]
    level = launch.level
    t_hbm, t_l2 = _memory_times(c, arch, level)
    cycles = max(t_cu, t_hbm, t_l2)
    mem = "MALL" if level == "mall" else "HBM"
    bound = "CU" if cycles == t_cu else (f"{mem} bandwidth" if cycles == t_hbm else "L2 bandwidth")
    lo = arch.launch_overhead_us if launch_overhead_us is None else float(launch_overhead_us)
    t_wo = cycles / (arch.clock_ghz * 1e3)
    counters = _counters(c, arch, occ, t_wo * 1e-6)
    method = (f"{method}; functional values for all {kernel.grid} workgroups{note}"
              if functional and workgroups is None else
              f"functional values for {len(set(workgroups))} of {kernel.grid} workgroups "
              f"only (time and counters of those workgroups, not of the launch)"
              if functional else
              f"{method}{note}; counters {_scaled_how(kernel, arch, k, scale, exact_arrivals)} "
              f"(outputs partial)")
    method += (f"; whole GPU = max(CU time, {mem} bytes / achievable bandwidth, L2 bytes / "
               f"achievable bandwidth): {bound}-bound")
    per_inst = _per_inst(prog, timed.per_inst)
    tr = None
    if trace:
        tr = [dict(cu=int(r[0]), simd=int(r[1]), wave=int(r[2]), start=float(r[3]), end=float(r[4]),
                   kind=TRACE_KINDS[int(r[5])]) for r in raw["trace"]]
    return SimResult(kernel=kernel.name, arch=arch.name, outputs=launch.outputs(raw), cycles=cycles,
                     time_us=t_wo + lo, time_us_without_launch=t_wo, launch_overhead_us=lo,
                     method=method, occupancy_waves_per_simd=occ.waves_per_simd,
                     occupancy_limiter=occ.limiter, vgprs=occ.vgprs,
                     workgroups_per_cu=occ.workgroups_per_cu, counters=counters, per_inst=per_inst,
                     trace=tr, bounds=dict(cu=t_cu, hbm=t_hbm, l2=t_l2),
                     loop_error_bound=loop_bound)


#: counters that add up over the kernels of a sequence (the rest are rates, recomputed)
_ADDITIVE = tuple(COUNTER_NAMES) + ("hbm_bytes",)


def _simulate_sequence(seq, arch, inputs, scalars, *, workgroups, vgprs=None,
                       **kw) -> SimResult:
    """Runs the kernels of ``seq`` in launch order, each as one ``simulate`` call: a
    workspace one kernel writes is the input of the next (its values in functional mode;
    in timing mode the partial values, which no lowering's control flow depends on).
    ``workgroups`` restricts the last kernel only (the one that writes the dispatch's
    outputs); the earlier ones run whole, so the sampled tiles see complete workspaces.

    Simplifications: each kernel starts with cold L1 and L2 (as every simulated launch
    does), so a workspace is read back from the memory level (HBM, or the MALL when the
    kernel's buffers fit it) although a real L2 may still hold part of it: a pessimistic
    bound on the reduction's reads. Kernels do not overlap (stream order; no PDL); the
    sum of the times includes one launch overhead per kernel.
    """
    values = dict(inputs or {})
    parts = []
    for i, k in enumerate(seq.kernels):
        last = i == len(seq.kernels) - 1
        given = {b.name: values[b.name] for b in k.buffers if b.name in values}
        for w in seq.workspaces:  # counters start zero-filled (the harness's hipMemset)
            if w.zeroed and w.name not in given and any(b.name == w.name for b in k.buffers):
                given[w.name] = np.zeros(w.shape, np.int32 if w.dtype == "i32" else np.float32)
        r = simulate(k, arch, given, scalars, workgroups=workgroups if last else None,
                     vgprs=None if vgprs is None else vgprs[i],
                     **{**kw, "trace": kw["trace"] and last})
        for b in k.buffers:
            if b.intent != "in":
                values[b.name] = r.outputs[b.name]
        parts.append(r)
    ws = {w.name for w in seq.workspaces}
    outputs = {b.name: values[b.name] for b in seq.buffers
               if b.intent != "in" and b.name in values and b.name not in ws}
    main = max(parts, key=lambda r: r.time_us_without_launch)
    counters = {n: sum(r.counters.get(n, 0.0) for r in parts) for n in _ADDITIVE}
    tcp = sum(r.counters["tcp_accesses"] for r in parts)
    counters["coalescing_pct"] = (sum(r.counters["coalescing_pct"] * r.counters["tcp_accesses"]
                                      for r in parts) / tcp) if tcp else 100.0
    for lvl in ("l2", "l1"):
        acc = counters[f"{lvl}_accesses"]
        counters[f"{lvl}_hit_pct"] = 100.0 * counters[f"{lvl}_hits"] / acc if acc else 0.0
    conf, act = counters["lds_bank_conflict_cycles"], counters["lds_idx_active_cycles"]
    counters["lds_bank_conflict_rate_pct"] = 3.125 * conf / (act - conf) if act > conf else 0.0
    counters["lds_bank_conflicts_per_access"] = conf / (act - conf) if act > conf else 0.0
    counters["occupancy_waves_per_simd"] = main.occupancy_waves_per_simd
    t_wo = sum(r.time_us_without_launch for r in parts)
    counters["achieved_bandwidth_gbs"] = counters["hbm_bytes"] / (t_wo * 1e-6) / 1e9 \
        if t_wo > 0 else 0.0
    counters["kernels"] = float(len(parts))
    method = f"{len(parts)} kernels in stream order, times summed: " + " | ".join(
        f"{r.kernel}: {r.time_us_without_launch:.3f} us + launch; {r.method}" for r in parts)
    return SimResult(kernel=seq.name, arch=arch.name, outputs=outputs,
                     cycles=sum(r.cycles for r in parts), time_us=sum(r.time_us for r in parts),
                     time_us_without_launch=t_wo,
                     launch_overhead_us=sum(r.launch_overhead_us for r in parts),
                     method=method, occupancy_waves_per_simd=main.occupancy_waves_per_simd,
                     occupancy_limiter=main.occupancy_limiter, vgprs=main.vgprs,
                     workgroups_per_cu=main.workgroups_per_cu, counters=counters,
                     per_inst=[], trace=parts[-1].trace,
                     bounds={k: sum(r.bounds.get(k, 0.0) for r in parts)
                             for k in ("cu", "hbm", "l2")},
                     loop_error_bound=max(r.loop_error_bound for r in parts), parts=parts)


def _per_inst(prog, rec):
    """One record per memory / LDS / ALU statement, keyed by its walk-order index
    (``rec``: the per-instruction records, already scaled)."""
    stall = np.zeros(len(prog.statements))
    for pc in range(rec.shape[0]):
        si = prog.inst_stmt[pc]
        if si >= 0:
            stall[si] += rec[pc, engine.I_STALL]
    out = []
    for si, s in enumerate(prog.statements):
        if not isinstance(s, (Assign, Load, Store, LdsLoad, LdsStore, Shuffle, WaveReduce, Mfma)):
            continue
        pc = prog.stmt_main.get(si, -1)
        if pc is None or pc < 0:
            continue
        kind = {Load: "global_load", Store: "global_store", LdsLoad: "lds_load",
                LdsStore: "lds_store", Shuffle: "shuffle", WaveReduce: "wave_reduce",
                Assign: "alu", Mfma: "mfma"}[type(s)]
        out.append(dict(index=si, kind=kind, stmt=s, executions=float(rec[pc, engine.I_EXEC]),
                        cache_lines=float(rec[pc, engine.I_LINES]),
                        tcp_accesses=float(rec[pc, engine.I_TCP]),
                        conflict_cycles=float(rec[pc, engine.I_CONF]),
                        lds_idx_cycles=float(rec[pc, engine.I_IDX]),
                        stall_cycles=float(stall[si])))
    return out
