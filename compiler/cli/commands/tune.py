"""`wavefuse tune MODEL`: the best plan and schedule per dispatch, scored by gpusim."""
from __future__ import annotations

from contextlib import nullcontext

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich import box
from rich.table import Table

from gpusim.hw import DEFAULT_ARCH

from compiler.tuning import sampling
from compiler.tuning.cluster import Cluster, cap_workers, default_workers, parse_address
from compiler.tuning.search import DEFAULT, tune
from compiler.cli.seed import (PUBLISHED, ROCMLIR_TILE, SEED_MODELS, epilogue_share, gains, published_gains)
from compiler.cli.seed import seed_rows as rows_of
from compiler.cli.commands import common
from compiler.cli.views.candidates import SHORT_LIMITERS
from compiler.cli.commands.cache import add_cache_options, store_of


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
    p.add_argument("--arch", type=common.arch_value, default=DEFAULT_ARCH,
                   help="gfx90a, gfx942 or gfx1100 (default gfx942)")
    p.add_argument("--budget", type=common.budget_value, default=None, metavar="N",
                   help="simulate at most N candidates per dispatch (default: a quarter of "
                        "its legal points, 4 to 24; Nx: N times that): the best analytic "
                        "estimates, a few seeded random ones, then the best one's "
                        "neighbours; N at least the legal points simulates every point")
    p.add_argument("--workers", type=common.workers_value, default=None, metavar="N",
                   help=f"rank and score candidates in N processes (1 to "
                        f"{common.MAX_WORKERS}; default $WAVEFUSE_WORKERS, else every core "
                        f"this process may use)")
    p.add_argument("--fix", type=common.fix_value, action="append", default=[],
                   metavar="KNOB=VALUE",
                   help="pin a schedule knob, e.g. --fix swizzle=before_fusion (repeatable, "
                        "once per knob)")
    p.add_argument("--mode", default="auto",
                   choices=("auto", "aggressive", "separate-contractions", "split-attention",
                            "conservative"),
                   help="fusion plan: choose by predicted time (auto) or force one "
                        "(split-attention: aggressive without the fused attention; "
                        "separate-contractions: aggressive without the wide GEMM of "
                        "sibling projections)")
    p.add_argument("--launch", choices=("stream", "graph"), default="stream",
                   help="how the host launches the dispatches: stream (one launch each, the "
                        "default) or graph (one HIP graph launch of the whole sequence: a "
                        "fixed cost plus a cost per kernel, cited in gpusim/hw); plan totals "
                        "and the choice of plan use it, and export's harness replays a "
                        "captured HIP graph")
    p.add_argument("--seed", type=common.seed_value, default=0,
                   help="seed for sampling and inputs")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip tuning the unfused baseline")
    p.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="score candidates on a Dask cluster: a scheduler address "
                        "(tcp://host:8786) or local:N for a local cluster of N workers "
                        "(needs the extra wavefuse[cluster])")
    p.add_argument("--check-all", action="store_true",
                   help="check the values of every workgroup of the chosen kernels, not "
                        "the output tiles of a sample of them")
    add_cache_options(p)


def run_tune(args, quiet: bool):

    fixed = common.fixed_knobs(args.fix)
    graph = common.load(args, whole=args.check_all)
    if args.cluster:
        parse_address(args.cluster)  # a bad address fails before any work
    kw = dict(budget=DEFAULT if args.budget is None else args.budget, workers=default_workers() if args.workers is None else cap_workers(args.workers), fixed=fixed,
              seed=args.seed, mode=args.mode, baseline=not args.no_baseline,
              check_all=args.check_all, launch=args.launch)
    with store_of(args) as store, \
            (Cluster(args.cluster) if args.cluster else nullcontext()) as cluster:
        kw.update(store=store, cluster=cluster)
        if quiet:
            return tune(graph, args.arch, **kw)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=common.console(), transient=True) as prog:
            return tune(graph, args.arch, progress=prog, **kw)


