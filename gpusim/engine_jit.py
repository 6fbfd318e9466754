"""The JIT path: every function of ``gpusim.engine`` compiled with ``numba.njit``.

The engine's source is loaded a second time as the module ``gpusim._engine_jitted`` (from
engine.py's cached bytecode) and each of its functions is then wrapped with ``njit``, so
the plain ``gpusim.engine`` stays the pure-Python reference and both paths run literally
the same code. ``error_model="numpy"``
lets float division by zero give inf (as on the GPU) instead of raising.

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

Cold compile (``python -m gpusim.bench`` "first compile"; the breakdown is in docs/log.md):
- a helper is typed and lowered once, but its LLVM module is only linked into ``run``'s,
  never optimised or turned into machine code of its own (``_HelperLibrary``): nothing
  calls a helper from Python, and Numba's default did both for every helper (and again
  for every helper linked into another) only to throw the result away;
- ``run``'s module is optimised once at -O3, without Numba's cheap first pass (it only
  gathers reference counts for pruning; the engine has none).
- ``_UNROLL = False`` would save another ~2.5 s (LLVM's loop unrolling is its largest
  single pass here, and its copies of the per-lane loops slow machine code generation),
  but paired runs (``tools/engine_ab.py --cpu``) put the tiled matmul at 0.87-0.99x
  without it (the LDS transpose at 1.09x), so it stays on. Without loop vectorisation the
  LDS and matmul kernels ran 15-25% slower.

The compiled ``run`` is cached on disk, so only the first process pays the compile, in
the user's cache folder (``engine_cache_dir``: ``$XDG_CACHE_HOME/wavefuse/engine``,
``~/.cache/wavefuse/engine`` without it), or in ``NUMBA_CACHE_DIR`` when that is set; never
next to the source, which in an installed package is site-packages (perhaps read-only, and
files left there after ``pip uninstall`` made a ``gpusim`` namespace package that shadowed
a later editable install). When neither folder is writable the engine runs uncached, with
a warning. Start-up with a filled cache (``_Cache``): ``run`` is loaded without Numba's
refresh of its target context, which imports every implementation registry (and through
NumPy's linear algebra, SciPy) and was a third of the start; the engine's machine code
uses none of them.

Numba's cache key ignores compile flags, so a cached build without bounds checks would be
reused under ``NUMBA_BOUNDSCHECK=1``; when bounds checking is on we therefore compile
without the cache (once per process).
"""
import hashlib
import importlib.util
import os
import sys
import warnings

import llvmlite.binding as llvm
import numba
from numba.core import codegen as _codegen
from numba.core import config as _config
from numba.core.caching import (CompileResultCacheImpl, FunctionCache, UserProvidedCacheLocator,
                                _CacheLocator, _SourceFileBackedLocatorMixin)
from numba.core.compiler import Compiler

from gpusim.compile_status import compiling

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine.py")
# a second module object of engine.py's code: its functions become dispatchers, while
# ``gpusim.engine`` stays plain Python; the loader reuses engine.py's cached bytecode
_spec = importlib.util.spec_from_file_location("gpusim._engine_jitted", _SRC)
_code = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _code  # Numba's cached environments import it by name
_spec.loader.exec_module(_code)
globals().update({k: v for k, v in vars(_code).items() if not k.startswith("__")})

_FUNCS = ("wrap32", "pdiv", "pmod", "round_f16", "round_bf16", "int_kind", "store_elem", "fbin", "ibin", "fcmp", "fun", "iun",
          "cache_access", "unique_sorted", "add_trace", "launch_wg", "pick_wave", "operands_ready",
          "issue_time", "issue", "exec_alu", "exec_control", "lane_indices", "exec_vmem",
          "coalesce", "popcount4", "memory_lines", "lds_conflicts", "exec_lds", "exec_shuffle",
          "exec_wave_reduce", "exec_mfma", "exec_atomic", "barrier_arrive", "wave_end", "run")
_CACHE = not numba.config.BOUNDSCHECK
#: run once per simulated instruction or more: inlined into ``run`` (see above); the rest
#: (workgroup launch, barriers, wave end, MFMA, shuffles, trace) stay calls, which keeps
#: the cold compile shorter
_INLINE = ("pick_wave", "operands_ready", "issue_time", "issue", "exec_alu", "exec_control",
           "lane_indices", "exec_vmem", "coalesce", "memory_lines", "cache_access", "unique_sorted",
           "exec_lds", "int_kind", "store_elem", "wrap32", "pdiv", "pmod", "popcount4")
#: LLVM loop unrolling, vectorisation and interleaving in ``run``'s module (see above)
_UNROLL = True
_INTERLEAVE = True
_VECTORIZE = True


class _Library(_codegen.JITCodeLibrary):
    """``run``'s code library: its module (every helper linked in) is optimised once."""

    def _optimize_final_module(self):
        pto = llvm.create_pipeline_tuning_options()
        pto.speed_level = _config.OPT
        pto.loop_unrolling = _UNROLL
        pto.loop_vectorization = _VECTORIZE
        pto.loop_interleaving = _INTERLEAVE
        pto.slp_vectorization = False
        pb = llvm.create_pass_builder(self._codegen._tm, pto)
        pm = pb.getModulePassManager()
        with self._recorded_timings.record("Module passes (full optimization)", pb):
            pm.run(self._final_module, pb)


