"""`wavefuse verify MODEL`: runs a list of named checks on seeded random inputs.

Each check is a function ``(VerifyContext) -> CheckResult`` registered, in order, with
``@verify_check("name")``. The first computes the numpy reference every later check
compares against; later stages add their own ("fused plan", "simulated kernels") by
decorating a function here. Exit status: 0 when no check fails, 1 otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
from rich.table import Table

from gpusim.hw import DEFAULT_ARCH

from compiler.ir import errorbound, numerics
from compiler.ir.graph import DTYPES, Graph, GraphError
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir.reference import evaluate, random_inputs
from compiler.tuning import sampling
from compiler.tuning.cluster import default_workers
from compiler.tuning.search import DEFAULT, tune
from compiler.cli.commands import common
from compiler.cli.commands.cache import add_cache_options, store_of

# Tolerances for comparing two float computations of the same graph: numerics.TOLERANCE
# (relative + absolute) plus the rounding allowance of compiler.ir.errorbound.


@dataclass
class CheckResult:
    name: str
    status: str  # "pass", "fail" or "skip"
    max_error: float | None = None
    tolerance: float | None = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


@dataclass
class VerifyContext:
    """What every check sees: the graph, its seeded inputs and the reference outputs."""
    spec: str
    graph: Graph
    seed: int
    inputs: dict
    reference: dict = field(default_factory=dict)  # graph output name -> array
    # graph output name -> its rounding-error scale (compiler.ir.errorbound): how far another
    # honest evaluation may be from the reference, beyond the constant tolerance
    scales: dict = field(default_factory=dict)
    # candidates per dispatch for the simulated-kernels check: tune's default, so that
    # `tune MODEL` then `verify MODEL` checks the kernels tune chose, from its database
    budget: object = DEFAULT
    store: object = None  # the tuning database (compiler.tuning.tunedb), None: this run only
    # every workgroup's values checked, or the output tiles of a sample of workgroups
    # (the default: a full-size model has thousands of workgroups per kernel)
    check_all: bool = False


CHECKS: list[tuple[str, Callable[[VerifyContext], CheckResult]]] = []


def verify_check(name: str):
    """Registers a check; checks run in registration order."""
    def deco(fn):
        CHECKS.append((name, fn))
        return fn
    return deco


def compare(ours: np.ndarray, theirs: np.ndarray, dtype: str,
            scale=None) -> tuple[bool, float, float]:
    """(match, max abs error, tolerance): |a-b| <= tol*(1+|b|) + lam*sqrt(2)*scale, the
    last term the rounding both evaluations may carry (compiler.ir.errorbound; ``scale``
    None: none); NaN/inf must coincide."""
    tol = numerics.tolerance("plan", dtype)
    extra = 0.0 if scale is None or dtype == "bool" else \
        errorbound.tolerance(theirs, scale, 0.0, np.size(theirs))
    ok, max_err = numerics.compare(ours, theirs, tol, extra)
    return ok, max_err, tol


def _rounding_note(ctx: VerifyContext) -> str:
    """The largest rounding allowance added to the constant tolerance, for the detail."""
    worst = max((float(errorbound.tolerance(0.0, s, 0.0, s.size).max())
                 for s in ctx.scales.values() if s.size), default=0.0)
    return f" (+ rounding allowance up to {worst:.2g})" if worst else ""


@verify_check("reference interpreter")
def check_reference(ctx: VerifyContext) -> CheckResult:
    """The numpy reference runs, gives the declared shapes, and is deterministic; with it,
    each output's rounding-error scale, which the later checks allow on top of their
    constant tolerance."""
    first, ctx.scales = errorbound.evaluate_with_scales(ctx.graph, ctx.inputs)
    second = evaluate(ctx.graph, ctx.inputs)
    ctx.reference = first
    problems = []
    for name, value in first.items():
        t = ctx.graph.op(name).type
        if value.shape != t.shape or value.dtype != np.dtype(DTYPES[t.dtype]):
            problems.append(f"{name}: got {value.dtype}{list(value.shape)}, expected {t}")
        if not np.array_equal(value, second[name], equal_nan=True):
            problems.append(f"{name}: two runs differ")
    nonfinite = sum(int((~np.isfinite(v.astype(np.float32))).sum()) for v in first.values()
                    if v.dtype.kind == "f")
    detail = "; ".join(problems) or (f"{len(first)} output(s), deterministic"
                                     + (f", {nonfinite} non-finite values" if nonfinite else ""))
    return CheckResult("reference interpreter", "fail" if problems else "pass", 0.0, 0.0,
                       detail)


@verify_check("onnx ReferenceEvaluator")
def check_onnx(ctx: VerifyContext) -> CheckResult:
    """For an ONNX model: our import + reference equals onnx's own reference evaluator."""
    name = "onnx ReferenceEvaluator"
    meta = ctx.graph.meta
    if "onnx_model" not in meta:
        return CheckResult(name, "skip", detail="not an ONNX model")
    from onnx.reference import ReferenceEvaluator  # lazy: ~1 s of start-up for every command

    from onnx.helper import tensor_dtype_to_np_dtype  # lazy: as above

    model = meta["onnx_model"]
    declared = {vi.name: tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
                for vi in model.graph.input}
    # our i32 holds ONNX's int64 (narrowed at import) and a rank-0 input is (1,) here:
    # hand onnx the declared dtype and rank
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in model.graph.input}
    feeds = {}
    for onnx_name, g_name in meta["onnx_inputs"].items():
        v = ctx.inputs[g_name].astype(declared[onnx_name])
        feeds[onnx_name] = v.reshape(()) if ranks[onnx_name] == 0 else v
    out_names = list(meta["onnx_outputs"])
    try:
        with np.errstate(all="ignore"):  # NaNs from log(<0) are compared, not warned about
            theirs = ReferenceEvaluator(model).run(out_names, feeds)
    except Exception as exc:  # noqa: BLE001 -- onnx's evaluator, not ours, cannot run it
        # (its GatherElements uses numpy.choose, at most 64 entries along the axis: BERT's
        # position ids at sequence 128)
        first = str(exc).splitlines()[0] if str(exc) else ""
        return CheckResult(name, "skip", detail=f"onnx.reference.ReferenceEvaluator cannot "
                           f"run this model ({type(exc).__name__}: {first[:160]})")
    worst, ok, details = 0.0, True, []
    tol_used = 0.0
    for onnx_name, value in zip(out_names, theirs):
        g_name = meta["onnx_outputs"][onnx_name]
        ours = ctx.reference[g_name] if g_name in ctx.reference else \
            evaluate(ctx.graph, ctx.inputs, keep_all=True)[g_name]
        match, err, tol = compare(ours, value, ctx.graph.op(g_name).type.dtype,
                                  ctx.scales.get(g_name))
        worst, tol_used = max(worst, err), max(tol_used, tol)
        if not match:
            ok = False
            details.append(f"{onnx_name}: max error {err:.3g}")
    return CheckResult(name, "pass" if ok else "fail", worst, tol_used,
                       ("; ".join(details) or f"{len(out_names)} output(s) match")
                       + _rounding_note(ctx))


