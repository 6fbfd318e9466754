"""The VGPR estimate of the fused attention kernel against hipcc's count.

Recorded with hipcc (Debian package: HIP 5.2, clang 15) for gfx90a, ``-O3``, on the
kernels ``wavefuse export`` writes (the FMA PV loop kept rolled, ``#pragma unroll 1``). The
estimate must meet ``wavefuse check``'s rule
(within 10% of hipcc, or the same VGPR-limited occupancy). The schedules cover one key
block (the key loop is straight-line code) and several (hipcc hoists the Q reads of
``q_in=lds`` out of the key loop, so they cost RM x head dim registers), FMA and MFMA.
"""
from __future__ import annotations

import shutil

import pytest

from codegen_hip.check import VGPR_AGREEMENT_REL, compile_to_asm, parse_asm
from codegen_hip.emit import emit_kernel
from codegen_hip.simfacts import vgpr_occupancy
from compiler.lower import lower
from compiler.ir.models import MODELS, load_model
from compiler.fusion import fuse
from gpusim.occupancy import estimate_vgprs

MFMA = dict(mma="mfma", row_stats="registers")
S1024 = "attention:heads=12,seq=1024,dim="
BASE = dict(BQ=16, BK=32, waves=4, RM=2, q_in="registers", row_stats="registers", lds_pad=4)
#: (model, knobs over BASE, hipcc's gfx90a .vgpr_count)
RECORDED = [
    ("attention", dict(BQ=32, BK=64), 111),                                    # Q in registers
    ("encoder_layer", dict(BQ=16, BK=16, RM=1, q_in="lds"), 53),              # 8 key blocks
    # mma=mfma (hipcc's count: VGPRs and AGPRs, one unified file on gfx90a)
    ("attention", dict(MFMA, BQ=64, BK=64, waves=4, RM=1), 60),          # 1 key block, 16x16
    ("attention", dict(MFMA, BQ=64, BK=32, waves=2, RM=1, q_in="lds"), 96),   # 32x32
    ("encoder_layer", dict(MFMA, BQ=64, BK=64, waves=4, RM=1), 84),
    ("encoder_layer", dict(MFMA, BQ=32, BK=32, waves=1, RM=1), 104),
    (S1024 + "64", dict(MFMA, BQ=64, BK=64, waves=4, RM=1), 124),      # 16 key blocks
    (S1024 + "64", dict(MFMA, BQ=64, BK=32, waves=4, RM=1), 80),
    (S1024 + "64", dict(MFMA, BQ=64, BK=32, waves=2, RM=1), 152),
    (S1024 + "128", dict(MFMA, BQ=64, BK=32, waves=4, RM=1), 132),
    # a recorded gap (73) until addresses that differ by a constant shared one register
    ("attention", dict(BQ=32, BK=64, q_in="lds", row_stats="lds"), 65),       # 1 key block
]
#: points the estimate agreed with while hipcc unrolled the PV loop fully (98, 84 VGPRs
#: then); with the loop kept rolled hipcc needs fewer and the estimate (125, 92) is one
#: wave or more too pessimistic: a known gap (gpusim.occupancy's docstring)
GAPS = [
    ("encoder_layer", dict(BQ=32, BK=64, q_in="lds", row_stats="lds"), 86),   # 2 key blocks
    ("encoder_layer", dict(BQ=16, BK=32, q_in="lds"), 80),                    # 4 key blocks
]
#: mma=mfma schedules the estimate under-counts beyond check's rule (hipcc, estimate):
#: two query blocks per wave (RM=2, which the space therefore makes opt-in) and a 32x32
#: block over two key blocks, where hipcc unrolls the key loop and schedules across it.
UNDER_COUNTED = [
    ("attention", dict(MFMA, BQ=128, BK=32, waves=4, RM=2), 124, 84),
    ("encoder_layer", dict(MFMA, BQ=64, BK=16, waves=2, RM=2, q_in="lds"), 92, 76),
    ("attention", dict(MFMA, BQ=64, BK=32, waves=2, RM=1), 108, 96),
]
ARCH = "gfx90a"


def _kernel(model, knobs):
    g = MODELS[model].build() if model in MODELS else load_model(model)
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


@pytest.mark.parametrize("model,knobs,hip,est", UNDER_COUNTED)
def test_known_under_counts_stay_as_recorded(model, knobs, hip, est):
    got = estimate_vgprs(_kernel(model, knobs), ARCH)
    assert got == est and got < hip, (f"{model} {knobs}: estimate now {got} (recorded {est}, "
                                      f"hipcc {hip}): move it to RECORDED if it agrees")


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("model,knobs,hip", RECORDED + GAPS + [x[:3] for x in UNDER_COUNTED])
def test_recorded_counts_are_what_hipcc_allocates(model, knobs, hip, tmp_path):
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(_kernel(model, knobs), ARCH))
    r = compile_to_asm(src, ARCH, tmp_path / "k.s")
    assert r["rc"] == 0, r["stderr"]
    got = parse_asm((tmp_path / "k.s").read_text())["vgprs"]
    assert got == hip, f"hipcc now allocates {got} VGPRs, recorded {hip}: record it again"
