"""`wavefuse compare A B`: two runs side by side (A and B are `wavefuse tune --json`
outputs), or `wavefuse compare --model M` tuned twice under two archs, modes or pins
(--arch-a/--arch-b, --mode-a/--mode-b, --fix-a/--fix-b). Shows which dispatches changed,
their times, counters and schedules, and the total split into launches and kernel time.
Times are simulated predictions.
"""
from __future__ import annotations

import argparse
import json

from gpusim.hw import DEFAULT_ARCH, get_arch

from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options, store_of
from compiler.cli.views.common import fmt_knobs
from compiler.ir.graph import GraphError
from compiler.tuning.search import tune

MODES = ("auto", "aggressive", "split-attention", "conservative")


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare two tune runs (saved JSON or tuned here)",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", metavar="RUN.json",
                   help="two `wavefuse tune --json` outputs (A then B)")
    p.add_argument("--model", metavar="MODEL", help=f"tune this model twice instead; "
                                                    f"{common.MODEL_HELP}")
    for side in ("a", "b"):
        p.add_argument(f"--arch-{side}", type=common.arch_value, default=None,
                       help=f"--model: arch of run {side.upper()} (default {DEFAULT_ARCH})")
        p.add_argument(f"--mode-{side}", choices=MODES, default="auto",
                       help=f"--model: fusion plan of run {side.upper()} (default auto)")
        p.add_argument(f"--fix-{side}", type=common.fix_value, action="append", default=[],
                       metavar="KNOB=VALUE", help=f"--model: pin a knob in run {side.upper()}")
    p.add_argument("--budget", type=common.count_value, default=8, metavar="N",
                   help="--model: candidates simulated per dispatch (default 8)")
    p.add_argument("--seed", type=common.seed_value, default=0, help="--model: sample seed")
    p.add_argument("--max-memory", type=common.size_value, default=None, metavar="SIZE",
                   help="--model: refuse models whose working set passes SIZE")
    p.add_argument("--dim", type=common.dim_value, action="append", default=[],
                   metavar="NAME=VALUE", help="--model: pin a symbolic ONNX dimension")
    add_cache_options(p)
    common.add_json(p)
    p.set_defaults(func=run)


def read_run(path: str) -> dict:
    """A saved `tune --json` output; unreadable or not JSON is one line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        # tune --json prints one object on one line; take the last non-empty line so a
        # file that also caught other output still reads
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return json.loads(lines[-1] if lines else "")
    except (json.JSONDecodeError, IndexError):
        raise GraphError(f"{path}: not JSON (expected the output of `wavefuse tune --json`)") \
            from None


def _label(arch, mode, fixed) -> str:
    bits = [arch.name, mode]
    if fixed:
        bits.append(fmt_knobs(fixed))
    return " ".join(bits)


def runs_of_model(args, store) -> tuple:
    """((run A, label), (run B, label)): the model tuned under each side's options, as
    `tune --json` objects (values not checked, no baseline: only times are compared)."""
    graph = common.load(args, whole=False)
    out = []
    for side in ("a", "b"):
        arch = getattr(args, f"arch_{side}") or get_arch(DEFAULT_ARCH)
        mode = getattr(args, f"mode_{side}")
        fixed = common.fixed_knobs(getattr(args, f"fix_{side}"))
        result = tune(graph, arch, budget=args.budget, seed=args.seed, mode=mode, fixed=fixed,
                      baseline=False, verify=False, store=store)
        out.append((result.to_json(), _label(arch, mode, fixed)))
    if out[0][1] == out[1][1]:
        raise GraphError("--model: runs A and B have the same options; give --arch-b, "
                         "--mode-b or --fix-b (or their -a forms)")
    return tuple(out)


def run(args) -> int:
    from compiler.cli.explore.compare import compare_data, compare_view
    side_opts = any(getattr(args, f"{o}_{s}") for o in ("arch", "fix") for s in "ab") or \
        any(getattr(args, f"mode_{s}") != "auto" for s in "ab")
    if args.model is not None:
        if args.runs:
            raise GraphError("give two RUN.json files or --model, not both")
        with store_of(args) as store:
            (a, la), (b, lb) = runs_of_model(args, store)
    else:
        if len(args.runs) != 2:
            raise GraphError(f"give two `tune --json` outputs (got {len(args.runs)}), or "
                             f"--model M with --arch-b/--mode-b/--fix-b")
        if side_opts:
            raise GraphError("--arch-a/b, --mode-a/b and --fix-a/b apply to --model only")
        a, b = (read_run(p) for p in args.runs)
        la, lb = args.runs
    data = compare_data(a, b, la, lb)
    if args.json:
        common.emit_json(data.to_json())
    else:
        common.console().print(compare_view(data))
    return 0
