"""Timing a long loop from truncated runs: the loop's steady per-trip cost, extrapolated.

A kernel whose work grows with the problem usually grows one loop: the K loop of a GEMM,
the key loop of a fused attention, the chunk loop of a row reduction. Simulating every
trip of it for every timed candidate makes tuning cost grow with the problem although
the trips all look alike. ``simulate(..., extrapolate_loops=True)`` (timing mode) therefore
runs the kernel with that loop cut to n1 < n2 < n3 trips and extrapolates the time and
every counter linearly to the loop's N trips from the last two runs:

    X(N) = X(n3) + (N - n3) * s23,   s23 = (X(n3) - X(n2)) / (n3 - n2),

and bounds the error by how much the per-trip slope still moved between the first two
runs and the last two, plus the slope's resolution (times are whole cycles, measured over
n3 - n2 trips), times the trips extrapolated (the rule of the workgroup sample's bound in
``gpusim.sim``): ``(N - n3) * (|s23 - s12| + 1 / (n3 - n2))``. (Exactly repeating trips
still drift by a cycle here and there: an arbitration tie resolved otherwise.) When that
bound is over ``LOOP_TOL`` of the time, longer cuts are tried (``CUTS``); when none is
steady, or the cuts would not save at least half of the trips, the loop runs in full.

Which loops: exactly one loop of the kernel, outermost among the long ones, with constant
bounds, a counter the body never writes and at least ``MIN_TRIPS`` trips. A kernel with
several long loops (a softmax's max, sum and normalise passes over one row) runs in full:
a later pass re-reads what an earlier one brought into the caches, and cutting both
passes would shrink that working set along with the loop.

Periodic trips. A trip that uses a fraction 1/p of each cache line it loads leaves the
rest of the line to the next p - 1 trips (a thread walking a row one element per trip: one
miss every 32 trips), so its cost repeats with period p. The cuts are spaced by
``MAX_PERIOD`` trips, which spans periods up to that whole; a loop loading fewer than
``line / MAX_PERIOD`` bytes per cache line per trip (from the cuts' counters) runs in full.

Broadcast loads. A load whose index is wave-uniform (every lane reads the same words: a
two-stage combine kernel's loop over the splits' partial states) is one line per wave
however many lanes read it, so the counters' bytes per line (lanes x width) say nothing
of how far it walks. Its walk is read from its index instead: the counter's coefficient
in the index's affine form (``broadcast_advances``). A loop with a broadcast load that
advances by less than ``line / MAX_PERIOD`` bytes per trip, or by an amount the index
does not show as a constant coefficient (the counter behind a register, a division),
runs in full: its misses come once per line, over more trips than the cuts span (the
combine's 64 splits of one word each: one miss every 32 trips, 5% of the time unseen).

SIMPLIFICATION: the trips after the cut cost what the steady trips before it cost. A loop
whose later trips revisit data its earlier ones brought into a cache (a pointer chase over
a small ring, a second sweep of a region) gets faster after the cut, which three short runs
cannot see; that is why extrapolation is opt-in: the search's scoring asks for it (its
lowerings' long loops stream a new tile every trip), while ``simulate``'s default, the
fidelity microbenchmarks and ``wavefuse profile`` run every trip.

``cut`` is also how the value check learns which output elements a workgroup sample
writes from a short run (``compiler.tuning.search``): it cuts loops that store nothing.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from gpusim.analysis import (
    Uniformity, affine_form, expr_key, expr_vars, stmt_defs, stmt_exprs,
)
from gpusim.program import DTYPE_BYTES, Const, For, If, Kernel, Load, Store, walk

MIN_TRIPS = 64                  # shorter loops run in full
CUTS = ((4, 8, 12), (8, 16, 24))  # trips of the three truncated runs, tried in order
LOOP_TOL = 0.02                 # steady: the extrapolation's bound is within 2% of the time
MAX_PERIOD = 4                  # the cuts' spacing: trips that share a line over more run in full


class Loop(NamedTuple):
    """A loop with constant bounds: the statement and its trip count."""
    stmt: For
    trips: int


def trips(s: For) -> int | None:
    """The trip count of a loop with constant bounds whose counter the body never
    writes; None otherwise."""
    if not (isinstance(s.start, Const) and isinstance(s.stop, Const)) or s.step <= 0:
        return None
    if any(d.name == s.var.name for x in walk(s.body) for d in stmt_defs(x)):
        return None
    return max(0, -(-(int(s.stop.value) - int(s.start.value)) // s.step))


def _outer_long(body, out: list, min_trips: int) -> list:
    for s in body:
        if isinstance(s, For):
            n = trips(s)
            if n is not None and n >= min_trips:
                out.append(Loop(s, n))
                continue
            _outer_long(s.body, out, min_trips)
        elif isinstance(s, If):
            _outer_long(s.then, out, min_trips)
            _outer_long(s.orelse, out, min_trips)
    return out


def long_loop(kernel: Kernel, min_trips: int = MIN_TRIPS) -> Loop | None:
    """The kernel's one long loop (see the module docstring), or None."""
    found = _outer_long(kernel.body, [], min_trips)
    return found[0] if len(found) == 1 else None


