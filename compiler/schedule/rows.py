"""Schedule of a row-reduction dispatch (softmax, layer norm, RMS norm): knobs and space.

The lowering is ``compiler.lower.reduction.lower_rows`` (its docstring explains each
knob's effect on the kernel). A reduction dispatch that does not have the row shape gets
the :mod:`compiler.schedule.generic` fallback instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower.common import LoweringError
from compiler.lower.reduction import (COLUMN_ROW_LANES, REGISTER_CACHE_ELEMS, ROW_DEFAULTS, ROW_SPLITS, RowShape, _single_pass_pair, check_schedule)
from compiler.lower.reduction import lower_rows as lower  # noqa: F401  (the kind's lowering)
from compiler.schedule import generic
from compiler.schedule.common import Candidate, knob

NAME = "rows"


@dataclass(frozen=True)
class Knobs:
    mapping: str = knob(ROW_DEFAULTS["mapping"], "wave: a wave per row (several rows per workgroup); "
                                "workgroup: a workgroup per row; columns: lanes on "
                                "consecutive rows, the reduced axis over the workgroup "
                                "(strided rows, e.g. a norm over the channels of NCHW)")
    workgroup: int = knob(ROW_DEFAULTS["workgroup"], "threads per workgroup, a multiple of the wave size")
    vector: int = knob(ROW_DEFAULTS["vector"], "elements per access along the row (1, 2, 4)")
    cache: str = knob(ROW_DEFAULTS["cache"], "reread: loop over the row in every pass; registers: keep "
                                f"the row in registers (at most {REGISTER_CACHE_ELEMS} per "
                                "thread)")
    reduce: str = knob(ROW_DEFAULTS["reduce"], "wave | shuffle | lds_tree: how lanes combine partials")
    row_lanes: int = knob(ROW_DEFAULTS["row_lanes"], "mapping=columns only (the other mappings' "
                                  "points do not carry it): lanes of a wave on consecutive "
                                  "rows (16, 32, 64); the other lanes and waves split the "
                                  "reduced axis")
    passes: str = knob(ROW_DEFAULTS["passes"], "multi: a pass per dependency level; single: Welford / "
                                "online softmax for two dependent reductions")
    row_splits: int = knob(ROW_DEFAULTS["row_splits"], "two-stage rows (mapping=workgroup or columns): P > 1 "
                                        "workgroups per row write partial states, a second "
                                        "kernel combines them and applies the epilogue once; "
                                        f"one of {ROW_SPLITS}")


def _left_out(knobs: dict, ws: int, C: int) -> str:
    """Points ``check_schedule`` accepts that the space still leaves out (never the best:
    idle lanes, or variants only worth one setting), with the reason."""
    mapping, wg = knobs["mapping"], knobs["workgroup"]
    if mapping == "columns" and wg // knobs["row_lanes"] > 64:
        return "more than 64 slices of the reduced axis (64 LDS reads per combine)"
    if mapping == "workgroup" and wg * knobs["vector"] > C:
        return f"workgroup of {wg} x {knobs['vector']} wider than the row"
    if mapping == "wave" and wg != ws and wg > 256:
        return "more than 4 rows per workgroup"
    if mapping == "wave" and knobs["reduce"] == "shuffle" and wg != ws * 4:
        return "shuffle variant only tried at 4 waves"
    return ""


def check(graph: Graph, dispatch) -> str:
    """Always '': a dispatch off the row shape gets the generic fallback, which lowers
    whatever fusion forms (one thread per root element, reductions serial)."""
    return ""


def space(graph: Graph, dispatch, arch: Arch) -> list:
    """Candidates for a row dispatch, illegal ones marked by the lowering's own
    ``check_schedule``; a non-row dispatch gets the generic fallback only."""
    try:
        rows = RowShape(graph, dispatch)
    except LoweringError as e:
        return generic.space(graph, dispatch, arch, str(e))
    ws, max_wg = arch.wave_size, arch.max_block_threads
    has_pair = any(_single_pass_pair(graph, dispatch, a, b)
                   for a in rows.reductions for b in rows.reductions)
    out = []
    for mapping in ("wave", "workgroup"):
        for wg in (ws, 2 * ws, 4 * ws, 256, 512, 1024):
            if wg > max_wg or wg % ws:
                continue
            for vec in (1, 2, 4):
                for cache in ("reread", "registers"):
                    for reduce in ("wave", "shuffle", "lds_tree"):
                        for passes in (("multi", "single") if has_pair else ("multi",)):
                            # no row_lanes: only mapping=columns offers it (under
                            # wave/workgroup it changes nothing, so it would only
                            # duplicate points and add a knob refinement steps over)
                            knobs = {"mapping": mapping, "workgroup": wg, "vector": vec,
                                     "cache": cache, "reduce": reduce, "passes": passes}
                            reason = (check_schedule(rows, {**ROW_DEFAULTS, **knobs}, arch)
                                      or _left_out(knobs, ws, rows.C))
                            out.append(Candidate(knobs, not reason, reason))
    if not rows.trailing:  # strided rows: lanes across rows, the reduced axis over waves
        for wg in (ws, 2 * ws, 4 * ws, 256, 512, 1024):
            if wg > max_wg or wg % ws:
                continue
            for row_lanes in COLUMN_ROW_LANES:
                for cache in ("reread", "registers"):
                    for passes in (("multi", "single") if has_pair else ("multi",)):
                        knobs = {"mapping": "columns", "workgroup": wg, "vector": 1,
                                 "cache": cache, "reduce": ROW_DEFAULTS["reduce"], "passes": passes,
                                 "row_lanes": row_lanes}
                        reason = (check_schedule(rows, knobs, arch)
                                  or _left_out(knobs, ws, rows.C))
                        out.append(Candidate(knobs, not reason, reason))
    # deduplicate (256 may equal 4 * wave size)
    seen, uniq = set(), []
    for c in out:
        k = tuple(sorted(c.knobs.items()))
        if k not in seen:
            seen.add(k)
            uniq.append(c)
    uniq = with_row_splits(rows, uniq, arch)
    # the always-lowerable point: the generic serial lowering handles whatever fusion formed
    fallback = generic.space(graph, dispatch, arch, "the fallback")[0]
    fallback.fallback = True
    return uniq + [fallback]


#: the shortest split of a row the space offers (elements). A heuristic of the space, not
#: a hardware figure: a row this short streams in well under the second kernel's launch
#: (``Arch.launch_overhead_us``), so splitting it cannot win; ``--fix row_splits=P``
#: still lowers any legal P
TWO_STAGE_MIN_SPLIT = 512


def with_row_splits(rows: RowShape, space: list, arch: Arch) -> list:
    """Two-stage points where one workgroup per row (or, for ``mapping=columns``, per
    block of ``row_lanes`` strided rows) cannot fill the GPU (those workgroups under the
    CU count): each legal ``mapping=workgroup``, ``cache=reread``, ``reduce=wave`` point
    and each legal ``mapping=columns``, ``cache=reread`` point also gets ``row_splits``
    P: the largest of ``ROW_SPLITS`` still under a workgroup per CU and the smallest at
    or over it (fewer workgroups of more columns each, or a full GPU: the search weighs
    them), each split's workgroup reading at least ``TWO_STAGE_MIN_SPLIT`` elements.
    Where the rule refuses every P (a second dependency level, i32 rows), one illegal
    point says why and the dispatch keeps its one-kernel points. The point at 256 threads (else the first) is
    tried whatever the budget."""
    extra, refused = [], None
    outer = math.prod(rows.outer)
    for c in space:
        k = c.knobs
        if not c.legal or k["cache"] != "reread":
            continue
        if k["mapping"] == "workgroup" and k["reduce"] == "wave":
            lanes, groups = 1, rows.R              # a workgroup per (contiguous) row
        elif k["mapping"] == "columns":
            lanes = k["row_lanes"]                 # a workgroup per block of strided rows
            groups = outer * -(-rows.inner_size // lanes)
        else:
            continue
        if groups >= arch.num_cus or lanes * rows.C < 2 * TWO_STAGE_MIN_SPLIT:
            continue   # enough workgroups, or too little to split in two
        ok, why = [], ""
        for P in ROW_SPLITS[1:]:
            reason = check_schedule(rows, {**ROW_DEFAULTS, **k, "row_splits": P}, arch)
            if reason:
                why = why or reason
            else:
                ok.append(P)
        ok = [P for P in ok if lanes * rows.C // P >= TWO_STAGE_MIN_SPLIT]
        fills = [P for P in ok if groups * P >= arch.num_cus]
        under = [P for P in ok if groups * P < arch.num_cus]
        pick = under[-1:] + fills[:1]  # just under a workgroup per CU, and just over
        for P in pick:
            extra.append(Candidate({**k, "row_splits": P}, True, ""))
        if not pick and refused is None and why:
            refused = Candidate({**k, "row_splits": ROW_SPLITS[1]}, False, why)
    if not extra and refused is None:
        return space
    if extra:
        # tried whatever the budget: 256 threads, the widest vector, the fewer splits
        # (under a workgroup per CU: one round, no straggling second one)
        first = min(extra, key=lambda c: (c.knobs["workgroup"] != 256, -c.knobs["vector"],
                                          c.knobs["row_splits"]))
        first.always = True
    for c in space:
        c.knobs = {**c.knobs, "row_splits": 1}
    return space + extra + ([refused] if refused is not None and not extra else [])
