"""`wavefuse tune MODEL`: the best plan and schedule per dispatch, scored by gpusim."""
from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..search import tune
from . import common


def register(sub) -> None:
    p = sub.add_parser("tune", help="search schedules (and the fusion plan) with the simulator",
                       description="Lower every candidate schedule of every dispatch, score it "
                                   "with gpusim, keep the fastest; compare with the unfused "
                                   "baseline and the roofline. Times are simulated.")
    common.add_model(p)
    add_tune_options(p)
    common.add_json(p)
    p.set_defaults(func=run)


def add_tune_options(p) -> None:
    p.add_argument("--arch", type=common.arch_value, default="gfx942",
                   help="gfx90a, gfx942 or gfx1100 (default gfx942)")
    p.add_argument("--budget", type=common.count_value, default=None, metavar="N",
                   help="simulate at most N candidates per dispatch (seeded sample)")
    p.add_argument("--workers", type=common.workers_value, default=1, metavar="N",
                   help=f"score candidates in N processes (1 to {common.MAX_WORKERS})")
    p.add_argument("--fix", type=common.fix_value, action="append", default=[],
                   metavar="KNOB=VALUE",
                   help="pin a schedule knob, e.g. --fix swizzle=before_fusion (repeatable, "
                        "once per knob)")
    p.add_argument("--mode", choices=("auto", "aggressive", "conservative"), default="auto",
                   help="fusion plan: choose by predicted time (auto) or force one")
    p.add_argument("--seed", type=common.seed_value, default=0,
                   help="seed for sampling and inputs")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip tuning the unfused baseline")


def run_tune(args, quiet: bool):
    fixed = common.fixed_knobs(args.fix)
    graph = common.load(args)
    kw = dict(budget=args.budget, workers=args.workers, fixed=fixed, seed=args.seed,
              mode=args.mode, baseline=not args.no_baseline)
    if quiet:
        return tune(graph, args.arch, **kw)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=common.console(), transient=True) as prog:
        return tune(graph, args.arch, progress=prog, **kw)


def run(args) -> int:
    result = run_tune(args, quiet=args.json)
    if args.json:
        common.emit_json(result.to_json())
    else:
        render_tune(result, common.console())
    return 1 if result.mismatches else 0


def render_tune(result, console) -> None:
    t = Table(title=f"{result.model} on {result.arch}: best schedule per dispatch "
                    f"({result.mode} plan; simulated times)", expand=False)
    for col, just in (("dispatch", "left"), ("time us", "right"), ("x roofline", "right"),
                      ("coalesc %", "right"), ("LDS confl %", "right"), ("waves/SIMD", "right"),
                      ("HBM KiB", "right"), ("check", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for d in result.dispatches:
        c = d.best.counters
        check = "-" if d.verified is None else ("ok" if d.verified else
                                                 f"[red]MISMATCH {d.max_error:.2g}[/]")
        t.add_row(d.name, f"{d.best.time_us:.2f}", f"{d.best.time_us / d.roofline_us:.2f}",
                  f"{c.get('coalescing_pct', 0):.0f}",
                  f"{c.get('lds_bank_conflict_rate_pct', 0):.1f}",
                  f"{c.get('occupancy_waves_per_simd', 0):g} {d.best.occupancy_limiter}",
                  f"{c.get('hbm_bytes', 0) / 1024:,.0f}", check)
    console.print(t)
    for d in result.dispatches:
        console.print(f"  [bold]{d.name}[/] ({d.kind}, {len(d.candidates)} simulated, "
                      f"{len(d.illegal)} illegal): "
                      + " ".join(f"{k}={v}" for k, v in d.best.knobs.items()))
    console.print(f"total predicted: [bold]{result.total_time_us:.2f} us[/] in "
                  f"{len(result.dispatches)} dispatch(es), launch overhead "
                  f"{result.launch_overhead_us} us each")
    if result.unfused_time_us is not None:
        g = result.gain_split()
        console.print(f"unfused baseline: {result.unfused_time_us:.2f} us in "
                      f"{result.unfused_dispatches} dispatches -> fused is "
                      f"[bold]{result.unfused_time_us / result.total_time_us:.2f}x[/] faster; "
                      f"gain {g['total_us']:.2f} us = {g['launch_us']:.2f} us launches + "
                      f"{g['kernel_us']:.2f} us kernel time (bytes, instructions)")
    console.print(f"roofline bound: {result.roofline_time_us:.2f} us "
                  f"(min bytes / HBM bandwidth or flops / peak, plus one launch); "
                  f"predicted / roofline = {result.total_time_us / result.roofline_time_us:.2f}")
    console.print(f"plan choice: {result.plan_choice.get('reason', '')}")
    console.print("[dim]times are gpusim predictions (simulated cycles at the modelled "
                  "clock + launch overhead), not measurements[/]")
    if result.mismatches:
        console.print("[red]simulated outputs differ from numpy for: "
                      + ", ".join(d.name for d in result.mismatches) + "[/]")
