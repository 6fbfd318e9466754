"""The explorer's view-model: one model, its fusion plan, and per dispatch what the panes
show (the tuned candidates, the winner's traced simulation, its memory accesses, its HIP
source), under the arch and pins chosen now.

Nothing here draws: every fact comes from the data builders of :mod:`compiler.cli.views`
(``candidates_data``, ``explain_data``, ``pattern_for``, ``source_data``...) or from the
search (``tune_dispatches``), so ``wavefuse explore``, ``wavefuse report`` and ``wavefuse
view`` agree by construction. Heavy work (scoring, tracing) happens in :meth:`Session.panes`,
which the explorer calls from a worker thread; the results are kept per (dispatch, arch,
pins) so going back to a dispatch costs nothing, and every score lands in the tuning
database, so a later ``tune`` or ``view`` reuses it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import gpusim
from gpusim.hw import ARCHES, DEFAULT_ARCH, Arch, get_arch
from gpusim.program import walk

from compiler.cli import views
from compiler.cli.views.memory import stmt_label
from compiler.fusion import fuse
from compiler.ir.graph import GraphError
from compiler.tuning import tunedb
from compiler.tuning.search import tune_dispatches

#: the stages of :meth:`Session.panes`, for a progress indicator
STAGES = ("scoring candidates", "tracing the winner", "memory accesses", "HIP source")


@dataclass
class MemoryPane:
    """The accesses of one space ("global" or "lds") and the one selected."""
    space: str
    insts: list                      # (walk-order index, label)
    inst: int | None = None          # the selected one (the worst, at first)
    data: object = None              # CoalescingData or BanksData of ``inst``
    pattern: dict | None = None      # its gpusim.access_pattern (what the renderers take)
    note: str = ""                   # why there is nothing to show


@dataclass
class DispatchPanes:
    """Everything the panes of one dispatch show, computed once."""
    name: str
    arch: Arch
    pins: dict
    tuned: object                    # compiler.tuning.search.DispatchTune
    sim: object                      # gpusim SimResult of the winner, trace=True
    decisions: list                  # ExplainRow touching this dispatch
    coalescing: MemoryPane
    banks: MemoryPane
    source: object                   # views.SourceData
    extra: dict = field(default_factory=dict)

    @property
    def kernel(self):
        return self.tuned.kernel


class Session:
    """A model under exploration. ``cache``/``no_cache`` choose the tuning database as
    ``--cache``/``--no-cache`` do; it is opened per call, so a worker thread may use it."""

    def __init__(self, graph, model: str, arch: Arch = DEFAULT_ARCH, mode: str = "aggressive",
                 budget: int | None = 8, seed: int = 0, cache=None, no_cache: bool = False,
                 plan=None):
        self.graph, self.model, self.arch = graph, model, get_arch(arch)
        self.mode, self.budget, self.seed = mode, budget, seed
        self.cache, self.no_cache = cache, no_cache
        aggressive = mode != "conservative"
        # tune's plan for the mode (sibling GEMMs merged when aggressive); its graph is the
        # one the dispatches are tuned on
        self.plan = plan if plan is not None else fuse(graph, aggressive=aggressive,
                                                       horizontal_gemms=aggressive)
        self.pins: dict = {}             # dispatch name -> {knob: value}
        self._panes: dict = {}
        self._tuned: dict = {}
        self._lock = threading.Lock()
        self._memory_store = tunedb.MemoryStore() if no_cache else None

    # ------------------------------------------------------------------ plain data
    @property
    def names(self) -> list:
        return [d.name for d in self.plan.dispatches]

    def plan_data(self):
        return views.plan_data(self.plan)

    def dispatch(self, name: str):
        views.common.choose("dispatch", name, self.names)
        return next(d for d in self.plan.dispatches if d.name == name)

    def decisions(self, name: str) -> list:
        """The fusion decisions whose producer or consumer runs in dispatch ``name``."""
        ops = set(self.dispatch(name).ops)
        return [r for r in views.explain_data(self.plan) if r.producer in ops or r.consumer in ops]

    def key(self, name: str, arch: Arch | None = None) -> tuple:
        pins = self.pins.get(name, {})
        return (name, (arch or self.arch).name, tuple(sorted(pins.items())))

    def cached(self, name: str):
        """The panes of ``name`` under the current arch and pins, if computed."""
        return self._panes.get(self.key(name))

    def set_arch(self, arch: Arch | str) -> None:
        if isinstance(arch, str):
            if arch not in ARCHES:
                raise GraphError(f"unknown arch {arch!r}; known arches: {', '.join(sorted(ARCHES))}")
            arch = ARCHES[arch]
        self.arch = arch

    def pin(self, name: str, knob: str, value) -> None:
        """Pins ``knob`` of dispatch ``name``; checked when the dispatch is next scored."""
        self.dispatch(name)
        self.pins.setdefault(name, {})[knob] = value

    def unpin(self, name: str) -> None:
        self.pins.pop(name, None)

    # ------------------------------------------------------------------ work
    def _store(self):
        if self._memory_store is not None:
            return self._memory_store, False
        return tunedb.open_store(self.cache, False), True

    def tune_all(self, progress=None) -> list:
        """Scores every dispatch not yet scored under the current arch (one search call,
        so identical dispatches are simulated once); ``progress`` is rich-Progress-like."""
        todo = [d for d in self.plan.dispatches if self.key(d.name) not in self._tuned
                and not self.pins.get(d.name)]
        if todo:
            store, close = self._store()
            try:
                out = tune_dispatches(self.plan.graph, todo, self.arch, budget=self.budget,
                                      seed=self.seed, store=store, progress=progress,
                                      label=f"{self.model} on {self.arch.name}")
            finally:
                if close:
                    store.close()
            with self._lock:
                for t in out:
                    self._tuned[self.key(t.name)] = t
        return [self._tuned.get(self.key(n)) for n in self.names]

    def tuned(self, name: str):
        key = self.key(name)
        if key not in self._tuned:
            store, close = self._store()
            try:
                t = tune_dispatches(self.plan.graph, [self.dispatch(name)], self.arch,
                                    budget=self.budget, seed=self.seed,
                                    fixed=dict(self.pins.get(name, {})), store=store)[0]
            finally:
                if close:
                    store.close()
            with self._lock:
                self._tuned[key] = t
        return self._tuned[key]

    def adopt(self, tuned_list: list) -> None:
        """Takes dispatches already tuned elsewhere (``tune``'s result, for the report)."""
        with self._lock:
            for t in tuned_list:
                self._tuned[self.key(t.name)] = t

    def panes(self, name: str, on_stage=None) -> DispatchPanes:
        """Scores, traces and probes dispatch ``name`` (the slow part; call it from a
        worker). ``on_stage(i, label)`` is called before each of ``STAGES``."""
        key = self.key(name)
        if key in self._panes:
            return self._panes[key]
        step = on_stage or (lambda i, label: None)
        arch = self.arch
        step(0, STAGES[0])
        tuned = self.tuned(name)
        step(1, STAGES[1])
        kernel = tuned.kernel
        sim = gpusim.simulate(kernel, arch, functional=False, trace=True)
        step(2, STAGES[2])
        coal = self.memory(kernel, "global", None, sim, arch)
        banks = self.memory(kernel, "lds", None, sim, arch)
        step(3, STAGES[3])
        src = views.source_data(kernel, sim, arch)
        p = DispatchPanes(name, arch, dict(self.pins.get(name, {})), tuned, sim,
                          self.decisions(name), coal, banks, src)
        with self._lock:
            self._panes[key] = p
        return p

    def memory(self, kernel, space: str, inst: int | None, sim=None,
               arch: Arch | None = None) -> MemoryPane:
        """The coalescing (global) or bank (lds) data of ``inst``, or of the worst access
        when None; an empty pane with the reason when the kernel has no such access."""
        stmts = list(walk(kernel.body))
        insts = [(i, stmt_label(stmts[i])) for i in views.memory_insts(kernel, space)]
        pane = MemoryPane(space, insts)
        if not insts:
            pane.note = (f"kernel {kernel.name} has no "
                         f"{'global memory' if space == 'global' else 'LDS'} access")
            return pane
        try:
            inst, pat = views.pattern_for(kernel, arch or self.arch, inst, space,
                                              sim_result=sim)
        except (views.ViewError, gpusim.KernelError) as exc:
            pane.note = str(exc)
            return pane
        pane.inst, pane.pattern = inst, pat
        pane.data = (views.coalescing_data(pat, inst) if space == "global"
                     else views.banks_data(pat, inst))
        return pane

    def select_access(self, panes: DispatchPanes, space: str, step: int = 1) -> MemoryPane:
        """The next (``step`` 1) or previous (-1) access of ``space`` after the selected
        one; replaces it in ``panes``."""
        pane = panes.coalescing if space == "global" else panes.banks
        if not pane.insts:
            return pane
        order = [i for i, _ in pane.insts]
        at = order.index(pane.inst) if pane.inst in order else -1
        new = self.memory(panes.kernel, space, order[(at + step) % len(order)], panes.sim,
                          panes.arch)
        if space == "global":
            panes.coalescing = new
        else:
            panes.banks = new
        return new
