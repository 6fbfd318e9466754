"""Schedule spaces: one module per dispatch kind, each with its typed knobs.

Kinds: ``elementwise`` (naive walks), ``transpose`` (permutes through an LDS tile),
``rows`` (row reductions), ``generic`` (the serial fallback for reductions of any other
shape), ``contraction`` (matmul / conv) and ``attention`` (QK^T, softmax and PV in one
kernel). Each module holds a frozen ``Knobs``
dataclass (every knob with its default and its meaning), ``space(graph, dispatch, arch)``,
``check(graph, dispatch)`` (why the space would have no legal point, arch-independent:
fusion asks it before committing a merge) and ``lower`` (the lowering in
``compiler.lower``). A schedule still travels as a plain
``dict`` of knob -> value (``{"workgroup": 256, "vector": 4}``), so it prints, serialises
and pins (``--fix vector=4``) without ceremony; a pin names a knob some kind's ``Knobs``
declares (:func:`check_pins`) and takes a value that kind's space enumerates (the search's
``select_candidates``). Each space marks illegal points with the reason (LDS over the
limit, more threads than the arch allows, misaligned vectors, too many registers: every
limit read from the ``Arch``), so the candidate table can show why a point was never
simulated.

Import direction: ``schedule`` -> ``lower``, never back.
"""
from __future__ import annotations

import dataclasses

from gpusim.hw import Arch

from compiler.ir.graph import GraphError
from compiler.lower import dispatch_kind
from compiler.schedule import attention, contraction, elementwise, generic, rows, transpose
from compiler.schedule.common import Candidate, knob


#: every schedule kind, by name
KINDS = {m.NAME: m for m in (elementwise, transpose, rows, generic, contraction, attention)}


def knob_names(kind_module) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind_module.Knobs))


def check_pins(fixed: dict) -> None:
    """Every pinned knob must be a knob of some dispatch kind; one line naming them if not."""
    known = {k for m in KINDS.values() for k in knob_names(m)}
    bad = sorted(k for k in fixed if k not in known)
    if bad:
        listing = "; ".join(f"{name}: {', '.join(knob_names(m))}" for name, m in KINDS.items())
        raise GraphError(f"--fix {bad[0]}: no dispatch kind has a knob {bad[0]!r}; "
                         f"knobs per kind: {listing}")


#: the structural legality check of each dispatch kind (``dispatch_kind``'s names)
CHECKS = {"attention": attention.check, "contraction": contraction.check,
          "reduction": rows.check, "elementwise": elementwise.check}


def check(graph, dispatch) -> str:
    """'' when nothing in the dispatch's structure keeps its space from a legal schedule,
    else why not: the arch-independent check each space starts with (past it, every kind
    but attention has a legal fallback point on every arch), asked by fusion before it
    commits a merge (``passes.core``) and by the property tests of every plan."""
    return CHECKS[dispatch_kind(graph, dispatch)](graph, dispatch)


def schedule_space(graph, dispatch, arch: Arch) -> list:
    """Every candidate schedule of a dispatch, the illegal ones marked with a reason."""
    kind = dispatch_kind(graph, dispatch)
    if kind == "attention":
        return attention.space(graph, dispatch, arch)
    if kind == "contraction":
        return contraction.space(graph, dispatch, arch)
    if kind == "reduction":
        return rows.space(graph, dispatch, arch)
    return elementwise.space(graph, dispatch, arch)


__all__ = ["Candidate", "CHECKS", "KINDS", "check", "check_pins", "knob_names", "schedule_space"]
