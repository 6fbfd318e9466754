"""How fast the analytic ranking (``compiler.tuning.rank``) estimates a schedule space:
points per second, before and after, measured in the same run.

"before" is ``rank.py`` and ``gpusim/occupancy.py`` as they were at ``--before`` (a git
revision, default the commit this work started from), loaded from git beside the current
modules; "after" is the working tree. Each repeat ranks every legal point of each space
(lowering included: the ranking lowers every point) with one then the other, alternating,
so both see the same machine load; the figures are medians over ``--repeats`` and the
ratio is of those medians. The estimates themselves differ where the model changed
after ``--before`` (the Spearman of the two orders is printed: 1.00 is the same order).

    python tools/bench_rank.py                       # attention 191 points, a BERT-base GEMM
    python tools/bench_rank.py --repeats 5 --sample 40
    python tools/bench_rank.py --lazy                # every exact estimate vs rank.Ranking
    python tools/bench_rank.py --bound --before ff7b434 --spaces conv3x3,gemm,attention

``--bound`` times what the staged search does to every legal point (lower it, then its
lower bound ``estimate(..., bound=True)``; the exact estimates are counted for the top
only), split into lowering and estimating, and says whether every estimate is the same
before and after (the fifth round's fast walk must not change one). ``--spaces`` picks
spaces by key (default: the three below); the machine's load average is printed before
and after.

``--lazy`` compares, on the working tree alone, estimating every point exactly (what the
search did before ``rank.Ranking``) with what the staged search now does: every point's
lower bound (no VGPR count), then the exact estimates best-first until the top of the
default budget is known; it prints both rates, how many exact estimates the lazy order
counted and whether its top equals the full sort's.

Wall times on whatever machine runs it (its load included); nothing here is simulated.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import random
import statistics
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpusim.hw import get_arch  # noqa: E402

from compiler.fusion import fuse  # noqa: E402
from compiler.ir.models import load_model  # noqa: E402
from compiler.lower import lower  # noqa: E402
from compiler.schedule import schedule_space  # noqa: E402
from compiler.tuning import rank  # noqa: E402
from compiler.tuning.bench_search import _conv  # noqa: E402
from compiler.tuning.search import legal_candidates  # noqa: E402

#: (label, model spec, dispatch index): the issue's 191-point attention space and the
#: BERT-base layer's first GEMM (QKV projection with its bias)
SPACES = (("attention h8 s2048 d64 (fused)", "attention:heads=8,seq=2048,dim=64", 0),
          ("BERT-base QKV GEMM", "encoder_layer:seq=128,hidden=768,heads=12,ffn=3072", 0),
          ("transpose+add 2048", "transpose_add:rows=2048,cols=2048", 0))
#: every space ``--spaces`` can name: the three above, ResNet-50's 3x3 conv (the
#: benchmark's ``conv3x3-56x56x64``), a layer norm and a depthwise conv
NAMED = {"attention": SPACES[0], "gemm": SPACES[1], "transpose": SPACES[2],
         "conv3x3": ("conv3x3 56x56x64 (NHWC, bias+ReLU)",
                     _conv("conv3x3", (1, 56, 56, 64), (64, 3, 3, 64), (1, 1),
                           (1, 1, 1, 1)), 0),
         "layernorm": ("layer norm 4096x768", "layernorm:rows=4096,cols=768", 0),
         "dwconv3x3": ("dwconv3x3 56x56x128",
                       _conv("dwconv3x3", (1, 56, 56, 128), (128, 3, 3, 1), (1, 1),
                             (1, 1, 1, 1), groups=128), 0)}


def _space(spec, which: int, arch):
    """(graph, dispatch, legal points) of a model spec or a graph builder."""
    g = spec() if callable(spec) else load_model(spec)
    d = fuse(g).dispatches[which]
    legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
    return g, d, legal


def _load() -> str:
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"
BEFORE = "bf19347"


def _module_at(rev: str, path: str, name: str) -> types.ModuleType:
    """The module at ``path`` as it was at git revision ``rev``, loaded as ``name``."""
    src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(name)
    mod.__file__ = os.path.join(ROOT, path)
    sys.modules[name] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def before_rank(rev: str) -> types.ModuleType:
    """``rank`` at ``rev`` estimating occupancy with ``occupancy`` at ``rev``."""
    occ = _module_at(rev, "gpusim/occupancy.py", "_bench_occupancy_before")
    old = _module_at(rev, "compiler/tuning/rank.py", "_bench_rank_before")
    old.occupancy = occ.occupancy
    return old


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=BEFORE, help="git revision of 'before'")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sample", type=int, default=0,
                   help="rank a seeded sample of this many points per space (0: every point)")
    p.add_argument("--arch", default="gfx942")
    p.add_argument("--lazy", action="store_true",
                   help="every exact estimate against rank.Ranking's lazy order")
    p.add_argument("--bound", action="store_true",
                   help="what the search does to every point: lower + lower bound")
    p.add_argument("--spaces", default="attention,gemm,transpose",
                   help=f"comma-separated keys of {', '.join(NAMED)}")
    a = p.parse_args(argv)
    if a.repeats < 1 or a.sample < 0:
        print("bench_rank: --repeats must be at least 1 and --sample at least 0",
              file=sys.stderr)
        return 2
    unknown = [x for x in a.spaces.split(",") if x not in NAMED]
    if unknown:
        print(f"bench_rank: unknown space {unknown[0]!r} (one of {', '.join(NAMED)})",
              file=sys.stderr)
        return 2
    a.chosen = [NAMED[x] for x in a.spaces.split(",")]
    if a.lazy:
        return lazy(a)
    try:
        old = before_rank(a.before)
    except subprocess.CalledProcessError as e:
        print(f"bench_rank: cannot read revision {a.before!r}: {e.stderr.strip()}",
              file=sys.stderr)
        return 2
    arch = get_arch(a.arch)
    if a.bound:
        return bound(a, old, arch)
    print(f"analytic ranking, points per second (wall, this machine; median of "
          f"{a.repeats}); before = {a.before}, after = working tree")
    print(f"{'space':34} {'points':>6} {'before':>8} {'after':>8} {'ratio':>6}  order rho")
    for label, spec, which in a.chosen:
        g, d, legal = _space(spec, which, arch)
        if a.sample and a.sample < len(legal):
            legal = random.Random(0).sample(legal, a.sample)
        times = {"before": [], "after": []}
        results = {}
        for _ in range(a.repeats):
            for name, mod in (("before", old), ("after", rank)):
                t0 = time.perf_counter()
                results[name] = mod.rank_candidates(g, d, legal, arch, lower)
                times[name].append(time.perf_counter() - t0)
        pairs = [(x.us, y.us) for x, y in zip(results["before"], results["after"])
                 if math.isfinite(x.us) and math.isfinite(y.us)]
        rho = rank.spearman([x for x, _ in pairs], [y for _, y in pairs])
        n = len(legal)
        pb = n / statistics.median(times["before"])
        pa = n / statistics.median(times["after"])
        print(f"{label:34} {n:6d} {pb:8.1f} {pa:8.1f} {pa / pb:5.1f}x  {rho:9.2f}")
    return 0


def lazy(a) -> int:
    from compiler.tuning.search import default_budget
    arch = get_arch(a.arch)
    print(f"ranking a space for the staged search, points per second (wall, this machine; "
          f"median of {a.repeats}): every point exact vs bounds + lazy exact top")
    print(f"{'space':34} {'points':>6} {'exact':>8} {'lazy':>8} {'ratio':>6} {'counted':>8}"
          f"  same top")
    for label, spec, which in a.chosen:
        g, d, legal = _space(spec, which, arch)
        k = max(1, math.ceil(default_budget(len(legal)) / 2))
        times = {"exact": [], "lazy": []}
        for _ in range(a.repeats):
            rank._LATER.clear()
            t0 = time.perf_counter()
            exact = rank.rank_candidates(g, d, legal, arch, lower)
            top = sorted(range(len(legal)), key=lambda i: (exact[i].us, i))[:k]
            times["exact"].append(time.perf_counter() - t0)
            rank._LATER.clear()
            counted = []
            t0 = time.perf_counter()
            bounds = rank.rank_candidates(g, d, legal, arch, lower, bound=True)

            def exact_of(indices):  # rank.Ranking asks for a batch of points
                counted.extend(indices)
                return [rank.estimate(lower(g, d, legal[i].knobs, arch), arch)
                        for i in indices]
            got = rank.Ranking(bounds, exact_of).best(k)
            times["lazy"].append(time.perf_counter() - t0)
        n = len(legal)
        pe = n / statistics.median(times["exact"])
        pl = n / statistics.median(times["lazy"])
        print(f"{label:34} {n:6d} {pe:8.1f} {pl:8.1f} {pl / pe:5.1f}x {len(counted):8d}"
              f"  {'yes' if got == top else 'NO'}")
    return 0


def bound(a, old, arch) -> int:
    """Every point lowered and bounded, before and after, alternating per repeat; the
    lowering is the same code in both (timed apart, once per point and repeat, and
    handed to both estimators so they see the same kernels)."""
    print(f"ranking's first stage (lower + lower bound of every legal point), points per "
          f"second (wall, this machine; median of {a.repeats}); before = {a.before}, "
          f"after = working tree; load average {_load()}")
    print(f"{'space':36} {'points':>6} {'lower ms':>8} {'est before':>10} "
          f"{'est after':>9} {'pts/s before':>12} {'pts/s after':>11} {'ratio':>6}  same")
    for label, spec, which in a.chosen:
        g, d, legal = _space(spec, which, arch)
        if a.sample and a.sample < len(legal):
            legal = random.Random(0).sample(legal, a.sample)
        times = {"lower": [], "before": [], "after": []}
        same = True
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            kernels = []
            for c in legal:
                try:
                    kernels.append(lower(g, d, c.knobs, arch))
                except Exception:  # noqa: BLE001 - as rank_candidates: no estimate
                    kernels.append(None)
            times["lower"].append(time.perf_counter() - t0)
            got = {}
            for name, mod in (("before", old), ("after", rank)):
                mod._LATER.clear()
                t0 = time.perf_counter()
                got[name] = [mod.estimate(k, arch, True) if k is not None else None
                             for k in kernels]
                times[name].append(time.perf_counter() - t0)
            same = same and all(
                (x is None and y is None) or (x.us, x.features, x.error)
                == (y.us, y.features, y.error) for x, y in zip(got["before"], got["after"]))
        n = len(legal)
        lo = statistics.median(times["lower"])
        eb, ea = statistics.median(times["before"]), statistics.median(times["after"])
        pb, pa = n / (lo + eb), n / (lo + ea)
        print(f"{label:36} {n:6d} {lo / n * 1e3:8.1f} {eb / n * 1e3:10.1f} "
              f"{ea / n * 1e3:9.1f} {pb:12.1f} {pa:11.1f} {pa / pb:5.1f}x  "
              f"{'yes' if same else 'NO'}")
    print(f"(ms per point; load average {_load()} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