def broadcast_advances(kernel: Kernel, loop: Loop) -> list:
    """Bytes per trip by which each wave-uniform global load in ``loop`` that moves with
    its counter advances (None where its index is not the counter times a constant plus
    a part that does not move: the counter read through a register the loop computes, or
    inside a division). Loads that do not move with the counter are left out."""
    counter = loop.stmt.var.name
    moving = {counter}   # the counter and the registers the loop computes from it
    grew = True
    while grew:
        grew = False
        for x in walk(loop.stmt.body):
            if any(expr_vars(e) & moving for e in stmt_exprs(x)):
                new = {d.name for d in stmt_defs(x)} - moving
                moving |= new
                grew = grew or bool(new)
    uni = Uniformity(kernel.body)
    key = expr_key(loop.stmt.var)
    out = []
    for x in walk(loop.stmt.body):
        if not (isinstance(x, Load) and uni.is_uniform(x.index)
                and expr_vars(x.index) & moving):
            continue
        terms, _ = affine_form(x.index)
        if expr_vars(x.index) & moving != {counter} or key not in terms or any(
                _mentions(k, key) for k in terms if k != key):
            out.append(None)
            continue
        out.append(abs(terms[key]) * loop.stmt.step * DTYPE_BYTES[kernel.buffer(x.buffer).dtype])
    return out


def _mentions(key, target) -> bool:
    """True when the expression key ``key`` contains ``target``'s."""
    return key == target or isinstance(key, tuple) and any(_mentions(k, target) for k in key)


def stores_nothing(s: For) -> bool:
    """True when no global store sits in the loop's body."""
    return not any(isinstance(x, Store) for x in walk(s.body))


def constant_loops(kernel: Kernel) -> list:
    """Every loop with constant bounds (``trips``), in program order."""
    return [Loop(s, n) for s in walk(kernel.body) if isinstance(s, For)
            for n in [trips(s)] if n is not None]


def cut(kernel: Kernel, new_trips: dict) -> Kernel:
    """``kernel`` with each loop of ``new_trips`` (For -> trips) stopped after that many
    trips; everything else is the same statement objects."""
    def body(stmts):
        out = []
        for s in stmts:
            if isinstance(s, For):
                inner = body(s.body)
                if s in new_trips:
                    stop = int(s.start.value) + int(new_trips[s]) * s.step
                    s = dataclasses.replace(s, stop=Const(stop, "i32"), body=inner)
                elif inner != s.body:
                    s = dataclasses.replace(s, body=inner)
            elif isinstance(s, If):
                then, orelse = body(s.then), body(s.orelse)
                if then != s.then or orelse != s.orelse:
                    s = dataclasses.replace(s, then=then, orelse=orelse)
            out.append(s)
        return tuple(out)
    return dataclasses.replace(kernel, body=body(kernel.body))


class Fit(NamedTuple):
    """A linear extrapolation of arrays measured at three trip counts."""
    value: np.ndarray   # at the loop's full trip count
    slope: np.ndarray   # per trip, from the last two runs
    bound: np.ndarray   # absolute error bound, per element


def extrapolate(ns, values, n_full: int) -> Fit:
    """Fits ``values`` (three arrays measured at ``ns`` trips, increasing) and
    extrapolates them to ``n_full`` trips (module docstring)."""
    (n1, n2, n3), (v1, v2, v3) = ns, [np.asarray(v, np.float64) for v in values]
    s12, s23 = (v2 - v1) / (n2 - n1), (v3 - v2) / (n3 - n2)
    ahead = n_full - n3
    return Fit(v3 + ahead * s23, s23, ahead * (np.abs(s23 - s12) + 1.0 / (n3 - n2)))
