"""`wavefuse check DIR`: compile an exported project with hipcc and compare the ISA with
what the simulator assumed (vector widths, LDS bytes, scratch, VGPR-based occupancy)."""
from __future__ import annotations

import argparse
import json

from codegen_hip import ExportError, check_dir, render_check
from codegen_hip.check import check_archs

from compiler.cli.commands import common


def arch_list(text: str) -> tuple[str, ...]:
    """``gfx90a,gfx940`` -> the targets, checked before anything is compiled."""
    try:
        return check_archs(text.split(","))
    except ExportError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub) -> None:
    p = sub.add_parser("check", help="compile exported kernels with hipcc and compare the ISA",
                       description="Compile every kernel of an exported DIR for each arch "
                                   "(device-only, to assembly) and list every disagreement "
                                   "with the simulator's assumptions. gfx942 is checked as "
                                   "gfx940 (same CDNA3 ISA; clang 15 knows gfx940).")
    p.add_argument("dir", metavar="DIR", help="a directory written by `wavefuse export`")
    p.add_argument("--arch", type=arch_list, default=("gfx90a", "gfx940"),
                   help="comma-separated targets (default gfx90a,gfx940)")
    common.add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    report = check_dir(args.dir, args.arch)
    errors = report["disagreements"]
    if args.json:
        common.emit_json(json.loads(json.dumps(report, default=str)))
    else:
        con = common.console()
        render_check(report, con)
        con.print("[bold green]ISA agrees with the simulator[/]" if not errors else
                  f"[bold red]{len(errors)} disagreement(s)[/]")
    return 1 if errors else 0
