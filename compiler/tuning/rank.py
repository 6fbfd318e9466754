"""Analytic ranking: an estimate of every candidate's time from its lowered kernel, without
simulating it.

Why: the simulator costs tens of milliseconds to seconds per candidate; lowering costs a few
milliseconds. A search that simulates a uniform random sample of the space finds the best
point only by luck (issue 26: attention's fused MFMA kernel was missed at budget 8). This
module reads the lowered kernel once, statically, and estimates

- instructions per unit, per wave: VALU (transcendentals at the arch's rate divisor), SALU
  (a wave-uniform integer assignment or loop counter, ``gpusim.compile``'s rule, issued on
  its own port beside other waves' VALU), VMEM, LDS, MFMA passes, barriers, every loop's
  body counted its trip count;
- the threads' addresses of workgroup 0 at every memory instruction, evaluated from the
  index expressions (a register holds its definition's lanes from where the walk meets
  it): the cache lines one wave's global access touches (coalescing) and the LDS bank
  conflict degree of an LDS access;
- bytes per memory level: the buffers' footprint once through HBM (or the MALL when it
  fits), every wave's requested lines through L2, and each CU's requested lines at its
  share of the memory level's bandwidth (gpusim's timed CU starts with a cold L2);
- occupancy (``gpusim.occupancy``: VGPRs, LDS, wave slots), workgroups against CUs;
- the exposed latency: each round of global loads waits, at its first use, the memory
  latency plus its workgroup's bytes at the CU's share of the bandwidth (an LDS read: the
  LDS latency), less the instructions issued since the load (a tile prefetched a trip
  ahead hides it), less what the other workgroups resident on the CU issue meanwhile;

and combines them as issue time + memory time + exposed latency per CU, at least the
wave launches. The estimate is for *ranking* the points of one dispatch, not a prediction: absolute
numbers are off, the order is what the search uses (the benchmark
``compiler.tuning.bench_search`` prints its Spearman correlation with the simulated time).

Simplifications, written here: every workgroup runs workgroup 0's address pattern, and an
access is analysed on the first wave that runs it; an ``If`` whose condition reads only
registers the walk evaluated weighs each arm by the share of waves taking it, one on a
loaded or float value counts both arms (a guard is almost always taken), and one the
lowering gave a share (``If.then_share``: the last arrival's fix-up, a stream-K segment
that some workgroups lack) weighs its arms by that share; a loop whose bounds are not
constants runs its ``trips_hint`` or once, and a loop variable holds its start; the
operators of an index expression count as VALU even where part of it is uniform; a register
defined in more than one place holds the definition the walk met last (in program order,
a loop body walked once); a value loaded from memory used in an address is taken as zero;
cache reuse between workgroups beyond the footprint is not modelled (L2 carries every
request); a load round's window counts one wave's instructions times the waves of its
workgroup sharing a SIMD, and a round that a loop's next trip uses waits one trip less.

Two walks count the same things: ``_walk`` is the reference (the plain one to read),
``_walk_fast`` is what ``estimate`` runs (the same arithmetic with less interpreter work;
``tests/test_rank_fast.py`` checks they agree feature for feature on real spaces).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpusim import steady
from gpusim.analysis import Uniformity, expr_children, expr_vars, stmt_exprs
from gpusim.compile import TRANSCENDENTAL
from gpusim.errors import KernelError
from gpusim.occupancy import occupancy
from gpusim.program import (Assign, Barrier, BinOp, Cast, Const, Fma, For, If, KernelSequence,
                            LdsLoad, LdsStore, Load, Mfma, ScalarRef, Select, Shuffle, Special, Store,
                            UnOp, Var, WaveReduce, DTYPE_BYTES, AtomicAdd)

#: the features the learned cost model (``compiler.tuning.costmodel``) reads, in order
FEATURES = ("valu", "vmem", "lds", "lds_conflict", "mfma_cycles", "barriers", "load_rounds",
            "l2_bytes", "hbm_bytes", "waves_per_simd", "grid", "wg_rounds", "cu_fill",
            "issue_us", "memory_us", "latency_us")


@dataclass
class Estimate:
    """A candidate's analytic figures; ``us`` is the ranking key (smaller first)."""
    us: float
    features: dict
    error: str = ""
    #: a lower bound (VGPRs not counted), see ``estimate``
    bound: bool = False
    #: an exact estimate's VGPR counts (``gpusim.occupancy.estimate_vgprs``), one per
    #: kernel in launch order: the simulation of the same point reuses them
    #: (``compiler.tuning.search.score``) instead of counting again
    vgprs: tuple = ()

    @property
    def ok(self) -> bool:
        return not self.error


class _Counts:
    def __init__(self, latency: float = 0.0, hide_scale: float = 1.0,
                 cycles_per_byte: float = 0.0):
        self.valu = self.vmem = self.lds = self.lds_cycles = 0.0
        # wave-uniform integer operations (gpusim's SALU, ``gpusim.compile``): in a wave's
        # own time like any instruction, but on their own issue port, beside other waves'
        # VALU (``uni``: the kernel's ``analysis.Uniformity``)
        self.salu = 0.0
        self.uni = None
        self.mfma_cycles = self.barriers = self.load_rounds = 0.0
        self.l2_bytes = 0.0  # per wave, lines touched x line size
        # exposed latency (see ``_load_issued``): the memory latency in cycles, how many
        # waves of the workgroup share a SIMD (their instructions fill a wait too), the
        # cycles a byte takes at this CU's share of the memory level's bandwidth, the
        # load rounds still waiting for a use as [registers, cycles at issue, trips,
        # bytes per wave, latency], and the cycles a wave waited, summed
        self.latency = latency
        self.hide_scale = hide_scale
        self.cycles_per_byte = cycles_per_byte
        self.pending: list = []
        self.waiting: set = set()  # every pending round's registers
        self.merge = False
        self.level = 1.0  # the trips of the loops around the statement walked
        self.exposed = 0.0

    def cycles(self, arch) -> float:
        """A wave's issue cycles counted so far (the walk's running clock)."""
        return ((self.valu + self.salu + self.vmem + self.lds_cycles) * arch.issue_period_cycles
                + self.mfma_cycles + self.barriers * arch.barrier_cycles)


