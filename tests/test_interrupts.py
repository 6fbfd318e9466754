"""Ctrl-C leaves nothing behind: not the ``.NAME.tmp-*`` folder `export` writes into beside
its target, not the ``wavefuse-check-*`` folder `check` compiles into. Each test runs the
command in a real process and sends SIGINT at a controlled point (a patched function
that announces the point through a file, then waits); a worker thread is kept alive in
the child, as hipcc's pool and numba's are in real runs, because a signal blocked only in
the main thread is then delivered to that thread and raised in the main thread anyway."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import codegen_kernels as ck
from codegen_hip import write_project

ROOT = Path(__file__).resolve().parent.parent

#: the child: argv = ready-file, hold seconds, which point, then the wavefuse command
CHILD = """
import shutil, sys, tempfile, threading, time
from pathlib import Path
import codegen_hip.export as ex
from compiler import cli
ready, hold, point = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
def announce(tag):
    ready.write_text(tag)
    time.sleep(hold)
if point == "export-mkdtemp":       # between creating the folder and holding its name
    real_mkdtemp = tempfile.mkdtemp
    def mkdtemp(*a, **k):
        d = real_mkdtemp(*a, **k)
        if ".tmp-" in k.get("prefix", ""):
            announce("tmp")
        return d
    ex.tempfile.mkdtemp = mkdtemp
if point == "check-cleanup":       # a second Ctrl-C while the compile folder is removed
    real_rmtree = shutil.rmtree
    def rmtree(path, *a, **k):
        if "wavefuse-check-" in str(path):
            announce("cleanup")
        return real_rmtree(path, *a, **k)
    shutil.rmtree = rmtree
sys.exit(cli.main(sys.argv[4:]))
"""

#: a stand-in hipcc that announces its run and takes a while (the real one: seconds)
SLOW_HIPCC = """#!/bin/sh
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
echo compile > "{ready}"
sleep 1
printf '\\t.vgpr_count:     8\\n' > "$out"
"""


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path, point, args, env=None, hold=2.0):
    ready = tmp_path / "ready"
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(ROOT), **(env or {}))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(ready), str(hold), point, *args],
                            cwd=tmp_path / "work", env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    return proc, ready


def _wait_for(ready: Path, tag: str, proc, timeout=300):
    t0 = time.monotonic()
    while not (ready.exists() and ready.read_text().strip() == tag):
        if proc.poll() is not None:
            raise AssertionError(f"the command ended early: {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError(f"the command never reached {tag!r}")
        time.sleep(0.02)


def _interrupted(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == "wavefuse: interrupted" and out.strip() == ""


def _export_dir(tmp_path):
    k = ck.elementwise_f4()
    return write_project(tmp_path / "export", [k], [(k, {"x": "x", "y": "y", "n": 4096,
                                                         "alpha": 0.5})],
                         {"x": np.zeros(4096, np.float32)})


def _slow_hipcc(tmp_path, ready):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "hipcc"
    exe.write_text(SLOW_HIPCC.format(ready=ready))
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_ctrl_c_while_check_compiles_leaves_no_folder(tmp_path):
    (tmp_path / "work").mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = _export_dir(tmp_path)
    env = {**_slow_hipcc(tmp_path, tmp_path / "ready"), "TMPDIR": str(tmpdir)}
    proc, ready = _start(tmp_path, "none", ["check", str(out)], env)
    _wait_for(ready, "compile", proc)
    proc.send_signal(signal.SIGINT)
    _interrupted(proc)
    assert os.listdir(tmpdir) == []


def test_a_second_ctrl_c_during_checks_cleanup_still_removes_the_folder(tmp_path):
    (tmp_path / "work").mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = _export_dir(tmp_path)
    env = {**_slow_hipcc(tmp_path, tmp_path / "ready"), "TMPDIR": str(tmpdir)}
    proc, ready = _start(tmp_path, "check-cleanup", ["check", str(out)], env)
    _wait_for(ready, "compile", proc)
    proc.send_signal(signal.SIGINT)
    _wait_for(ready, "cleanup", proc)
    proc.send_signal(signal.SIGINT)
    _interrupted(proc)
    assert os.listdir(tmpdir) == []


@pytest.mark.slow
def test_ctrl_c_as_export_creates_its_folder_leaves_nothing(tmp_path):
    """The folder exists, its name not yet held by the code that removes it on failure:
    the signal waits until it is."""
    work = tmp_path / "work"
    work.mkdir()
    proc, ready = _start(tmp_path, "export-mkdtemp",
                         ["export", "softmax:rows=2,cols=4", "--budget", "1", "-o", "out"])
    _wait_for(ready, "tmp", proc)
    proc.send_signal(signal.SIGINT)
    _interrupted(proc)
    assert sorted(os.listdir(work)) == [], "a temporary folder, lock or export was left"
