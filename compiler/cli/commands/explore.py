"""`wavefuse explore MODEL`: browse a model's plan, schedules, wave timelines, memory maps
and HIP source in one terminal application (Textual), or in a browser with --serve.

Keys: 1..5 panes, a arch, p pin a knob, s sort, +/- zoom, g/b next access, ? help, q quit.
Scoring runs in the background; every score is kept in the tuning database. Times are
simulated predictions (gpusim), not measurements. Needs `pip install 'wavefuse[explore]'`.
"""
from __future__ import annotations

import argparse
import errno
import os
import shlex
import shutil
import socket
import sys

from gpusim.hw import DEFAULT_ARCH

from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options
from compiler.ir.graph import GraphError

INSTALL_HINT = "pip install 'wavefuse[explore]'"
MIN_COLUMNS, MIN_LINES = 80, 24


class MissingExtra(GraphError):
    """Textual (or textual-serve) is not installed: a user error with the fix in it."""


def register(sub) -> None:
    p = sub.add_parser("explore", help="interactive explorer of a model (terminal or browser)",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model(p)
    p.add_argument("--arch", type=common.arch_value, default=DEFAULT_ARCH,
                   help="gfx90a, gfx942 or gfx1100 (default gfx942; `a` changes it live)")
    p.add_argument("--mode", choices=("aggressive", "conservative"), default="aggressive",
                   help="fusion plan to explore (default aggressive)")
    p.add_argument("--dispatch", metavar="NAME", help="dispatch selected at start")
    p.add_argument("--budget", type=common.count_value, default=8, metavar="N",
                   help="candidates simulated per dispatch (seeded sample; default 8)")
    p.add_argument("--seed", type=common.seed_value, default=0,
                   help="seed of the candidate sample")
    p.add_argument("--serve", action="store_true",
                   help="serve the explorer to web browsers (textual-serve) instead of "
                        "running it in this terminal")
    p.add_argument("--host", default="localhost",
                   help="--serve: address to listen on (default localhost; 0.0.0.0 for a "
                        "classroom network)")
    p.add_argument("--port", type=port_value, default=8000, metavar="N",
                   help="--serve: TCP port (default 8000)")
    add_cache_options(p)
    p.set_defaults(func=run)


def port_value(text: str) -> int:
    return common._int_in(text, "a TCP port from 1 to 65535", 1, 65535)


def require(module: str):
    """Imports an optional module of the explore extra, or one line naming the fix."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"`wavefuse explore` needs {module.split('.')[0].replace('_', '-')}"
                           f": {INSTALL_HINT}") from None


def check_port(host: str, port: int) -> None:
    """Binds and releases ``host:port`` so that a port in use is one line, before the
    server starts (textual-serve would print a traceback)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise GraphError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
            raise GraphError(f"port {port} on {host} {why}; choose another with --port") from None


def check_terminal() -> None:
    """The explorer is laid out for 80x24; a smaller terminal (or none) is refused."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise GraphError("explore needs an interactive terminal (or --serve for a browser; "
                         "`wavefuse report` writes an HTML file)")
    cols, lines = shutil.get_terminal_size((0, 0))
    if cols < MIN_COLUMNS or lines < MIN_LINES:
        raise GraphError(f"the terminal is {cols}x{lines}; explore needs at least "
                         f"{MIN_COLUMNS}x{MIN_LINES}")


def serve_command(args) -> str:
    """The command textual-serve runs per browser session: this one, without --serve."""
    parts = [sys.executable, "-m", "compiler.cli", "explore", args.model, "--arch",
             args.arch.name, "--mode", args.mode, "--budget", str(args.budget), "--seed",
             str(args.seed)]
    for name, value in args.dim:
        parts += ["--dim", f"{name}={value}"]
    if args.max_memory is not None:
        parts += ["--max-memory", str(args.max_memory)]
    if args.dispatch:
        parts += ["--dispatch", args.dispatch]
    if args.no_cache:
        parts.append("--no-cache")
    elif args.cache:
        parts += ["--cache", args.cache]
    return shlex.join(parts)


def session_of(args):
    from compiler.cli.explore.session import Session
    graph = common.load(args)
    s = Session(graph, args.model, args.arch, args.mode, args.budget, args.seed,
                args.cache, args.no_cache)
    if args.dispatch is not None:
        s.dispatch(args.dispatch)     # a name that is not a dispatch: one line, before the UI
    return s


def run(args) -> int:
    require("textual")
    if args.serve:
        server_mod = require("textual_serve.server")
        session_of(args)              # a model that cannot be loaded fails here, not in the browser
        check_port(args.host, args.port)
        server = server_mod.Server(serve_command(args), host=args.host, port=args.port,
                                   title=f"wavefuse explore {args.model}")
        print(f"serving the explorer of {args.model} at http://{args.host}:{args.port} "
              f"(Ctrl-C stops)", file=sys.stderr)
        server.serve()
        return 0
    session = session_of(args)
    if not os.environ.get("TEXTUAL_DRIVER"):   # textual-serve's sessions have no tty
        check_terminal()
    from compiler.cli.explore.app import ExploreApp
    ExploreApp(session, args.dispatch).run()
    return 0