def _reads_any(s, names) -> bool:
    """Whether statement ``s`` itself reads a register in ``names`` (a loop's bounds, a
    branch's condition, not their bodies); stops at the first."""
    stack = list(stmt_exprs(s))
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Var:
            if x.name in names:
                return True
        elif t is BinOp:
            stack.append(x.a)
            stack.append(x.b)
        elif t is not Const and t is not Special and t is not ScalarRef:
            stack.extend(expr_children(x))
    return False


def _round_wait(c: _Counts, entry, hidden: float) -> float:
    """What one trip of a load round waits: the latency plus its workgroup's bytes at
    the CU's share of the bandwidth (gpusim's per-CU model), less the cycles hidden."""
    return max(0.0, entry[4] + entry[3] * c.cycles_per_byte - hidden * c.hide_scale)


def _close_round(c: _Counts, entry, now: float) -> None:
    m = entry[2]
    if m > 0:
        c.exposed += m * _round_wait(c, entry, (now - entry[1]) / m)


def _first_use(s, c: _Counts, arch) -> None:
    """Close the load rounds whose registers ``s`` reads: the wave waits there (gpusim's
    scoreboard, like s_waitcnt at first use) for what the instructions issued since the
    load did not hide."""
    if not c.pending:
        return
    if not isinstance(s, (Assign, If, For, Load, LdsLoad)):
        c.merge = False  # loads after this one wait in a round of their own
    if not _reads_any(s, c.waiting):
        return
    now, keep = None, []
    for entry in c.pending:
        if _reads_any(s, entry[0]):
            now = c.cycles(arch) if now is None else now
            _close_round(c, entry, now)
        else:
            keep.append(entry)
    c.pending = keep
    c.waiting = set().union(*(e[0] for e in keep))


def _load_issued(s, mult: float, c: _Counts, arch, nbytes: float,
                 latency: float | None = None) -> None:
    """Open a load round at a global load or an LDS read (``latency``: the LDS's; or add
    its registers to the round the loads just before it opened at the same loop depth:
    loads issued together wait together). Why: a load's latency is exposed only as far as the instructions between
    it and its first use do not cover it; a prefetched tile (``prefetch=2``) loads before
    the current tile's MFMAs and is used after them, so its wait is hidden, and with one
    workgroup on a CU nothing else hides it (the ranking placed ``prefetch=1`` points
    level with ``prefetch=2`` ones that gpusim ran 1.5x faster; docs/search.md, eleventh
    round)."""
    names = {d.name for d in s.dsts}
    # the waves that take a guard's arm load their part of a tile: the round is the
    # loop's (trips ``c.level``), its bytes each wave's share of the workgroup's
    share = mult / c.level if c.level > 0 else 0.0
    c.waiting.update(names)
    latency = c.latency if latency is None else latency
    last = c.pending[-1] if c.pending else None
    if last is not None and last[2] == c.level and last[4] == latency and c.merge:
        last[0].update(names)
        last[3] += nbytes * share
    else:
        c.pending.append([names, c.cycles(arch), c.level, nbytes * share, latency])
    c.merge = True


def _loop_enter(c: _Counts, arch, body_mult: float) -> tuple:
    """Before a loop's body: the rounds open so far, the clock, and the outer trips."""
    state = ({id(e) for e in c.pending}, c.cycles(arch), c.level)
    c.level = body_mult
    return state


def _loop_exit(c: _Counts, arch, state: tuple, body_mult: float) -> None:
    """After a loop's body: close the rounds it opened and did not use (their registers
    are read in the next trip: a tile loaded a trip ahead, ``prefetch=2``), each waiting
    a whole trip less; then back to the outer trips."""
    before, start, c.level = state
    if body_mult <= 0 or all(id(e) in before for e in c.pending):
        return
    trip = (c.cycles(arch) - start) / body_mult
    keep = []
    for entry in c.pending:
        if id(entry) not in before and entry[2] == body_mult:
            c.exposed += body_mult * _round_wait(c, entry, trip)
        else:
            keep.append(entry)
    c.pending = keep
    c.waiting = set().union(*(e[0] for e in keep))


def _close_all(c: _Counts, arch) -> None:
    now = c.cycles(arch)
    for entry in c.pending:
        _close_round(c, entry, now)
    c.pending = []
    c.waiting = set()


def _ops(e) -> float:
    """VALU instructions of an expression (a transcendental counts its rate divisor)."""
    if isinstance(e, (Const, Var, Special, ScalarRef)):
        return 0.0
    if isinstance(e, BinOp):
        return (4.0 if e.op in TRANSCENDENTAL else 1.0) + _ops(e.a) + _ops(e.b)
    if isinstance(e, UnOp):
        return (4.0 if e.op in TRANSCENDENTAL else 1.0) + _ops(e.a)
    if isinstance(e, Cast):
        return 1.0 + _ops(e.a)
    if isinstance(e, Fma):
        return 1.0 + _ops(e.a) + _ops(e.b) + _ops(e.c)
    if isinstance(e, Select):
        return 1.0 + _ops(e.cond) + _ops(e.a) + _ops(e.b)
    return 1.0


_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
       "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
       "shl": np.left_shift, "shr": np.right_shift}


