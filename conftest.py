"""Test-wide settings.

The tuning database (``compiler.tuning.tunedb``) is a fresh file in a temporary folder for every
test: ``WAVEFUSE_CACHE`` is set here, so no test touches the user's cache, and no test sees
scores another test left.

gpusim's JIT runs with Numba's bounds checks on (issue 4), so an out-of-range index inside
the interpreter fails loudly instead of reading garbage. Set NUMBA_BOUNDSCHECK=0 in the
environment to time the suite without them.

Hypothesis profiles, chosen with ``WAVEFUSE_HYPOTHESIS_PROFILE``:

- ``ci`` (default): every property test runs the number of examples its ``@settings``
  gives (605 in all), as CI always has;
- ``long``: 20 times as many examples for every property test, random each run, to keep
  hunting for bugs the CI sample misses (``WAVEFUSE_HYPOTHESIS_PROFILE=long python3 -m
  pytest -n 2 -k property``);
- ``ci-long``: ``long``'s hunt at a fixed seed (``derandomize``: the examples are a hash
  of each test, the same on every run for one Hypothesis and Python version), so it
  passes or fails the same way every time; ``.ci/run`` runs it over the six core property
  modules. Fewer examples than ``long`` (10x) to stay within about 3 minutes on 2 cores.

``ci`` and ``long`` keep their example database in ``.hypothesis/examples`` at the
repository root (an ignored folder), so a failing example is replayed first on the next
run, whichever folder pytest was started from; ``ci-long`` keeps none (Hypothesis:
derandomize implies no database, it needs none to replay). Each failure prints a
reproduction blob.
"""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
# a tune started by a test runs serially unless the test asks for workers: pytest-xdist's
# workers already take the cores (compiler.tuning.cluster.default_workers)
os.environ.setdefault("WAVEFUSE_WORKERS", "1")

# Tests never read or write the user's tuning database: the session (and every
# subprocess it starts) gets an empty one of its own, removed at the end.
_CACHE_DIR = tempfile.mkdtemp(prefix="wavefuse-test-cache-")
os.environ["WAVEFUSE_CACHE"] = os.path.join(_CACHE_DIR, "tune.sqlite3")


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_tuning_cache(monkeypatch):
    """Each test starts from an empty tuning database: a score remembered by one test
    must not hide what another test replaced (a monkeypatched space or scorer)."""
    path = tempfile.mkdtemp(prefix="t-", dir=_CACHE_DIR)
    monkeypatch.setenv("WAVEFUSE_CACHE", os.path.join(path, "tune.sqlite3"))

try:
    from hypothesis import HealthCheck, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
except ImportError:  # hypothesis is a test extra; the tutorials run without it
    settings = None

PROFILE_ENV = "WAVEFUSE_HYPOTHESIS_PROFILE"
#: how many times each test's own example count a profile runs.
EXAMPLE_FACTOR = {"ci": 1, "long": 20, "ci-long": 10}
DATABASE_DIR = Path(__file__).resolve().parent / ".hypothesis" / "examples"
PROFILE = os.environ.get(PROFILE_ENV, "ci").strip() or "ci"
if PROFILE not in EXAMPLE_FACTOR:
    raise SystemExit(f"{PROFILE_ENV}={PROFILE!r}: unknown Hypothesis profile; "
                     f"use one of {', '.join(EXAMPLE_FACTOR)}")

if settings is not None:
    _base = dict(database=DirectoryBasedExampleDatabase(str(DATABASE_DIR)), print_blob=True)
    settings.register_profile("ci", **_base)
    settings.register_profile("long", max_examples=100 * EXAMPLE_FACTOR["long"], deadline=None,
                              suppress_health_check=[HealthCheck.too_slow], **_base)
    settings.register_profile("ci-long", max_examples=100 * EXAMPLE_FACTOR["ci-long"],
                              deadline=None, suppress_health_check=[HealthCheck.too_slow],
                              derandomize=True, database=None, print_blob=True)
    settings.load_profile(PROFILE)


def _scale_examples(item, factor: int) -> None:
    """Multiplies a property test's own ``max_examples`` by ``factor``.

    ``@settings(max_examples=N)`` on a test overrides any profile, so a profile alone
    cannot run "20x the examples"; the test's settings object is replaced by a child
    with N * factor (a test that sets no count gets the profile's, already scaled).
    """
    test = getattr(item, "obj", None)
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    if current is None or not getattr(getattr(test, "hypothesis", None), "inner_test", None):
        return
    if current.max_examples == settings.default.max_examples:
        return
    test._hypothesis_internal_use_settings = settings(
        current, max_examples=current.max_examples * factor)


def pytest_collection_modifyitems(config, items):
    if settings is None:
        return
    factor = EXAMPLE_FACTOR[PROFILE]
    if factor == 1:
        return
    seen = set()
    for item in items:
        obj = getattr(item, "obj", None)
        if obj is not None and id(obj) not in seen:
            seen.add(id(obj))
            _scale_examples(item, factor)


def pytest_report_header(config):
    if settings is not None:
        return (f"hypothesis profile: {PROFILE}"
                f"{' (fixed seed)' if settings.default.derandomize else ''} "
                f"(set {PROFILE_ENV}=long for 20x the examples)")
    return None