@verify_check("fused plan")
def check_fused_plan(ctx: VerifyContext) -> CheckResult:
    """Both fusion plans, run dispatch by dispatch (only boundary tensors survive between
    dispatches), equal the unfused graph."""
    worst, details, ok, tol = 0.0, [], True, 0.0
    for aggressive in (True, False):
        plan = fuse(ctx.graph, aggressive=aggressive, horizontal_gemms=aggressive)
        got = execute_plan(plan, ctx.inputs)
        for name, want in ctx.reference.items():
            match, err, t = compare(got[name], want, ctx.graph.op(name).type.dtype,
                                    ctx.scales.get(name))
            worst, tol = max(worst, err), max(tol, t)
            ok = ok and match
        details.append(f"{plan.mode}: {plan.num_dispatches} dispatch(es)")
    return CheckResult("fused plan", "pass" if ok else "fail", worst, tol,
                       "; ".join(details) + _rounding_note(ctx))


@verify_check("simulated kernels")
def check_simulated(ctx: VerifyContext) -> CheckResult:
    """The tuned kernels (a small seeded search on gfx942), run functionally by gpusim,
    equal numpy: what the simulator times is a correct program."""
    try:
        result = tune(ctx.graph, DEFAULT_ARCH, budget=ctx.budget, seed=ctx.seed,
                      baseline=False, mode="auto", store=ctx.store,
                      check_all=ctx.check_all, workers=default_workers())
    except GraphError as e:  # a dispatch no schedule lowers: this check fails, the
        # schedule-free checks before it still stand
        return CheckResult("simulated kernels", "fail", None, 1e-3,
                           f"not scheduled: {e}")
    worst = max((d.max_error or 0.0) for d in result.dispatches)
    bad = [d.name for d in result.mismatches]
    run = [d for d in result.dispatches if not d.check.startswith(sampling.SHARED_PREFIX)]
    sampled = sum(" of " in d.check for d in run)
    what = ("every workgroup of every dispatch checked" if ctx.check_all else
            f"{len(run)} distinct kernel(s) run, one instance each (the other "
            f"{len(result.dispatches) - len(run)} dispatch(es) run one of them); "
            f"{sampled} of those on a sample of workgroups, the rest whole")
    detail = (f"{len(result.dispatches)} dispatch(es), {result.mode} plan, "
              f"{result.total_time_us:.2f} us predicted on gfx942; {what}")
    if bad:
        detail = "mismatch in " + ", ".join(bad) + "; " + detail
    return CheckResult("simulated kernels", "fail" if bad else "pass", worst,
                       numerics.tolerance("simulated", "f32"), detail)