class _Lanes:
    """Evaluates integer index expressions for the threads of workgroup 0 (every wave of
    it: a guard on the wave index, such as the K-split waves' combine, is taken by some
    waves only).

    A register's lanes are evaluated once, when the walk meets its definition (``bind``),
    and a use reads the stored array: an address costs its own operators, not the whole
    tree of definitions behind it again at every access."""

    def __init__(self, wave: int, block: int = 0):
        self.tid = np.arange(max(wave, block), dtype=np.int64)
        self.lane = self.tid % wave
        self.wave = wave
        self.waves = len(self.tid) // wave + (len(self.tid) % wave > 0)
        self.zero = np.zeros_like(self.tid)
        self.zero.setflags(write=False)
        self.defs: dict = {}

    def known(self, e) -> bool:
        """Whether every register ``e`` reads holds lanes the walk evaluated (not a value
        loaded from memory, not a float)."""
        return all(n in self.defs for n in expr_vars(e))

    def waves_active(self, mask) -> int:
        """Waves of the workgroup with at least one thread in ``mask``."""
        m = np.zeros(self.waves * self.wave, dtype=bool)
        m[:len(mask)] = mask
        return int(m.reshape(self.waves, self.wave).any(axis=1).sum())

    def first_wave(self, mask) -> np.ndarray:
        """The thread indices of the first wave with a thread in ``mask``, those threads
        only (wave 0's every lane when none is)."""
        hits = np.flatnonzero(mask)
        w = int(hits[0]) // self.wave if len(hits) else 0
        lanes = np.arange(w * self.wave, min((w + 1) * self.wave, len(self.tid)))
        sel = lanes[mask[lanes]] if len(hits) else lanes
        return sel

    def bind(self, name: str, e) -> None:
        """``name`` now holds ``e`` (evaluated with the registers' current values)."""
        self.defs[name] = self.value(e)

    def forget(self, name: str) -> None:
        """``name`` was loaded from memory: taken as zero (the module docstring)."""
        self.defs.pop(name, None)  # zero when used in an address; unknown to ``known``

    def value(self, e):
        if isinstance(e, Var):
            v = self.defs.get(e.name)
            return self.zero if v is None else v
        if isinstance(e, Const):
            return (np.full_like(self.tid, int(e.value))
                    if isinstance(e.value, (int, bool))
                    else self.zero)
        if isinstance(e, Special):
            if e.name == "thread_id":
                return self.tid
            if e.name == "lane":
                return self.lane
            if e.name == "wave_size":
                return np.full_like(self.tid, self.wave)
            return self.zero  # block 0
        if isinstance(e, BinOp) and e.dtype == "i32":
            a, b = self.value(e.a), self.value(e.b)
            with np.errstate(all="ignore"):
                if e.op in _NP:
                    try:
                        return _NP[e.op](a, np.clip(b, 0, 62) if e.op in ("shl", "shr") else b)
                    except TypeError:
                        return self.zero
                if e.op in ("div", "floordiv"):
                    return np.where(b != 0, a // np.where(b == 0, 1, b), 0)
                if e.op in ("mod", "rem"):
                    return np.where(b != 0, a % np.where(b == 0, 1, b), 0)
                cmp = _CMP.get(e.op)
                if cmp is not None:
                    return cmp(a, b).astype(np.int64)
            return self.zero
        if isinstance(e, Select):
            c = self.value(e.cond)
            return np.where(c != 0, self.value(e.a), self.value(e.b))
        if isinstance(e, Cast):
            return self.value(e.a)
        return self.zero


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}


