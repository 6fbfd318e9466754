"""TuneResult.gain_split and plan_time_us count launches per kernel: a dispatch lowered to
a kernel sequence (split-K, flash-decoding) launches each of its kernels."""
from __future__ import annotations

import pytest

from gpusim.hw import GFX942

from compiler.tuning.search import DispatchTune, Scored, TuneResult, dispatch_kernels, plan_time_us


def _tuned(name, time_us, kernels=None):
    counters = {} if kernels is None else {"kernels": float(kernels)}
    best = Scored({}, time_us, counters=counters)
    return DispatchTune(name, "contraction", None, best, [best], [])


def _result(dispatches, unfused_us, unfused_dispatches, unfused_kernels=None, launch="stream"):
    per = GFX942.launch_overhead_us if launch == "stream" else GFX942.graph_node_us
    return TuneResult("m", GFX942, "aggressive", None, dispatches,
                      plan_time_us(dispatches, GFX942, launch), unfused_us, unfused_dispatches,
                      1.0, per, launch=launch, unfused_kernels=unfused_kernels)


def test_a_split_dispatch_counts_its_second_launch():
    lo = GFX942.launch_overhead_us
    plan = [_tuned("gemm", 20.0, kernels=2), _tuned("norm", 6.0)]
    assert [dispatch_kernels(d) for d in plan] == [2, 1]
    r = _result(plan, 60.0, 5, unfused_kernels=5)
    g = r.gain_split()
    assert r.kernels == 3 and g["kernels"] == 3 and g["unfused_kernels"] == 5
    # 5 kernels unfused, 3 fused: two launches saved, not three (one per dispatch saved)
    assert g["launch_us"] == pytest.approx(2 * lo)
    assert g["total_us"] == pytest.approx(60.0 - 26.0)
    assert g["kernel_us"] == pytest.approx(g["total_us"] - 2 * lo)


def test_an_unfused_baseline_that_splits_counts_its_kernels():
    lo = GFX942.launch_overhead_us
    r = _result([_tuned("all", 10.0)], 40.0, 3, unfused_kernels=4)
    assert r.gain_split()["launch_us"] == pytest.approx(3 * lo)
    # no kernel count recorded: one kernel per unfused dispatch, as before
    r = _result([_tuned("all", 10.0)], 40.0, 3)
    assert r.gain_split()["launch_us"] == pytest.approx(2 * lo)


def test_graph_launch_takes_off_every_kernels_stream_launch():
    lo = GFX942.launch_overhead_us
    plan = [_tuned("gemm", 20.0, kernels=2), _tuned("norm", 6.0)]
    kernel_time = 26.0 - 3 * lo
    assert plan_time_us(plan, GFX942, "graph") == pytest.approx(
        kernel_time + GFX942.launch_cost_us(3, "graph"))
    assert plan_time_us(plan, GFX942, "stream") == pytest.approx(26.0)
