"""Schedule of an elementwise (injective) dispatch walked naively: the knobs and the space.

The lowering is ``compiler.lower.elementwise`` (its docstring explains the walk). A
dispatch that permutes its input also gets the LDS-tiled candidates of
:mod:`compiler.schedule.transpose`, marked ``transpose=lds`` (these ``transpose=none``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower.common import LoweringError, ceil_div
from compiler.lower.elementwise import DEFAULTS, check_schedule, iteration_order, iteration_shape
from compiler.lower.elementwise import lower_elementwise as lower  # noqa: F401  (the kind's lowering)
from compiler.schedule import transpose
from compiler.schedule.common import Candidate, knob

NAME = "elementwise"


@dataclass(frozen=True)
class Knobs:
    workgroup: int = knob(DEFAULTS["workgroup"], "threads per workgroup (64 to 1024)")
    vector: int = knob(DEFAULTS["vector"], "elements per access along the innermost iterated dim (1, 2, 4)")
    elems: int = knob(DEFAULTS["vector"], "elements per thread, a multiple of vector, unrolled (at "
                                   "most 16); absent: one vector (elems = vector)")
    order: str = knob(DEFAULTS["order"], "walk the output row-major, or input:<tensor> to walk "
                                "that input's memory order")
    transpose: str = knob(DEFAULTS["transpose"], "none: this naive walk; lds: the transpose kind's tile")


def check(graph: Graph, dispatch) -> str:
    """'' when the space has a legal point (its scalar fallback lowers whenever the
    outputs share one iteration space), else why not. Needs only the dispatch's root and
    outputs, so fusion asks it before every merge (``fusion.core``)."""
    try:
        iteration_shape(graph, dispatch)
    except LoweringError as e:
        return str(e)
    return ""


def space(graph: Graph, dispatch, arch: Arch) -> list:
    """Workgroup x vector x elems x order, with illegal points marked: the lowering's
    ``check_schedule``, then two rules of the space (more than 16 elements per thread, a
    workgroup larger than the work) that leave out points it would lower but that never
    win."""
    why = check(graph, dispatch)
    if why:
        return [Candidate({"workgroup": 256}, False, why)]
    shape = iteration_shape(graph, dispatch)
    n = math.prod(shape)
    orders = ["output"]
    for t in dispatch.inputs:
        ty = graph.op(t).type
        if ty.shape == shape and not ty.is_row_major:
            orders.append(f"input:{t}")
    out = []
    for order in orders:
        inner = iteration_order(graph, dispatch, order)[-1]
        for wg in (64, 128, 256, 512, 1024):
            for vec in (1, 2, 4):
                for elems in (vec, 2 * vec, 4 * vec):
                    knobs = {"workgroup": wg, "vector": vec, "elems": elems, "order": order}
                    reason = check_schedule(shape, inner, knobs, arch)
                    if not reason and elems > 16:  # lowers, never wins: the space's rules
                        reason = "more than 16 elements per thread"
                    elif not reason and wg > 64 and ceil_div(n, elems) < wg:
                        reason = "workgroup larger than the work"
                    out.append(Candidate(knobs, not reason, reason))
    # the always-lowerable point: one scalar element per thread in output order
    out.append(Candidate({"workgroup": 64, "vector": 1, "elems": 1, "order": "output"},
                         fallback=True))
    tiled = transpose.space(graph, dispatch, arch)
    if tiled:  # a permute: the naive walks compete with the LDS-tiled ones
        for c in out:
            c.knobs["transpose"] = "none"
        out += tiled
    return out