def _walk(body, mult: float, c: _Counts, lanes: _Lanes, arch, kernel, active=None) -> None:
    """Count ``body``'s instructions per wave (``mult``: trips of the enclosing loops times
    the share of the workgroup's waves that run it) and analyse its accesses with the
    threads in ``active`` (every thread of workgroup 0 when None)."""
    if active is None:
        active = np.ones(len(lanes.tid), dtype=bool)
    loads_here = False
    for s in body:
        _first_use(s, c, arch)
        if isinstance(s, Assign):
            if s.dst.dtype == "i32" and c.uni.is_uniform(s.value):
                c.salu += mult * max(1.0, _ops(s.value))
            else:
                c.valu += mult * max(1.0, _ops(s.value))
            if s.dst.dtype == "i32":
                lanes.bind(s.dst.name, s.value)
            else:
                lanes.forget(s.dst.name)
        elif isinstance(s, For):
            lanes.bind(s.var.name, s.start)
            trips = steady.trips(s)
            n = float(trips) if trips is not None else (
                s.trips_hint if s.trips_hint is not None else 1.0)
            # loop control, once per entry and per trip: scalar for a uniform counter
            control = 2.0 + (0.0 if s.unroll else n)
            if c.uni.is_uniform(s.start) and c.uni.is_uniform(s.stop):
                c.salu += mult * control
            else:
                c.valu += mult * control
            state = _loop_enter(c, arch, mult * max(n, 0.0))
            _walk(s.body, mult * max(n, 0.0), c, lanes, arch, kernel, active)
            _loop_exit(c, arch, state, mult * max(n, 0.0))
        elif isinstance(s, If):
            c.valu += mult * (1.0 + _ops(s.cond))
            if s.then_share is not None:  # the lowering's mean over workgroups and trips
                for arm, share in ((s.then, s.then_share), (s.orelse, 1.0 - s.then_share)):
                    if arm and share > 0:
                        _walk(arm, mult * share, c, lanes, arch, kernel, active)
            elif lanes.known(s.cond):
                # a guard the walk can evaluate: each arm for the waves that take it
                cond = lanes.value(s.cond) != 0
                here = max(1, lanes.waves_active(active))
                for arm, mask in ((s.then, active & cond), (s.orelse, active & ~cond)):
                    share = lanes.waves_active(mask) / here
                    if arm and share > 0:
                        _walk(arm, mult * share, c, lanes, arch, kernel, mask)
            else:  # on a loaded or float value: both arms (almost always taken)
                _walk(s.then, mult, c, lanes, arch, kernel, active)
                _walk(s.orelse, mult, c, lanes, arch, kernel, active)
        elif isinstance(s, (Load, Store)):
            n = len(s.dsts) if isinstance(s, Load) else len(s.values)
            c.vmem += mult
            c.valu += mult * _ops(s.index)
            try:
                nbytes = DTYPE_BYTES[kernel.buffer(s.buffer).dtype]
            except KeyError:
                nbytes = 4
            addr = lanes.value(s.index)[lanes.first_wave(active)] * nbytes
            line = arch.l1_line_bytes
            lines = len(np.union1d(addr // line, (addr + n * nbytes - 1) // line))
            c.l2_bytes += mult * lines * line
            if isinstance(s, Load):
                loads_here = True
                _load_issued(s, mult, c, arch, lines * line)
                for d in s.dsts:
                    lanes.forget(d.name)
        elif isinstance(s, (LdsLoad, LdsStore)):
            n = len(s.dsts) if isinstance(s, LdsLoad) else len(s.values)
            c.lds += mult
            c.valu += mult * _ops(s.index)
            sel = lanes.first_wave(active)
            words = lanes.value(s.index)[sel]
            banks = arch.lds_banks
            # lanes of one phase (half a wave64 per 32 banks) that hit one bank: the degree
            phase = lanes.lane[sel] // banks
            degree = 1
            for p in np.unique(phase):
                w = np.unique(words[phase == p])  # one word read by many lanes: broadcast
                degree = max(degree, int(np.bincount(w % banks, minlength=banks).max()))
            c.lds_cycles += mult * degree * max(1, n * 4 // arch.lds_bank_bytes // 1)
            if isinstance(s, LdsLoad):
                _load_issued(s, mult, c, arch, 0.0, arch.lds_latency_cycles)
                for d in s.dsts:
                    lanes.forget(d.name)
        elif isinstance(s, Mfma):
            c.mfma_cycles += mult * arch.mfma_cycles(s.shape)
        elif isinstance(s, Barrier):
            c.barriers += mult
        elif isinstance(s, Shuffle):
            c.valu += mult * (1.0 + _ops(s.value))
            lanes.forget(s.dst.name)
        elif isinstance(s, WaveReduce):
            c.valu += mult * (math.log2(arch.wave_size) * 2 + _ops(s.value))
            lanes.forget(s.dst.name)
        elif isinstance(s, AtomicAdd):  # one VMEM request to the L2, its old value back
            c.vmem += mult
            c.valu += mult * (_ops(s.index) + _ops(s.value))
            c.l2_bytes += mult * arch.l1_line_bytes
            lanes.forget(s.dst.name)
    if loads_here:
        c.load_rounds += mult


# ---------------------------------------------------------------------------- fast walk
# The walk above is the reference (plain, one numpy array per value, the one to read);
# the ranking runs the walk below, which counts and analyses the same things with the
# same arithmetic, only with less interpreter work per node (fifth round, docs/search.md:
# the ranking's walk was most of a bound's cost). ``tests/test_rank_fast.py`` checks the
# two give equal estimates, feature for feature, on every point of several real spaces.
# What differs is bookkeeping only: a constant is evaluated once per value and kept, an
# expression's instruction count is remembered per node (the kernel's expressions are
# immutable and shared), the thread masks of a workgroup whose every thread is active
# take their answer without a numpy pass, one LDS access's bank degree is one bincount
# over (phase, bank) instead of one per phase, and the cache lines of a global access are
# a Python set of at most two words per lane.

_TRANS = frozenset(TRANSCENDENTAL)
_LEAVES = frozenset((Var, Const, Special, ScalarRef))
#: an access pattern's answer (bank degree, lines) by the pattern moved to start at zero,
#: across kernels: the same pattern at another base has the same degree, and the same
#: lines when moved by whole lines (a tile's unrolled accesses and the points of a space
#: repeat a few patterns); bounded, cleared when full
_DEGREES: dict = {}
_LINES: dict = {}


class _FastLanes(_Lanes):
    """``_Lanes`` with the constants' arrays kept and the masks' answers for a workgroup
    whose every thread is active computed once."""

    def __init__(self, wave: int, block: int = 0):
        super().__init__(wave, block)
        self.all = np.ones(len(self.tid), dtype=bool)
        self.consts: dict = {}
        self.first_all = super().first_wave(self.all)
        self.padded = self.waves * self.wave != len(self.tid)
        self.firsts: dict = {}
        self.nbytes: dict = {}  # a buffer's element size, by name

    def const(self, v: int):
        a = self.consts.get(v)
        if a is None:
            a = self.consts[v] = np.full_like(self.tid, v)
            a.setflags(write=False)
        return a

    def waves_active(self, mask) -> int:
        if mask is self.all:
            return self.waves
        if self.padded:
            return super().waves_active(mask)
        return int(mask.reshape(self.waves, self.wave).any(axis=1).sum())

    def first_wave(self, mask) -> np.ndarray:
        if mask is self.all:
            return self.first_all
        hit = self.firsts.get(id(mask))
        if hit is None or hit[0] is not mask:  # a guard's mask: every access under it
            hit = self.firsts[id(mask)] = (mask, super().first_wave(mask))
        return hit[1]

    def value(self, e):
        t = type(e)
        if t is Var:
            v = self.defs.get(e.name)
            return self.zero if v is None else v
        if t is BinOp:
            if e.dtype != "i32":
                return self.zero
            op = e.op
            a, b = e.a, e.b
            if type(a) is Var:
                a = self.defs.get(a.name)
                if a is None:
                    a = self.zero
            else:
                a = self.value(a)
            if type(b) is Const and isinstance(b.value, (int, bool)):
                # a constant operand as a Python int: the same int64 results as the
                # reference's full array (numpy's weak scalars), one pass instead of the
                # reference's zero-divisor masks
                cb = int(b.value)
                f = _NP.get(op)
                if f is not None:
                    return f(a, min(max(cb, 0), 62) if op in ("shl", "shr") else cb)
                if op in ("div", "floordiv"):
                    return a // cb if cb else self.zero
                if op in ("mod", "rem"):
                    return a % cb if cb else self.zero
                cmp = _CMP.get(op)
                if cmp is not None:
                    return cmp(a, cb).astype(np.int64)
                return self.zero
            if type(b) is Var:
                b = self.defs.get(b.name)
                if b is None:
                    b = self.zero
            else:
                b = self.value(b)
            f = _NP.get(op)
            if f is not None:
                try:
                    return f(a, np.clip(b, 0, 62) if op in ("shl", "shr") else b)
                except TypeError:
                    return self.zero
            if op in ("div", "floordiv"):
                return np.where(b != 0, a // np.where(b == 0, 1, b), 0)
            if op in ("mod", "rem"):
                return np.where(b != 0, a % np.where(b == 0, 1, b), 0)
            cmp = _CMP.get(op)
            if cmp is not None:
                return cmp(a, b).astype(np.int64)
            return self.zero
        if t is Const:
            return (self.const(int(e.value)) if isinstance(e.value, (int, bool))
                    else self.zero)
        if t is Special:
            if e.name == "thread_id":
                return self.tid
            if e.name == "lane":
                return self.lane
            if e.name == "wave_size":
                return self.const(self.wave)
            return self.zero
        if t is Select:
            c = self.value(e.cond)
            return np.where(c != 0, self.value(e.a), self.value(e.b))
        if t is Cast:
            return self.value(e.a)
        return super().value(e)

    @staticmethod
    def n_ops(e) -> float:
        """``_ops(e)`` with type tests by identity (the same sum, in the same order)."""
        t = type(e)
        if t in _LEAVES:
            return 0.0
        n_ops = _FastLanes.n_ops
        if t is BinOp:
            a, b = e.a, e.b
            return ((4.0 if e.op in _TRANS else 1.0) + (0.0 if type(a) in _LEAVES else n_ops(a))
                    + (0.0 if type(b) in _LEAVES else n_ops(b)))
        if t is Fma:
            a, b, c = e.a, e.b, e.c
            return (1.0 + (0.0 if type(a) in _LEAVES else n_ops(a))
                    + (0.0 if type(b) in _LEAVES else n_ops(b))
                    + (0.0 if type(c) in _LEAVES else n_ops(c)))
        if t is UnOp:
            return (4.0 if e.op in _TRANS else 1.0) + n_ops(e.a)
        if t is Cast:
            return 1.0 + n_ops(e.a)
        if t is Select:
            return 1.0 + n_ops(e.cond) + n_ops(e.a) + n_ops(e.b)
        return _ops(e)


def _walk_fast(body, mult: float, c: _Counts, lanes: _FastLanes, arch, kernel,
               active=None) -> None:
    """``_walk`` (same counts, same order of additions), with ``_FastLanes``."""
    if active is None:
        active = lanes.all
    ops = lanes.n_ops
    loads_here = False
    for s in body:
        if c.pending:
            _first_use(s, c, arch)
        t = type(s)
        if t is Assign:
            if s.dst.dtype == "i32" and c.uni.is_uniform(s.value):
                c.salu += mult * max(1.0, ops(s.value))
            else:
                c.valu += mult * max(1.0, ops(s.value))
            if s.dst.dtype == "i32":
                lanes.defs[s.dst.name] = lanes.value(s.value)
            else:
                lanes.defs.pop(s.dst.name, None)
        elif t is For:
            lanes.defs[s.var.name] = lanes.value(s.start)
            trips = steady.trips(s)
            n = float(trips) if trips is not None else (
                s.trips_hint if s.trips_hint is not None else 1.0)
            control = 2.0 + (0.0 if s.unroll else n)
            if c.uni.is_uniform(s.start) and c.uni.is_uniform(s.stop):
                c.salu += mult * control
            else:
                c.valu += mult * control
            state = _loop_enter(c, arch, mult * max(n, 0.0))
            _walk_fast(s.body, mult * max(n, 0.0), c, lanes, arch, kernel, active)
            _loop_exit(c, arch, state, mult * max(n, 0.0))
        elif t is If:
            c.valu += mult * (1.0 + ops(s.cond))
            if s.then_share is not None:
                for arm, share in ((s.then, s.then_share), (s.orelse, 1.0 - s.then_share)):
                    if arm and share > 0:
                        _walk_fast(arm, mult * share, c, lanes, arch, kernel, active)
            elif lanes.known(s.cond):
                cond = lanes.value(s.cond) != 0
                here = max(1, lanes.waves_active(active))
                for arm, mask in ((s.then, active & cond), (s.orelse, active & ~cond)):
                    if not arm:
                        continue
                    if active is lanes.all and mask.all():
                        mask = lanes.all
                    share = lanes.waves_active(mask) / here
                    if share > 0:
                        _walk_fast(arm, mult * share, c, lanes, arch, kernel, mask)
            else:
                _walk_fast(s.then, mult, c, lanes, arch, kernel, active)
                _walk_fast(s.orelse, mult, c, lanes, arch, kernel, active)
        elif t is Load or t is Store:
            n = len(s.dsts) if t is Load else len(s.values)
            c.vmem += mult
            c.valu += mult * ops(s.index)
            nbytes = lanes.nbytes.get(s.buffer)
            if nbytes is None:
                try:
                    nbytes = DTYPE_BYTES[kernel.buffer(s.buffer).dtype]
                except KeyError:
                    nbytes = 4
                lanes.nbytes[s.buffer] = nbytes
            addr = lanes.value(s.index)[lanes.first_wave(active)] * nbytes
            line = arch.l1_line_bytes
            span = n * nbytes - 1
            if len(addr):
                addr = addr - int(addr.min()) // line * line
            key = (addr.tobytes(), span, line)
            count = _LINES.get(key)
            if count is None:
                if len(_LINES) > 1 << 16:
                    _LINES.clear()
                count = _LINES[key] = len(set((addr // line).tolist()).union(
                    ((addr + span) // line).tolist()))
            c.l2_bytes += mult * count * line
            if t is Load:
                loads_here = True
                _load_issued(s, mult, c, arch, count * line)
                for d in s.dsts:
                    lanes.defs.pop(d.name, None)
        elif t is LdsLoad or t is LdsStore:
            n = len(s.dsts) if t is LdsLoad else len(s.values)
            c.lds += mult
            c.valu += mult * ops(s.index)
            sel = lanes.first_wave(active)
            words = lanes.value(s.index)[sel]
            banks = arch.lds_banks
            phase = lanes.lane[sel] // banks
            # the distinct (phase, word) pairs, then per (phase, bank) how many: the most
            # is the degree (a word read by many lanes of a phase is a broadcast)
            if len(words):
                words = words - int(words.min())
            key = (phase.tobytes(), words.tobytes(), banks)
            degree = _DEGREES.get(key)
            if degree is None:
                if len(_DEGREES) > 1 << 16:
                    _DEGREES.clear()
                degree = _DEGREES[key] = _bank_degree(phase, words, banks)
            c.lds_cycles += mult * degree * max(1, n * 4 // arch.lds_bank_bytes // 1)
            if t is LdsLoad:
                _load_issued(s, mult, c, arch, 0.0, arch.lds_latency_cycles)
                for d in s.dsts:
                    lanes.defs.pop(d.name, None)
        elif t is Mfma:
            c.mfma_cycles += mult * arch.mfma_cycles(s.shape)
        elif t is Barrier:
            c.barriers += mult
        elif t is Shuffle:
            c.valu += mult * (1.0 + ops(s.value))
            lanes.defs.pop(s.dst.name, None)
        elif t is WaveReduce:
            c.valu += mult * (math.log2(arch.wave_size) * 2 + ops(s.value))
            lanes.defs.pop(s.dst.name, None)
        else:
            # a statement kind this walk does not specialise: the reference's treatment
            _walk([s], mult, c, lanes, arch, kernel, active)
    if loads_here:
        c.load_rounds += mult


def _bank_degree(phase, words, banks: int) -> int:
    """The most lanes of one phase that hit one bank at distinct words (the reference's
    loop over phases, as one pass): the distinct (phase, word) pairs, counted per
    (phase, bank)."""
    if len(words) == 0:
        return 1
    lo = int(words.min())
    span = int(words.max()) - lo + 1
    if span > 1 << 40:  # a key would overflow: the reference's loop
        degree = 1
        for p in np.unique(phase):
            w = np.unique(words[phase == p])
            degree = max(degree, int(np.bincount(w % banks, minlength=banks).max()))
        return degree
    key = np.unique(phase * span + (words - lo))
    ph, w = np.divmod(key, span)
    return max(1, int(np.bincount(ph * banks + (w + lo) % banks).max()))


def _kernels(k) -> list:
    if isinstance(k, KernelSequence):
        return list(k.kernels)
    return list(k) if isinstance(k, (list, tuple)) else [k]


def estimate(kernel, arch, bound: bool = False, reference: bool = False,
             vgprs=None) -> Estimate:
    """The analytic estimate of one lowered kernel (or a sequence of them, summed, each
    kernel after the first paying its own launch, as the simulator charges it).

    ``bound``: a lower bound of the estimate, without counting the kernels' VGPRs
    (occupancy as if each needed the fewest): the VGPR count is most of the estimate's
    cost, and more VGPRs only lower occupancy, which never shortens the estimate (fewer
    workgroups per CU: more rounds, fewer SIMDs busy, less latency hidden), so the exact
    estimate is at least the bound. ``Ranking`` counts VGPRs only where the order needs it.
    A bound that fails (LDS or wave slots) fails exactly too; it is marked exact.

    ``reference``: walk the kernel with the plain reference walk (``_walk``) instead of
    the fast one (``_walk_fast``); the two give equal estimates (the differential test).

    ``vgprs`` (exact only): the kernels' VGPR counts made before (one count or None per
    kernel in launch order, as a simulation of the same lowering counted them: the
    caller vouches they are these kernels'), used instead of counting again. An exact
    estimate carries its counts (``Estimate.vgprs``)."""
    kernels = _kernels(kernel)
    total, feats, counts = (len(kernels) - 1) * arch.launch_overhead_us, {}, []
    for i, k in enumerate(kernels):
        known = None if bound or vgprs is None or i >= len(vgprs) else vgprs[i]
        e = (_later_kernel(k, arch, bound, reference, known) if i
             else _estimate_one(k, arch, 1 if bound else known, reference, not bound))
        if not e.ok:
            return e
        total += e.us
        for f, v in e.features.items():
            feats[f] = feats.get(f, 0.0) + v
        counts.extend(e.vgprs)
    return Estimate(total, feats, bound=bound, vgprs=() if bound else tuple(counts))


class Ranking:
    """The order of a dispatch's legal points by exact estimate, computed best-first from
    lower bounds (``estimate(..., bound=True)``): a point's exact estimate (its VGPRs
    counted) is computed only when its bound reaches the head of the queue, so ranking a
    space of N points for a search that simulates B of them counts the VGPRs of about B
    points, not N (A*'s argument: an exact value at the head is no larger than any other
    point's bound, hence than its exact value). The order it gives is the one sorting
    every exact estimate would give, ties by index.

    ``bounds``: an ``Estimate`` per point (bounds, or exact ones where known);
    ``exact_of(indices)``: those points' exact estimates (lowers and counts), a list;
    ``batch``: how many bound heads are made exact at once (the workers' count: a few
    exact estimates more than needed, computed in parallel). ``forced`` holds the points
    this ranking's callers used (emitted by ``best`` or read by index), the same at any
    batch, so positions shown to users depend neither on the worker count nor on what a
    shared database happened to hold."""

    def __init__(self, bounds: list, exact_of, batch: int = 1):
        self._bounds = list(bounds)
        self._exact_of = exact_of
        self._batch = max(1, int(batch))
        self._exact: dict = {}
        self.forced: set = set()

    def __len__(self) -> int:
        return len(self._bounds)

    def bound(self, i: int) -> Estimate:
        return self._exact.get(i) or self._bounds[i]

    def _make_exact(self, indices: list) -> None:
        todo = [i for i in indices if i not in self._exact and self._bounds[i].bound]
        for i in indices:
            if not self._bounds[i].bound:
                self._exact.setdefault(i, self._bounds[i])
        if todo:
            for i, e in zip(todo, self._exact_of(todo)):
                self._exact[i] = e

    def __getitem__(self, i: int) -> Estimate:
        """Point i's exact estimate (counted on first use)."""
        self._make_exact([i])
        self.forced.add(i)
        return self._exact[i]

    def best(self, k: int, among=None) -> list:
        """Up to ``k`` indices (of ``among``, default every point) in exact-estimate order,
        points that fail to lower or fit last."""
        import heapq
        pool = range(len(self._bounds)) if among is None else among
        heap = [(self.bound(i).us, i, i in self._exact or not self._bounds[i].bound)
                for i in pool]
        heapq.heapify(heap)
        out = []
        while heap and len(out) < k:
            us, i, exact = heap[0]
            if exact:
                heapq.heappop(heap)
                self.forced.add(i)
                out.append(i)
                continue
            group = []
            while heap and len(group) < self._batch and not heap[0][2]:
                group.append(heapq.heappop(heap)[1])
            self._make_exact(group)
            for j in group:
                heapq.heappush(heap, (self._exact[j].us, j, True))
        return out

    def position(self) -> dict:
        """index -> position when points are ordered by their exact estimate where this
        ranking's callers used it and by their bound elsewhere: exact at the top, where
        the search looked, approximate below."""
        key = lambda i: (self._exact[i] if i in self.forced else self._bounds[i]).us  # noqa: E731
        return {i: r for r, i in enumerate(sorted(range(len(self._bounds)),
                                                  key=lambda i: (key(i), i)))}


#: estimates of the later kernels of sequences, by their text: split-K's sum of partials
#: and flash-decoding's combine depend on the output tile, the threads and the split
#: count only, so the points of one space repeat them (bounded: cleared when full)
_LATER: dict = {}


#: the same estimates by the kernel's body object: the lowering builds a reduction once
#: for the points that share it (``compiler.lower.contraction.reduce_kernel``), so its
#: later points hand the very same body, and reading its text (a third of a second per
#: hundred points) is skipped; the entry holds the body, so its id stays its own
_LATER_BY_BODY: dict = {}


def _later_kernel(k, arch, bound: bool = False, reference: bool = False,
                  vgprs: int | None = None) -> Estimate:
    ident = (id(k.body), arch.name, bound, reference)
    hit = _LATER_BY_BODY.get(ident)
    if hit is not None and hit[0] is k.body and hit[1] == (k.name, k.params, k.grid,
                                                           k.block, k.lds):
        e = hit[2]
        return Estimate(e.us, dict(e.features), e.error, vgprs=e.vgprs)
    # the kernel's text without ``meta`` (the schedule's knobs, read by no estimate):
    # with it no two points' reduction kernels matched (a 3x3 conv's 548 split-K and
    # stream-K points have 110 distinct reduction kernels)
    key = (arch.name, repr((k.name, k.params, k.grid, k.block, k.body, k.lds)), bound,
           reference)
    e = _LATER.get(key)
    if e is None:
        if len(_LATER) > 256:
            _LATER.clear()
        e = _LATER[key] = _estimate_one(k, arch, 1 if bound else vgprs, reference,
                                        not bound)
    if len(_LATER_BY_BODY) > 256:
        _LATER_BY_BODY.clear()
    _LATER_BY_BODY[ident] = (k.body, (k.name, k.params, k.grid, k.block, k.lds), e)
    return Estimate(e.us, dict(e.features), e.error, vgprs=e.vgprs)


def _estimate_one(k, arch, vgprs: int | None = None, reference: bool = False,
                  exact: bool = False) -> Estimate:
    """One kernel's estimate; ``vgprs``: its VGPRs (1 for a bound), None: counted.
    ``exact``: the count is the kernel's own, carried in ``Estimate.vgprs``."""
    try:
        occ = occupancy(k, arch, vgprs)
    except KernelError as e:
        return Estimate(math.inf, {}, str(e))
    wpw = occ.waves_per_workgroup
    footprint = sum(b.size * DTYPE_BYTES.get(b.dtype, 4) for b in k.buffers)
    level = arch.memory_level(footprint)
    # a byte's cycles at one CU's share of the memory level's read bandwidth (gpusim
    # divides it among the CUs with work; per wave: the walk counts one wave's bytes)
    per_byte = (arch.clock_ghz * 1e9 * min(arch.num_cus, k.grid)
                / arch.memory_bytes_per_s(level)) * wpw
    c = _Counts(arch.memory_latency_cycles(level), max(1.0, wpw / arch.simds_per_cu),
                per_byte)
    c.uni = Uniformity(k.body)
    if reference:
        _walk(k.body, 1.0, c, _Lanes(arch.wave_size, k.block), arch, k)
    else:
        with np.errstate(all="ignore"):
            _walk_fast(k.body, 1.0, c, _FastLanes(arch.wave_size, k.block), arch, k)
    _close_all(c, arch)
    clk = arch.clock_ghz * 1e3  # cycles per microsecond
    per_cu_wgs = max(1, occ.workgroups_per_cu)
    wg_rounds = math.ceil(k.grid / (arch.num_cus * per_cu_wgs))
    busy_cus = min(arch.num_cus, k.grid)
    cu_fill = busy_cus / arch.num_cus
    # issue: every wave's instructions on the SIMDs of the CUs that have work
    wave_cycles = (c.valu * arch.issue_period_cycles + c.vmem * arch.issue_period_cycles
                   + c.lds_cycles * arch.issue_period_cycles + c.mfma_cycles
                   + c.barriers * arch.barrier_cycles)
    wgs_per_cu = math.ceil(k.grid / busy_cus)
    simds = min(arch.simds_per_cu, wpw * min(per_cu_wgs, wgs_per_cu))
    # a SIMD's waves issue their vector, memory and matrix instructions one after another
    # (counted serially, as before); their scalar ones take the SALU port beside them
    # (gpusim's per-category issue ports, ``engine.issue``), so a SIMD takes the longer
    # of the two streams, and at least one wave's own serial chain per round of the
    # waves resident on it
    salu_cycles = c.salu * arch.issue_period_cycles
    simd_waves = wgs_per_cu * wpw / simds
    resident_waves = max(1.0, min(simd_waves, float(occ.waves_per_simd)))
    issue_cycles = max(simd_waves * max(wave_cycles, salu_cycles),
                       math.ceil(simd_waves / resident_waves) * (wave_cycles + salu_cycles))
    # memory: footprint through HBM/MALL once, every requested line through L2
    hbm_us = footprint / arch.stream_bytes_per_s(footprint) * 1e6
    l2_total = c.l2_bytes * wpw * k.grid
    l2_us = l2_total / (arch.l2_read_bytes_per_clk * arch.clock_ghz * 1e9) * 1e6
    # and each CU's own requests at its share of the memory level's bandwidth: gpusim
    # times CU 0 with a cold L2, so its lines come from the memory level (``gpusim.sim``:
    # pessimistic for data other CUs share; the ranking follows what it ranks against)
    cu_us = (c.l2_bytes * wpw * wgs_per_cu * c.cycles_per_byte / max(wpw, 1)) / clk
    memory_us = max(hbm_us, l2_us, cu_us)
    # exposed latency: what a workgroup waits at its loads' first uses (``_first_use``)
    # that the other workgroups on its CU do not fill with their instructions. A
    # workgroup's waves wait together (they meet at barriers), so waves of one workgroup
    # do not hide each other's waits; r workgroups side by side take max(r * I, I + L)
    # per round of r (I: a workgroup's issue time on its SIMDs, L: its exposed wait)
    resident = max(1, min(per_cu_wgs, wgs_per_cu))
    wg_issue = wpw * (wave_cycles + salu_cycles) / max(1, min(arch.simds_per_cu, wpw))
    exposed_cycles = (math.ceil(wgs_per_cu / resident)
                      * max(0.0, c.exposed - (resident - 1) * wg_issue))
    issue_us = issue_cycles / clk
    latency_us = exposed_cycles / clk
    launch_us = (wg_rounds * arch.wave_launch_cycles) / clk
    # issue and memory added, not overlapped: the memory a wave waits for and the
    # instructions it issues (addresses, conversions, the stores' operands) share its
    # time; with max() a memory-bound space's points tie on bytes and the order among them
    # was decided by noise (the transposes' Spearman 0.3 -> 0.8 on every point). The
    # launches are a floor, not a term: a wave launches while others run.
    us = max(issue_us + memory_us + latency_us, launch_us)
    feats = {"valu": c.valu, "salu": c.salu, "vmem": c.vmem, "lds": c.lds,
             "lds_conflict": c.lds_cycles / c.lds if c.lds else 1.0,
             "mfma_cycles": c.mfma_cycles, "barriers": c.barriers,
             "load_rounds": c.load_rounds, "l2_bytes": l2_total, "hbm_bytes": float(footprint),
             "waves_per_simd": occ.waves_per_simd, "grid": float(k.grid),
             "wg_rounds": float(wg_rounds), "cu_fill": cu_fill, "issue_us": issue_us,
             "memory_us": memory_us, "latency_us": latency_us}
    return Estimate(us, feats, vgprs=(occ.vgprs,) if exact else ())


def version() -> str:
    """A hash of this file: estimates remembered in the tuning database are keyed by it."""
    if "v" not in _VERSION:
        import hashlib
        _VERSION["v"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return _VERSION["v"]


_VERSION: dict = {}


def rank_candidates(graph, dispatch, candidates: list, arch, lower,
                    bound: bool = False, vgprs=None) -> list:
    """Estimate per candidate (same order); a candidate that fails to lower gets an
    infinite estimate and its reason (it is never simulated). ``bound``: lower bounds
    (``estimate``). ``vgprs``: per candidate, its kernels' VGPR counts made before (a
    simulation's) or None (``estimate``)."""
    out = []
    for n, cand in enumerate(candidates):
        knobs = cand.knobs if hasattr(cand, "knobs") else cand
        try:
            k = lower(graph, dispatch, knobs, arch)
        except Exception as e:  # noqa: BLE001 - a lowering failure is a ranking fact
            out.append(Estimate(math.inf, {}, f"{type(e).__name__}: {e}"))
            continue
        out.append(estimate(k, arch, bound, vgprs=None if vgprs is None else vgprs[n]))
    return out


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (average ranks for ties); nan under 3 points."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    if len(xs) < 3:
        return float("nan")

    def ranks(v):
        order = np.argsort(v, kind="mergesort")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for u in np.unique(v):  # ties: the mean rank
            m = v == u
            if m.sum() > 1:
                r[m] = r[m].mean()
        return r
    rx, ry = ranks(xs), ranks(ys)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
