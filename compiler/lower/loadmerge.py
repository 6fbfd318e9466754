"""Merge an elementwise kernel's scalar global loads the way hipcc does.

A windowed op read through strided slice views (MaxPool's taps: ``x[..., 2w + kw]`` for
four outputs ``w`` per thread) loads each element with its own scalar load, and the
overlapping windows load some elements twice. hipcc removes the duplicates and merges
runs of consecutive dwords into ``global_load_dwordx4`` (ResNet-50's 3x3 stride-2 MaxPool:
27 distinct elements of 36 loads, read as 6 ``dwordx4`` and 3 ``dword``), so the simulator
priced accesses the ISA does not make and ``wavefuse check`` reported a width it never saw.

This pass says in the IR what hipcc emits, where it is provable: within one straight-line
run of statements, scalar loads of one buffer whose indices differ only by constants
(same affine form over the same registers) are deduplicated (a later load of the same
element reads the first one's register), and four consecutive elements whose first index
``Divisibility`` proves a multiple of 4 become one 4-wide load; a run of exactly three
consecutive 4-byte elements (a pooling window's row) becomes one 3-wide load, which needs
no more than dword alignment (``global_load_dwordx3``; hipcc merged one such row of
Inception's 3x3 average pooling by itself and left the other two scalar, as its
vectorizer proved only that row's neighbours consecutive). The affine form looks
through index registers assigned once (``key1 = kk + 1``, ``key2 = kk + 2``: an MFMA
attention's score epilogue names each of a lane's four consecutive keys, and LLVM, which
sees the values and not the names, merges the four bias loads of Swin's windowed
attention into one ``global_load_dwordx4``). Runs whose alignment is
not provable stay scalar: hipcc merges those too (global memory needs only dword
alignment), but the simulator's vector accesses are naturally aligned, so the IR cannot
say it; such runs are priced as scalar loads, a stated difference.
"""
from __future__ import annotations

import dataclasses

from gpusim import program
from gpusim.analysis import Divisibility, affine_form, expr_vars, register_writes, stmt_defs

from compiler.lower.common import rewrite_blocks

#: the widest access the pass forms (16 bytes of f32: ``global_load_dwordx4``)
WIDTH = 4
#: a run of exactly this many 4-byte elements becomes one ``global_load_dwordx3``
DWORD3 = 3


def _affine(e, values: dict | None = None) -> tuple[tuple, int]:
    """``e``'s affine form (``gpusim.analysis.affine_form``) with hashable terms; a term
    that is a register in ``values`` (name -> its one defining expression) is replaced by
    that expression's affine form, recursively."""
    terms, const = affine_form(e)
    if values:
        out: dict = {}
        stack = [(terms, 1)]
        while stack:
            ts, scale = stack.pop()
            for k, c in ts.items():
                if k[0] == "v" and k[1] in values:
                    sub, sc = affine_form(values[k[1]])
                    const += scale * c * sc
                    stack.append((sub, scale * c))
                else:
                    out[k] = out.get(k, 0) + scale * c
        terms = {k: c for k, c in out.items() if c}
    return tuple(sorted(terms.items(), key=repr)), const


def _index_values(body) -> dict:
    """name -> value for the i32 registers the body assigns exactly once, with an
    expression whose registers are such registers or loop counters: the same value
    wherever it is read (after its definition), so an index may be read through it."""
    writes: dict = {}
    for reg, kind, what in register_writes(body):
        writes.setdefault(reg.name, []).append((reg, kind, what))
    counters = {n for n, ws in writes.items() if all(k == "loop" for _, k, _ in ws)}
    once = {n: ws[0][2] for n, ws in writes.items()
            if len(ws) == 1 and ws[0][1] == "expr" and ws[0][0].dtype == "i32"}
    values: dict = {}
    changed = True
    while changed:  # keep a register only when every register it reads is kept
        changed = False
        for n, v in once.items():
            if n not in values and all(r in values or r in counters for r in expr_vars(v)):
                values[n] = v
                changed = True
    return values


