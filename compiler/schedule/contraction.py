"""The schedule space of a matmul/conv dispatch (see ``compiler.lower.contraction``).

Knobs: block tile ``BM x BN x BK``, thread micro-tile ``TM x TN``, ``KW`` wave groups that
split each K tile inside the workgroup (partials combined through LDS: more waves per CU
for small-M GEMMs that cannot fill the GPU with workgroups), LDS row padding ``lds_pad``
(0, 1 element: odd stride but scalar LDS reads, 4: one 16 B vector, "xor" chunks), global
load widths ``vec_a``/``vec_b`` (the widest legal, not a free knob: narrower only issues
more instructions), the output ``swizzle`` placement and ``mma``: ``fma`` (VALU
micro-tiles) or ``mfma`` (one matrix-core block per wave, CDNA only).

The tiles are a short ranked list (small-M tiles with split-K first, then the classic
64x64); each is crossed with the swizzle placements, and the first tile also with every
lds_pad, so the space stays a few dozen legal points. Illegal points carry the reason.
"""
from __future__ import annotations

import itertools

from ..lower.common import LoweringError
from ..lower.contraction import (LDS_PADS, SWIZZLES, Gemm, _arch_limits, check_schedule)
from . import Candidate

TILES = [  # (BM, BN, BK, TM, TN, KW), best-first prior
    (16, 32, 64, 2, 4, 8), (32, 32, 64, 4, 4, 16), (16, 32, 32, 2, 4, 4),
    (32, 32, 32, 4, 4, 4), (32, 64, 64, 4, 4, 8), (64, 32, 64, 4, 4, 8),
    (64, 64, 32, 4, 4, 4), (64, 64, 16, 4, 4, 1), (32, 64, 16, 4, 4, 1),
    (16, 64, 16, 1, 4, 1), (128, 128, 16, 8, 8, 1),
    (32, 32, 16, 8, 8, 1),      # 16 threads: less than a wave
    (128, 128, 32, 4, 4, 1),    # 1024 threads, LDS overflow with the swizzle
]


#: MFMA tiles (BM, BN, BK, TM, TN, KW): one 32x32 or 16x16 matrix-core block per wave,
#: KW wave groups splitting K; CDNA only (the same f32 peak as packed FMA on gfx942, twice
#: the FMA rate on gfx90a, S2/S3), ranked after the FMA tiles by the prior. They are
#: opt-in (``--fix mma=mfma``): gpusim's VGPR estimate (AGPR accumulators and hoisted
#: fragment reads modelled) agrees with hipcc 15 within 10% or on the occupancy for 87 of
#: the 108 (tile, swizzle, arch) points of mlp and conv_add_relu, and within one wave for
#: all; the rest are the 32x32 tiles with KW <= 4, off by 8-16 VGPRs either way (hipcc's
#: 64-bit address registers and its scheduling are not modelled), so the occupancy the
#: search would compare them on is not yet trustworthy there.
MFMA_TILES = [
    (32, 32, 64, 32, 32, 4), (32, 32, 128, 32, 32, 8), (32, 32, 32, 32, 32, 8),
    (32, 64, 64, 32, 32, 2), (64, 64, 32, 32, 32, 1), (16, 16, 64, 16, 16, 4),
]


def tiles() -> list:
    return list(TILES)


def _prior(k: dict) -> tuple:
    """Smaller is tried first: FMA before MFMA, the tile's rank, vector-padded LDS,
    swizzle order."""
    t = (k["BM"], k["BN"], k["BK"], k["TM"], k["TN"], k["KW"])
    pad_rank = {4: 0, "xor": 1, 0: 2, 1: 3}[k["lds_pad"]]
    tiles = MFMA_TILES if k["mma"] == "mfma" else TILES
    return (k["mma"] == "mfma", tiles.index(t), pad_rank, SWIZZLES.index(k["swizzle"]))


def contraction_space(graph, dispatch, arch_name: str) -> list[Candidate]:
    """Every candidate schedule of a contraction dispatch, legal ones first."""
    try:
        gemm = Gemm(graph, dispatch)
    except LoweringError as e:
        return [Candidate({}, False, str(e))]
    wave_size, lds_limit = _arch_limits(arch_name)
    va = gemm.A.max_vec[gemm.A.inner]
    vb = gemm.B.max_vec[gemm.B.inner]
    legal, illegal = [], []
    points = [("fma", ti, t) for ti, t in enumerate(TILES)]
    points += [("mfma", ti, t) for ti, t in enumerate(MFMA_TILES)]
    for mma, ti, (bm, bn, bk, tm, tn, kw) in points:
        first = ti == 0 and mma == "fma"
        for pad, swz in itertools.product(LDS_PADS if first else (4,), SWIZZLES):
            knobs = {"mma": mma, "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": kw,
                     "lds_pad": pad, "vec_a": va, "vec_b": vb, "swizzle": swz}
            why = check_schedule(gemm, knobs, wave_size, lds_limit)
            if why and mma == "mfma" and wave_size != 64:
                if ti or swz != SWIZZLES[0]:
                    continue  # one illegal point says why, not the whole MFMA list
            opt_in = "mma" if mma == "mfma" else ""
            (illegal if why else legal).append(Candidate(knobs, not why, why, opt_in))
    base = {"mma": "fma", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "KW": 1,
            "lds_pad": 4, "vec_a": va, "vec_b": vb, "swizzle": "none"}
    for name, best in (("vec_a", va), ("vec_b", vb)):
        if best < 4:
            knobs = {**base, name: 4}
            illegal.append(Candidate(knobs, False,
                                     check_schedule(gemm, knobs, wave_size, lds_limit)))
    legal.sort(key=lambda c: _prior(c.knobs))
    return legal + illegal
