"""The exercise of lesson 12 ("How the tuner searches"): write a search strategy.

The learner writes ``choose(points, estimates, simulate, budget)``: ``points`` are the
legal knob dicts of one dispatch, ``estimates`` their analytic estimates in microseconds
(``compiler.tuning.rank``; an ordering, not a prediction), ``simulate(i)`` returns point
``i``'s simulated time (gpusim, timing mode) and counts the call, ``budget`` is how many
calls are allowed. It returns the index of its answer. ``check_search`` scores it the way
``compiler.tuning.bench_search`` scores the built-in strategies: found/best against the
best of every point, and the simulations spent; ``python -m compiler.tuning.bench_search
--exercise MODULE:FUNCTION`` scores the same function on the benchmark's dispatches.

Every simulated time goes through the tuning database (a fresh in-memory one unless a
store is given), so the every-point reference is simulated once per dispatch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpusim.hw import get_arch

from compiler.fusion import fuse
from compiler.ir.models import load_model
from compiler.schedule import schedule_space
from compiler.tuning import tunedb
from compiler.tuning.search import _estimates, legal_candidates, tune_dispatches


class BudgetSpent(Exception):
    """``simulate`` was called more often than the budget allows."""


@dataclass
class SearchVerdict:
    """found/best of the learner's answer (1.0 = the best point) and what it spent."""
    ok: bool
    found_over_best: float
    simulations: int
    budget: int
    problems: list = field(default_factory=list)

    def __str__(self):
        head = (f"{'PASS' if self.ok else 'FAIL'} (found/best {self.found_over_best:.3f}, "
                f"{self.simulations} of {self.budget} simulations; simulated times)")
        return head + "".join(f"\n  - {p}" for p in self.problems)

    def __bool__(self):
        return self.ok


def run_choose(choose, graph, dispatch, arch, budget: int, store, tolerance: float = 1.05):
    """Runs ``choose`` on one dispatch; a ``SearchVerdict`` against every point's best."""
    version = tunedb.model_version()
    fp = tunedb.dispatch_fingerprint(graph, dispatch)
    legal, _ = legal_candidates(schedule_space(graph, dispatch, arch), {}, dispatch.name)
    every = tune_dispatches(graph, [dispatch], arch, budget=None, store=store)[0]
    best = every.best.time_us
    times = {tunedb.knobs_text(s.knobs): s.time_us for s in every.candidates}
    est = [e.us for e in _estimates(graph, dispatch, fp, legal, arch, store, version)]
    calls = []

    def simulate(i: int) -> float:
        if len(calls) >= budget:
            raise BudgetSpent(f"simulate() called more than the budget of {budget}")
        calls.append(i)
        t = times.get(tunedb.knobs_text(legal[i].knobs))
        return math.inf if t is None else t  # a point that fails to simulate: never best

    points = [dict(c.knobs) for c in legal]
    try:
        i = choose(points, list(est), simulate, budget)
    except BudgetSpent as e:
        return SearchVerdict(False, math.nan, len(calls), budget, [str(e)])
    problems = []
    if not isinstance(i, int) or not 0 <= i < len(points):
        return SearchVerdict(False, math.nan, len(calls), budget,
                             [f"choose returned {i!r}, not an index into points"])
    t = times.get(tunedb.knobs_text(legal[i].knobs), math.inf)
    ratio = t / best
    if i not in calls:
        problems.append("the answer was never simulated: the search must measure it")
    if ratio > tolerance:
        problems.append(f"found/best {ratio:.3f} is over {tolerance}: the answer is "
                        f"{t:.2f} us, the best point {best:.2f} us")
    return SearchVerdict(not problems, ratio, len(calls), budget, problems)


def check_search(choose, model: str = "transpose_add:rows=256,cols=256", budget: int = 8,
                 arch: str = "gfx942", store=None) -> SearchVerdict:
    """The lesson's check: ``choose`` on the (single) dispatch of ``model``."""
    g = load_model(model)
    store = tunedb.MemoryStore() if store is None else store
    return run_choose(choose, g, fuse(g).dispatches[0], get_arch(arch), budget, store)