def run(args) -> int:
    result = run_tune(args, quiet=args.json)
    seed_rows = None
    if _seed_case(result, args):
        seed_rows = rows_of(result.arch)
        seed_tail = epilogue_share(result.arch)
    if args.json:
        out = result.to_json()
        if seed_rows is not None:
            out["seed"] = _seed_json(seed_rows, seed_tail)
        common.emit_json(out)
    else:
        render_tune(result, common.console())
        if seed_rows is not None:
            render_seed(seed_rows, seed_tail, common.console())
    return 1 if result.mismatches else 0


def _seed_case(result, args) -> bool:
    """The rocMLIR seed question: a conv_add_relu model tuned with MFMA on a CDNA arch."""
    return (result.model in SEED_MODELS and common.fixed_knobs(args.fix).get("mma") == "mfma"
            and bool(result.arch.mfma_passes))


def _seed_json(rows, tail: float) -> dict:
    one, means = published_gains()
    return {"tile": ROCMLIR_TILE, "published": PUBLISHED,
            "published_gain": {"one_run": one, "five_run_means": means},
            "predicted_kernel_us": [vars(r) for r in rows], "predicted_gain": gains(rows),
            "predicted_epilogue_share": tail, "max_gain_of_a_free_epilogue": 1 / (1 - tail),
            "time_unit": "simulated microseconds without launch overhead"}


def render_seed(rows, tail: float, console) -> None:
    """The seed's kernel as rocMLIR builds it, every swizzle placement, beside the
    measurement."""
    t = Table(title="rocMLIR seed: MFMA tile as rocMLIR builds it "
                    f"(BM{ROCMLIR_TILE['BM']} BN{ROCMLIR_TILE['BN']} 32x32x2f32 per wave, K "
                    "unsplit); kernel time without launch", expand=False)
    for col in ("residual layout", "swizzle", "predicted us", "coalesc %", "published us"):
        t.add_column(col, justify="left" if col in ("residual layout", "swizzle") else "right")
    pub = {"after_fusion": f"{PUBLISHED['after_fusion_us']:.1f} (mean {PUBLISHED['after_fusion_mean_us']:.1f})",
           "before_fusion": f"{PUBLISHED['before_fusion_us']:.1f} (mean {PUBLISHED['before_fusion_mean_us']:.1f})"}
    for r in rows:
        layout = "NHWC, as the output" if r.model == "conv_add_relu" else "channel-major"
        t.add_row(layout, r.swizzle, f"{r.kernel_us:.2f}", f"{r.coalescing_pct:.1f}",
                  pub.get(r.swizzle, "") if r.model == "conv_add_relu" else "")
    console.print(t)
    g = gains(rows)
    one, means = published_gains()
    console.print(f"gain of before_fusion over after_fusion (develop -> PR): predicted "
                  f"{g['conv_add_relu']:.3f}x (channel-major residual {g['conv_add_relu_mismatch']:.3f}x); "
                  f"published {one:.3f}x one run, {means:.3f}x 5-run means ({PUBLISHED['source']})")
    develop = next(r.kernel_us for r in rows
                   if r.model == "conv_add_relu" and r.swizzle == "after_fusion")
    console.print(f"[dim]the predicted epilogue (after the last MFMA) is {tail * develop:.1f} us of "
                  f"{develop:.1f} us ({tail:.1%}): even a free epilogue would gain at most "
                  f"{1 / (1 - tail):.3f}x, so the swizzle placement alone cannot give the measured "
                  f"gain; see compiler/cli/seed.py[/]")


def search_line(d) -> str:
    """How the dispatch's winner was found: points ranked and simulated, the stage."""
    s = d.search
    if not s:
        return f"{len(d.candidates)} simulated"
    if s.get("every_point"):
        return f"every point: {s['simulated']} of {s['legal']} legal simulated"
    ranked = f"{s['ranked']} ranked, " if s.get("ranked") else ""
    return (f"{ranked}{s['simulated']} of {s['legal']} simulated ({s['strategy']}), "
            f"winner from {s['winner_stage'] or '-'}")


