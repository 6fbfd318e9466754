"""The JIT engine's on-disk cache, across processes: a first process with an empty cache
compiles ``run``, a second loads it without compiling (``gpusim.engine_jit`` loads it
without Numba's context refresh, from a module it registers by name), and both give the
pure-Python engine's results. A broken load would make every later process either fail
or silently compile again for ~20 s."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpusim import microbench as mb
from gpusim import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = (
    "import json, numpy as np; from gpusim import simulate, microbench as mb; "
    "from gpusim import engine_jit as J; r = simulate(mb.lds_transpose(32), 'gfx942'); "
    "s = J.run.stats; print(json.dumps(dict(cycles=r.cycles, counters=r.counters, "
    "out=[float(np.float64(v).sum()) for v in r.outputs.values()], "
    "hits=sum(s.cache_hits.values()), misses=sum(s.cache_misses.values()))))")


def _child(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("NUMBA_BOUNDSCHECK", None)  # bounds checking compiles without the cache
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_loads_the_cached_engine_with_the_same_results(tmp_path):
    first = _child(tmp_path)
    second = _child(tmp_path)
    assert (first["misses"], first["hits"]) == (1, 0)
    assert (second["misses"], second["hits"]) == (0, 1)
    ref = simulate(mb.lds_transpose(32), "gfx942", jit=False)
    for r in (first, second):
        assert r["cycles"] == ref.cycles
        assert r["counters"] == {k: float(v) for k, v in ref.counters.items()}
        assert r["out"] == [float(np.float64(v).sum()) for v in ref.outputs.values()]
