"""The JIT path: every function of ``gpusim.engine`` compiled with ``numba.njit(cache=True)``.

The engine's source is loaded a second time as the module ``gpusim._engine_jitted`` (from
engine.py's cached bytecode) and each of its functions is then wrapped with ``njit``, so
the plain ``gpusim.engine`` stays the pure-Python reference and both paths run literally
the same code. ``error_model="numpy"``
lets float division by zero give inf (as on the GPU) instead of raising. The compiled code
is cached in ``__pycache__``, so only the first process on a machine pays the compile.

Compile options, each for speed (``python -m gpusim.bench`` measures them):
- ``_nrt=False``: no reference counting. The engine never allocates (``engine.new_state``
  and ``gpusim.sim`` allocate every array beforehand), so Numba's atomic reference counts
  on each array taken out of a record or passed to a helper were pure cost (a fifth of
  the run time). An allocation inside the engine would now fail to compile.
- ``forceinline`` on the hot helpers: LLVM inlines them into ``run``, so a call no longer
  copies the records' array descriptors (hundreds of words per call) on every simulated
  instruction.
- no C / CPython wrappers for the helpers (only ``run`` is called from Python): those
  wrappers were a third of the cold compile.

Start-up with a filled cache (``_Cache``): ``run`` is loaded without Numba's refresh of its
target context, which imports every implementation registry (and through NumPy's linear
algebra, SciPy) and was a third of the start; the engine's machine code uses none of them.

Numba's cache key ignores compile flags, so a cached build without bounds checks would be
reused under ``NUMBA_BOUNDSCHECK=1``; when bounds checking is on we therefore compile
without the cache (once per process).
"""
import importlib.util
import os
import sys

import numba
from numba.core.caching import FunctionCache

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine.py")
# a second module object of engine.py's code: its functions become dispatchers, while
# ``gpusim.engine`` stays plain Python; the loader reuses engine.py's cached bytecode
_spec = importlib.util.spec_from_file_location("gpusim._engine_jitted", _SRC)
_code = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _code  # Numba's cached environments import it by name
_spec.loader.exec_module(_code)
globals().update({k: v for k, v in vars(_code).items() if not k.startswith("__")})

_FUNCS = ("wrap32", "pdiv", "pmod", "round_f16", "store_elem", "fbin", "ibin", "fcmp", "fun", "iun",
          "cache_access", "unique_sorted", "add_trace", "launch_wg", "pick_wave", "operands_ready",
          "issue_time", "issue", "exec_alu", "exec_control", "lane_indices", "exec_vmem",
          "coalesce", "popcount4", "memory_lines", "lds_conflicts", "exec_lds", "exec_shuffle",
          "exec_wave_reduce", "exec_mfma", "barrier_arrive", "wave_end", "run")
_CACHE = not numba.config.BOUNDSCHECK
#: run once per simulated instruction or more: inlined into ``run`` (see above); the rest
#: (workgroup launch, barriers, wave end, MFMA, shuffles, trace) stay calls, which keeps
#: the cold compile shorter
_INLINE = ("pick_wave", "operands_ready", "issue_time", "issue", "exec_alu", "exec_control",
           "lane_indices", "exec_vmem", "coalesce", "memory_lines", "cache_access", "unique_sorted",
           "exec_lds", "store_elem", "wrap32", "pdiv", "pmod", "popcount4")
for _name in _FUNCS:
    _jitted = numba.njit(cache=_CACHE, error_model="numpy", _nrt=False, no_cfunc_wrapper=True,
                         no_cpython_wrapper=_name != "run",
                         forceinline=_name in _INLINE)(getattr(_code, _name))
    setattr(_code, _name, _jitted)  # what the other functions' calls resolve to
    globals()[_name] = _jitted


class _Cache(FunctionCache):
    """Numba's cache, but a cached ``run`` is loaded without refreshing the target
    context first: the refresh imports every Numba implementation registry (NumPy's
    linear algebra included, which imports SciPy), a third of a cached start's CPU time,
    and the engine's machine code needs none of them (no NRT, no Python objects). A miss
    still compiles through Numba's compiler, which refreshes the context itself.
    ``tests/test_engine_cache.py`` checks the load in a fresh process."""

    def load_overload(self, sig, target_context):
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


if _CACHE and hasattr(FunctionCache, "_load_overload"):  # else (another Numba): Numba's own
    run._cache = _Cache(run.py_func)
