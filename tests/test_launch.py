"""Launch overhead: a HIP graph launch (one host submission for the whole sequence, a
cited fixed cost plus a cost per kernel) beside today's launch per dispatch, as an option
of ``tune`` and ``export``; the exported harness captures and replays a HIP graph."""
import json
import shutil
import subprocess

import numpy as np
import pytest

from gpusim.hw import ARCHES, get_arch

from codegen_hip import write_project
from compiler.ir.models import load_model
from compiler.tuning.search import SearchError, plan_time_us, tune


@pytest.mark.parametrize("name", sorted(ARCHES))
def test_every_arch_cites_its_graph_launch_costs(name):
    arch = get_arch(name)
    assert arch.graph_launch_us > 0 and arch.graph_node_us > 0
    for field in ("graph_launch_us", "graph_node_us"):
        assert "rocm-systems issue #10834" in arch.source(field)
    assert arch.launch_cost_us(0, "graph") == 0.0
    assert arch.launch_cost_us(3, "graph") == pytest.approx(arch.graph_launch_us
                                                            + 3 * arch.graph_node_us)
    assert arch.launch_cost_us(3) == 3 * arch.launch_overhead_us
    with pytest.raises(ValueError, match="use stream or graph"):
        arch.launch_cost_us(3, "batched")


def test_a_graph_launch_replaces_the_per_dispatch_launches_in_the_total():
    g = load_model("softmax:rows=16,cols=64")
    arch = get_arch("gfx942")
    s = tune(g, arch, budget=2, baseline=False, verify=False, mode="conservative")
    r = tune(g, arch, budget=2, baseline=False, verify=False, mode="conservative",
             launch="graph")
    n = len(r.dispatches)
    kernels = sum(d.best.time_us - arch.launch_overhead_us for d in r.dispatches)
    assert r.launch == "graph" and s.launch == "stream"
    assert r.total_time_us == pytest.approx(kernels + arch.graph_launch_us + n * arch.graph_node_us)
    assert s.total_time_us == pytest.approx(kernels + n * arch.launch_overhead_us)
    assert r.total_time_us == pytest.approx(plan_time_us(r.dispatches, arch, "graph"))
    assert r.launch_overhead_us == arch.graph_node_us
    assert r.to_json()["launch"] == "graph"
    with pytest.raises(SearchError, match="use stream or graph"):
        tune(g, arch, budget=2, launch="batched")


def _project(tmp_path, launch):
    """Two dispatches of one kernel (y = 2x, then z = 2y), checked against 4x."""
    from gpusim import program
    i, v = program.Var("i", "i32"), program.Var("v", "f32")
    body = (program.Assign(i, program.block_id() * 64 + program.thread_id()), program.Load((v,), "x", i),
            program.Store("y", i, (v * 2.0,)))
    k = program.Kernel("twice", (program.Buffer("x", "f32", (256,), "in"),
                           program.Buffer("y", "f32", (256,), "out")), 4, 64, body)
    xs = np.arange(256, dtype=np.float32)
    return write_project(tmp_path / launch, [k], [(k, {"x": "x", "y": "y"}),
                                                  (k, {"x": "y", "y": "z"})],
                         {"x": xs}, expected={"z": xs * 4}, launch=launch)


@pytest.mark.parametrize("launch", ["stream", "graph"])
def test_the_harness_replays_a_captured_graph_when_asked(tmp_path, launch):
    main = (_project(tmp_path, launch) / "main.hip").read_text()
    graph_calls = ("hipStreamBeginCapture", "hipStreamEndCapture", "hipGraphInstantiate",
                   "hipGraphLaunch(graph_exec, stream)")
    assert all((c in main) == (launch == "graph") for c in graph_calls)
    assert "0, stream>>>" in main


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
def test_the_graph_harness_compiles_and_links(tmp_path):
    out = _project(tmp_path, "graph")
    sources = ["main.hip"] + sorted(p.name for p in out.glob("*.hip") if p.name != "main.hip")
    r = subprocess.run(["hipcc", "-Wno-unused-command-line-argument", "--offload-arch=gfx90a",
                        "-O3", *sources, "-o", str(tmp_path / "app")], cwd=out,
                       env={**__import__("os").environ, "HIP_PLATFORM": "amd",
                            "TMPDIR": str(tmp_path)},  # clang's scratch folders
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]



@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_graph_harness_compiles_with_nvcc_through_the_shim(tmp_path):
    """The NVIDIA shim maps the stream and graph calls (CUDA 12's three-argument
    instantiate behind HIP's five-argument one)."""
    out = _project(tmp_path, "graph")
    sources = ["main.hip"] + sorted(p.name for p in out.glob("*.hip") if p.name != "main.hip")
    r = subprocess.run(["nvcc", "-I", "nvidia", "-arch=sm_90", "-x", "cu", *sources,
                        "-o", str(tmp_path / "app_nv")], cwd=out, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]

def test_tune_takes_launch_graph_and_refuses_other_values(tmp_path):
    import os
    import sys
    env = {**os.environ, "WAVEFUSE_CACHE": str(tmp_path / "t.db")}
    cmd = [sys.executable, "-m", "compiler.cli", "tune", "softmax:rows=8,cols=64", "--budget",
           "1", "--no-baseline", "--mode", "conservative"]
    r = subprocess.run(cmd + ["--launch", "graph", "--json"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["launch"] == "graph"
    bad = subprocess.run(cmd + ["--launch", "batched"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
