"""`wavefuse view KIND MODEL`: one terminal view of a model's plan, schedules or kernel.

Kinds: plan (dispatch tree, boundary tensors, traffic), explain (every fusion decision;
with --tune also the search's cost numbers), candidates (scored schedules of a dispatch),
timeline (per-wave Gantt of the winner on CU 0), coalescing (lanes x cache lines of a
global access), banks (lanes x LDS banks of an LDS access), source (emitted HIP with
per-line simulator counters), search (how the staged search found the winner:
convergence with its stages, analytic rank against simulated time). Views of a kernel tune the chosen dispatch first with a
small seeded budget (--budget) and show its fastest schedule. Times are simulated.
"""
from __future__ import annotations

import argparse

from rich.console import Console, Group

import gpusim
from gpusim.hw import DEFAULT_ARCH
from gpusim.program import KernelSequence, kernels_of

from compiler.cli import views
from compiler.fusion import fuse
from compiler.tuning.search import DEFAULT, tune, tune_dispatches
from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options, store_of

KINDS = ("plan", "explain", "candidates", "timeline", "coalescing", "banks", "source",
         "search")


def register(sub) -> None:
    p = sub.add_parser("view", help="show a plan, candidates, wave timeline, memory maps or source",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=KINDS, metavar="KIND", help=" | ".join(KINDS))
    common.add_model(p)
    p.add_argument("--dispatch", metavar="NAME",
                   help="dispatch to show (default: the first; for banks the first with LDS)")
    p.add_argument("--arch", type=common.arch_value, default=DEFAULT_ARCH,
                   help="gfx90a, gfx942 or gfx1100 (default gfx942)")
    p.add_argument("--mode", choices=("aggressive", "conservative"), default="aggressive",
                   help="fusion plan to view (default aggressive)")
    p.add_argument("--budget", type=common.count_value, default=None, metavar="N",
                   help="candidates simulated per dispatch (default 8; search: tune's "
                        "default, a quarter of the legal points, 4 to 24)")
    p.add_argument("--seed", type=common.seed_value, default=0, help="seed of the candidate sample")
    p.add_argument("--sort", default="time",
                   help="candidates: time | roofline | coalescing | conflicts | occupancy | bytes")
    p.add_argument("--inst", type=common.index_value, metavar="N",
                   help="coalescing/banks: statement index (default: the worst one)")
    p.add_argument("--from", dest="start", type=common.cycle_value, metavar="CYCLE",
                   help="timeline: first cycle of the window")
    p.add_argument("--to", dest="end", type=common.cycle_value, metavar="CYCLE",
                   help="timeline: end cycle of the window")
    p.add_argument("--tune", action="store_true",
                   help="explain: run the search so its plan-choice decision shows costs")
    p.add_argument("--width", type=common.width_value, metavar="N", help="render width in columns")
    p.add_argument("--svg", metavar="FILE", help="also save the render as an SVG file")
    add_cache_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.svg is not None:
        common.writable_file(args.svg, "--svg", "view.svg")
    with store_of(args) as store:
        renderable, title = build(args, store)
    con = Console(width=args.width, record=bool(args.svg), highlight=False)
    con.print(renderable)
    if args.svg:
        con.save_svg(args.svg, title=title)
    return 0





def build(args, store=None):
    """(renderable, title) for the requested view; tuning and simulation happen here."""


    if args.budget is None:
        args.budget = DEFAULT if args.kind == "search" else 8
    graph = common.load(args, compute=args.kind not in ("plan", "explain") or args.tune)
    aggressive = args.mode == "aggressive"
    # the plan tune forms (sibling GEMMs merged when aggressive), so that dispatch names
    # such as ``..._hcat_1`` in tune's output are the ones --dispatch accepts
    plan = fuse(graph, aggressive=aggressive, horizontal_gemms=aggressive)
    title = f"wavefuse view {args.kind} {args.model}"
    if args.kind == "plan":
        return views.plan_view(plan), title
    if args.kind == "explain":
        if args.tune:
            plan = tune(graph, args.arch, budget=args.budget, seed=args.seed,
                        baseline=False, verify=False, store=store).plan
        return views.explain_view(plan), title
    if args.kind == "candidates" and args.sort not in views.SORT_KEYS:
        raise views.ViewError(f"no sort key {args.sort!r}; valid: {', '.join(views.SORT_KEYS)}")
    names = [d.name for d in plan.dispatches]
    if args.dispatch is not None:
        views.common.choose("dispatch", args.dispatch, names)
        order = [d for d in plan.dispatches if d.name == args.dispatch]
    else:
        order = list(plan.dispatches)

    def tuned_of(d):
        return tune_dispatches(plan.graph, [d], args.arch, budget=args.budget, seed=args.seed,
                               store=store)[0]

    if args.kind == "banks" and args.dispatch is None:
        tuned = None
        for d in order:   # the first dispatch whose winning kernel uses LDS
            t = tuned_of(d)
            if any(views.memory_insts(k, "lds") for k in kernels_of(t.kernel)):
                tuned = t
                break
        if tuned is None:
            raise views.ViewError(f"no dispatch of {graph.name} uses LDS in its best schedule "
                                  f"(dispatches: {', '.join(names)})")
    else:
        tuned = tuned_of(order[0])
    title += f" --dispatch {tuned.name}"
    k = tuned.kernel
    if args.kind == "candidates":
        return views.candidates_view(tuned, args.sort), title
    if args.kind == "search":
        return views.search_view(tuned), title
    if isinstance(k, KernelSequence) and len(k.kernels) == 1:
        k = k.kernels[0]  # split-K reduced by its last workgroup: one kernel, scratch
    if isinstance(k, KernelSequence):
        if args.kind == "source":  # every kernel of the sequence, in launch order
            res = gpusim.simulate(k, args.arch, functional=False)
            return Group(*(views.source_view(kk, r, args.arch)
                           for kk, r in zip(k.kernels, res.parts))), \
                title + f" ({len(k.kernels)} kernels in launch order)"
        # the other views look at one kernel: the first (split-K: the partial kernel,
        # where the K loop runs; the one with LDS when asked for banks)
        first = next((kk for kk in k.kernels if args.kind != "banks" or
                      views.memory_insts(kk, "lds")), k.kernels[0])
        title += f" (kernel {first.name}, 1 of the dispatch's {len(k.kernels)})"
        k = first
    if args.kind == "timeline":
        res = gpusim.simulate(k, args.arch, functional=False, trace=True)
        return views.timeline_view(res, args.start, args.end), title
    if args.kind == "coalescing":
        inst, pat = views.pattern_for(k, args.arch, args.inst, "global")
        return views.coalescing_view(pat, inst), title
    if args.kind == "banks":
        inst, pat = views.pattern_for(k, args.arch, args.inst, "lds")
        return views.banks_view(pat, inst), title
    res = gpusim.simulate(k, args.arch, functional=False)
    return views.source_view(k, res, args.arch), title
