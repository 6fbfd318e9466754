"""Schedule of the generic fallback for reductions that are not row-shaped.

The lowering is ``compiler.lower.reduction.lower_generic``: one thread per element of the
root, each reduction a serial loop; correct and slow, and the search says so. Every point
the lowering's ``check_generic_schedule`` accepts is legal; its reason says why the row
lowering did not apply.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower.reduction import GENERIC_DEFAULTS, check_generic_schedule
from compiler.lower.reduction import lower_generic as lower  # noqa: F401  (the kind's lowering)
from compiler.schedule.common import Candidate, knob

NAME = "generic"


@dataclass(frozen=True)
class Knobs:
    lowering: str = knob(GENERIC_DEFAULTS["lowering"], "generic: the serial fallback (set by the space)")
    workgroup: int = knob(GENERIC_DEFAULTS["workgroup"], "threads per workgroup (the space: 64 or 256)")


def space(graph: Graph, dispatch, arch: Arch, why: str = "") -> list:
    """The fallback's points; ``why``: what kept the dispatch off the row lowering."""
    out = []
    for wg in (64, 256):
        knobs = {"lowering": "generic", "workgroup": wg}
        illegal = check_generic_schedule(knobs, arch)
        out.append(Candidate(knobs, not illegal, illegal or f"generic: {why}"))
    return out
