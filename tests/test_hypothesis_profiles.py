"""The Hypothesis profiles of conftest.py: `long` really runs 20x each test's examples, and
failures are saved in (and replayed from) the example database under .hypothesis/."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

COUNTING_TEST = '''
import os
from hypothesis import given, settings, strategies as st

@settings(max_examples=4)
@given(st.integers())
def test_counted(x):
    with open(os.environ["COUNT_FILE"], "a") as f:
        f.write("x\\n")

@given(st.integers())
def test_default_count(x):
    with open(os.environ["COUNT_FILE"] + ".default", "a") as f:
        f.write("x\\n")
'''


def _run(tmp_path, profile, body=COUNTING_TEST):
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_counting.py").write_text(body)
    count = tmp_path / f"count-{profile}"
    env = dict(os.environ, COUNT_FILE=str(count), WAVEFUSE_HYPOTHESIS_PROFILE=profile,
               PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        "-p", "no:xdist", str(tmp_path)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    return p, count


def _lines(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("profile,counted,default", [("ci", 4, 100), ("long", 80, 2000),
                                                     ("ci-long", 40, 1000)])
def test_profile_scales_every_property_test(tmp_path, profile, counted, default):
    p, count = _run(tmp_path, profile)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"hypothesis profile: {profile}" in p.stdout
    # integers() can repeat an example; Hypothesis then stops short of the count
    assert 0.8 * counted <= _lines(count) <= counted
    assert 0.8 * default <= _lines(Path(str(count) + ".default")) <= default


def test_unknown_profile_is_refused(tmp_path):
    p, _ = _run(tmp_path, "longest")
    assert p.returncode != 0
    assert "unknown Hypothesis profile" in p.stdout + p.stderr


def test_failures_replay_from_the_database(tmp_path):
    body = ('import os\nfrom hypothesis import given, settings, strategies as st\n'
            '@settings(max_examples=200)\n@given(st.integers(0, 10**9))\n'
            'def test_fails(x):\n'
            '    with open(os.environ["COUNT_FILE"], "a") as f:\n'
            '        f.write(f"{x}\\n")\n'
            '    assert x < 10**6\n')
    first, _ = _run(tmp_path, "ci", body)
    # Hypothesis 6.155 says "Falsifying example", 6.170 "Failing test case"
    assert first.returncode == 1 and ("Falsifying example" in first.stdout
                                      or "Failing test case" in first.stdout), first.stdout
    assert "x=1000000" in first.stdout
    assert any((tmp_path / ".hypothesis" / "examples").rglob("*"))
    (tmp_path / "count-ci").unlink()
    second, count = _run(tmp_path, "ci", body)
    assert second.returncode == 1
    assert count.read_text().splitlines()[0] == "1000000"  # the saved example runs first


RECORDING_TEST = (
    'import os\nfrom hypothesis import given, settings, strategies as st\n'
    '@settings(max_examples=5)\n@given(st.integers(0, 10**9))\n'
    'def test_recorded(x):\n'
    '    with open(os.environ["COUNT_FILE"], "a") as f:\n'
    '        f.write(f"{x}\\n")\n')


def test_ci_long_runs_the_same_examples_every_time(tmp_path):
    """``.ci/run``'s profile is derandomized: two runs try the same examples (so a pass
    stays a pass), and it writes no example database to replay from."""
    runs = []
    for _ in range(2):
        p, count = _run(tmp_path, "ci-long", RECORDING_TEST)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "fixed seed" in p.stdout
        runs.append(count.read_text().splitlines())
        count.unlink()
    assert runs[0] == runs[1] and len(set(runs[0])) > 10
    assert not (tmp_path / ".hypothesis" / "examples").exists()
    p, count = _run(tmp_path, "long", RECORDING_TEST)   # the random hunt differs
    assert count.read_text().splitlines() != runs[0]
