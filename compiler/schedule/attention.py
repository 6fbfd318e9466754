"""Schedule of an attention dispatch (QK^T, row softmax and PV in one kernel): knobs and
space.

The lowering is ``compiler.lower.attention`` (its docstring explains the kernel and each
knob's effect); ``check_schedule`` there is the one legality check the space and the
lowering share. The space crosses query block x key block x waves x rows per thread x
where Q lives x where the row statistics live, with ``lds_pad`` crossed on the prior's
first legal point only, so it stays a few hundred points the search samples. ``mma``
adds the matrix-core variant (CDNA): its query block is waves x RM x 32 or 16 (one MFMA
block per wave and RM), its row statistics always in registers, so it crosses key block x
waves x RM x block edge x where Q lives (a few dozen points, in the search like the rest).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gpusim import program
from gpusim.hw import Arch

from compiler.ir.graph import Graph
from compiler.lower.attention import (BKS, BQS, KEY_SPLITS, LDS_PADS, MFMA_FOR_BLOCK, Q_IN, RMS, ROW_STATS, SPLIT_REDUCES, WAVES, Attention, check_schedule)
from compiler.lower.attention import lower_attention as lower  # noqa: F401  (the kind's lowering)
from compiler.lower.common import LoweringError, ceil_div
from compiler.schedule.common import Candidate, knob

NAME = "attention"


@dataclass(frozen=True)
class Knobs:
    mma: str = knob("fma", "fma: VALU micro-kernels; mfma: QK^T and PV on the matrix cores "
                           "(CDNA only), one block of BQ / (waves x RM) = 32 or 16 query "
                           "rows per wave and RM")
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
    key_splits: int = knob(1, "flash-decoding: workgroups splitting the keys of a query "
                              "block (1: one kernel; KS > 1: partial outputs, maxima and "
                              "sums in a workspace, then a combine kernel)")
    split_reduce: str = knob("kernel", f"key_splits > 1: who combines the splits, one of "
                                       f"{SPLIT_REDUCES}: kernel (a second kernel) or "
                                       f"last_wg (in the one kernel, the workgroup that "
                                       f"arrives last at its query block's atomic counter)")


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
                        knobs = {"mma": "fma", "BQ": bq, "BK": bk, "waves": w, "RM": rm,
                                 "q_in": qin,
                                 "row_stats": rs, "lds_pad": 4}
                        why = check_schedule(a, knobs, arch)
                        (illegal if why else legal).append(Candidate(knobs, not why, why))
    legal.sort(key=lambda c: _prior(c.knobs))
    mfma = _mfma_points(a, arch)
    if legal:
        first = legal[0].knobs
        for pad in LDS_PADS[1:]:
            knobs = {**first, "lds_pad": pad}
            why = check_schedule(a, knobs, arch)
            (illegal if why else legal).append(Candidate(knobs, not why, why))
    out = legal + [c for c in mfma if c.legal] + illegal + [c for c in mfma if not c.legal]
    return _refuse_over_vgprs(graph, dispatch, a, with_key_splits(a, out, arch), arch)


def _refuse_over_vgprs(graph, dispatch, a: Attention, space: list, arch: Arch) -> list:
    """FMA points with Q staged in LDS and one key trip per workgroup: ``check_schedule``
    counts no Q registers there (no key loop for hipcc to hoist Q's reads out of), but in
    the straight-line step gpusim's VGPR estimate may still keep them all live (a 110-wide
    head read two at a time, RM 4: 507-557 VGPRs), and the simulator refuses a kernel over
    the arch's VGPRs per lane. Such points are lowered here (a small attention: few keys)
    and refused with the estimate when it is over, so that a legal point always runs."""
    from gpusim.occupancy import estimate_vgprs
    for c in space:
        k = c.knobs
        if not (c.legal and k.get("mma") == "fma" and k.get("q_in") == "lds"):
            continue
        if ceil_div(a.sk, k["BK"] * int(k.get("key_splits", 1))) > 1:
            continue  # a key loop: check_schedule counts Q's registers hoisted out of it
        kernels = program.kernels_of(lower(graph, dispatch, k, arch))
        need = max(estimate_vgprs(kern, arch) for kern in kernels)
        if need > arch.vgprs_per_lane:
            c.legal, c.always = False, False
            c.reason = (f"~{need} VGPRs per lane by gpusim's estimate (Q's {a.dk}-wide rows "
                        f"read from LDS in one straight-line key step), over the "
                        f"{arch.vgprs_per_lane} of {arch.name}")
    return [c for c in space if c.legal] + [c for c in space if not c.legal]


def with_key_splits(a: Attention, space: list, arch: Arch) -> list:
    """Flash-decoding points for an attention whose query blocks do not fill the GPU
    (decoding: one query row per head; a short sequence of many heads, ViT-B/16's 197
    tokens: 12 heads x 4 query blocks of 64): each legal point (FMA and MFMA tiles alike)
    with fewer workgroups than CUs, in a kind whose smallest query block does not fill
    the GPU either, and a query block no longer than the queries (or the kind's
    smallest: decoding's one row) also gets one legal key split KS (``KEY_SPLITS``
    that divide its key blocks): the smallest that gives every CU a workgroup, else the
    largest. A larger query block keeps its splits: on the matrix cores it is more waves
    sharing each staged key block, not padding (ViT's 64-query, 4-wave block split 4 ways
    over its 4 key blocks of 64 beats every one-kernel point, docs/kernels.md). Each split
    point comes twice: combined by a second kernel (``split_reduce=kernel``) and in the
    one kernel by each query block's last-arriving workgroup (``last_wg``). The split
    points (both) of the prior's best tile (an FMA one where there is one) are tried
    whatever the budget (``always``); the MFMA split points are sampled like the MFMA
    tiles. An attention whose query blocks fill the GPU gets no
    ``key_splits`` knob."""
    extra, first = [], None
    pts = [c for c in space if c.legal and c.knobs.get("mma") in ("fma", "mfma")]
    bqs = {mma: min((c.knobs["BQ"] for c in pts if c.knobs["mma"] == mma), default=0)
           for mma in ("fma", "mfma")}
    for c in pts:
        k = c.knobs
        if k["BQ"] != bqs[k["mma"]] and k["BQ"] > a.sq:
            continue  # a query block past the queries only computes more padding rows
        grid = math.prod(a.batch) * ceil_div(a.sq, k["BQ"])
        if grid >= arch.num_cus or math.prod(a.batch) * ceil_div(a.sq, bqs[k["mma"]]) \
                >= arch.num_cus:
            continue  # this tile, or the kind's smallest query block, fills the GPU
        ok = [n for n in KEY_SPLITS[1:]
              if not check_schedule(a, {**k, "key_splits": n}, arch)]
        tries = [n for n in ok if grid * n >= arch.num_cus][:1] or ok[-1:]
        for n in tries:
            cand = Candidate({**k, "key_splits": n, "split_reduce": "kernel"}, True, "",
                             c.opt_in)
            # its twin combined in the one kernel by each query block's last arrival
            # (one launch less; its tail is one workgroup's, docs/kernels.md)
            one = {**k, "key_splits": n, "split_reduce": "last_wg"}
            why = check_schedule(a, one, arch)
            twin = Candidate(one, not why, why, c.opt_in)
            extra += [cand, twin]
            if first is None and not c.opt_in:
                first = (cand, twin)
    if not extra:
        return space
    if first is not None:
        for c in first:
            c.always = c.legal
    for c in space:
        if c.knobs:
            c.knobs = {**c.knobs, "key_splits": 1}
    legal = [c for c in space if c.legal]
    return legal + [c for c in extra if c.legal] + [c for c in space if not c.legal] + \
        [c for c in extra if not c.legal]


def _mfma_prior(k: dict) -> tuple:
    """Tried first among the MFMA points (a scan at seq 1024, head dim 64 on gfx942): Q in
    registers, 4 waves, 64-key blocks, one query block per wave, 16x16 blocks."""
    m = k["BQ"] // (k["waves"] * k["RM"])
    return (Q_IN.index(k["q_in"]), abs(k["waves"] - 4), abs(k["BK"] - 64), k["RM"], m)


def _mfma_points(a: Attention, arch: Arch) -> list[Candidate]:
    """mma=mfma: every (block edge M, waves, RM, BK, q_in) whose BQ = waves x RM x M is one
    of the query blocks, with 16-byte fragment reads (lds_pad 4; 0 and 1 crossed on the
    prior's first legal point only); on an arch without matrix cores one illegal point
    says why. Points with RM > 1 are opt-in (``--fix RM=2``): gpusim's VGPR estimate
    counts up to a third fewer registers than hipcc allocates for them (80 vs 124,
    tests/test_attention_vgprs.py), so the occupancy they would be compared on is not
    trustworthy."""
    legal, illegal = [], []
    for m, w, rm, bk, qin in itertools.product(sorted(MFMA_FOR_BLOCK), WAVES, RMS, BKS, Q_IN):
        if w * rm * m not in BQS:
            continue
        knobs = {"mma": "mfma", "BQ": w * rm * m, "BK": bk, "waves": w, "RM": rm,
                 "q_in": qin, "row_stats": "registers", "lds_pad": 4}
        why = check_schedule(a, knobs, arch)
        (illegal if why else legal).append(Candidate(knobs, not why, why,
                                                     opt_in="RM" if rm > 1 else ""))
        if why and arch.wave_size != program.MFMA_WAVE:
            return illegal
    legal.sort(key=lambda c: _mfma_prior(c.knobs))
    for pad in (LDS_PADS[1:] if legal else ()):
        knobs = {**legal[0].knobs, "lds_pad": pad}
        why = check_schedule(a, knobs, arch)
        (illegal if why else legal).append(Candidate(knobs, not why, why,
                                                     opt_in=legal[0].opt_in))
    return legal + illegal


