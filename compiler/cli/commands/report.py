"""`wavefuse report MODEL -o report.html`: one self-contained HTML file with the plan, the
per-dispatch table, the roofline chart, the fusion decisions, and per dispatch its
candidates, wave timeline and memory maps as SVG. No script and no network: it opens
anywhere. The numbers are those of `wavefuse tune --json`; times are simulated.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from gpusim.hw import DEFAULT_ARCH

from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options, store_of
from compiler.tuning.search import tune


def register(sub) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of a tuned model",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the HTML file to write (replaced whole, or left as it was)")
    p.add_argument("--arch", type=common.arch_value, default=DEFAULT_ARCH,
                   help="gfx90a, gfx942 or gfx1100 (default gfx942)")
    p.add_argument("--mode", default="auto",
                   choices=("auto", "aggressive", "split-attention", "conservative"),
                   help="fusion plan: chosen by predicted time (auto) or forced")
    p.add_argument("--budget", type=common.count_value, default=8, metavar="N",
                   help="candidates simulated per dispatch (seeded sample; default 8)")
    p.add_argument("--seed", type=common.seed_value, default=0, help="seed of the sample")
    p.add_argument("--fix", type=common.fix_value, action="append", default=[],
                   metavar="KNOB=VALUE", help="pin a schedule knob (repeatable)")
    p.add_argument("--no-baseline", action="store_true", help="skip the unfused baseline")
    add_cache_options(p)
    p.set_defaults(func=run)





def write_atomic(path: Path, text: str) -> None:
    """Writes a temporary file beside ``path`` and renames it over: a reader (or an
    interrupted run) sees the old file or the whole new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def build(args, store):
    """(TuneResult, Session) for the arguments: the tune `tune --json` would print (values
    not checked) and the session that renders its panes."""
    from compiler.cli.explore.session import Session
    graph = common.load(args, whole=False)
    result = tune(graph, args.arch, budget=args.budget, seed=args.seed, mode=args.mode,
                  fixed=common.fixed_knobs(args.fix), baseline=not args.no_baseline,
                  verify=False, store=store)
    session = Session(graph, args.model, result.arch, result.mode, args.budget, args.seed,
                      plan=result.plan, no_cache=True)
    session.adopt(result.dispatches)
    return result, session


def run(args) -> int:
    from compiler.cli.explore.report import report_html
    path = common.writable_file(args.output, "-o", "report.html")
    with store_of(args) as store:
        result, session = build(args, store)
        text = report_html(result, session)
    write_atomic(path, text)
    common.console().print(f"wrote {path} ({len(text.encode()) / 1024:.0f} KiB): "
                           f"{len(result.dispatches)} dispatches, {result.total_time_us:.2f} us "
                           f"predicted (simulated)")
    return 0
