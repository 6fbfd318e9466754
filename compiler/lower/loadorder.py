"""Issue a straight-line run's global and LDS loads early, the way hipcc's scheduler does.

gpusim issues a wave's instructions in program order and a use waits for its load
(``s_waitcnt``), so the IR's statement order is the ISA's order. A lowering that emits
each value's load just before its arithmetic (a row kernel's pass over three column
chunks: load, accumulate, load, accumulate, ...; a layer norm's epilogue: gamma, use,
beta, use) would pay one memory latency per load, where hipcc's machine scheduler
clusters the loads of a basic block at its top and pays about one for all of them.

This pass says in the IR what hipcc emits: within one straight-line run of statements
(a basic block: it never moves a load into or out of a loop or a branch), each global
or LDS load moves up to just after the last statement it depends on. It does not pass a
statement that defines a register of its index, reads or writes its destinations,
stores to its buffer (an LDS load: to its array) or atomically updates it, or orders
memory (a barrier, a fence, an atomic), nor a loop or branch (the end of a basic block),
nor a cross-lane reduction or shuffle (hipcc keeps loads below them: a layer norm's ISA
issues its three row loads together, then its gamma and beta loads together after the
wave sums). One branch it does pass: one holding only global stores to other buffers
(the row guard around each of a columns kernel's output stores), which hipcc sinks
below the loads that follow (a ConvNeXt norm's gamma and beta loads issue in clusters,
its twelve guarded stores last, gfx940 ISA). Loads keep their relative order. The price,
live registers from the load to its use, is what the register count
(``gpusim.occupancy``) then sees, as hipcc's own schedule would have it; hipcc weighs
pressure against latency and may cluster less where registers are short, and it caps a
wave's outstanding LDS reads (``lgkmcnt``), differences this pass does not model (it is
applied to row and elementwise kernels, whose runs are short).
"""
from __future__ import annotations

from gpusim import program
from gpusim.analysis import expr_vars, stmt_defs, stmt_exprs

from compiler.lower.common import rewrite_blocks

#: statements a load never moves above: they order memory, end a basic block, or are
#: cross-lane (hipcc kept a layer norm's gamma and beta loads below its wave sums, gfx90a
#: and gfx940 alike: ``tests/test_loadorder.py``)
_BARRIERS = (program.Barrier, program.Fence, program.AtomicAdd, program.For, program.If,
             program.Shuffle, program.WaveReduce)
_LOADS = (program.Load, program.LdsLoad)


def _reads(s) -> set:
    out: set = set()
    for e in stmt_exprs(s):
        expr_vars(e, out)
    return out


def _guarded_stores(s, load) -> bool:
    """Whether ``s`` is a branch holding only global stores to other buffers (a row
    guard around an output's store): hipcc sinks such stores below the loads that follow
    them (a ConvNeXt layer norm's per-channel gamma and beta loads issue in clusters and
    its guarded stores come last, gfx940 ISA), so a load may rise above it."""
    return isinstance(s, program.If) and all(
        isinstance(x, program.Store) and x.buffer != getattr(load, "buffer", None)
        for x in program.walk(s.then + s.orelse))


def _blocks(load, s) -> bool:
    """Whether ``load`` (global or LDS) may not move above statement ``s``."""
    dsts = {v.name for v in load.dsts}
    if _guarded_stores(s, load):  # only if a store (or the guard) reads what it overwrites
        return bool(dsts & set().union(*map(_reads, program.walk((s,)))))
    if isinstance(s, _BARRIERS):
        return True
    if isinstance(load, program.Load) and isinstance(s, program.Store) and s.buffer == load.buffer:
        return True
    if isinstance(load, program.LdsLoad) and isinstance(s, program.LdsStore) \
            and s.array == load.array:
        return True
    defs = {v.name for v in stmt_defs(s)}
    return bool(defs & (expr_vars(load.index) | dsts) or dsts & _reads(s))


def _run(stmts: list) -> list:
    out: list = []
    for s in stmts:
        if isinstance(s, _LOADS):
            at = len(out)
            while at > 0 and not _blocks(s, out[at - 1]) and not isinstance(out[at - 1], _LOADS):
                at -= 1
            # loads keep their order: it stops below the nearest earlier load it meets
            out.insert(at, s)
        else:
            out.append(s)
    return out


def loads_early(body: tuple) -> tuple:
    """``body`` with every straight-line run's global and LDS loads issued early (see
    above)."""
    return rewrite_blocks(body, _run)