def _rename(x, names: dict):
    """``x`` (an expression or statement tree) with registers renamed per ``names``."""
    if isinstance(x, program.Var):
        return names.get(x.name, x)
    if isinstance(x, tuple):
        return tuple(_rename(y, names) for y in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            if isinstance(v, (program.Expr, program.Stmt, tuple)):
                nv = _rename(v, names)
                if nv is not v:
                    changes[f.name] = nv
        return dataclasses.replace(x, **changes) if changes else x
    return x


def _run_of_three(by_off: dict, c0: int) -> bool:
    """Whether ``c0`` starts a run of exactly three consecutive elements (no neighbour
    on either side: a longer run is the 4-wide rule's, or stays scalar)."""
    return (c0 - 1 not in by_off and c0 + DWORD3 not in by_off
            and all(c0 + j in by_off for j in range(DWORD3)))


def merge_loads(body: tuple, wave_size: int, stored: frozenset = frozenset(),
                dwords: frozenset = frozenset()) -> tuple:
    """``body`` with the scalar loads of each straight-line run deduplicated and merged
    (see the module docstring); buffers in ``stored`` (written by the kernel) are left
    alone; runs of three become one load only in ``dwords`` (buffers of 4-byte
    elements: a dwordx3)."""
    div = Divisibility(body, wave_size)
    values = _index_values(body)
    ndefs: dict = {}
    for s in program.walk(body):
        for v in stmt_defs(s):
            ndefs[v.name] = ndefs.get(v.name, 0) + 1
    names: dict = {}

    def run(stmts):
        groups: dict = {}      # (buffer, dtype, affine terms) -> {offset: [(pos, Load)]}
        for pos, s in enumerate(stmts):
            if isinstance(s, program.Load) and len(s.dsts) == 1 and s.buffer not in stored \
                    and ndefs[s.dsts[0].name] == 1:
                terms, c = _affine(s.index, values)
                key = (s.buffer, s.dsts[0].dtype, terms)
                groups.setdefault(key, {}).setdefault(c, []).append((pos, s))
        defined_at = {v.name: pos for pos, s in enumerate(stmts) for v in stmt_defs(s)}
        drop, place = set(), {}
        for (buf, _, _), by_off in groups.items():
            if sum(len(v) for v in by_off.values()) < 2:
                continue
            for c, loads in by_off.items():  # duplicates read the first load's register
                keep = loads[0][1].dsts[0]
                for p, s in loads[1:]:
                    names[s.dsts[0].name] = keep
                    drop.add(p)
            offs = sorted(by_off)
            i = 0
            while i < len(offs):
                c0 = offs[i]
                if all(c0 + j in by_off for j in range(WIDTH)):
                    head = by_off[c0][0][1]
                    members = [by_off[c0 + j][0] for j in range(WIDTH)]
                    at = min(p for p, _ in members)
                    # the head's index registers must exist where the vector goes
                    ready = all(defined_at.get(r, -1) < at for r in expr_vars(head.index))
                    if ready and div.multiple_of(head.index) % WIDTH == 0:
                        vec = program.Load(tuple(s.dsts[0] for _, s in members), buf, head.index)
                        # the vector load takes its first member's place, where the
                        # head's index registers are already defined (checked above)
                        place[at] = vec
                        drop.update(p for p, _ in members if p != at)
                        i += WIDTH
                        continue
                if buf in dwords and _run_of_three(by_off, c0):
                    head = by_off[c0][0][1]
                    members = [by_off[c0 + j][0] for j in range(DWORD3)]
                    at = min(p for p, _ in members)
                    if all(defined_at.get(r, -1) < at for r in expr_vars(head.index)):
                        place[at] = program.Load(tuple(s.dsts[0] for _, s in members), buf,
                                                 head.index)
                        drop.update(p for p, _ in members if p != at)
                        i += DWORD3
                        continue
                i += 1
        out = []
        for pos, s in enumerate(stmts):
            if pos in place:
                out.append(place[pos])
            elif pos not in drop:
                out.append(s)
        return out

    merged = rewrite_blocks(body, run)
    return _rename(merged, names) if names else merged
