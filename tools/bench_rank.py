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
from compiler.tuning.search import legal_candidates  # noqa: E402

#: (label, model spec, dispatch index): the issue's 191-point attention space and the
#: BERT-base layer's first GEMM (QKV projection with its bias)
SPACES = (("attention h8 s2048 d64 (fused)", "attention:heads=8,seq=2048,dim=64", 0),
          ("BERT-base QKV GEMM", "encoder_layer:seq=128,hidden=768,heads=12,ffn=3072", 0),
          ("transpose+add 2048", "transpose_add:rows=2048,cols=2048", 0))
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
    a = p.parse_args(argv)
    if a.lazy:
        return lazy(a)
    if a.repeats < 1 or a.sample < 0:
        print("bench_rank: --repeats must be at least 1 and --sample at least 0",
              file=sys.stderr)
        return 2
    try:
        old = before_rank(a.before)
    except subprocess.CalledProcessError as e:
        print(f"bench_rank: cannot read revision {a.before!r}: {e.stderr.strip()}",
              file=sys.stderr)
        return 2
    arch = get_arch(a.arch)
    print(f"analytic ranking, points per second (wall, this machine; median of "
          f"{a.repeats}); before = {a.before}, after = working tree")
    print(f"{'space':34} {'points':>6} {'before':>8} {'after':>8} {'ratio':>6}  order rho")
    for label, spec, which in SPACES:
        g = load_model(spec)
        d = fuse(g).dispatches[which]
        legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
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
    for label, spec, which in SPACES:
        g = load_model(spec)
        d = fuse(g).dispatches[which]
        legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
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

            def exact_of(i):
                counted.append(i)
                return rank.estimate(lower(g, d, legal[i].knobs, arch), arch)
            got = rank.Ranking(bounds, exact_of).best(k)
            times["lazy"].append(time.perf_counter() - t0)
        n = len(legal)
        pe = n / statistics.median(times["exact"])
        pl = n / statistics.median(times["lazy"])
        print(f"{label:34} {n:6d} {pe:8.1f} {pl:8.1f} {pl / pe:5.1f}x {len(counted):8d}"
              f"  {'yes' if got == top else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
