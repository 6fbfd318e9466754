"""Simulator-driven search: the best schedule per dispatch and the best fusion plan.

For each dispatch of a fusion plan, every legal candidate schedule (or a seeded sample of
``budget`` of them) is lowered to a kernel and scored by ``gpusim.simulate`` in timing
mode; the fastest predicted one wins. The plan itself is chosen the same way: the
aggressive plan, the aggressive plan without the attention rule's fused dispatch
(``split-attention``: QK^T, softmax and PV as three dispatches) and the conservative plan
are all tuned and the fastest total wins, launch overheads included; the decisions record
the numbers, and each fused attention gets a decision setting its dispatch beside its
three rivals (time, HBM bytes, LDS, occupancy). The unfused baseline (every
primitive op its own dispatch, views folded into their consumers) is tuned too, so the
gain of fusion is a difference of two predictions of the same model, split into launch
overhead saved and kernel time saved.

Every chosen kernel is then run functionally by gpusim on the graph's seeded inputs and
compared with the numpy reference, on the output tiles of a sample of its workgroups
(``compiler.tuning.sampling``; every workgroup with ``check_all``); a mismatch is reported in
the result, never hidden.

All times are simulated microseconds on the modelled architecture, not measurements.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from dataclasses import dataclass, field

import numpy as np

import gpusim
from gpusim import steady
from gpusim import program
from gpusim.program import KernelSequence
from gpusim.hw import DEFAULT_ARCH, Arch, get_arch

from compiler.tuning import cluster as runner
from compiler.ir import numerics, partial
from compiler.tuning import fusion_guard, plancache, rank, refine, sampling, staged, tunedb
from compiler.ir.graph import Graph, GraphError
from compiler.lower import LoweringError, dispatch_kind, lower
from compiler.lower.common import memory_image
from compiler.fusion.plan import Decision, unfused_dispatches
from compiler.ir.reference import evaluate, random_inputs
from compiler.schedule import Candidate, check_pins, schedule_space

KEY_COUNTERS = ("coalescing_pct", "lds_bank_conflict_cycles", "lds_bank_conflict_rate_pct",
                "hbm_bytes", "occupancy_waves_per_simd", "valu_insts", "vmem_insts",
                "lds_insts")


class SearchError(GraphError):
    """A search that cannot run as asked (e.g. a pinned knob value no candidate has)."""


@dataclass
class Scored:
    knobs: dict
    time_us: float | None
    cycles: float | None = None
    counters: dict = field(default_factory=dict)
    occupancy_limiter: str = ""
    error: str = ""
    #: the kernels' VGPR counts the simulation used, one per kernel in launch order (an
    #: exact analytic estimate of the same point reuses them: ``_ranking``)
    vgprs: tuple = ()

    @property
    def ok(self) -> bool:
        return self.time_us is not None


@dataclass
class DispatchTune:
    name: str
    kind: str
    dispatch: object
    best: Scored
    candidates: list            # Scored, fastest first (failed ones last)
    illegal: list               # Candidate, never simulated, with the reason
    kernel: object = None       # the winner's gpusim Kernel
    bytes: int = 0              # global-memory bytes across its boundary
    flops: int = 0
    roofline_us: float = 0.0
    max_error: float | None = None
    verified: bool | None = None
    check: str = ""             # which workgroups the value check ran (verify_dispatches)

    search: dict = field(default_factory=dict)  # staged.DispatchSearch.summary()

    # the winner's kernel is lowered when first asked for (a cached run that only
    # reports times never lowers); ``_lower`` holds (graph, arch) until then
    _lower = None

    def to_json(self) -> dict:
        c = self.best.counters
        return {"name": self.name, "kind": self.kind, "ops": list(self.dispatch.ops),
                "schedule": self.best.knobs,
                "time_us": self.best.time_us, "roofline_us": self.roofline_us,
                "counters": {k: c.get(k) for k in KEY_COUNTERS},
                "occupancy_limiter": self.best.occupancy_limiter,
                # kernels the dispatch launches (2 for split-K / flash-decoding)
                "kernels": int(c.get("kernels", 1)),
                "candidates": len(self.candidates), "illegal": len(self.illegal),
                "verified": self.verified, "max_error": self.max_error, "check": self.check,
                "search": {k: v for k, v in self.search.items() if k != "convergence"}}


def _kernel_get(self):
    if self.__dict__.get("_kernel") is None and self._lower is not None:
        graph, arch = self._lower
        self.__dict__["_kernel"] = lower(graph, self.dispatch, self.best.knobs, arch)
    return self.__dict__.get("_kernel")


def _kernel_set(self, kernel):
    self.__dict__["_kernel"] = kernel
    if kernel is not None:  # not the lowering of the winner's knobs: never a cache hit
        self.__dict__["_custom"] = True


DispatchTune.kernel = property(_kernel_get, _kernel_set)


@dataclass
class TuneResult:
    model: str
    arch: Arch
    mode: str
    plan: object
    dispatches: list
    total_time_us: float
    unfused_time_us: float | None
    unfused_dispatches: int
    roofline_time_us: float
    launch_overhead_us: float
    plan_choice: dict = field(default_factory=dict)
    roofline_basis: str = ""  # which bandwidth the roofline divides by (roofline_basis())
    launch: str = "stream"    # how the host launches the dispatches (plan_time_us)
    #: kernels the unfused baseline launches (a split dispatch of it launches two);
    #: None: as many as its dispatches
    unfused_kernels: int | None = None

    @property
    def mismatches(self) -> list:
        return [d for d in self.dispatches if d.verified is False]

    @property
    def kernels(self) -> int:
        """Kernels the plan launches: one per dispatch, more for a kernel sequence."""
        return sum(dispatch_kernels(d) for d in self.dispatches)

    def gain_split(self) -> dict:
        """How much of fusion's predicted gain is launches and how much kernel time. The
        launches are counted per kernel, not per dispatch: a split-K or flash-decoding
        dispatch launches two kernels, each paying ``launch_overhead_us`` (the cost of
        one more kernel under the result's ``launch``), so a plan that splits pays
        launches that fusion's dispatch count alone would not show."""
        if self.unfused_time_us is None:
            return {}
        unfused = self.unfused_dispatches if self.unfused_kernels is None else \
            self.unfused_kernels
        launches = (unfused - self.kernels) * self.launch_overhead_us
        total = self.unfused_time_us - self.total_time_us
        return {"total_us": total, "launch_us": launches, "kernel_us": total - launches,
                "kernels": self.kernels, "unfused_kernels": unfused}

    def to_json(self) -> dict:
        return {"model": self.model, "arch": self.arch.name, "mode": self.mode,
                "total_time_us": self.total_time_us,
                "unfused_time_us": self.unfused_time_us,
                "roofline_time_us": self.roofline_time_us,
                "roofline_basis": self.roofline_basis,
                "num_dispatches": len(self.dispatches),
                "unfused_dispatches": self.unfused_dispatches,
                "launch_overhead_us": self.launch_overhead_us, "launch": self.launch,
                "gain": self.gain_split(), "plan_choice": self.plan_choice,
                "time_unit": "simulated microseconds (gpusim model, not measured)",
                "dispatches": [d.to_json() for d in self.dispatches]}


# ----------------------------------------------------------------------------- scoring
def score(graph: Graph, dispatch, knobs: dict, arch: Arch, vgprs=None) -> Scored:
    """Lowers and simulates one candidate in timing mode (``tunedb.SCORE_SIMULATE``);
    failures become reasons. A long loop (K loop, key loop) is timed from a few steady
    trips and extrapolated (``gpusim.steady``): the lowerings' long loops stream a new
    tile every trip.

    ``vgprs``: the kernels' VGPR counts the exact analytic estimate of the same point
    made (``rank.Estimate.vgprs``, one per kernel in launch order), handed to the
    simulator instead of counted again: the lowering is a pure function of the dispatch,
    the knobs, the arch and the lowering sources (which the estimate's key holds), so
    the kernels are the ones counted (``tests/test_search_staged.py`` checks the counts
    against fresh ones)."""
    try:
        kernel = lower(graph, dispatch, knobs, arch)
        seq = isinstance(kernel, KernelSequence)
        n = len(kernel.kernels) if seq else 1
        hint = tuple(vgprs) if vgprs and len(vgprs) == n else None
        res = gpusim.simulate(kernel, arch, vgprs=hint if seq or hint is None else hint[0],
                              **tunedb.SCORE_SIMULATE)
    except (LoweringError, gpusim.KernelError) as e:
        return Scored(dict(knobs), None, error=str(e))
    counts = tuple(int(p.vgprs) for p in res.parts) if seq else (int(res.vgprs),)
    return Scored(dict(knobs), float(res.time_us), float(res.cycles), dict(res.counters),
                  str(getattr(res, "occupancy_limiter", "")), vgprs=counts)


def _score_job(graph, job):
    dispatch, knobs, arch, *vgprs = job
    return score(graph, dispatch, knobs, arch, *vgprs)


#: ``budget=DEFAULT``: the staged search's default number of simulations per dispatch
DEFAULT = "default"
#: the default budget: a quarter of the legal points, at least 4 and at most 24
DEFAULT_MIN, DEFAULT_MAX, DEFAULT_SHARE = 4, 24, 4


class DefaultTimes(int):
    """``budget=DefaultTimes(k)``: k times the default budget of each dispatch
    (``default_budget``), e.g. the 4x of issue 26's plan-stability target; ``tune
    --budget 4x`` on the command line."""

    def __repr__(self) -> str:
        return f"{int(self)}x"


def dispatch_budget(budget, legal: int):
    """Simulations for a dispatch of ``legal`` points under ``budget`` (None: every
    point; ``DEFAULT``; ``DefaultTimes(k)``; or a number)."""
    if budget == DEFAULT:
        return default_budget(legal)
    if isinstance(budget, DefaultTimes):
        return int(budget) * default_budget(legal)
    return budget


def default_budget(legal: int) -> int:
    """Simulations per dispatch at the default setting: a quarter of the legal points
    (issue 26's target), at least ``DEFAULT_MIN`` (small spaces) and at most
    ``DEFAULT_MAX`` (the analytic ranking and refinement find the best of large spaces
    well within it; ``compiler.tuning.bench_search`` measures that)."""
    return max(DEFAULT_MIN, min(DEFAULT_MAX, legal // DEFAULT_SHARE))


def legal_candidates(space: list, fixed: dict, where: str) -> tuple[list, list]:
    """(legal candidates after the pins, illegal ones); a pin no point has, or whose
    points are all illegal, is a ``SearchError`` naming the knob's values."""
    relevant = {k: v for k, v in fixed.items() if any(k in c.knobs for c in space)}
    if relevant:
        matching = [c for c in space if all(c.knobs.get(k) == v for k, v in relevant.items())]
        if not matching:
            values = {k: sorted({str(c.knobs[k]) for c in space if k in c.knobs})
                      for k in relevant}
            pinned = ", ".join(f"{k}={v}" for k, v in relevant.items())
            known = "; ".join(f"{k}: " + ", ".join(v) for k, v in values.items())
            raise SearchError(f"{where}: no candidate has {pinned}; values it has: {known}")
        if not any(c.legal for c in matching):
            raise SearchError(f"{where}: every candidate with the pinned knobs is illegal: "
                              f"{matching[0].reason}")
        space = matching
    legal = [c for c in space if c.legal and (not c.opt_in or c.opt_in in relevant)]
    if any(not c.fallback for c in legal):  # the fallback is the last resort only
        legal = [c for c in legal if not c.fallback]
    illegal = [c for c in space if not c.legal]
    return legal, illegal


def select_candidates(space: list, fixed: dict, budget: int | None, seed: int,
                      where: str) -> tuple[list, list]:
    """(legal candidates to simulate, illegal ones) after pins and a uniform random sample
    of ``budget`` (the ``random`` strategy; the staged search is ``tune_dispatches``'s
    default)."""
    legal, illegal = legal_candidates(space, fixed, where)
    if budget is not None and len(legal) > budget:
        always = [c for c in legal if c.always]
        legal = [c for c in legal if not c.always]
        rng = random.Random(seed)
        keep = sorted(rng.sample(range(len(legal)), max(0, budget - len(always))))
        legal = always + [legal[i] for i in keep]
    return legal, illegal


# ----------------------------------------------------------------------------- baseline
def dispatch_bytes(graph: Graph, dispatch) -> int:
    return sum(graph.tensor_bytes(t) for t in list(dispatch.inputs) + list(dispatch.outputs)
               if not (graph.op(t).kind == "constant" and graph.op(t).type.size == 1))


def dispatch_flops(graph: Graph, dispatch) -> int:
    flops = 0
    for n in dispatch.ops:
        op = graph.op(n)
        if op.kind == "matmul":
            a = graph.op(op.inputs[0]).type
            flops += 2 * op.type.size * a.shape[-1]
        elif op.kind == "conv2d":
            w = graph.op(op.inputs[1]).type
            flops += 2 * op.type.size * math.prod(w.shape[1:])
        elif not op.is_view:
            flops += op.type.size
    return flops


#: how the host may launch a plan's dispatches (``Arch.launch_cost_us``)
LAUNCHES = ("stream", "graph")


def dispatch_kernels(d) -> int:
    """Kernels a tuned dispatch launches: 1, or the length of its kernel sequence (the
    simulator's ``kernels`` counter of a ``KernelSequence``)."""
    return int(d.best.counters.get("kernels", 1)) if d.best.counters else 1


def plan_time_us(tuned: list, arch, launch: str = "stream") -> float:
    """A plan's predicted time: its kernels plus the host's launches. Every simulated
    kernel's time includes one ``launch_overhead_us`` (a stream launch; a kernel
    sequence's dispatch time, one per kernel); with ``graph`` those are taken off and the
    HIP graph's cost for all the plan's kernels added instead."""
    if launch == "stream":
        return sum(d.best.time_us for d in tuned)
    n = sum(dispatch_kernels(d) for d in tuned)
    kernels = sum(d.best.time_us for d in tuned) - n * arch.launch_overhead_us
    return kernels + arch.launch_cost_us(n, launch)


def launch_per_dispatch_us(arch, launch: str = "stream") -> float:
    """What one more dispatch costs the host under ``launch``."""
    return arch.launch_overhead_us if launch == "stream" else arch.graph_node_us


def roofline_basis(nbytes: int, arch) -> str:
    """Names the bandwidth ``roofline_us`` uses, for the tune report."""
    level = "MALL" if arch.memory_level(nbytes) == "mall" else "HBM"
    return (f"achievable {level} bandwidth {arch.stream_bytes_per_s(nbytes) / 1e12:.2f} TB/s "
            f"(measured copy rate, not the {arch.hbm_bytes_per_s / 1e12:.1f} TB/s HBM peak)")


def roofline_us(nbytes: int, flops: int, arch, launches: int = 1) -> float:
    """max(bytes / achievable memory bandwidth, flops / FP32 vector peak) plus the launch
    overheads. The bandwidth is the measured copy rate of the level that holds the bytes
    (``Arch.stream_bytes_per_s``: HBM, or the MALL when they fit it), the same one the
    simulator charges, not the datasheet peak no kernel reaches."""
    peak = arch.peak_fp32_flops_per_clk_per_cu * arch.num_cus * arch.clock_ghz * 1e9
    return max(nbytes / arch.stream_bytes_per_s(nbytes), flops / peak) * 1e6 + \
        launches * arch.launch_overhead_us


def minimal_bytes(graph: Graph) -> int:
    """Reading every graph input once and writing every output once."""
    leaves = [n for n in graph.topo_order() if graph.op(n).kind in ("input", "constant")
              and graph.op(n).type.size > 1]
    return sum(graph.tensor_bytes(n) for n in leaves) + \
        sum(graph.tensor_bytes(n) for n in graph.outputs)


def plan_lower_bound(graph: Graph, dispatches: list, arch) -> float:
    """A time no tuning of these dispatches can beat: per dispatch, its boundary bytes at
    L2's peak bandwidth (the fastest level a kernel streams from) or its flops at the FP32
    peak, whichever is longer, plus its launch overhead (simulated-model figures, so a
    bound on the simulator's predictions, not on hardware)."""
    # the faster of the vector FMA peak and the matrix cores' peak for the operand kinds
    # the dispatches' contractions may use (f32; bf16 and int8 where the graph has such
    # GEMMs: ``compiler.lower.contraction.Gemm.mfma_kind``; gfx90a's f32 MFMA runs twice
    # its vector rate): a bound must hold for every candidate, MFMA ones included
    kinds = {"f32"}
    for d in dispatches:
        root = graph.op(d.root)
        if root.kind in ("matmul", "conv2d"):
            kinds.add({"i32": "i8", "bf16": "bf16"}.get(root.type.dtype, "f32"))
    mfma = max((2 * math.prod(program.MFMA_SHAPES[shape][:3]) * arch.simds_per_cu
                / arch.mfma_cycles(shape) for shape in arch.mfma_passes
                if program.MFMA_PACK[shape][1] in kinds), default=0)
    peak = max(arch.peak_fp32_flops_per_clk_per_cu, mfma) * arch.num_cus * arch.clock_ghz * 1e9
    l2 = max(arch.l2_bytes_per_clk, arch.l2_read_bytes_per_clk) * arch.clock_ghz * 1e9
    return sum(max(dispatch_bytes(graph, d) / l2,
                   dispatch_flops(graph, d) / peak) * 1e6 + arch.launch_overhead_us
               for d in dispatches)


# ----------------------------------------------------------------------------- attention
#: the name of the aggressive plan without the attention rule (QK^T | softmax | PV)
SPLIT_ATTENTION = "split-attention"
#: the name of the aggressive plan without horizontal fusion of sibling GEMMs
#: (``compiler.fusion.horizontal``): each projection its own dispatch
SEPARATE_CONTRACTIONS = "separate-contractions"


def _part_figures(parts: list, lds_of=lambda d: d.kernel.lds_bytes) -> dict:
    """Time, HBM bytes, LDS and occupancy of some tuned dispatches (one plan's attention)."""
    return {"us": round(sum(d.best.time_us for d in parts), 3),
            "dispatches": len(parts),
            "hbm_bytes": int(sum(d.best.counters.get("hbm_bytes", 0) for d in parts)),
            "lds_bytes": max((lds_of(d) for d in parts), default=0),
            "waves_per_simd": min((d.best.counters.get("occupancy_waves_per_simd", 0)
                                   for d in parts), default=0)}


def attention_decisions(graph: Graph, fused: list, split: list) -> list:
    """One ``search`` decision per fused attention: its tuned dispatch against the tuned
    dispatches of the same ops in the 3-dispatch plan, with time, HBM bytes, LDS use and
    occupancy of both (simulated predictions)."""
    out = []
    lds: dict = {}   # identical layers lower to one kernel: its LDS bytes, once

    def lds_of(t):
        where = getattr(t, "_lower", None)
        if t.__dict__.get("_kernel") is not None or where is None:
            return t.kernel.lds_bytes
        key = (tunedb.dispatch_fingerprint(where[0], t.dispatch),
               tunedb.knobs_text(t.best.knobs))
        if key not in lds:
            lds[key] = t.kernel.lds_bytes
        return lds[key]
    for d in fused:
        if d.kind != "attention":
            continue
        ops = {n for n in d.dispatch.ops if not graph.op(n).is_view}
        parts = [s for s in split if ops & set(s.dispatch.ops)]
        f, u = _part_figures([d], lds_of), _part_figures(parts, lds_of)
        win = f["us"] <= u["us"]
        why = (f"fused attention {f['us']:.2f} us in 1 dispatch ({f['hbm_bytes']} B HBM, "
               f"{f['lds_bytes']} B LDS, {f['waves_per_simd']:.0f} waves/SIMD) vs "
               f"{u['dispatches']} dispatches {u['us']:.2f} us ({u['hbm_bytes']} B HBM, "
               f"{u['lds_bytes']} B LDS, {u['waves_per_simd']:.0f} waves/SIMD): "
               + ("one launch and S never written win" if win else
                  "the split plan's parallelism and GEMM tiles beat the saved traffic"))
        cost = {f"fused_{k}": v for k, v in f.items()}
        cost.update({f"split_{k}": v for k, v in u.items()})
        out.append(Decision("search", d.name, ", ".join(p.name for p in parts), win, why, cost))
    return out


def horizontal_decisions(plan, wide_us: float, separate_us: float) -> list:
    """One ``search`` decision per wide GEMM the horizontal rule formed in the aggressive
    plan: the plan with it against the same plan with separate projections (simulated
    totals, launches included)."""
    out = []
    for d in plan.decisions:
        if d.rule == "horizontal" and d.fused:
            win = wide_us <= separate_us
            out.append(Decision(
                "search", d.producer, d.consumer, win,
                f"one wide GEMM ({d.consumer}): plan {wide_us:.2f} us vs separate "
                f"dispatches {separate_us:.2f} us (simulated) -> "
                + ("the wide GEMM is kept" if win else "the separate GEMMs are kept"),
                {"wide_plan_us": round(wide_us, 3), "separate_plan_us": round(separate_us, 3)}))
    return out


# ----------------------------------------------------------------------------- tuning
def _reason_list(reasons, limit: int = 6) -> str:
    """The distinct reasons, whole (never cut mid-word): the first ``limit`` and a count
    of the rest."""
    distinct = sorted(set(reasons))
    shown = "; ".join(distinct[:limit])
    more = len(distinct) - limit
    return shown + (f"; and {more} more reason(s) (see `wavefuse view candidates`)"
                    if more > 0 else "")


def _score_fallbacks(graph, dispatch, space, scored, arch, illegal, fixed) -> list:
    """Scores the space's always-lowerable fallback points not yet tried (when every
    sampled candidate failed to lower or simulate) that agree with the pins; the ones
    that worked, fastest first."""
    tried = [s.knobs for s in scored]
    out = []
    for c in space:
        pinned = all(c.knobs.get(k, v) == v for k, v in fixed.items())
        if c.fallback and c.legal and pinned and c.knobs not in tried:
            s = score(graph, dispatch, c.knobs, arch)
            if s.ok:
                out.append(s)
            else:
                illegal.append(Candidate(s.knobs, False, s.error))
    return sorted(out, key=lambda s: s.time_us)


def tune_dispatches(graph: Graph, dispatches: list, arch: Arch, *, budget=None, fixed=None,
                    seed=0, workers=1, progress=None, label="", store=None,
                    cluster=None, strategy: str = "staged") -> list:
    """Scores candidates of every dispatch; returns DispatchTune per dispatch.

    ``budget``: simulations per dispatch (None: every legal point; ``DEFAULT``:
    ``default_budget``); a budget of at least the legal points simulates every point and
    the result says so. ``strategy``: ``staged`` (analytic ranking, exploration,
    refinement: ``compiler.tuning.staged``), ``ranked`` (the top of the ranking only) or
    ``random`` (a seeded uniform sample).

    Scores and analytic estimates are looked up in ``store`` (a ``tunedb`` store; a fresh
    in-memory one when None) by dispatch fingerprint, arch, knobs and model version; only
    the misses are computed, each distinct one once, so identical dispatches of a model
    cost one tuning. The search runs in rounds: each round gathers every dispatch's
    proposals, and the misses run serially, in ``workers`` processes or on a Dask
    ``cluster`` (``compiler.tuning.cluster``); results come back in job order, so the
    choice is the same.
    """
    if strategy not in staged.STRATEGIES:
        raise SearchError(f"unknown search strategy {strategy!r}; one of "
                          f"{', '.join(staged.STRATEGIES)}")
    fixed = fixed or {}
    store = tunedb.MemoryStore() if store is None else store
    version = tunedb.model_version()
    fps = [tunedb.dispatch_fingerprint(graph, d) for d in dispatches]
    spaces = list(zip(dispatches, _spaces(graph, dispatches, fps, arch, store, version)))
    known = {k for _, space in spaces for c in space for k in c.knobs}
    unknown = sorted(set(fixed) - known)
    if unknown:
        raise SearchError(f"--fix {', '.join(unknown)}: no dispatch of this model has that "
                          f"knob; its knobs are: {', '.join(sorted(known))}")
    space_of = {d.name: space for d, space in spaces}
    plans, searches, memo_keys = [], {}, {}
    legals = {}
    for (d, space), fp in zip(spaces, fps):
        legals[d.name] = legal_candidates(space, fixed, f"dispatch {d.name}")
        if fp not in memo_keys:
            memo_keys[fp] = search_key(fp, arch, version, fixed, dispatch_budget(
                budget, len(legals[d.name][0])), seed, strategy)
    results: dict = {}  # score key -> row, this run's and the store's
    replays = store.get_many("spaces", list(memo_keys.values()))
    for (d, space), fp in zip(spaces, fps):
        legal, illegal = legals[d.name]
        row = replays.get(memo_keys[fp])
        if fp not in searches and row is not None:
            keys = [tunedb.score_key(fp, arch, legal[j].knobs, version)
                    for j in row["simulated"] if j < len(legal)]
            results.update(store.get_many("scores", keys))
            if len(keys) == len(row["simulated"]) and all(k in results for k in keys):
                searches[fp] = staged.Replayed(row)  # else its scores are gone: search
        if fp not in searches:
            # identical dispatches (one fingerprint: the same space, pins and budget) run
            # one search: its proposals depend only on the space, the ranking, the seed and
            # the simulated times, which are the same for every instance
            b = dispatch_budget(budget, len(legal))
            every = b is None or b >= len(legal)
            est = None
            if strategy != "random" and not every:
                est = _ranking(graph, d, fp, legal, arch, store, version, workers, cluster)
            orders = _knob_orders(fp, arch, version, fixed, legal) \
                if strategy == "staged" else None
            searches[fp] = staged.DispatchSearch(legal, est, b, seed, strategy, orders)
        plans.append((d, legal, illegal, fp, searches[fp]))
    # one entry per distinct search: the first dispatch that runs it
    firsts, seen = [], set()
    for i, (*_, fp, _) in enumerate(plans):
        if fp not in seen:
            seen.add(fp)
            firsts.append(i)
    task = None
    if progress:
        total = sum(plans[i][4].budget for i in firsts)
        task = progress.add_task(f"{label or 'scoring'} ({len(plans)} dispatches, "
                                 f"{len(firsts)} distinct)", total=total)
    while True:
        round_ = [(i, plans[i][4].propose()) for i in firsts]
        if not any(picks for _, picks in round_):
            break
        keys = {i: [tunedb.score_key(plans[i][3], arch, plans[i][1][j].knobs, version)
                    for j in picks] for i, picks in round_}
        want = [k for ks in keys.values() for k in ks if k not in results]
        results.update(store.get_many("scores", want))
        jobs, job_keys = [], []
        for i, picks in round_:
            for j, k in zip(picks, keys[i]):
                if k not in results and k not in job_keys:
                    job_keys.append(k)
                    jobs.append((plans[i][0], plans[i][1][j].knobs, arch))
        # the VGPR counts the points' exact estimates made travel with their jobs
        counted = store.get_many("scores", [f"rank|{rank.version()}|{k}" for k in job_keys])
        for n, k in enumerate(job_keys):
            row = counted.get(f"rank|{rank.version()}|{k}")
            if row and row.get("vgprs"):
                jobs[n] = jobs[n] + (tuple(row["vgprs"]),)
        hits = sum(len(p) for _, p in round_) - len(jobs)
        if progress and hits:
            progress.advance(task, hits)
        done = (lambda j: progress.advance(task)) if progress else None
        scored = runner.run_jobs(_score_job, jobs, shared=graph, workers=workers,
                                 cluster=cluster, on_done=done)
        fresh = {k: _scored_dict(r) for k, r in zip(job_keys, scored)}
        store.put_many("scores", fresh, version)
        results.update(fresh)
        for i, picks in round_:
            plans[i][4].observe([results[k]["time_us"] for k in keys[i]])
    out, summaries, done_searches, sim_keys = [], {}, {}, {}
    for d, legal, illegal, fp, search in plans:
        simulated = search.simulated()
        if fp not in sim_keys:  # identical dispatches: one space, one search, one key list
            sim_keys[fp] = [tunedb.score_key(fp, arch, legal[j].knobs, version)
                            for j in simulated]
        scored = [_scored_of(results[k], legal[j].knobs)
                  for j, k in zip(simulated, sim_keys[fp])]
        for s in scored:
            if not s.ok:
                illegal.append(Candidate(s.knobs, False, s.error))
        # ties in time (a bandwidth-bound kernel hides its LDS conflicts and extra
        # instructions) go to the candidate that asks less of the CU
        ok = sorted([s for s in scored if s.ok], key=lambda s: (
            round(s.time_us, 6), s.counters.get("lds_bank_conflict_cycles", 0),
            s.counters.get("valu_insts", 0) + s.counters.get("vmem_insts", 0)
            + s.counters.get("lds_insts", 0)))
        if not ok:
            ok = _score_fallbacks(graph, d, space_of[d.name], scored, arch, illegal, fixed)
        if not ok:
            reasons = _reason_list(c.reason for c in illegal)
            raise SearchError(f"dispatch {d.name}: no candidate could be lowered and "
                              f"simulated ({reasons})")
        nbytes, flops = dispatch_bytes(graph, d), dispatch_flops(graph, d)
        t = DispatchTune(d.name, dispatch_kind(graph, d), d, ok[0], ok, illegal, None,
                         nbytes, flops, roofline_us(nbytes, flops, arch))
        if fp not in summaries:
            summaries[fp] = search.summary(ok[0].knobs)
            row = {"simulated": search.simulated(), "summary": summaries[fp]}
            # replayed only when JSON keeps it as it is (knob values of other types)
            if not isinstance(search, staged.Replayed) and \
                    json.loads(json.dumps(row)) == row:
                done_searches[memo_keys[fp]] = row
        t.search = summaries[fp]
        t._lower = (graph, arch)
        out.append(t)
    store.put_many("spaces", done_searches, version)
    return out


def search_key(fp, arch, version, fixed, budget, seed, strategy) -> str:
    """The key of a dispatch search's outcome in the tuning database: everything the
    staged search's proposals depend on (the space by fingerprint, arch and model version;
    the pins, the budget, the seed, the strategy; the estimator's version and the search's
    own sources), so a warm run replays it (``staged.Replayed``)."""
    return "search|" + hashlib.sha256(
        f"{tunedb.space_key(fp, arch, version)}|{tunedb.knobs_text(fixed)}|{budget}|{seed}|"
        f"{strategy}|{rank.version()}|{_search_version()}".encode()).hexdigest()


def _search_version() -> str:
    if "v" not in _SEARCH_VERSION:
        from pathlib import Path
        here = Path(__file__).parent
        _SEARCH_VERSION["v"] = tunedb._digest([here / "search.py", here / "staged.py",
                                               here / "refine.py"])
    return _SEARCH_VERSION["v"]


_SEARCH_VERSION: dict = {}


_ORDERS: dict = {}


def _knob_orders(fp, arch, version, fixed, legal) -> dict:
    """``refine.knob_orders`` of a dispatch's legal points, once per process for a
    fingerprint and pins (a tune's plans share most of their dispatches)."""
    key = (tunedb.space_key(fp, arch, version), tunedb.knobs_text(fixed))
    if key not in _ORDERS:
        if len(_ORDERS) > 4096:
            _ORDERS.clear()
        _ORDERS[key] = refine.knob_orders([c.knobs for c in legal])
    return _ORDERS[key]


def _estimates(graph, dispatch, fp, legal, arch, store, version) -> list:
    """The analytic estimate of every legal point (``compiler.tuning.rank``), read from
    and written to the tuning database (the ``scores`` table, keys prefixed ``rank|`` and
    the estimator's own version, so a changed estimator ranks afresh):
    a warm run lowers nothing to rank."""
    keys = [f"rank|{rank.version()}|" + tunedb.score_key(fp, arch, c.knobs, version)
            for c in legal]
    known = store.get_many("scores", keys)
    todo = [i for i, k in enumerate(keys) if k not in known]
    if todo:
        fresh = rank.rank_candidates(graph, dispatch, [legal[i] for i in todo], arch, lower)
        rows = {keys[i]: _estimate_row(e) for i, e in zip(todo, fresh)}
        store.put_many("scores", rows, version)
        known.update(rows)
    return [_estimate_of(known[k]) for k in keys]


def _exact_job(graph, job) -> rank.Estimate:
    dispatch, knobs, arch, vgprs = job
    return rank.rank_candidates(graph, dispatch, [knobs], arch, lower, vgprs=[vgprs])[0]


def _bound_job(graph, job) -> list:
    dispatch, knobs, arch = job
    return rank.rank_candidates(graph, dispatch, knobs, arch, lower, bound=True)


def _ranking(graph, dispatch, fp, legal, arch, store, version, workers=1,
             cluster=None) -> rank.Ranking:
    """The legal points' ``rank.Ranking``: every point's lower bound (its VGPRs not
    counted), the exact estimates counted as the search asks for them; both read from and
    written to the tuning database (``rbound|`` and ``rank|`` keys with the estimator's
    version), so a warm run lowers nothing."""
    keys = [tunedb.score_key(fp, arch, c.knobs, version) for c in legal]
    rv = rank.version()
    bound_keys = [f"rbound|{rv}|{k}" for k in keys]
    exact_keys = [f"rank|{rv}|{k}" for k in keys]
    known = store.get_many("scores", bound_keys)
    todo = [i for i, k in enumerate(bound_keys) if k not in known]
    if todo:
        # in chunks over the workers (a chunk per worker and round of the pool's queue)
        n = max(1, min(len(todo), 4 * max(workers, 1) if cluster is None else 64))
        chunks = [todo[c::n] for c in range(n)]
        done = runner.run_jobs(_bound_job, [(dispatch, [legal[i].knobs for i in c], arch)
                                            for c in chunks],
                               shared=graph, workers=workers, cluster=cluster)
        fresh = {i: e for c, es in zip(chunks, done) for i, e in zip(c, es)}
        rows = {bound_keys[i]: _estimate_row(fresh[i]) for i in todo}
        store.put_many("scores", rows, version)
        known.update(rows)
    bounds = [_estimate_of(known[k]) for k in bound_keys]

    def exact_of(indices):
        rows = store.get_many("scores", [exact_keys[i] for i in indices])
        todo = [i for i in indices if exact_keys[i] not in rows]
        # a point simulated before (the convergence summary's explore points) hands its
        # simulation's VGPR counts to its estimate
        sims = store.get_many("scores", [keys[i] for i in todo])
        done = runner.run_jobs(_exact_job, [(dispatch, legal[i].knobs, arch,
                                             tuple(sims.get(keys[i], {}).get("vgprs") or ())
                                             or None) for i in todo],
                               shared=graph, workers=workers, cluster=cluster)
        fresh = {exact_keys[i]: _estimate_row(e) for i, e in zip(todo, done)}
        store.put_many("scores", fresh, version)
        rows.update(fresh)
        return [_estimate_of(rows[exact_keys[i]]) for i in indices]
    return rank.Ranking(bounds, exact_of, batch=max(1, workers))


def _estimate_row(e: rank.Estimate) -> dict:
    row = {"us": e.us if math.isfinite(e.us) else None, "features": e.features,
           "error": e.error, "bound": e.bound}
    if e.vgprs:
        row["vgprs"] = list(e.vgprs)
    return row


def _estimate_of(row: dict) -> rank.Estimate:
    return rank.Estimate(math.inf if row["us"] is None else row["us"], row["features"],
                         row["error"], row.get("bound", False), tuple(row.get("vgprs", ())))


def _spaces(graph, dispatches, fps, arch, store, version) -> list:
    """Each dispatch's schedule space, computed once per fingerprint and remembered in
    the store (a pure function of the dispatch, the arch and the lowering sources)."""
    keys = [tunedb.space_key(fp, arch, version) for fp in fps]
    known = store.get_many("spaces", keys)
    fresh, out, made = {}, [], {}
    for d, key in zip(dispatches, keys):
        if key not in known:
            space = schedule_space(graph, d, arch)
            rows = [dataclasses.asdict(c) for c in space]
            known[key] = rows
            if json.loads(json.dumps(rows)) == rows:  # knob values JSON keeps as they are
                fresh[key] = rows
        if key not in made:  # identical dispatches share the (never modified) candidates
            made[key] = [Candidate(**r) for r in known[key]]
        out.append(list(made[key]))
    store.put_many("spaces", fresh, version)
    return out


def _scored_dict(s: Scored) -> dict:
    return {"time_us": s.time_us, "cycles": s.cycles, "counters": s.counters,
            "occupancy_limiter": s.occupancy_limiter, "error": s.error,
            "vgprs": list(s.vgprs)}


def _scored_of(row: dict, knobs: dict) -> Scored:
    return Scored(dict(knobs), row["time_us"], row["cycles"], dict(row["counters"]),
                  row["occupancy_limiter"], row["error"], tuple(row.get("vgprs", ())))


def verify_dispatches(graph: Graph, tuned: list, arch: Arch, seed: int = 0,
                      store=None, check_all: bool = True) -> None:
    """Runs every chosen kernel functionally in gpusim and compares with numpy: every
    workgroup of every dispatch with ``check_all``, else the first instance of each
    distinct kernel (identical layers run one program: ``sampling.one_instance_per_kernel``;
    the others' ``check`` names it and their ``verified`` stays None) and the output tiles
    of a sample of its workgroups
    (``compiler.tuning.sampling``; ``d.check`` says which) against the reference computed for
    those rows only (``compiler.ir.partial``; the kernel's inputs are given at the rows the
    reference says the sample reads, the rest of each buffer stays zero). A sampled check
    the rows cannot decide (no row was found, or values differ) is repeated against the
    whole reference, so a mismatch reported is one of the whole reference's.

    A check is remembered in ``store`` under the kernel's key (dispatch fingerprint,
    knobs, model version), the whole graph's fingerprint, the seed and the dispatch's
    place in the graph: the same kernel on the same inputs gives the same values, and a
    run whose checks are all remembered evaluates nothing."""
    version = tunedb.model_version()
    extent = "all" if check_all else \
        f"sample:{sampling.EDGE}/{sampling.SPREAD}/{sampling.RANDOM}"
    keys = [None] * len(tuned)
    hits: dict = {}
    kernels = [None if d.__dict__.get("_custom") else  # set by hand: not its knobs' lowering
               f"{tunedb.dispatch_fingerprint(graph, d.dispatch)}|"
               f"{tunedb.knobs_text(d.best.knobs)}" for d in tuned]
    shared = {} if check_all else sampling.one_instance_per_kernel(kernels)
    if store is not None:
        where = tunedb.graph_fingerprint(graph)
        for i, d in enumerate(tuned):
            if kernels[i] is None or i in shared:
                continue
            keys[i] = tunedb.check_key(
                kernels[i], arch, version,
                f"{where}|seed={seed}|{d.dispatch.inputs}|{d.dispatch.outputs}", extent)
        hits = store.get_many("checks", [k for k in keys if k])
    todo = []
    for i, d in enumerate(tuned):
        if i in shared:
            first = tuned[shared[i]]
            d.max_error, d.verified = None, None
            d.check = (f"{sampling.SHARED_PREFIX} {first.name}'s (checked there: one "
                       f"instance of each distinct kernel is run; --check-all runs all)")
            continue
        hit = hits.get(keys[i]) if keys[i] else None
        if hit is not None:
            d.max_error, d.verified, d.check = hit["max_error"], hit["verified"], hit["check"]
        else:
            todo.append(i)
    if not todo:
        return
    inputs = random_inputs(graph, seed)
    whole = _WholeReference(graph, inputs, [tuned[i] for i in todo])
    for i in todo:
        d, key = tuned[i], keys[i]
        grid = d.kernel.grid
        wgs = None if check_all else sampling.sample_workgroups(grid, seed)
        if wgs is not None and len(wgs) == grid:
            wgs = None
        d.check = (f"all {grid} workgroups" if wgs is None else
                   f"{len(wgs)} of {grid} workgroups (edges, spread, seeded random)")
        found = _check_rows(graph, d.kernel, arch, inputs, wgs) if wgs is not None else None
        if found is None or not found[1]:
            found = _check_whole(graph, d, arch, whole.env(d), wgs)
        whole.done(d)
        d.max_error, d.verified = found
        if key is not None:
            store.put_many("checks", {key: {"max_error": found[0], "verified": bool(found[1]),
                                            "check": d.check}}, version)


class _WholeReference:
    """The whole numpy reference, evaluated when a check first needs it, keeping only the
    tensors later checks read (at attention's sequence 4096 each score-sized
    intermediate is 512 MiB)."""

    def __init__(self, graph, inputs, tuned):
        self.graph, self.inputs = graph, inputs
        self.needed = [set(d.dispatch.inputs) | set(d.dispatch.outputs) for d in tuned]
        self.values = None

    def env(self, d) -> dict:
        if self.values is None:
            self.values = evaluate(self.graph, self.inputs, keep=set().union(*self.needed))
        return self.values

    def done(self, d) -> None:
        self.needed.pop(0)
        if self.values is not None:
            later = set().union(*self.needed) if self.needed else set()
            for name in [t for t in self.values if t not in later]:
                del self.values[name]  # no later check reads it


def _compare(got, ref, dtype) -> tuple[float, bool]:
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64).reshape(ref.shape)
    tol = numerics.tolerance("simulated", dtype)  # i32 (int/bool): exact
    match, err = numerics.compare(got, ref, tol)  # the same NaN is no mismatch
    return err, match


def _written(res, kernel, ranges=None) -> dict:
    """Flat offsets each output's sentinel no longer holds (``ranges``: where
    ``sampling.sentinel_outputs`` put it)."""
    ranges = ranges or {}
    return {b.name: sampling.written_offsets(res.outputs[b.name], b.dtype, ranges.get(b.name))
            for b in kernel.buffers if b.intent == "out"}


def _address_probe(kernel):
    """``kernel`` with every constant-bound loop that stores nothing cut to one trip
    (``gpusim.steady.cut``), or None when it has none: what a workgroup sample writes
    is learnt from this short run instead of the whole K or key loop. The run on the
    given rows repeats the full kernel and compares the addresses it wrote, so a probe
    that wrote elsewhere costs a second try, never a wrong check."""
    cuts = {loop.stmt: 1 for loop in steady.constant_loops(kernel)
            if loop.trips > 1 and steady.stores_nothing(loop.stmt)}
    return steady.cut(kernel, cuts) if cuts else None


def _check_rows(graph, kernel, arch, inputs, wgs):
    """(max error, match) of the sampled workgroups against the reference computed for
    the rows they wrote only, or None when the rows cannot decide (see verify_dispatches).
    A kernel that reads an intermediate first runs once on zero inputs to learn which
    rows its sample writes (the addresses a kernel writes do not depend on its data),
    with its loops that store nothing cut short (``_address_probe``; the full kernel
    when the probe fails or writes elsewhere)."""

    if isinstance(kernel, KernelSequence):
        return None  # its workspaces are written by earlier kernels: the whole check
    outs = [b for b in kernel.buffers if b.intent == "out"]
    ins = [b for b in kernel.buffers if b.intent == "in"]
    if not outs or len(outs) + len(ins) != len(kernel.buffers):
        return None  # an inout buffer: the whole check
    leaves = all(graph.op(b.name).kind in ("input", "constant") for b in ins)
    probes = [kernel] if leaves else [p for p in (_address_probe(kernel), kernel) if p]
    for probe in probes:
        found = _check_rows_with(graph, kernel, probe, arch, inputs, wgs, outs, ins, leaves)
        if found != "retry":
            return found
    return None


def _check_rows_with(graph, kernel, probe, arch, inputs, wgs, outs, ins, leaves):
    """``_check_rows`` with ``probe`` run to learn the written addresses; "retry" when
    a cut probe raised or wrote elsewhere than the kernel."""
    cut = probe is not kernel
    fill = sampling.sentinel_outputs(kernel, wgs, arch.wave_size)
    sentinels = fill.inputs
    full = {b.name: memory_image(graph, b.name, inputs[b.name] if graph.op(b.name).kind ==
                                 "input" else graph.op(b.name).attrs["value"]) for b in ins} \
        if leaves else {b.name: gpusim.Partial(np.zeros(0, np.int64), np.zeros(0))
                        for b in ins}
    try:  # zero inputs may divide an integer by zero: then the whole check
        res = gpusim.simulate(probe, arch, inputs={**full, **sentinels}, functional=True,
                              workgroups=wgs)
    except gpusim.KernelError:
        if leaves:
            raise
        return "retry" if cut else None
    offsets = _written(res, kernel, fill.ranges)
    if not any(len(o) for o in offsets.values()):
        return "retry" if cut else None
    wanted = {n: partial.row_ids(graph.op(n).type, o) for n, o in offsets.items() if len(o)}
    try:
        ref = partial.evaluate_rows(graph, inputs, wanted)
    except (KeyError, IndexError):
        return None
    if not leaves:  # the run that counts: the rows the sample reads, given
        del res  # its memory image of the outputs: one score-sized buffer at a time
        given = {}
        for b in ins:
            rows, t = ref[b.name], graph.op(b.name).type
            given[b.name] = (memory_image(graph, b.name, rows.values[0]) if rows.r == 0 else
                             gpusim.Partial(partial.memory_offsets(t, rows),
                                            rows.values.reshape(-1)))
        res = gpusim.simulate(kernel, arch, inputs={**given, **sentinels}, functional=True,
                              workgroups=wgs)
        again = _written(res, kernel, fill.ranges)
        if any(not np.array_equal(again[n], o) for n, o in offsets.items()):
            return "retry" if cut else None
    worst, ok = 0.0, True
    for b in outs:
        o = offsets[b.name]
        if not len(o):
            continue
        try:
            want = partial.values_at(graph.op(b.name).type, ref[b.name], o)
        except (KeyError, IndexError):
            return None
        got = np.asarray(res.outputs[b.name]).reshape(-1)[o]
        err, match = _compare(got, want, b.dtype)
        worst, ok = max(worst, err), ok and match
    return worst, ok


def _check_whole(graph, d, arch, env, wgs):
    """(max error, match) against the whole reference: every workgroup when ``wgs`` is
    None, else the elements the sample wrote."""

    k = d.kernel
    inputs = {b.name: memory_image(graph, b.name, env[b.name]) for b in k.buffers
              if b.intent != "out"}
    masks = {}
    if wgs is not None:
        inputs.update({b.name: sampling.sentinel_like(b.dtype, b.shape)
                       for b in k.buffers if b.intent == "out"})
        res = gpusim.simulate(k, arch, inputs=inputs, functional=True, workgroups=wgs)
        masks = {b.name: sampling.written(res.outputs[b.name], b.dtype).reshape(-1)
                 for b in k.buffers if b.intent == "out"}
        if not any(m.any() for m in masks.values()):  # the sample wrote nothing
            d.check = f"all {k.grid} workgroups (the sample wrote nothing)"
            inputs = {n: a for n, a in inputs.items() if n not in masks}
            masks, wgs = {}, None
    if wgs is None:
        res = gpusim.simulate(k, arch, inputs=inputs, functional=True)
    worst, ok = 0.0, True
    for b in k.buffers:
        if b.intent == "in":
            continue
        ref, got = np.asarray(env[b.name]), np.asarray(res.outputs[b.name])
        if b.name in masks:  # the written elements only, before any f64 copy
            ref, got = ref.reshape(-1)[masks[b.name]], got.reshape(-1)[masks[b.name]]
        err, match = _compare(got, ref, b.dtype)
        worst, ok = max(worst, err), ok and match
    return worst, ok


def tune(graph: Graph, arch: Arch | str = DEFAULT_ARCH, *, budget=None, workers=1, fixed=None, seed=0,
         mode: str = "auto", baseline: bool = True, verify: bool = True,
         progress=None, store=None, cluster=None, check_all: bool = False,
         launch: str = "stream", strategy: str = "staged", prune: bool = True) -> TuneResult:
    """Tunes a model: plan choice (aggressive, aggressive without the attention rule's
    fused dispatch, conservative), schedules, baseline. ``mode`` pins one of them.

    ``store``: a ``tunedb`` store shared by every plan, the baseline and the check (a
    fresh in-memory one when None); ``cluster``: a ``compiler.tuning.cluster.Cluster``;
    ``check_all``: check every workgroup's values, not a sample's; ``launch``: ``stream``
    (a host launch per dispatch) or ``graph`` (one HIP graph launch for the whole
    sequence), which every plan total and the fusion guard use; ``strategy``: the
    schedule search (``tune_dispatches``); ``prune``: skip a plan whose lower bound
    (``plan_lower_bound``) cannot beat a plan already tuned (plans are tuned in order of
    their bounds). ``arch`` is resolved
    here, once (a name for the Python API's convenience); everything below takes the
    ``Arch``."""
    arch = get_arch(arch)
    if launch not in LAUNCHES:
        raise SearchError(f"launch={launch!r}; use {' or '.join(LAUNCHES)}")
    check_pins(fixed or {})
    store = tunedb.MemoryStore() if store is None else store
    kw = dict(budget=budget, fixed=fixed, seed=seed, workers=workers, progress=progress,
              store=store, cluster=cluster, strategy=strategy)
    modes = ("aggressive", SEPARATE_CONTRACTIONS, SPLIT_ATTENTION, "conservative") \
        if mode == "auto" else (mode,)
    plans = {}
    bounds = {}
    structure = plancache.structure_fingerprint(graph)
    for m in modes:
        # the attention rule's fused dispatch is one candidate, its 3-dispatch plan another;
        # the wide GEMM of sibling projections one, the separate projections another
        # (each plan remembered in the store: a warm run forms none)
        plan = plancache.fused(graph, store, structure, aggressive=(m != "conservative"),
                               attention=(m != SPLIT_ATTENTION),
                               horizontal_gemms=m in ("aggressive", SPLIT_ATTENTION))
        key = tuple(tuple(d.ops) for d in plan.dispatches)
        if any(p_key == key for p_key, _ in plans.values()):
            continue  # same plan as an earlier mode: nothing to compare
        plans[m] = (key, plan)
        bounds[m] = plan_lower_bound(plan.graph, plan.dispatches, arch)
    with runner.worker_pool(workers if cluster is None else 1):
        runner.share(graph, *(p.graph for _, p in plans.values()))
        return _tune_plans(graph, arch, plans, bounds, modes, kw, budget=budget, seed=seed,
                           prune=prune, launch=launch, baseline=baseline, verify=verify,
                           store=store, check_all=check_all)


def _tune_plans(graph, arch, plans, bounds, modes, kw, *, budget, seed, prune, launch,
                baseline, verify, store, check_all) -> TuneResult:
    """``tune`` after the plans are formed (inside its worker pool)."""
    tried = {}
    pruned = {}
    # plans in order of their lower bounds: one whose bound cannot beat the best total
    # found so far is not tuned (its decision says so). The conservative plan is always
    # tuned when there are others: its dispatches are the parts the fusion guard weighs
    # each merge against (a fused plan can beat the conservative bound in total and still
    # hold a merge slower than its parts)
    for m in sorted(plans, key=lambda m: (bounds[m], modes.index(m))):
        totals_so_far = [plan_time_us(t, arch, launch) for _, t in tried.values()]
        if prune and m != "conservative" and totals_so_far and bounds[m] >= min(totals_so_far):
            pruned[m] = (f"{m} plan not tuned further: its lower bound {bounds[m]:.2f} us "
                         f"({len(plans[m][1].dispatches)} dispatches at L2's peak bandwidth "
                         f"and the FP32 peak, plus their launches) cannot beat "
                         f"{min(totals_so_far):.2f} us predicted for a plan already tuned")
            continue
        tuned = tune_dispatches(plans[m][1].graph, plans[m][1].dispatches, arch,
                                label=f"{m} plan", **kw)
        tried[m] = (plans[m][0], tuned)
    plans = {m: p for m, (_, p) in plans.items()}
    # --- fusion guard hook (compiler/tuning/fusion_guard.py): a fused dispatch predicted
    # slower than its conservative parts is split into them, with the numbers recorded
    # (only where the conservative plan was tuned: a pruned one cannot beat the best plan)
    if "conservative" in tried:
        for m in [m for m in tried if m != "conservative"]:
            plans[m], guarded = fusion_guard.guard(
                plans[m], tried[m][1], plans["conservative"], tried["conservative"][1],
                launch_per_dispatch_us(arch, launch) - arch.launch_overhead_us)
            tried[m] = (tried[m][0], guarded)
    # --- end of the fusion guard hook
    totals = {m: plan_time_us(t, arch, launch) for m, (_, t) in tried.items()}
    chosen = min(totals, key=totals.get)
    tuned = tried[chosen][1]
    reason = (f"{chosen} plan predicted fastest "
              + ", ".join(f"{m} {v:.2f} us" for m, v in totals.items()))
    if pruned:
        reason += "; " + "; ".join(pruned.values())
    choice = {"chosen": chosen,
              "predicted_us": {m: round(v, 3) for m, v in totals.items()},
              "lower_bound_us": {m: round(v, 3) for m, v in bounds.items()},
              "pruned": pruned,
              "dispatches": {m: len(p.dispatches) for m, p in plans.items()},
              "reason": reason if len(plans) > 1 else
              f"{chosen} plan (the other mode gives the same plan)"}
    plan = plans[chosen]
    for m, why in pruned.items():
        plan.decisions.append(Decision("search", chosen, m, True, why,
                                       {f"{m}_bound_us": bounds[m],
                                        f"{chosen}_us": totals[chosen]}))
    if "conservative" in totals and "aggressive" in totals:
        plan.decisions.append(Decision("search", "aggressive", "conservative",
                                       chosen == "aggressive", choice["reason"],
                                       {f"{m}_us": v for m, v in totals.items()}))
    elif len(totals) > 1:
        plan.decisions.append(Decision("search", chosen, ", ".join(m for m in totals
                                                                    if m != chosen),
                                       True, choice["reason"],
                                       {f"{m}_us": v for m, v in totals.items()}))
    if "aggressive" in tried and SEPARATE_CONTRACTIONS in tried:
        plan.decisions.extend(horizontal_decisions(plans["aggressive"], totals["aggressive"],
                                                   totals[SEPARATE_CONTRACTIONS]))
    if "aggressive" in tried and SPLIT_ATTENTION in tried:
        plan.decisions.extend(attention_decisions(graph, tried["aggressive"][1],
                                                  tried[SPLIT_ATTENTION][1]))
    unfused_us, unfused_kernels = None, None
    unfused = unfused_dispatches(graph)
    if baseline:
        base = tune_dispatches(graph, unfused, arch, label="unfused baseline",
                               **{**kw, "fixed": {}, "budget": DEFAULT if budget in (None, DEFAULT)
                                  or isinstance(budget, DefaultTimes) else min(budget, 24)})
        unfused_us = plan_time_us(base, arch, launch)
        unfused_kernels = sum(dispatch_kernels(d) for d in base)
    if verify:  # the chosen plan's graph (horizontal fusion rewrites it)
        verify_dispatches(plan.graph, tuned, arch, seed, store=store, check_all=check_all)
    flops = sum(d.flops for d in tuned)
    nbytes = minimal_bytes(graph)
    roof = roofline_us(nbytes, flops, arch, launches=0) + arch.launch_cost_us(1, launch)
    return TuneResult(graph.name, arch, chosen, plan, tuned, plan_time_us(tuned, arch, launch),
                      unfused_us, len(unfused), roof, launch_per_dispatch_us(arch, launch),
                      choice, roofline_basis(nbytes, arch), launch, unfused_kernels)
