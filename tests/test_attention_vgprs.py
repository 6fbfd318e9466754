"""The VGPR estimate of the fused attention kernel against hipcc's count.

Recorded with hipcc (Debian package: HIP 5.2, clang 15) for gfx90a, ``-O3``, on the
kernels ``wavefuse export`` writes (the PV loop kept rolled, ``#pragma unroll 1``). The estimate must meet ``wavefuse check``'s rule
(within 10% of hipcc, or the same VGPR-limited occupancy). The schedules cover one key
block (the key loop is straight-line code) and several (hipcc hoists the Q reads of
``q_in=lds`` out of the key loop, so they cost RM x head dim registers).
"""
from __future__ import annotations

import shutil

import pytest

from codegen_hip.check import VGPR_AGREEMENT_REL, compile_to_asm, parse_asm
from codegen_hip.emit import emit_kernel
from codegen_hip.simfacts import vgpr_occupancy
from compiler.lower import lower
from compiler.models import MODELS
from compiler.passes import fuse
from gpusim.occupancy import estimate_vgprs

BASE = dict(BQ=16, BK=32, waves=4, RM=2, q_in="registers", row_stats="registers", lds_pad=4)
#: (model, knobs over BASE, hipcc's gfx90a .vgpr_count)
RECORDED = [
    ("attention", dict(BQ=32, BK=64), 111),                                    # Q in registers
    ("encoder_layer", dict(BQ=16, BK=16, RM=1, q_in="lds"), 53),              # 8 key blocks
]
#: points the estimate agreed with while hipcc unrolled the PV loop fully (69, 98, 84
#: VGPRs then); with the loop kept rolled hipcc needs fewer and the estimate (73, 124, 92)
#: is one wave too pessimistic: a known gap (gpusim.occupancy's docstring)
GAPS = [
    ("attention", dict(BQ=32, BK=64, q_in="lds", row_stats="lds"), 65),       # 1 key block
    ("encoder_layer", dict(BQ=32, BK=64, q_in="lds", row_stats="lds"), 86),   # 2 key blocks
    ("encoder_layer", dict(BQ=16, BK=32, q_in="lds"), 80),                    # 4 key blocks
]
ARCH = "gfx90a"


def _kernel(model, knobs):
    g = MODELS[model].build()
    [d] = [d for d in fuse(g).dispatches if d.kind == "attention"]
    return lower(g, d, {**BASE, **knobs}, ARCH)


def _agrees(est, hip):
    return (abs(est - hip) <= VGPR_AGREEMENT_REL * hip
            or vgpr_occupancy(est, ARCH) == vgpr_occupancy(hip, ARCH))


@pytest.mark.parametrize("model,knobs,hip", RECORDED)
def test_estimate_meets_checks_rule_against_recorded_hipcc(model, knobs, hip):
    est = estimate_vgprs(_kernel(model, knobs), ARCH)
    assert _agrees(est, hip), (f"{model} {knobs}: estimate {est} VGPRs "
                               f"({vgpr_occupancy(est, ARCH)} waves) vs hipcc {hip} "
                               f"({vgpr_occupancy(hip, ARCH)} waves)")


@pytest.mark.parametrize("model,knobs,hip", GAPS)
@pytest.mark.xfail(strict=True, reason="known gap: the estimate is one wave pessimistic")
def test_known_gaps_still_miss(model, knobs, hip):
    assert _agrees(estimate_vgprs(_kernel(model, knobs), ARCH), hip)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("model,knobs,hip", RECORDED + GAPS)
def test_recorded_counts_are_what_hipcc_allocates(model, knobs, hip, tmp_path):
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(_kernel(model, knobs), ARCH))
    r = compile_to_asm(src, ARCH, tmp_path / "k.s")
    assert r["rc"] == 0, r["stderr"]
    got = parse_asm((tmp_path / "k.s").read_text())["vgprs"]
    assert got == hip, f"hipcc now allocates {got} VGPRs, recorded {hip}: record it again"
