"""The one-line status shown while the simulator engine compiles (once per machine).

The first ``simulate`` on a machine makes Numba compile the engine, about 20 s of one
core; a learner who sees nothing for that long thinks it hung. :func:`compiling` wraps
that compile (``gpusim.engine_jit`` calls it only on a cache miss, never on a cached
load) and says so where a person is watching:

- stderr is a terminal: a spinner on one line, replaced by one "compiled in N s" line;
- in a Jupyter kernel (stderr is the notebook's stream): one line before, one after;
- anywhere else (pipes, tests parsing stderr, CI logs): nothing, unless
  ``WAVEFUSE_PROGRESS=1`` asks for the two plain lines (``WAVEFUSE_PROGRESS=0`` silences
  every form).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time

MESSAGE = "compiling the simulator once, about 20 s"
FRAMES = "|/-\\"


def _mode(stream) -> str:
    """"spinner", "lines" or "quiet" for ``stream``, per the module docstring."""
    want = os.environ.get("WAVEFUSE_PROGRESS", "").strip()
    if want == "0":
        return "quiet"
    try:
        if stream.isatty():
            return "spinner"
    except (AttributeError, ValueError):  # a closed or odd stream
        return "quiet"
    if want == "1" or "ipykernel" in type(stream).__module__:
        return "lines"
    return "quiet"


def _frame(spin: str, text: str, seconds: float, width: int) -> str:
    """One spinner frame no wider than ``width``: a line that wrapped would turn every
    carriage return into a new line. Drops the detail in brackets first, then cuts."""
    for t in (text, MESSAGE):
        line = f"{spin} gpusim: {t}  {seconds:4.0f} s"
        if len(line) <= width:
            return line
    return line[:max(1, width)]


@contextlib.contextmanager
def compiling(detail: str = "", stream=None):
    """Shows the status while the body runs; ``detail`` follows the message (where the
    compiled engine will be kept)."""
    stream = stream or sys.stderr
    mode = _mode(stream)
    text = MESSAGE + (f" ({detail})" if detail else "")
    start = time.monotonic()
    stop = threading.Event()
    spinner = None
    if mode == "lines":
        print(f"gpusim: {text} ...", file=stream, flush=True)
    elif mode == "spinner":
        width = shutil.get_terminal_size((80, 24)).columns - 1

        def spin():
            i = 0
            while not stop.wait(0.1):
                stream.write("\r" + _frame(FRAMES[i % len(FRAMES)], text,
                                             time.monotonic() - start, width))
                stream.flush()
                i += 1
        spinner = threading.Thread(target=spin, name="gpusim-compile-status", daemon=True)
        spinner.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        if spinner is not None:
            spinner.join()
            stream.write("\r\033[K")
        if mode != "quiet":
            took = time.monotonic() - start
            word = "compiled the simulator" if ok else "the simulator's compile failed"
            print(f"gpusim: {word} in {took:.0f} s", file=stream, flush=True)