def run_checks(spec: str, graph: Graph, seed: int = 0, store=None, budget=DEFAULT,
               check_all: bool = False) -> list[CheckResult]:
    ctx = VerifyContext(spec, graph, seed, random_inputs(graph, seed), budget=budget,
                        store=store, check_all=check_all)
    results = []
    for name, fn in CHECKS:
        r = fn(ctx)
        if r is None:
            raise GraphError(f"verify check {name!r} returned no result")
        results.append(r)
    return results


STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "skip": "yellow"}


def run(args) -> int:
    graph = common.load(args)
    with store_of(args) as store:
        results = run_checks(args.model, graph, args.seed, store,
                             DEFAULT if args.budget is None else args.budget,
                             args.check_all)
    failed = any(r.failed for r in results)
    if args.json:
        common.emit_json({"model": args.model, "graph": graph.name, "seed": args.seed,
                          "ok": not failed, "checks": [asdict(r) for r in results]})
        return 1 if failed else 0
    table = Table(title=f"verify {args.model} (seed {args.seed})")
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("max error", justify="right")
    table.add_column("tolerance", justify="right")
    table.add_column("detail", overflow="fold")
    for r in results:
        table.add_row(r.name, f"[{STATUS_STYLE[r.status]}]{r.status}[/]",
                      "" if r.max_error is None else f"{r.max_error:.3g}",
                      "" if r.tolerance is None else f"{r.tolerance:.0e}", r.detail)
    con = common.console()
    con.print(table)
    con.print("[bold red]MISMATCH[/]" if failed else "[bold green]OK[/]")
    return 1 if failed else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("verify", help="check a model's results against references")
    common.add_model(p)
    common.add_seed(p)
    p.add_argument("--budget", type=common.budget_value, default=None, metavar="N",
                   help="candidates per dispatch for the simulated-kernels check (default: "
                        "tune's default; Nx: N times it); the same budget as `tune` reuses "
                        "its tuning database, so verify checks the kernels tune chose")
    p.add_argument("--check-all", action="store_true",
                   help="check the values of every workgroup of every dispatch, not the "
                        "first instance of each distinct kernel on the output tiles of a "
                        "sample of its workgroups")
    add_cache_options(p)
    common.add_json(p)
    p.set_defaults(func=run)
