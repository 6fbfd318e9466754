"""Signals held off while a file tree is swapped into place or a temporary one removed.

``export`` and ``check`` both leave nothing half-written when interrupted; the one way to
hold SIGINT/SIGTERM/SIGHUP lives here, below both (``check`` <- ``pins`` <- ``export``).
"""
from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def signals_held():
    """Delays SIGINT/SIGTERM/SIGHUP until the block is done, then delivers the first one
    that arrived.

    In the main thread the signals' Python handlers are swapped for one that only records
    the signal: blocking them with ``pthread_sigmask`` is not enough, because the mask is
    per thread and the kernel hands a process-directed signal to any thread that does not
    block it (a hipcc worker, numba's pool), after which Python runs the handler in the
    main thread inside the block anyway. Elsewhere (no handlers can be set off the main
    thread) the signals are blocked in this thread.
    """
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    if threading.current_thread() is not threading.main_thread():
        try:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        except (AttributeError, OSError, ValueError):  # no pthread_sigmask here
            yield
            return
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    pending: list[int] = []
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if pending:  # delivered now, to the handler the caller had
            signal.raise_signal(pending[0])
