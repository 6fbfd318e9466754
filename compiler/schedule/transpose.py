"""Schedule of a permute through an LDS tile: the knobs and the space.

The lowering is ``compiler.lower.transpose`` (its docstring explains the two phases and
why ``lds_pad=1`` removes the bank conflicts). The space is empty when no input of the
dispatch can be staged (``staging_plan`` says why); the elementwise kind then keeps only
its naive walks.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower.transpose import DEFAULTS, PADS, TILES, WORKGROUPS, check_schedule, staging_plan
from compiler.lower.transpose import lower_transpose as lower  # noqa: F401  (the kind's lowering)
from compiler.schedule.common import Candidate, knob

NAME = "transpose"


@dataclass(frozen=True)
class Knobs:
    transpose: str = knob(DEFAULTS["transpose"], "lds: stage a tile in LDS (none: the elementwise kind)")
    tile: int = knob(DEFAULTS["tile"], f"tile side T, one of {TILES}")
    workgroup: int = knob(DEFAULTS["workgroup"], "threads per workgroup, a multiple of T up to T*T")
    lds_pad: int = knob(DEFAULTS["lds_pad"], "words of padding per tile row: 1 spreads a column over the banks")


def space(graph: Graph, dispatch, arch: Arch) -> list:
    """The LDS-tiled candidates of an elementwise dispatch (empty when none applies),
    marked by the lowering's ``check_schedule`` and the space's own rule (a 64 tile over
    dims of 32 or less: lowers, never wins)."""
    plan = staging_plan(graph, dispatch)
    if isinstance(plan, str):
        return []
    _, d_i, d_o, shape = plan
    out = []
    for tile in TILES:
        for wg in WORKGROUPS:
            for pad in PADS:
                knobs = {"transpose": "lds", "tile": tile, "workgroup": wg, "lds_pad": pad}
                reason = check_schedule(knobs, arch)
                if not reason and tile > 32 and min(shape[d_i], shape[d_o]) <= 32:
                    reason = f"tile {tile} is larger than the permuted dims {shape[d_i]}x{shape[d_o]}"
                out.append(Candidate(knobs, not reason, reason))
    return out
