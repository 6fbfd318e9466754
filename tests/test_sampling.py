"""Value checks on a sample of workgroups (compiler.tuning.sampling, simulate(workgroups=...))."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_search import _zero_stores

from gpusim.hw import GFX942
import gpusim
from gpusim.program import kernels_of
from gpusim.sim import has_atomics
from compiler.tuning import sampling
from compiler.lower.common import memory_image
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs
from compiler.tuning.search import tune_dispatches, verify_dispatches


def test_sample_has_the_edges_and_is_seeded():
    s = sampling.sample_workgroups(1000, seed=1)
    assert {0, 1, 998, 999} <= set(s) and len(s) <= 2 * sampling.EDGE + sampling.SPREAD + \
        sampling.RANDOM
    assert s == sampling.sample_workgroups(1000, seed=1)
    assert s != sampling.sample_workgroups(1000, seed=2)
    assert sampling.sample_workgroups(10) == list(range(10))


@pytest.mark.parametrize("spec", ["mlp:tokens=2048", "layernorm:rows=512"])
def test_sampled_workgroups_write_what_the_full_run_writes(spec):
    g = load_model(spec)
    env = evaluate(g, random_inputs(g, 0), keep_all=True)
    tuned = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=2)
    checked = 0
    for d in tuned:
        k = d.kernel
        inputs = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
                  if b.intent != "out"}
        full = gpusim.simulate(k, "gfx942", inputs=dict(inputs), functional=True)
        wgs = sampling.sample_workgroups(k.grid, 0)
        if len(wgs) == k.grid:
            continue
        outs = {b.name: sampling.sentinel_like(b.dtype, b.shape) for b in k.buffers
                if b.intent == "out"}
        part = gpusim.simulate(k, "gfx942", inputs={**inputs, **outs}, functional=True,
                               workgroups=wgs)
        if any(has_atomics(x) for x in kernels_of(k)):
            # split-K reduced by the last arrival: every workgroup must run, and does
            assert "arrival counters need them all" in part.method
            for name in outs:
                np.testing.assert_array_equal(part.outputs[name], full.outputs[name])
                checked += 1
            continue
        assert "of %d workgroups only" % k.grid in part.method
        for name in outs:
            dtype = next(b.dtype for b in k.buffers if b.name == name)
            mask = sampling.written(part.outputs[name], dtype)
            assert 0 < mask.sum() < mask.size
            assert np.array_equal(part.outputs[name][mask], full.outputs[name][mask])
            checked += 1
    assert checked


def test_a_sampled_check_finds_a_wrong_kernel_and_says_what_it_checked():
    g = load_model("softmax:rows=4096,cols=256")
    tuned = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=2)
    verify_dispatches(g, tuned, GFX942, check_all=False)
    d = tuned[0]
    assert d.verified and f"of {d.kernel.grid} workgroups" in d.check
    d.kernel = dataclasses.replace(d.kernel, body=_zero_stores(d.kernel.body))
    verify_dispatches(g, tuned, GFX942, check_all=False)
    assert d.verified is False and d.max_error > 0.001


def test_workgroups_needs_functional_mode_and_real_ids():
    g = load_model("softmax")
    k = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=1)[0].kernel
    with pytest.raises(gpusim.KernelError, match="workgroups="):
        gpusim.simulate(k, "gfx942", functional=False, workgroups=[0])
    with pytest.raises(gpusim.KernelError, match="got"):
        gpusim.simulate(k, "gfx942", workgroups=[k.grid])


def test_timing_method_states_rounds_and_error_bound():
    g = load_model("softmax:rows=65536,cols=256")
    # a schedule with many workgroup rounds per CU, so that rounds are sampled
    k = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=1, strategy="random")[0].kernel
    assert k.grid > 16 * GFX942.num_cus
    res = gpusim.simulate(k, "gfx942", functional=False)
    assert "rounds sampled" in res.method and "error bound" in res.method


@pytest.mark.slow
def test_bench_scaling_reports_time_and_memory(capsys, monkeypatch):
    from compiler.tuning import bench
    monkeypatch.setenv("NUMBA_BOUNDSCHECK", "0")  # the child loads the cached engine
    assert bench.main(["scaling", "--sizes", "32", "--repeat", "1", "--budget", "2",
                       "--json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    row = out["rows"][0]
    assert row["seq"] == 32 and row["median_s"] > 0 and row["peak_mib"] > 10
    assert 0 < row["median_cpu_s"] and len(row["runs_cpu_s"]) == 1
