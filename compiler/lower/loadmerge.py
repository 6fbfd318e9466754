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
``Divisibility`` proves a multiple of 4 become one 4-wide load. Runs whose alignment is
not provable stay scalar: hipcc merges those too (global memory needs only dword
alignment), but the simulator's vector accesses are naturally aligned, so the IR cannot
say it; such runs are priced as scalar loads, a stated difference.
"""
from __future__ import annotations

import dataclasses

from gpusim import program
from gpusim.analysis import Divisibility, affine_form, stmt_defs

#: the widest access the pass forms (16 bytes of f32: ``global_load_dwordx4``)
WIDTH = 4


def _affine(e) -> tuple[tuple, int]:
    """``e``'s affine form (``gpusim.analysis.affine_form``) with hashable terms."""
    terms, const = affine_form(e)
    return tuple(sorted(terms.items(), key=repr)), const


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


def merge_loads(body: tuple, wave_size: int, stored: frozenset = frozenset()) -> tuple:
    """``body`` with the scalar loads of each straight-line run deduplicated and merged
    (see the module docstring); buffers in ``stored`` (written by the kernel) are left
    alone."""
    div = Divisibility(body, wave_size)
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
                terms, c = _affine(s.index)
                key = (s.buffer, s.dsts[0].dtype, terms)
                groups.setdefault(key, {}).setdefault(c, []).append((pos, s))
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
                    if div.multiple_of(head.index) % WIDTH == 0:
                        members = [by_off[c0 + j][0] for j in range(WIDTH)]
                        at = min(p for p, _ in members)
                        vec = program.Load(tuple(s.dsts[0] for _, s in members), buf, head.index)
                        # the vector load takes its first member's place: the members
                        # share the index's registers (one affine form), defined before it
                        place[at] = vec
                        drop.update(p for p, _ in members if p != at)
                        i += WIDTH
                        continue
                i += 1
        out = []
        for pos, s in enumerate(stmts):
            if pos in place:
                out.append(place[pos])
            elif pos not in drop:
                out.append(s)
        return out

    def visit(stmts):
        out = []
        for s in run(list(stmts)):
            if isinstance(s, program.For):
                s = dataclasses.replace(s, body=visit(s.body))
            elif isinstance(s, program.If):
                s = dataclasses.replace(s, then=visit(s.then), orelse=visit(s.orelse))
            out.append(s)
        return tuple(out)

    merged = visit(tuple(body))
    return _rename(merged, names) if names else merged
