"""Schedule of an attention dispatch (QK^T, row softmax and PV in one kernel): knobs and
space.

The lowering is ``compiler.lower.attention`` (its docstring explains the kernel and each
knob's effect); ``check_schedule`` there is the one legality check the space and the
lowering share. The space crosses query block x key block x waves x rows per thread x
where Q lives x where the row statistics live, with ``lds_pad`` crossed on the prior's
first legal point only, so it stays a few hundred points the search samples.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from gpusim.hw import Arch

from ..graph import Graph
from ..lower.attention import (BKS, BQS, LDS_PADS, Q_IN, RMS, ROW_STATS, WAVES, Attention,
                               check_schedule)
from ..lower.attention import lower_attention as lower  # noqa: F401  (the kind's lowering)
from ..lower.common import LoweringError
from .common import Candidate, knob

NAME = "attention"


@dataclass(frozen=True)
class Knobs:
    BQ: int = knob(16, f"query rows per workgroup, one of {BQS}")
    BK: int = knob(32, f"keys per block streamed through LDS, one of {BKS}")
    waves: int = knob(4, f"waves per workgroup, one of {WAVES}")
    RM: int = knob(2, "query rows per thread: each K value read from LDS feeds RM rows")
    q_in: str = knob("registers", "registers: each thread's RM rows of Q held in registers "
                                  "for the whole kernel; lds: the Q block re-read from LDS")
    row_stats: str = knob("registers", "registers: a row's lanes combine max and sum by xor "
                                       "shuffles in one wave; lds: through an LDS array of "
                                       "partials (a row may span waves)")
    lds_pad: int = knob(4, "words of padding per LDS row of Q, K and P: 0 or 4 allow "
                           "16-byte reads, 1 an odd stride with scalar reads")


def _prior(k: dict) -> tuple:
    """Tried first (the best points of a scan at seq 1024, head dim 64 on gfx942): Q in
    registers, 4 waves, 32-key blocks, 2 rows per thread, small query blocks (more
    workgroups), shuffles, vector-padded LDS."""
    return (Q_IN.index(k["q_in"]), abs(k["waves"] - 4), abs(k["BK"] - 32),
            abs(k["RM"] - 2), k["BQ"], ROW_STATS.index(k["row_stats"]),
            LDS_PADS.index(k["lds_pad"]))


def check(graph: Graph, dispatch) -> str:
    """'' when the dispatch has the attention structure the kernel computes, else why
    not (whether a tile fits the arch's LDS and registers is the space's business)."""
    try:
        Attention(graph, dispatch)
    except LoweringError as e:
        return str(e)
    return ""


def space(graph: Graph, dispatch, arch: Arch) -> list[Candidate]:
    """Every candidate schedule, legal ones first in the prior's order; an illegal point
    carries the reason (LDS, registers, threads that do not split over the rows)."""
    try:
        a = Attention(graph, dispatch)
    except LoweringError as e:
        return [Candidate({}, False, str(e))]
    legal, illegal = [], []
    for bq in BQS:
        for bk in BKS:
            for w in WAVES:
                for rm in RMS:
                    for rs, qin in itertools.product(ROW_STATS, Q_IN):
                        knobs = {"BQ": bq, "BK": bk, "waves": w, "RM": rm, "q_in": qin,
                                 "row_stats": rs, "lds_pad": 4}
                        why = check_schedule(a, knobs, arch)
                        (illegal if why else legal).append(Candidate(knobs, not why, why))
    legal.sort(key=lambda c: _prior(c.knobs))
    if legal:
        first = legal[0].knobs
        for pad in LDS_PADS[1:]:
            knobs = {**first, "lds_pad": pad}
            why = check_schedule(a, knobs, arch)
            (illegal if why else legal).append(Candidate(knobs, not why, why))
    return legal + illegal


