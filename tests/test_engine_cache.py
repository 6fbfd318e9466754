"""The JIT engine's on-disk cache, across processes: a first process with an empty cache
compiles ``run``, a second loads it without compiling (``gpusim.engine_jit`` loads it
without Numba's context refresh, from a module it registers by name), and both give the
pure-Python engine's results. A broken load would make every later process either fail
or silently compile again.

Where it lives: the user's cache folder (``$XDG_CACHE_HOME/wavefuse/engine``), or
``NUMBA_CACHE_DIR`` when set; never the package's own ``__pycache__`` (site-packages for an
installed wavefuse, where leftovers after ``pip uninstall`` shadowed an editable install);
and no writable folder means an uncached engine and a warning, not a failed import."""
import glob
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from numba.core import config as numba_config

from gpusim import engine_jit
from gpusim import microbench as mb
from gpusim import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = (
    "import json, numpy as np; from gpusim import simulate, microbench as mb; "
    "from gpusim import engine_jit as J; r = simulate(mb.lds_transpose(32), 'gfx942'); "
    "s = J.run.stats; print(json.dumps(dict(cycles=r.cycles, counters=r.counters, path=s.cache_path, "
    "out=[float(np.float64(v).sum()) for v in r.outputs.values()], "
    "hits=sum(s.cache_hits.values()), misses=sum(s.cache_misses.values()))))")


def _child(cache_home):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home), PYTHONPATH=ROOT)
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("NUMBA_BOUNDSCHECK", None)  # bounds checking compiles without the cache
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_loads_the_cached_engine_with_the_same_results(tmp_path):
    in_tree = os.path.join(ROOT, "gpusim", "__pycache__", "engine.run-*")
    before = {f: os.stat(f).st_mtime_ns for f in glob.glob(in_tree)}
    first = _child(tmp_path)
    second = _child(tmp_path)
    assert first["path"] == second["path"]
    assert first["path"].startswith(str(tmp_path / "wavefuse" / "engine"))
    assert glob.glob(os.path.join(first["path"], "engine.run-*.nbi"))
    assert {f: os.stat(f).st_mtime_ns for f in glob.glob(in_tree)} == before
    assert (first["misses"], first["hits"]) == (1, 0)
    assert (second["misses"], second["hits"]) == (0, 1)
    ref = simulate(mb.lds_transpose(32), "gfx942", jit=False)
    for r in (first, second):
        assert r["cycles"] == ref.cycles
        assert r["counters"] == {k: float(v) for k, v in ref.counters.items()}
        assert r["out"] == [float(np.float64(v).sum()) for v in ref.outputs.values()]


def _cache_path(monkeypatch, home, numba_dir=""):
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(numba_config, "CACHE_DIR", str(numba_dir))
    cache = engine_jit._make_cache(engine_jit.run.py_func)
    return None if cache is None else cache._cache_path


def test_engine_cache_is_in_the_user_cache_folder(tmp_path, monkeypatch):
    path = _cache_path(monkeypatch, tmp_path)
    assert path.startswith(str(tmp_path / "wavefuse" / "engine" / "gpusim_"))
    assert os.path.isdir(path)


def test_numba_cache_dir_is_honoured(tmp_path, monkeypatch):
    path = _cache_path(monkeypatch, tmp_path / "home", tmp_path / "numba")
    assert path.startswith(str(tmp_path / "numba"))
    assert not (tmp_path / "home").exists()


def test_unwritable_cache_folders_warn_and_leave_the_engine_uncached(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"  # a folder cannot be made below a file, even as root
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="compiled again in every process.*NUMBA_CACHE_DIR"):
        assert _cache_path(monkeypatch, blocker, blocker / "numba") is None
    # an unwritable NUMBA_CACHE_DIR alone falls back to the user cache folder, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _cache_path(monkeypatch, tmp_path, blocker / "numba").startswith(str(tmp_path))
