"""The search benchmark: found/best against simulations, per strategy and budget.

Why: a search is measured by how close its answer comes to the best point of the space
and how many simulations it spent (Ansor, tinygrad's BEAM and Triton's pruned autotuner
are measured that way). ``python -m compiler.tuning.bench_search`` runs, on realistic
dispatches of the built-in models (attention 512 to 4096 keys with head dims 64 and 128,
its split plan, a BERT-base and a GPT-2 layer's GEMMs with their epilogues, 1x1, 3x3, 7x7
and depthwise convolutions, norms over rows and over channels, softmax, transposes),
the strategies ``random`` (the former uniform sample), ``ranked`` (the top of the analytic
ranking only) and ``staged`` (the default: ranking, exploration, refinement) at several
budgets, and prints per strategy and budget: found/best (median, 90th percentile, worst),
simulations, wall time; and the Spearman correlation of the analytic ranking with the
simulated time on the dispatches whose every point is known.

Best-known times are stored in ``search_best.json`` beside this file with the timing-model
version (``tunedb.model_version()``) they were computed under; ``--generate`` recomputes
them (every legal point where the space has at most ``--every-limit`` points, else the
best of a long staged search and a random search of the same budget; the file says which)
and stops starting new dispatches after ``--time-box`` seconds, keeping what it finished.
Every simulation goes through the tuning database (``--cache``), so a benchmark run after
a generation re-simulates nothing it already knows: "simulations" counts the points each
strategy asked for, cached or not, and the wall time is the search's own with a warm
database. All times are simulated predictions (gpusim), not measurements.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gpusim.hw import DEFAULT_ARCH, get_arch

from compiler.fusion import fuse
from compiler.ir import builders
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.lower import dispatch_kind
from compiler.schedule import schedule_space
from compiler.tuning import rank, tunedb
from compiler.tuning.search import (_estimates, default_budget, legal_candidates,
                                    tune_dispatches)

BEST_FILE = Path(__file__).with_name("search_best.json")
STRATEGIES = ("random", "ranked", "staged")
BUDGETS = ("4", "8", "default", "32")


@dataclass(frozen=True)
class Case:
    """A model and a plan; every distinct dispatch of it is a benchmark dispatch."""
    name: str
    build: Callable[[], Graph]
    split_attention: bool = False


def _model(spec: str) -> Callable[[], Graph]:
    return lambda: load_model(spec)


def _conv(name: str, x, w, stride, padding, groups=1) -> Callable[[], Graph]:
    """An NHWC convolution + bias + ReLU (the ResNet/MobileNet epilogue)."""
    def build():
        g = Graph(name)
        xi = g.input("x", x)
        wi = g.input("w", w)
        b = g.input("b", (w[0],))
        y = g.conv2d(xi, wi, data_format="NHWC", stride=stride, padding=padding,
                     groups=groups)
        g.output(g.relu(g.add(y, b)))
        return g
    return build


def _channel_norm() -> Graph:
    """Layer norm over the channels of an NCHW activation (a strided reduction axis)."""
    g = Graph("channel_norm")
    x = g.input("x", (1, 256, 56 * 56))
    g.output(builders.layer_norm(g, x, axis=1))
    return g


#: the benchmark's models; a BERT-base layer is encoder_layer at hidden 768, 12 heads, FFN
#: 3072, 128 tokens; GPT-2's MLP is mlp at hidden 768, FFN 3072, 1024 tokens
CASES = (
    Case("attn-h12-s512-d64", _model("attention:heads=12,seq=512,dim=64")),
    Case("attn-h8-s1024-d64", _model("attention:heads=8,seq=1024,dim=64")),
    Case("attn-h8-s2048-d64", _model("attention:heads=8,seq=2048,dim=64")),
    Case("attn-h8-s4096-d64", _model("attention:heads=8,seq=4096,dim=64")),
    Case("attn-h8-s512-d128", _model("attention:heads=8,seq=512,dim=128")),
    Case("attn-h8-s2048-d128", _model("attention:heads=8,seq=2048,dim=128")),
    Case("gpt2-causal-attn-h12-s1024-d64",
         _model("attention:heads=12,seq=1024,dim=64,mask=causal")),
    Case("attn-split-h8-s2048-d64", _model("attention:heads=8,seq=2048,dim=64"), True),
    Case("bert-base-layer", _model("encoder_layer:seq=128,hidden=768,heads=12,ffn=3072")),
    Case("gpt2-mlp", _model("mlp:tokens=1024,hidden=768,ffn=3072")),
    Case("conv1x1-7x7x2048-512", _model("conv_add_relu")),
    Case("conv1x1-14x14x1024-256", _model("conv_add_relu:h=14,w=14,c=1024,k=256")),
    Case("conv3x3-56x56x64", _conv("conv3x3", (1, 56, 56, 64), (64, 3, 3, 64), (1, 1),
                                   (1, 1, 1, 1))),
    Case("conv7x7-stem-224", _conv("conv7x7", (1, 224, 224, 3), (64, 7, 7, 3), (2, 2),
                                   (3, 3, 3, 3))),
    Case("dwconv3x3-56x56x128", _conv("dwconv3x3", (1, 56, 56, 128), (128, 3, 3, 1),
                                      (1, 1), (1, 1, 1, 1), groups=128)),
    Case("layernorm-4096x768", _model("layernorm:rows=4096,cols=768")),
    Case("rmsnorm-4096x4096", _model("rmsnorm:rows=4096,cols=4096")),
    Case("channel-norm-256x3136", _channel_norm),
    Case("softmax-4096x1024", _model("softmax:rows=4096,cols=1024")),
    Case("softmax-8192x512", _model("softmax:rows=8192,cols=512")),
    Case("transpose-add-2048", _model("transpose_add:rows=2048,cols=2048")),
    Case("transpose-add-4096x1024", _model("transpose_add:rows=4096,cols=1024")),
)


@dataclass
class Item:
    """One benchmark dispatch: its graph, dispatch and legal points."""
    id: str
    graph: Graph
    dispatch: object
    kind: str
    fingerprint: str
    legal: list


def items(arch, only: str | None = None) -> list:
    """Every distinct dispatch of the cases (by fingerprint), in case order."""
    seen, out = set(), []
    for case in CASES:
        if only and only not in case.name:
            continue
        g = case.build()
        plan = fuse(g, aggressive=True, attention=not case.split_attention)
        for d in plan.dispatches:
            fp = tunedb.dispatch_fingerprint(g, d)
            if fp in seen:
                continue
            seen.add(fp)
            legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
            if legal:
                out.append(Item(f"{case.name}/{d.name}", g, d, dispatch_kind(g, d), fp,
                                legal))
    return out


def _lower():
    from compiler.lower import lower
    return lower


def _budget(text: str, n: int) -> int:
    return default_budget(n) if text == "default" else int(text)


def run_strategy(item: Item, strategy: str, budget: int, arch, store, seed: int) -> dict:
    t0 = time.perf_counter()
    tuned = tune_dispatches(item.graph, [item.dispatch], arch, budget=budget, seed=seed,
                            store=store, strategy=strategy)[0]
    return {"time_us": tuned.best.time_us, "simulations": tuned.search["simulated"],
            "wall_s": time.perf_counter() - t0, "stage": tuned.search["winner_stage"]}


# ----------------------------------------------------------------------------- best-knowns
def load_best(path: Path = BEST_FILE) -> dict:
    if not path.exists():
        return {"model_version": None, "arch": None, "dispatches": {}}
    return json.loads(path.read_text())


def generate(arch, store, every_limit: int, long_budget: int, time_box: float,
             path: Path, only: str | None, seed: int) -> dict:
    """Best-known times, written after every dispatch (a time box keeps what finished)."""
    version = tunedb.model_version()
    data = load_best(path)
    if data.get("model_version") != version or data.get("arch") != arch.name:
        data = {"model_version": version, "arch": arch.name, "dispatches": {}}
    data["note"] = ("best-known simulated times (gpusim predictions, us) per benchmark "
                    "dispatch; method 'every point' simulated every legal point, 'best of "
                    "long search' is the best of a staged and a random search of "
                    "'budget' simulations each; regenerate with python -m "
                    "compiler.tuning.bench_search --generate")
    t0 = time.perf_counter()
    # the cheap ones first (small spaces, small tensors), so a time box keeps the most
    todo = sorted(items(arch, only), key=lambda it: (
        min(len(it.legal), every_limit + 1), sum(
            it.graph.op(t).type.nbytes for t in list(it.dispatch.inputs)
            + list(it.dispatch.outputs))))
    for it in todo:
        if it.id in data["dispatches"]:
            continue
        if time.perf_counter() - t0 > time_box:
            print(f"time box of {time_box:.0f} s reached; {it.id} not generated",
                  file=sys.stderr)
            continue
        t1 = time.perf_counter()
        n = len(it.legal)
        if n <= every_limit:
            best = tune_dispatches(it.graph, [it.dispatch], arch, budget=None, store=store,
                                   seed=seed)[0].best
            entry = {"method": "every point", "simulated": n}
        else:
            runs = [tune_dispatches(it.graph, [it.dispatch], arch, budget=long_budget,
                                    store=store, seed=seed, strategy=s)[0].best
                    for s in ("staged", "random")]
            best = min(runs, key=lambda s: s.time_us)
            entry = {"method": "best of long search", "budget": long_budget}
        entry.update({"best_us": best.time_us, "knobs": best.knobs, "legal": n,
                      "kind": it.kind, "generated_s": round(time.perf_counter() - t1, 1)})
        data["dispatches"][it.id] = entry
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{it.id}: {entry['method']} {best.time_us:.3f} us over {n} legal points "
              f"({entry['generated_s']} s)", file=sys.stderr)
    return data


# ----------------------------------------------------------------------------- benchmark
def _pct(xs, q):
    return float(np.percentile(np.asarray(xs, float), q)) if xs else float("nan")


def _every_point_scores(its: list, best: dict, arch, store):
    """(item, [(estimate us, simulated us)]) for the dispatches generated with every point:
    their scores are all in the database, so the estimates can be set beside them."""
    version = tunedb.model_version()
    for it in its:
        e = best["dispatches"].get(it.id)
        if not e or e["method"] != "every point":
            continue
        est = _estimates(it.graph, it.dispatch, it.fingerprint, it.legal, arch, store, version)
        keys = [tunedb.score_key(it.fingerprint, arch, c.knobs, version) for c in it.legal]
        rows = store.get_many("scores", keys)
        yield it, [(x, rows[k]["time_us"]) for x, k in zip(est, keys)
                   if k in rows and rows[k]["time_us"] and math.isfinite(x.us)]


def correlation(its: list, best: dict, arch, store) -> list:
    """(id, Spearman, points) of the analytic estimate against the simulated time."""
    return [(it.id, rank.spearman([x.us for x, _ in pairs], [t for _, t in pairs]), len(pairs))
            for it, pairs in _every_point_scores(its, best, arch, store) if len(pairs) >= 3]


def costmodel_quality(its: list, best: dict, arch, store) -> list:
    """(id, analytic rho, learned rho) on the every-point dispatches: the learned model
    (``compiler.tuning.costmodel``) fitted on the top 12 estimates, tested on the rest."""
    from compiler.tuning import costmodel
    out = []
    for it, pairs in _every_point_scores(its, best, arch, store):
        a, l = costmodel.online_quality([x for x, _ in pairs], [t for _, t in pairs])
        if not math.isnan(a):
            out.append((it.id, a, l))
    return out


def benchmark(arch, store, strategies, budgets, seeds, only=None) -> dict:
    best = load_best()
    its = [it for it in items(arch, only) if it.id in best["dispatches"]]
    missing = [it.id for it in items(arch, only) if it.id not in best["dispatches"]]
    # the analytic ranking first, timed on its own (lowering every legal point): the
    # strategies' wall times below then read the estimates from the database
    version = tunedb.model_version()
    ranking = []
    for it in its:
        t0 = time.perf_counter()
        rank.rank_candidates(it.graph, it.dispatch, it.legal, arch, _lower())
        ranking.append((len(it.legal), time.perf_counter() - t0))
        _estimates(it.graph, it.dispatch, it.fingerprint, it.legal, arch, store, version)
    rows = []
    for s in strategies:
        for b in budgets:
            found, sims, every, wall = [], [], [], 0.0
            for it in its:
                bk = best["dispatches"][it.id]["best_us"]
                for seed in seeds:
                    r = run_strategy(it, s, _budget(b, len(it.legal)), arch, store, seed)
                    found.append(r["time_us"] / bk)
                    sims.append(r["simulations"])
                    every.append(len(it.legal))
                    wall += r["wall_s"]
            rows.append({"strategy": s, "budget": b, "dispatches": len(its),
                         "median": _pct(found, 50), "p90": _pct(found, 90),
                         "worst": max(found) if found else float("nan"),
                         "within_1.05": sum(f <= 1.05 + 1e-9 for f in found),
                         "runs": len(found), "simulations": int(sum(sims)),
                         "every_point_simulations": int(sum(every)),
                         "wall_s": round(wall, 2)})
    corr = correlation(its, best, arch, store)
    return {"arch": arch.name, "model_version": tunedb.model_version(),
            "best_version": best.get("model_version"), "rows": rows,
            "spearman": [{"dispatch": i, "rho": r, "points": n} for i, r, n in corr],
            "missing": missing,
            "ranking": {"points": sum(n for n, _ in ranking),
                        "seconds": round(sum(t for _, t in ranking), 2)},
            "time_unit": "simulated microseconds (gpusim predictions, not measurements)"}


def score_exercise(choose, arch, store, only=None) -> int:
    """The lesson-12 exercise scored on every benchmark dispatch whose every point is
    known (their scores are in the database), at the default budget."""
    from compiler.lessons.search_exercise import run_choose
    best = load_best()
    found, sims, n = [], 0, 0
    for it in items(arch, only):
        e = best["dispatches"].get(it.id)
        if not e or e["method"] != "every point":
            continue
        v = run_choose(choose, it.graph, it.dispatch, arch, default_budget(len(it.legal)),
                       store)
        found.append(v.found_over_best)
        sims += v.simulations
        n += len(it.legal)
        print(f"{it.id}: {v}")
    if not found:
        print("no dispatch with every point known; run --generate first", file=sys.stderr)
        return 2
    ok = [f for f in found if not math.isnan(f)]
    print(f"exercise: found/best median {np.median(ok):.3f}, worst {max(ok):.3f}, "
          f"{sum(f <= 1.05 for f in ok)}/{len(found)} within 1.05x, {sims} simulations "
          f"({sims / n:.1%} of every point); simulated times")
    return 0


def render(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console()
    t = Table(title=f"search benchmark on {result['arch']}: found/best (simulated "
                    f"predictions), {result['rows'][0]['dispatches'] if result['rows'] else 0}"
                    f" dispatches")
    for c in ("strategy", "budget", "median", "p90", "worst", "<=1.05x", "simulations",
              "of every point", "wall s"):
        t.add_column(c, justify="left" if c in ("strategy", "budget") else "right")
    for r in result["rows"]:
        t.add_row(r["strategy"], r["budget"], f"{r['median']:.3f}", f"{r['p90']:.3f}",
                  f"{r['worst']:.3f}", f"{r['within_1.05']}/{r['runs']}",
                  str(r["simulations"]),
                  f"{r['simulations'] / max(1, r['every_point_simulations']):.1%}",
                  f"{r['wall_s']:.1f}")
    con.print(t)
    rk = result["ranking"]
    if rk["points"]:
        con.print(f"analytic ranking: {rk['points']} points lowered and estimated in "
                  f"{rk['seconds']:.1f} s ({rk['points'] / max(rk['seconds'], 1e-9):.0f} "
                  f"points/s, this machine, its load included)")
    rhos = [s["rho"] for s in result["spearman"] if not math.isnan(s["rho"])]
    if rhos:
        con.print(f"analytic ranking vs simulated time, Spearman over every point: median "
                  f"{np.median(rhos):.2f}, worst {min(rhos):.2f} on {len(rhos)} dispatches")
        for s in result["spearman"]:
            con.print(f"  {s['dispatch']}: {s['rho']:.2f} ({s['points']} points)")
    for c in result.get("costmodel", []):
        con.print(f"  cost model, {c['dispatch']}: held-out Spearman analytic "
                  f"{c['analytic_rho']:.2f}, learned {c['learned_rho']:.2f}")
    if result["missing"]:
        con.print(f"[yellow]{len(result['missing'])} dispatch(es) without a best-known time "
                  f"(not generated yet): {', '.join(result['missing'])}[/]")
    if result["best_version"] != result["model_version"]:
        con.print("[yellow]best-known times are from another timing-model version; "
                  "regenerate with --generate[/]")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m compiler.tuning.bench_search",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default=DEFAULT_ARCH)
    p.add_argument("--cache", default=None, help="tuning database (default: the usual)")
    p.add_argument("--generate", action="store_true",
                   help="compute the best-known times first (resumable)")
    p.add_argument("--every-limit", type=int, default=64,
                   help="simulate every point of spaces up to this many legal points")
    p.add_argument("--long-budget", type=int, default=48)
    p.add_argument("--time-box", type=float, default=1800.0, metavar="S")
    p.add_argument("--only", default=None, help="cases whose name contains this")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--budgets", default=",".join(BUDGETS))
    p.add_argument("--seeds", default="0")
    p.add_argument("--exercise", metavar="MODULE:FUNCTION", default=None,
                   help="score a learner's choose(points, estimates, simulate, budget) "
                        "(lesson 12) on the dispatches whose every point is known, at the "
                        "default budget, instead of the built-in strategies")
    p.add_argument("--costmodel", action="store_true",
                   help="also print the learned cost model's ranking quality against the "
                        "analytic ranking's (compiler.tuning.costmodel)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        arch = get_arch(args.arch)
        strategies = args.strategies.split(",")
        budgets = args.budgets.split(",")
        seeds = [int(s) for s in args.seeds.split(",")]
        if any(s not in STRATEGIES for s in strategies) or any(
                b != "default" and (not b.isdigit() or int(b) < 1) for b in budgets):
            raise ValueError(f"strategies from {STRATEGIES}, budgets whole numbers >= 1 or "
                             f"'default'")
    except (ValueError, KeyError) as e:
        print(f"bench_search: {e}", file=sys.stderr)
        return 2
    choose = None
    if args.exercise:
        import importlib
        mod, _, fn = args.exercise.partition(":")
        try:
            choose = getattr(importlib.import_module(mod), fn or "choose")
        except (ImportError, AttributeError, ValueError) as e:
            print(f"bench_search: --exercise {args.exercise}: {e}", file=sys.stderr)
            return 2
    store = tunedb.open_store(args.cache)
    try:
        if choose is not None:
            return score_exercise(choose, arch, store, args.only)
        if args.generate:
            generate(arch, store, args.every_limit, args.long_budget, args.time_box,
                     BEST_FILE, args.only, 0)
        result = benchmark(arch, store, strategies, budgets, seeds, args.only)
        if args.costmodel:
            its = items(arch, args.only)
            result["costmodel"] = [{"dispatch": i, "analytic_rho": a, "learned_rho": l}
                                   for i, a, l in costmodel_quality(its, load_best(), arch,
                                                                    store)]
    finally:
        store.close()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        render(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
