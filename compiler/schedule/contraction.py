"""The schedule space of a matmul/conv dispatch (see ``compiler.lower.contraction``).

Knobs: block tile ``BM x BN x BK``, thread micro-tile ``TM x TN``, LDS staging layout
``lds_pad`` (0, 1 element, or "xor"), global load widths ``vec_a``/``vec_b`` and the output
``swizzle`` placement (none / after_fusion / before_fusion).

To keep the space small enough to simulate every point (about 90 legal ones), the tiles
are BM, BN in {32, 64, 128} with BK = 16 and a square micro-tile sized for 64-256 threads
(4x4 up to 64x64 outputs, 8x8 above), plus 64x64x32 and two tiles that show the limits
(32x32 with 8x8: too few threads; 128x128x32 with 4x4: 1024 threads, and its swizzled
output tile overflows LDS); each tile is crossed with every lds_pad and swizzle. Vector
widths are not a
free knob: each candidate uses the widest legal width of each operand (a narrower one only
issues more instructions for the same bytes), and one extra point per operand shows a
4-wide load marked illegal when memory does not allow it. Illegal points carry the reason
(threads per workgroup, LDS bytes, registers, misaligned vectors). Legal candidates come
first, ordered by a cheap prior (a moderate 64x64 tile with 4x4 micro-tiles first), so a
``--budget`` sample of the head is sensible.
"""
from __future__ import annotations

import itertools

from ..lower.common import LoweringError
from ..lower.contraction import (LDS_PADS, SWIZZLES, Gemm, _arch_limits, check_schedule)
from . import Candidate

BLOCK_MN = (32, 64, 128)


def tiles() -> list:
    """(BM, BN, BK, TM, TN) points of the space."""
    out = []
    for bm, bn in itertools.product(BLOCK_MN, BLOCK_MN):
        t = 4 if bm * bn <= 64 * 64 else 8
        out.append((bm, bn, 16, t, t))
    out += [(64, 64, 32, 4, 4), (32, 32, 16, 8, 8), (128, 128, 32, 4, 4)]
    return out


def _prior(k: dict) -> tuple:
    """Smaller is tried first: tiles near 64x64, 4x4 micro-tiles, padded LDS."""
    pad_rank = {1: 0, "xor": 1, 0: 2}[k["lds_pad"]]
    return (abs(k["BM"] - 64) + abs(k["BN"] - 64), k["BK"] != 16, pad_rank,
            SWIZZLES.index(k["swizzle"]))


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
    for (bm, bn, bk, tm, tn), pad, swz in itertools.product(tiles(), LDS_PADS, SWIZZLES):
        knobs = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "lds_pad": pad,
                 "vec_a": va, "vec_b": vb, "swizzle": swz}
        why = check_schedule(gemm, knobs, wave_size, lds_limit)
        (illegal if why else legal).append(Candidate(knobs, not why, why))
    base = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "lds_pad": 1,
            "vec_a": va, "vec_b": vb, "swizzle": "none"}
    for name, best in (("vec_a", va), ("vec_b", vb)):
        if best < 4:
            knobs = {**base, name: 4}
            illegal.append(Candidate(knobs, False,
                                     check_schedule(gemm, knobs, wave_size, lds_limit)))
    legal.sort(key=lambda c: _prior(c.knobs))
    return legal + illegal
