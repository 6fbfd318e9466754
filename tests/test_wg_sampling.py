"""Timing from a sample of CU 0's workgroups (``gpusim.sim._time``, ``_cu_time``) against
the full simulation of CU 0: the sampled CU time is within its stated error bound, over
grid sizes (CU 0's share a whole number of resident rounds or not) and resident-workgroup
counts, for a row softmax, a streaming copy and a small tiled GEMM (issue 14: a partial
last round was extrapolated per workgroup though it costs nearly a full round, and the
sample's own last round, which drains without a successor, set the period)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from compiler.lower import lower
from compiler.ir.models import load_model
from compiler.fusion import fuse
from gpusim import microbench as mb
from gpusim import sim
from gpusim.hw import get_arch
from gpusim.occupancy import occupancy

#: few CUs, so CU 0's share of a small grid spans many rounds (a differential check of
#: the extrapolation, not of the chip)
ARCH = dataclasses.replace(get_arch("gfx942"), num_cus=4)


def _sampled_and_full(kernel, wgs, arch=ARCH):
    """(sampled T_cu, its relative bound, method, full CU 0 time) with ``wgs`` resident."""
    occ = occupancy(kernel, arch)
    occ = dataclasses.replace(occ, workgroups_per_cu=min(wgs, occ.workgroups_per_cu))
    prog = sim._program(kernel, arch)
    timed = sim._time(kernel, arch, prog, occ, None, None, True, False, 0, None)
    n0 = timed.raw["n0"]
    _, _, bound = sim._cu_time(timed.raw, n0, timed.k, occ.workgroups_per_cu)
    full = sim._Launch(kernel, arch, prog, None, None, occ, random_fill=False).run(
        True, False, n0)
    assert full["k"] == n0
    return timed.t_cu, bound, timed.method, float(full["sess_cycles"][0])


def _assert_within_bound(kernel, wgs):
    t, bound, method, full = _sampled_and_full(kernel, wgs)
    if "all" in method.split(" of its")[0]:
        assert t == full and bound == 0.0
        return
    assert "rounds sampled" in method and "error bound" in method
    if bound == float("inf"):
        assert "unknown" in method
        return
    err = abs(t - full) / full
    assert err <= bound * t / full + 1e-9, \
        f"{kernel.name}: sampled {t:.0f} vs full {full:.0f} ({100 * err:.2f}%), " \
        f"stated +-{100 * bound:.2f}%: {method}"


#: a one-pass row softmax, one row per workgroup of two waves (its rows stay in registers)
SOFTMAX_KNOBS = {"mapping": "workgroup", "workgroup": 128, "vector": 1, "cache": "registers",
                 "reduce": "wave", "passes": "single"}


def softmax_rows(rows, cols=512):
    g = load_model(f"softmax:rows={rows},cols={cols}")
    return lower(g, fuse(g).dispatches[0], SOFTMAX_KNOBS, ARCH)


SETTINGS = dict(max_examples=6, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@settings(**SETTINGS)
@given(rows=st.integers(4 * 20, 4 * 60), wgs=st.sampled_from([2, 3, 4, 8]))
@example(rows=4 * 54, wgs=8)   # 6 rounds and a partial round of 6
@example(rows=4 * 50, wgs=4)   # whole rounds: the sample's last round drains
def test_softmax_rows_sampled_time_within_bound(rows, wgs):
    _assert_within_bound(softmax_rows(rows), wgs)


def stream_copy(per_cu, block=256, width=4):
    return mb.stream_copy(ARCH.num_cus * per_cu * block * width, block, width)


@settings(**SETTINGS)
@given(per_cu=st.integers(20, 80), wgs=st.sampled_from([4, 5, 8]))
@example(per_cu=54, wgs=8)
def test_stream_copy_sampled_time_within_bound(per_cu, wgs):
    _assert_within_bound(stream_copy(per_cu), wgs)


@pytest.mark.xfail(strict=True, reason="known gap: with 2 resident workgroups the stream's "
                   "period keeps falling after the 4 sampled rounds (647, 643, 639, then 611 "
                   "from round 5), so the spread of the sampled periods understates the error")
def test_stream_copy_two_resident_warm_up_outlasts_the_sample():
    _assert_within_bound(stream_copy(20), 2)


@settings(**SETTINGS)
@given(tiles=st.integers(5, 9), wgs=st.sampled_from([2, 3, 4]))
@example(tiles=8, wgs=3)
def test_small_gemm_sampled_time_within_bound(tiles, wgs):
    _assert_within_bound(mb.tiled_matmul(16 * tiles, 16 * 4, 64), wgs)


def test_partial_last_round_is_sampled_not_extrapolated_per_workgroup():
    """CU 0's share of 54 in rounds of 4 ends with a partial round of 2: the sample ends
    with one too, and only whole rounds are extrapolated. (In rounds of 8 this softmax's
    period, set by the LDS ports the 16 waves share, still moves by ~5% a round after 8
    rounds, so CU 0's 54 are all simulated and nothing is extrapolated.)"""
    t, bound, method, full = _sampled_and_full(softmax_rows(4 * 54), 4)
    assert "ending with a partial round of 2" in method
    assert "and " not in method.split("extrapolated by")[1].split("(")[0]
    assert abs(t - full) / full <= bound * t / full + 1e-9
