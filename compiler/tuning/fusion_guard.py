"""No fusion that loses: a fused dispatch predicted slower than its parts is split again.

Fusion rules decide on indexing maps, before any schedule exists, so a rule can form a
dispatch that no schedule runs well: a reduction whose consumers were pulled in at the
cost of its parallelism, a row dispatch that fell back to one thread per element. The
search already tunes the conservative plan beside the aggressive one; this module holds
each dispatch of a fused plan against the conservative dispatches it is made of (its
*parts*: the conservative dispatches whose compute ops all lie inside it). When the fused
dispatch's best schedule is predicted slower than the sum of its parts' best schedules
(launches included on both sides), the merge is refused: the plan keeps the parts instead,
and a ``fusion_guard`` decision records both numbers for ``wavefuse view explain``. A
merge that wins is recorded with its numbers too.

So a fused plan is never slower than the conservative plan because of a dispatch it
formed, up to the dispatches that have no conservative parts (a horizontal wide GEMM, a
fused attention: the search scores those against their own rival plans).

Limits: a dispatch is split only into whole conservative dispatches, and only when the
result is a valid plan (every tensor a part reads is written before it, every tensor the
fused dispatch wrote is written by a part) and the parts' ops are the same ops in the
fused plan's graph; otherwise it stays, with the reason. The comparison is of simulated
predictions, not measurements.
"""
from __future__ import annotations

import copy
import dataclasses

from compiler.fusion.plan import Decision, FusionPlan

NAME = "fusion_guard"


def _compute_ops(graph, dispatch) -> set:
    return {n for n in dispatch.ops if not graph.op(n).is_view}


def _same_op(ga, gb, n) -> bool:
    if n not in ga or n not in gb:
        return False
    a, b = ga.op(n), gb.op(n)
    return a.kind == b.kind and a.inputs == b.inputs and a.type == b.type


def parts_of(plan, d, conservative, tuned_c, part_ops: list | None = None) -> list:
    """The tuned conservative dispatches whose compute ops all lie in dispatch ``d``
    (a conservative dispatch recomputing nothing outside ``d``). ``part_ops``: each
    conservative dispatch's compute ops, when the caller asks for many ``d``."""
    ops = _compute_ops(plan.graph, d)
    if part_ops is None:
        part_ops = [_compute_ops(conservative.graph, c) for c in conservative.dispatches]
    out, covered = [], set()
    for cops, t in zip(part_ops, tuned_c):
        if cops and cops <= ops and all(_same_op(plan.graph, conservative.graph, n)
                                        for n in cops):
            out.append(t)
            covered |= cops
    return out if covered == ops else []


def _split_is_valid(plan, index, parts) -> str:
    """'' when replacing dispatch ``index`` by ``parts`` keeps the plan valid, else why."""
    g = plan.graph
    written = {n for n in g.topo_order() if g.op(n).kind in ("input", "constant")}
    for d in plan.dispatches[:index]:
        written |= set(d.outputs)
    for p in parts:
        missing = [t for t in p.dispatch.inputs if t not in written]
        if missing:
            return f"a part reads {missing[0]}, which the fused plan keeps inside a dispatch"
        written |= set(p.dispatch.outputs)
    lost = [t for t in plan.dispatches[index].outputs if t not in written]
    if lost:
        return f"no part writes {lost[0]}"
    return ""


def _renamed(t, dispatch, graph):
    """A copy of tuned dispatch ``t`` under ``dispatch`` (a new name): its kernel is
    lowered again when asked, so the kernel carries the new name too."""
    out = copy.copy(t)
    out.name, out.dispatch = dispatch.name, dispatch
    out.__dict__.pop("_kernel", None)
    out.__dict__.pop("_custom", None)
    out._lower = (graph, t._lower[1])
    return out


def guard(plan, tuned: list, conservative, tuned_c: list, launch_delta_us: float = 0.0) -> tuple:
    """(plan, tuned dispatches) with each losing merge replaced by its conservative parts,
    and the plan's decisions extended by one ``fusion_guard`` decision per fused dispatch
    that has two or more parts. ``launch_delta_us``: what each dispatch's launch costs
    beyond the stream launch its simulated time includes (a HIP graph's per-node cost
    minus it), so the comparison counts launches as the plan total does."""
    dispatches, out, decisions = [], [], []
    part_ops = [_compute_ops(conservative.graph, c) for c in conservative.dispatches]
    for i, (d, t) in enumerate(zip(plan.dispatches, tuned)):
        parts = parts_of(plan, d, conservative, tuned_c, part_ops)
        if len(parts) < 2:
            dispatches.append(d)
            out.append(t)
            continue
        fused_raw = t.best.time_us + launch_delta_us
        parts_raw = sum(p.best.time_us + launch_delta_us for p in parts)
        loses = fused_raw > parts_raw
        # the figures as recorded (3 decimals), so the reason and the cost agree
        fused_us, parts_us = round(fused_raw, 3), round(parts_raw, 3)
        names = ", ".join(p.name for p in parts)
        cost = {"merged_us": fused_us, "parts_us": parts_us, "parts": len(parts)}
        why = _split_is_valid(plan, i, parts) if loses else ""
        if loses and not why:
            decisions.append(Decision(
                NAME, d.name, names, False,
                f"refused: the fused dispatch's best schedule is predicted at {fused_us:.2f} us, "
                f"its {len(parts)} parts' best at {parts_us:.2f} us (simulated, launches "
                f"included): the parts are kept", cost))
            for k, p in enumerate(parts):
                pd = dataclasses.replace(p.dispatch, name=f"{d.name}_part{k}")
                dispatches.append(pd)
                out.append(_renamed(p, pd, plan.graph))
            continue
        decisions.append(Decision(
            NAME, d.name, names, True,
            (f"kept: fused {fused_us:.2f} us vs {len(parts)} parts {parts_us:.2f} us "
             f"(simulated, launches included)") if not loses else
            (f"kept although slower (fused {fused_us:.2f} us vs parts {parts_us:.2f} us): "
             f"{why}"), cost))
        dispatches.append(d)
        out.append(t)
    new = FusionPlan(plan.graph, dispatches, list(plan.decisions) + decisions, plan.mode,
                     plan.bytes_unfused, plan.num_dispatches_unfused)
    return new, out
