"""The ``wavefuse`` command line.

Subcommands are modules in :mod:`compiler.commands`; each exposes ``register(subparsers)``
which adds its parser and sets ``func``. They are found with :mod:`pkgutil`, so adding a
command is adding a file. Errors a user can cause (bad model names, unreadable files,
unsupported ops, shape mismatches, kernels the simulator or HIP backend rejects) are
caught here once: one line on stderr, exit status 2, no traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__
from .graph import GraphError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2

# Error families of the lower layers; looked up by name so the CLI works before (and
# without) those modules defining them. gpusim and codegen_hip never import compiler.
_FOREIGN_ERRORS = (("gpusim", "KernelError"), ("codegen_hip", "ExportError"))


def command_modules() -> list:
    """Every module in compiler.commands that defines ``register``, sorted by name."""
    from . import commands
    mods = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{commands.__name__}.{info.name}")
        if callable(getattr(mod, "register", None)):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        print("wavefuse: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - narrowed just below
        if not isinstance(exc, user_error_types()):
            raise
        print(f"wavefuse: error: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK if code is None else int(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
