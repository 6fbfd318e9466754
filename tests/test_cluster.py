"""Scoring on a Dask cluster (compiler.tuning.cluster): same results as serial, lost workers
retried, clean errors and interrupts. Runs a two-worker LocalCluster when the extra
``wavefuse[cluster]`` (dask[distributed]) is installed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gpusim.hw import GFX942
from compiler.tuning import cluster
from compiler.cli import main
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.tuning.search import tune_dispatches


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("wavefuse: error:") and len(err.strip().splitlines()) == 1
    return err


def test_missing_extra_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    err = _one_line_error(capsys, ["tune", "softmax", "--no-cache", "--cluster", "local:2"])
    assert "pip install 'wavefuse[cluster]'" in err


@pytest.mark.parametrize("address", ["local:0", "local:x", "http://h:1", "host-without-port"])
def test_bad_address_is_a_one_line_error(capsys, address):
    err = _one_line_error(capsys, ["tune", "softmax", "--no-cache", "--cluster", address])
    assert "--cluster" in err


def test_workers_are_capped_at_the_core_count(capsys):
    cores = cluster.core_count()
    # one candidate: scored in this process, so no pool (and no engine compile) starts
    assert main(["tune", "softmax", "--budget", "1", "--no-baseline", "--no-cache",
                 "--workers", str(cores + 1), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == (f"wavefuse: --workers {cores + 1} capped at {cores}, the cores "
                           f"available to this process")
    assert cluster.cap_workers(1, warn=pytest.fail) == 1


dask = pytest.importorskip("distributed", reason="the extra wavefuse[cluster] is not installed")


def test_unreachable_scheduler_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    err = _one_line_error(capsys, ["tune", "softmax", "--no-cache", "--cluster",
                                   "tcp://127.0.0.1:9"])
    assert "cannot reach the Dask scheduler" in err


@pytest.fixture(scope="module")
def local2():
    # the workers load the engine from Numba's on-disk cache instead of compiling it with
    # bounds checks (conftest) in each process; bounds checks change no result
    old = os.environ.get("NUMBA_BOUNDSCHECK")
    os.environ["NUMBA_BOUNDSCHECK"] = "0"
    try:
        c = cluster.Cluster("local:2").__enter__()
    finally:
        if old is None:
            os.environ.pop("NUMBA_BOUNDSCHECK")
        else:
            os.environ["NUMBA_BOUNDSCHECK"] = old
    try:
        yield c
    finally:
        c.__exit__(None, None, None)


def test_local_cluster_gives_the_serial_result(local2):
    g = load_model("attention:heads=2,seq=64,dim=32")
    ds = fuse(g).dispatches
    serial = tune_dispatches(g, ds, GFX942, budget=5, seed=2)
    spread = tune_dispatches(g, ds, GFX942, budget=5, seed=2, cluster=local2)
    for a, b in zip(serial, spread):
        assert a.best.knobs == b.best.knobs
        assert [(c.knobs, c.time_us, c.counters) for c in a.candidates] == \
            [(c.knobs, c.time_us, c.counters) for c in b.candidates]


def _die_once(marker, job):
    """Kills its worker process the first time it runs job 1 (a lost worker)."""
    if job == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return job * 10


def test_a_lost_worker_is_retried(local2, tmp_path):
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = str(tmp_path / "died")
    seen = []
    assert local2.map(_die_once, [0, 1, 2, 3], marker, seen.append) == [0, 10, 20, 30]
    assert os.path.exists(marker) and sorted(seen) == [0, 1, 2, 3]


def default_sigint():
    """A shell starts background jobs with SIGINT ignored, and a Python started so never
    raises KeyboardInterrupt: the child gets the default back, as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_cancels_and_leaves_no_worker(tmp_path):
    """SIGINT during a LocalCluster run: exit 130, one line, no worker process left."""
    proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", "tune", "encoder_layer",
                             "--budget", "60", "--no-cache", "--cluster", "local:2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NUMBA_BOUNDSCHECK": "0"},
                            preexec_fn=default_sigint)
    time.sleep(25)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    proc.send_signal(signal.SIGINT)
    try:
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "wavefuse: interrupted"
    time.sleep(2)
    alive = [c for c in children if os.path.exists(f"/proc/{c}")
             and "zombie" not in open(f"/proc/{c}/status").read().lower()]
    assert not alive


def test_a_tune_with_workers_starts_one_pool_and_matches_serial(monkeypatch):
    # every plan, its rankings and the baseline share one pool forked after the plans'
    # graphs exist (compiler.tuning.cluster.worker_pool), not a pool per round
    from compiler.tuning.search import tune
    made = []
    real = cluster.ProcessPoolExecutor

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)
    monkeypatch.setattr(cluster, "ProcessPoolExecutor", counting)
    g = load_model("mlp")
    a = tune(g, "gfx942", budget=5, seed=3, verify=False)
    b = tune(g, "gfx942", budget=5, seed=3, verify=False, workers=2)
    assert made == [1] and not cluster._POOL
    assert b.total_time_us == a.total_time_us and b.mode == a.mode
    assert [d.best.knobs for d in a.dispatches] == [d.best.knobs for d in b.dispatches]
    assert a.unfused_time_us == b.unfused_time_us
