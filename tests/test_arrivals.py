"""Timing a last-arrival kernel from the other CUs' arrivals only (``gpusim.arrivals``)
against running them whole (``exact_arrivals=True``, the reference): the timed CU runs
exactly the same (its cycles are equal: the slice left every counter as the whole kernel
does), and the launch's counters, estimated for the other CUs, stay near the counted ones
(equal for split-K, whose workgroups do equal work; within a fifth for stream-K's uneven
segments). Split-K, stream-K (one and two workgroups per CU) and flash-decoding."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import gpusim
from gpusim import arrivals, program
from gpusim.hw import GFX942

from compiler.fusion import fuse
from compiler.lower.attention import Attention, check_schedule as attention_check
from compiler.lower.contraction import Gemm, StreamK, check_schedule, lower_contraction
from compiler.lower import lower

from test_attention import attention_graph
from test_flash_decoding import REGS
from test_lower_contraction import whole
from test_stream_k import FMA, few_cus, matmul

LAST = {"split_reduce": "last_wg"}
INSTRUCTIONS = ("valu_insts", "vmem_insts", "lds_insts")


def _both(k, arch):
    exact = gpusim.simulate(k, arch, functional=False, exact_arrivals=True)
    est = gpusim.simulate(k, arch, functional=False)
    return exact, est


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(m=70, n=50, k=600, cus=5, split=("stream_k", 2))
@example(m=16, n=16, k=64, cus=3, split=("stream_k", 1))
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(16, 600),
       cus=st.integers(2, 16),
       split=st.sampled_from([("stream_k", 1), ("stream_k", 2), ("split_k", 2),
                              ("split_k", 3), ("split_k", 4)]))
def test_timed_cu_runs_as_after_the_whole_others(m, n, k, cus, split):
    """Ragged tiles and splits, any CU count: CU 0's cycles are the reference's, and so
    is the time where both are CU-bound."""
    g, arch = matmul(m, n, k), few_cus(cus)
    s = {**FMA, split[0]: split[1], **LAST}
    if check_schedule(Gemm(g, whole(g)), s, arch):
        return
    exact, est = _both(lower_contraction(g, whole(g), s, arch), arch)
    assert est.bounds["cu"] == exact.bounds["cu"]
    if all(r.bounds["cu"] >= max(r.bounds["hbm"], r.bounds["l2"]) for r in (exact, est)):
        assert est.time_us == exact.time_us


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tm=st.integers(1, 3), tn=st.integers(1, 3), j=st.integers(1, 8),
       cus=st.integers(3, 16), split=st.sampled_from([2, 3, 4]))
def test_split_k_counters_equal_where_work_is_equal(tm, tn, j, cus, split):
    """Whole tiles and whole K tiles per split: every workgroup does CU 0's work, and the
    estimated instruction counts are the counted ones. (Ragged tiles or splits are
    charged CU 0's work, as a sampled timing of any kernel scales CU 0's: a 16 x 65
    output over 3 CUs counted 4.6% more global loads.)"""
    bm, bn, bk = FMA["BM"], FMA["BN"], FMA["BK"]
    g, arch = matmul(bm * tm, bn * tn, bk * split * j), few_cus(cus)
    s = {**FMA, "split_k": split, **LAST}
    if check_schedule(Gemm(g, whole(g)), s, arch):
        return
    exact, est = _both(lower_contraction(g, whole(g), s, arch), arch)
    for name in INSTRUCTIONS:
        assert est.counters[name] == pytest.approx(exact.counters[name], rel=0.01), name


@pytest.mark.parametrize("m,n,j,cus,w", [(64, 96, 4, 5, 2), (96, 64, 3, 7, 1), (64, 64, 8, 6, 2)])
def test_stream_k_counters_near(m, n, j, cus, w):
    """Stream-K's workgroups touch one to three tiles each, so their work differs by a
    segment's staging and slot: with at least 4 K tiles per workgroup the estimated
    instruction counts stay within a fifth of the counted ones."""
    g, arch = matmul(m, n, FMA["BK"] * 16 * j), few_cus(cus)
    s = {**FMA, "stream_k": w, **LAST}
    sk = StreamK(Gemm(g, whole(g)), s, arch)
    assert sk.iters >= 4 * sk.G and not check_schedule(Gemm(g, whole(g)), s, arch)
    exact, est = _both(lower_contraction(g, whole(g), s, arch), arch)
    assert est.bounds["cu"] == exact.bounds["cu"]
    for name in INSTRUCTIONS:
        assert est.counters[name] == pytest.approx(exact.counters[name], rel=0.2), name


def test_flash_decoding_timed_cu_is_exact():
    g = attention_graph(2, 24, 6 * REGS["BK"] - 3, 16, 16, "causal")
    d = next(x for x in fuse(g).dispatches if x.kind == "attention")
    kn = {**REGS, "key_splits": 3, **LAST}
    assert not attention_check(Attention(g, d), kn, GFX942)
    arch = dataclasses.replace(GFX942, num_cus=5)
    exact, est = _both(lower(g, d, kn, arch), arch)
    assert est.bounds["cu"] == exact.bounds["cu"]
    assert "estimated from CU 0's" in est.method


def test_slice_keeps_the_arrivals_and_drops_the_work():
    """The slice of a stream-K kernel has its atomic, the tail's counter reset and the
    segment loop, and none of the MAC loop's loads, FMAs or the epilogue's stores."""
    g, arch = matmul(70, 50, 200), few_cus(7)
    (k,) = lower_contraction(g, whole(g), {**FMA, "stream_k": 2, **LAST}, arch).kernels
    sl = arrivals.arrival_slice(k)
    kinds = [type(s) for s in program.walk(sl.body)]
    assert kinds.count(program.AtomicAdd) == 1
    counters = arrivals.counter_buffers(k)
    stores = [s for s in program.walk(sl.body) if isinstance(s, program.Store)]
    assert stores and all(s.buffer in counters for s in stores)
    assert program.Load not in kinds and program.For in kinds
    assert len(list(program.walk(sl.body))) < len(list(program.walk(k.body))) / 5