class _HelperLibrary(_codegen.JITCodeLibrary):
    """A helper's code library: finalising it only links in the helpers it calls, so that
    ``run``'s module gets them all; no module optimisation, no machine code, and the
    helper's module never reaches the JIT engine (nothing calls it from Python)."""

    def finalize(self):
        self._raise_if_finalized()
        seen = set()
        for library in self._linking_libraries:
            if library not in seen:
                seen.add(library)
                self._reload_init.update(library._reload_init)
                self._final_module.link_in(library._get_module_for_linking(), preserve=True)
        self._finalized = True

    @property
    def codegen(self):
        return _LinkOnly(self._codegen)

    def _optimize_functions(self, ll_module):
        pass  # run's module optimisation does it once, after linking


class _LinkOnly:
    """A helper library's codegen as Numba's ``get_executable`` sees it: the helper's
    module is not in the JIT engine, so it has no environment slot to set (the engine
    uses no environment: no Python objects, no NRT)."""

    def __init__(self, codegen):
        self._codegen = codegen

    def set_env(self, env_name, env):
        pass

    def __getattr__(self, name):
        return getattr(self._codegen, name)


def _pipeline(library_class):
    """Numba's compiler, with ``library_class`` as the function's code library."""

    class _Compiler(Compiler):
        def compile_extra(self, func):
            if self.state.library is None:
                lib = library_class(self.state.targetctx.codegen(), func.__qualname__)
                lib.enable_object_caching()
                self.state.library = lib
            if library_class is not _Library:
                return super().compile_extra(func)
            # only ``run`` gets here, and only on a real compile (a cache hit loads
            # without compiling); its helpers are typed and compiled inside it
            with compiling(_cache_note()):
                return super().compile_extra(func)

    return _Compiler


for _name in _FUNCS:
    _jitted = numba.njit(error_model="numpy", _nrt=False, no_cfunc_wrapper=True,
                         no_cpython_wrapper=_name != "run", forceinline=_name in _INLINE,
                         pipeline_class=_pipeline(_Library if _name == "run" else _HelperLibrary)
                         )(getattr(_code, _name))
    setattr(_code, _name, _jitted)  # what the other functions' calls resolve to
    globals()[_name] = _jitted


def _cache_note() -> str:
    """Where the compiled engine will be kept, for the compile's status line."""
    if not _CACHE:
        return "bounds checks on: not cached"
    return "then cached in " + (_config.CACHE_DIR or engine_cache_dir())


def engine_cache_dir() -> str:
    """The user's cache folder for the compiled engine: ``$XDG_CACHE_HOME/wavefuse/engine``
    (``~/.cache/wavefuse/engine`` without it), beside the tuning database's default."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "wavefuse", "engine")


with open(__file__, "rb") as _f:
    #: part of the cache key: Numba's own key is engine.py's text, not the compile options
    #: above, so a cached engine compiled with other settings would be loaded
    _STAMP = hashlib.sha256(_f.read()).hexdigest()


class _StampMixin:
    def get_source_stamp(self):
        return super().get_source_stamp(), _STAMP


class _NumbaCacheDirLocator(_StampMixin, UserProvidedCacheLocator):
    """``NUMBA_CACHE_DIR``, when set."""


class _UserCacheLocator(_StampMixin, _SourceFileBackedLocatorMixin, _CacheLocator):
    """``engine_cache_dir()``, one subfolder per source folder (as Numba's own locators:
    two installs of gpusim never share an index)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(engine_cache_dir(), self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path


class _CacheImpl(CompileResultCacheImpl):
    # NUMBA_CACHE_DIR when set (and writable), else the user's cache folder; never the
    # source's __pycache__ (Numba's default), nor Numba's own user-wide folder
    _locator_classes = [_NumbaCacheDirLocator, _UserCacheLocator]


class _Cache(FunctionCache):
    """Numba's cache in ``_CacheImpl``'s folders, and a cached ``run`` is loaded without
    refreshing the target context first: the refresh imports every Numba implementation
    registry (NumPy's linear algebra included, which imports SciPy), a third of a cached
    start's CPU time, and the engine's machine code needs none of them (no NRT, no Python
    objects). A miss still compiles through Numba's compiler, which refreshes the context
    itself. ``tests/test_engine_cache.py`` checks the load in a fresh process."""

    _impl_class = _CacheImpl

    def load_overload(self, sig, target_context):
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def _make_cache(py_func):
    """``run``'s cache, or None (with a warning) when no cache folder is writable."""
    try:
        return _Cache(py_func)
    except RuntimeError:  # Numba: "cannot cache function ...: no locator available"
        tried = (f"NUMBA_CACHE_DIR={_config.CACHE_DIR}, " if _config.CACHE_DIR else "")
        warnings.warn(f"gpusim: no writable folder for the engine cache (tried {tried}"
                      f"{engine_cache_dir()}), so "
                      f"the simulator engine is compiled again in every process; set "
                      f"NUMBA_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder",
                      RuntimeWarning, stacklevel=2)
        return None


if _CACHE and hasattr(FunctionCache, "_load_overload"):  # else (another Numba): Numba's own
    _cache = _make_cache(run.py_func)
    if _cache is not None:
        run._cache = _cache