def render_tune(result, console) -> None:
    # short headers and a light box: one line per dispatch at 80-100 columns
    t = Table(title=f"{result.model} on {result.arch.name}: best schedule per dispatch "
                    f"({result.mode} plan; simulated times)", expand=False, box=box.SIMPLE_HEAD)
    for col, just in (("dispatch", "left"), ("time us", "right"), ("x roof", "right"),
                      ("coal %", "right"), ("LDS %", "right"), ("occupancy", "left"),
                      ("HBM KiB", "right"), ("check", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for d in result.dispatches:
        c = d.best.counters
        check = ("shared" if d.check.startswith(sampling.SHARED_PREFIX) else "-") \
            if d.verified is None else ("ok" if d.verified else
                                        f"[red]MISMATCH {d.max_error:.2g}[/]")
        t.add_row(d.name, f"{d.best.time_us:.2f}", f"{d.best.time_us / d.roofline_us:.2f}",
                  f"{c.get('coalescing_pct', 0):.0f}",
                  f"{c.get('lds_bank_conflict_rate_pct', 0):.1f}",
                  f"{c.get('occupancy_waves_per_simd', 0):g} "
                  f"{SHORT_LIMITERS.get(d.best.occupancy_limiter, d.best.occupancy_limiter)}",
                  f"{c.get('hbm_bytes', 0) / 1024:,.0f}", check)
    console.print(t)
    for d in result.dispatches:
        console.print(f"  [bold]{d.name}[/] ({d.kind}, {search_line(d)}, "
                      f"{len(d.illegal)} illegal): "
                      + " ".join(f"{k}={v}" for k, v in d.best.knobs.items()))
    arch = result.arch
    launched = (f"launch overhead {result.launch_overhead_us} us each"
                if result.launch == "stream" else
                f"one HIP graph launch: {arch.graph_launch_us} us + {arch.graph_node_us} us per "
                f"kernel (instead of {arch.launch_overhead_us} us per stream launch)")
    console.print(f"total predicted: [bold]{result.total_time_us:.2f} us[/] in "
                  f"{len(result.dispatches)} dispatch(es), {launched}")
    if result.unfused_time_us is not None:
        g = result.gain_split()
        console.print(f"unfused baseline: {result.unfused_time_us:.2f} us in "
                      f"{result.unfused_dispatches} dispatches -> fused is "
                      f"[bold]{result.unfused_time_us / result.total_time_us:.2f}x[/] faster; "
                      f"gain {g['total_us']:.2f} us = {g['launch_us']:.2f} us launches "
                      f"({g['unfused_kernels']} -> {g['kernels']} kernels) + "
                      f"{g['kernel_us']:.2f} us kernel time (bytes, instructions)")
    console.print(f"roofline bound: {result.roofline_time_us:.2f} us "
                  f"(min bytes / {result.roofline_basis}, or flops / peak; plus one "
                  f"{'launch' if result.launch == 'stream' else 'graph launch of one kernel'}); "
                  f"predicted / roofline = {result.total_time_us / result.roofline_time_us:.2f}")
    console.print(f"plan choice: {result.plan_choice.get('reason', '')}")
    console.print("[dim]times are gpusim predictions (simulated cycles at the modelled "
                  "clock + launch overhead), not measurements[/]")
    shared = sum(d.check.startswith(sampling.SHARED_PREFIX) for d in result.dispatches)
    if shared:
        console.print(f"values checked on {len(result.dispatches) - shared} distinct kernels; "
                      f"{shared} dispatch(es) run one of those kernels and are marked "
                      f"'shared' (--check-all checks every dispatch)")
    if result.mismatches:
        console.print("[red]simulated outputs differ from numpy for: "
                      + ", ".join(d.name for d in result.mismatches) + "[/]")
