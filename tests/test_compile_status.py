"""The status line of the engine's first compile (``gpusim.compile_status``).

Shown only where a person watches (a terminal: a spinner; a Jupyter kernel: two
lines), never on a plain pipe, so commands whose stderr is parsed stay one line; and
only when Numba really compiles, never on a cached load.
"""
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusim.compile_status import MESSAGE, compiling

ROOT = Path(__file__).resolve().parent.parent


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_pipe_gets_nothing(monkeypatch):
    monkeypatch.delenv("WAVEFUSE_PROGRESS", raising=False)
    out = io.StringIO()
    with compiling(stream=out):
        pass
    assert out.getvalue() == ""


def test_a_terminal_gets_a_spinner_then_one_line(monkeypatch):
    monkeypatch.delenv("WAVEFUSE_PROGRESS", raising=False)
    out = Tty()
    with compiling("then cached in X", stream=out):
        __import__("time").sleep(0.35)
    text = out.getvalue()
    assert MESSAGE in text and "then cached in X" in text and "\r" in text
    assert text.rstrip().splitlines()[-1].endswith("s") and "compiled the simulator in" in text


def test_a_spinner_frame_never_wraps():
    from gpusim.compile_status import _frame
    long = MESSAGE + " (then cached in /a/very/long/cache/folder/wavefuse/engine)"
    assert _frame("|", long, 3, 200).endswith("3 s") and "cached in" in _frame("|", long, 3, 200)
    assert "cached in" not in _frame("|", long, 3, 70) and len(_frame("|", long, 3, 70)) <= 70
    assert len(_frame("|", long, 3, 20)) <= 20


def test_progress_env_forces_lines_or_silence(monkeypatch):
    monkeypatch.setenv("WAVEFUSE_PROGRESS", "1")
    out = io.StringIO()
    with compiling(stream=out):
        pass
    assert out.getvalue().splitlines()[0] == f"gpusim: {MESSAGE} ..."
    monkeypatch.setenv("WAVEFUSE_PROGRESS", "0")
    out = Tty()
    with compiling(stream=out):
        pass
    assert out.getvalue() == ""


def test_a_failed_compile_says_so(monkeypatch):
    monkeypatch.setenv("WAVEFUSE_PROGRESS", "1")
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with compiling(stream=out):
            raise RuntimeError("boom")
    assert "compile failed" in out.getvalue()


@pytest.mark.slow
def test_status_only_when_the_engine_really_compiles(tmp_path):
    """A fresh engine cache: the first process compiles and says so; the second loads
    the cached engine and says nothing."""
    code = ("import gpusim; from gpusim import microbench as mb; "
            "gpusim.simulate(mb.stream_copy(4096), 'gfx942')")
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=str(tmp_path / "engine"),
               WAVEFUSE_PROGRESS="1")
    env.pop("NUMBA_BOUNDSCHECK", None)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=900) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert MESSAGE in runs[0].stderr and "compiled the simulator in" in runs[0].stderr
    assert MESSAGE not in runs[1].stderr
