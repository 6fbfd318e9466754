"""Timing a kernel with arrival counters without running the other CUs' work.

A kernel that counts arrivals (``AtomicAdd``: split-K's and stream-K's last-arrival
fix-up, flash-decoding's combine) is timed on CU 0 *after* every other workgroup has
arrived, so that CU 0's workgroups see the counts that make them run their tiles' tails
(``gpusim.sim``). Running the other CUs whole for that cost 303 times the timed CU's own
work on gfx942 for the one-round persistent grids these kernels have: 36% of a cold
ResNet-50 tune's CPU went there and 0.2% to the timed CU (py-spy; docs/search.md,
"Thirteenth round"). What the timed CU needs from the others is only

- the counters' values: the others' arrivals. The *slice* of the kernel that writes the
  counter buffers (the atomic adds, the tail's reset, and everything their indices,
  values and enclosing loops and branches read: the tile and segment arithmetic, the
  old value's trip through LDS) arrives exactly as the whole kernel does, without the
  MAC loops, partial sums or epilogues. Its values are the counters' own, so CU 0 then
  runs exactly what it ran after the whole others (its time is unchanged; the partials
  it reads are zeros instead of sums, and no lowering's control flow reads them);
- the others' share of the launch's counters (bytes through L2 and the memory level,
  instructions), which set the bandwidth bounds. They are *estimated*
  (SIMPLIFICATION): a workgroup's work outside the tail is CU 0's (a second run of CU
  0's workgroups arriving first, so they run no tail a shared tile gives them), and a
  tail costs what CU 0's tails cost (the difference between its two runs per tail),
  times the tails the slice counted the others run:

      others = (first - t1 * tail) / k * (other workgroups) + tail * (tails by others)
      tail   = (last - first) / (t_last - t1)

  where ``first`` / ``last`` are the counters of CU 0's k workgroups arriving first /
  last and t1 / t_last the tails they ran. As in any sampled timing (``gpusim.sim``),
  workgroups doing uneven work (ragged tiles and splits, stream-K's one to three
  segments, causal attention's key splits) are charged CU 0's, and CU 0's cold L2 stands
  for every CU's, so memory bytes are an upper bound (the whole run let each CU find
  lines the CUs before it left in their shared L2: 1.1-3.3x fewer on the benchmark's
  spaces). ``tests/test_arrivals.py`` holds the estimate against the whole run.

Measured on the 1,140 last-arrival points of the search benchmark's 30 spaces
(``python -m compiler.tuning.bench_search``'s dispatches, gfx942): every one is CU-bound
under the estimate, so its predicted time is the whole run's to the last cycle; their
simulations took 148 s, and a sample of 28 took 56.5 s whole against 1.5 s.

``simulate(..., exact_arrivals=True)`` runs the whole others as before (the reference).
"""
from __future__ import annotations

import numpy as np

from gpusim.analysis import expr_vars, stmt_defs, stmt_exprs
from gpusim.program import (AtomicAdd, Barrier, Fence, For, If, Kernel, LdsLoad, LdsStore,
                            Store)


def counter_buffers(kernel) -> set:
    """The buffers ``kernel``'s atomics count in."""
    from gpusim.program import walk
    return {s.buffer for s in walk(kernel.body) if isinstance(s, AtomicAdd)}


def _reads(s) -> set:
    out = set()
    for e in stmt_exprs(s):
        out |= set(expr_vars(e))
    return out


def arrival_slice(kernel: Kernel) -> Kernel:
    """``kernel`` with only what writes its counter buffers: the atomics, stores to those
    buffers, and (to a fixed point) every statement defining a register they read, every
    LDS store to an array a kept LDS load reads, and the loops and branches around kept
    statements with the barriers and fences in them."""
    counters = counter_buffers(kernel)
    need_regs: set = set()
    need_lds: set = set()

    def wanted(s) -> bool:
        if isinstance(s, AtomicAdd):
            return s.buffer in counters
        if isinstance(s, Store):
            return s.buffer in counters
        if isinstance(s, LdsStore):
            return s.array in need_lds
        return any(v.name in need_regs for v in stmt_defs(s))

    def mark(body) -> bool:
        """Adds what the kept statements of ``body`` read; whether any is kept."""
        any_kept = False
        for s in body:
            if isinstance(s, For):
                inner = mark(s.body)
                keep = inner or wanted(s)
            elif isinstance(s, If):
                inner = mark(s.then) | mark(s.orelse)
                keep = inner
            else:
                keep = wanted(s)
            if keep:
                any_kept = True
                before = (len(need_regs), len(need_lds))
                need_regs.update(_reads(s))
                if isinstance(s, LdsLoad):
                    need_lds.add(s.array)
                if (len(need_regs), len(need_lds)) != before:
                    changed[0] = True
        return any_kept

    changed = [True]
    while changed[0]:
        changed[0] = False
        mark(kernel.body)

    def keep(body) -> tuple:
        out = []
        for s in body:
            if isinstance(s, For):
                inner = keep(s.body)
                if inner or wanted(s):
                    out.append(For(s.var, s.start, s.stop, s.step, inner, s.unroll, s.rolled,
                                   s.trips_hint))
            elif isinstance(s, If):
                then, orelse = keep(s.then), keep(s.orelse)
                if any(not isinstance(x, (Barrier, Fence)) for x in then + orelse):
                    out.append(If(s.cond, then, orelse, s.then_share))
            elif isinstance(s, (Barrier, Fence)) or wanted(s):
                out.append(s)
        # a block of nothing but barriers and fences does no arrival
        return tuple(out) if any(not isinstance(x, (Barrier, Fence)) for x in out) else ()

    body = keep(kernel.body)
    return Kernel(f"{kernel.name}_arrivals", kernel.params, kernel.grid, kernel.block, body,
                  kernel.lds, dict(kernel.meta))


def tails_and_arrivals(prog, per_inst, counters: set) -> tuple[float, float]:
    """(tails, arrivals) a run executed, from its per-instruction records: a tail resets
    its tile's counter (a store to a counter buffer), an arrival is an atomic add (each
    executed by one wave of its workgroup)."""
    from gpusim import engine
    tails = arrivals = 0.0
    for si, s in enumerate(prog.statements):
        pc = prog.stmt_main.get(si, -1)
        if pc is None or pc < 0:
            continue
        if isinstance(s, AtomicAdd) and s.buffer in counters:
            arrivals += float(per_inst[pc, engine.I_EXEC])
        elif isinstance(s, Store) and s.buffer in counters:
            tails += float(per_inst[pc, engine.I_EXEC])
    return tails, arrivals


def others_estimate(first: np.ndarray, t1: float, last: np.ndarray, t_last: float, k: int,
                    other_wgs: int, other_tails: float) -> np.ndarray:
    """The other workgroups' counters (or per-instruction records), see the module
    docstring: CU 0's work per workgroup outside the tails, and CU 0's cost per tail."""
    tail = (last - first) / (t_last - t1) if t_last > t1 else np.zeros_like(first)
    base = (first - t1 * tail) / max(k, 1)
    return np.maximum(base * other_wgs + tail * other_tails, 0.0)
