"""The ``wavefuse`` command line.

Subcommands are modules in :mod:`compiler.cli.commands`; each exposes ``register(subparsers)``
which adds its parser and sets ``func``. They are found with :mod:`pkgutil`, so adding a
command is adding a file. Errors a user can cause (bad model names, unreadable files,
unsupported ops, shape mismatches, kernels the simulator or HIP backend rejects) are
caught here once: one line on stderr, exit status 2, no traceback. So are usage errors
(argparse's usage block is replaced by one line pointing at ``--help``), running out of
memory, and SIGTERM/SIGHUP, which unwind like Ctrl-C so that nothing half-written stays.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import signal
import sys
import warnings

import numpy as np

from compiler import __version__
from compiler.cli import commands
from compiler.ir.graph import GraphError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2

# Error families of the lower layers; looked up by name so the CLI works before (and
# without) those modules defining them. gpusim and codegen_hip never import compiler.
_FOREIGN_ERRORS = (("gpusim", "KernelError"), ("codegen_hip", "ExportError"))


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings reach a user of the command as one line, not as a source location and
    the line of code that raised them."""
    text = str(message)
    return f"wavefuse: warning: {text[len('gpusim: '):] if text.startswith('gpusim: ') else text}\n"


class UsageError(Exception):
    """A command line argparse rejects; its message is already one line."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like KeyboardInterrupt (cleanup runs)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and do not exit."""

    def error(self, message):
        command = self.prog.partition(" ")[2]
        raise UsageError(f"{command + ': ' if command else ''}{message} "
                         f"(see `{self.prog} --help`)")


def command_modules() -> list:
    """Every module in compiler.cli.commands that defines ``register``, sorted by name."""
    mods = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{commands.__name__}.{info.name}")
        if callable(getattr(mod, "register", None)):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="wavefuse",
        description="Kernel fusion, schedules and a cycle-approximate AMD GPU simulator, "
                    "with HIP code generation.")
    parser.add_argument("--version", action="version", version=f"wavefuse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in command_modules():
        mod.register(sub)
    return parser


def user_error_types() -> tuple:
    """The exception classes that mean "bad input", not "bug in wavefuse"."""
    types = [GraphError, OSError]
    for package, attr in _FOREIGN_ERRORS:
        try:
            importlib.import_module(package)
        except ImportError:
            continue
        for name, mod in list(sys.modules.items()):
            if name == package or name.startswith(package + "."):
                cls = getattr(mod, attr, None)
                if isinstance(cls, type) and issubclass(cls, BaseException) \
                        and cls not in types:
                    types.append(cls)
    return tuple(types)


def error_line(exc: BaseException) -> str:
    """One line for a user error; OSError gets its file name, not its errno."""
    if isinstance(exc, OSError) and exc.strerror:
        msg = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    else:
        msg = str(exc) or type(exc).__name__
    return " ".join(msg.split())


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def _catch_termination() -> dict:
    """SIGTERM and SIGHUP raise ``Terminated`` (main thread only); returns the old handlers."""
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _raise_terminated)
        except (ValueError, OSError):  # not the main thread, or no such signal here
            pass
    return old


#: the cyclic collector's first-generation threshold for a command's run (Python's
#: default is 700 allocations). Why: lowering and ranking allocate millions of small IR
#: nodes, trees without cycles that reference counting frees, so the collector found
#: next to nothing while taking 21-36% of a cold ResNet-50 tune's CPU (measured with
#: ``gc.callbacks``; docs/search.md, seventh round). Cycles are still collected, later.
GC_FIRST_GENERATION = 100_000


def main(argv=None) -> int:
    previous = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_FIRST_GENERATION), *thresholds[1:])
    try:
        return _main(argv)
    finally:
        warnings.formatwarning = previous
        gc.set_threshold(*thresholds)


def _main(argv) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            command = getattr(args, "command", None)
            where = f"wavefuse {command}" if command else "wavefuse"
            raise UsageError(f"{command + ': ' if command else ''}unrecognized arguments: "
                             f"{' '.join(extra)} (see `{where} --help`)")
    except UsageError as exc:
        print(f"wavefuse: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if not getattr(args, "func", None):
        print("wavefuse: error: no command given (see `wavefuse --help` for the commands)",
              file=sys.stderr)
        return EXIT_USAGE
    old_handlers = _catch_termination()
    try:
        with np.errstate(all="ignore"):  # NaN/Inf in a model are results, not warnings
            code = args.func(args)
    except KeyboardInterrupt:
        print("wavefuse: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"wavefuse: terminated by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except MemoryError:
        print("wavefuse: error: out of memory; use smaller sizes, or a lower --max-memory so "
              "that such a model is refused before it starts", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - narrowed just below
        if not isinstance(exc, user_error_types() + (UsageError,)):
            raise
        print(f"wavefuse: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    return EXIT_OK if code is None else int(code)

