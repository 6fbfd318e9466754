"""Spearman correlation of the analytic ranking with the simulated time, per benchmark
dispatch whose every point is known, for the ranking at a git revision (``--before``)
and the working tree's, on the same simulated times.

The simulated times are read from the tuning database that ``python -m
compiler.tuning.bench_search --generate --cache DB`` filled (every point of each
dispatch its best-known file marks ``every point``); nothing is simulated here. All
times are gpusim's simulated predictions.

    python tools/rank_quality.py --cache /tmp/bench.db [--before REV] [--only TEXT]
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

from gpusim.hw import DEFAULT_ARCH, get_arch  # noqa: E402

from compiler.lower import lower  # noqa: E402
from compiler.tuning import bench_search, rank, tunedb  # noqa: E402
from bench_rank import BEFORE, before_rank  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="the benchmark's tuning database")
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--only", default=None)
    p.add_argument("--arch", default=DEFAULT_ARCH)
    a = p.parse_args(argv)
    if not os.path.exists(a.cache):
        print(f"rank_quality: no database at {a.cache}", file=sys.stderr)
        return 2
    arch = get_arch(a.arch)
    store = tunedb.open_store(a.cache)
    best = bench_search.load_best()
    version = tunedb.model_version()
    if best.get("model_version") != version:
        print("rank_quality: search_best.json is from another model version; "
              "run bench_search --generate first", file=sys.stderr)
        return 2
    try:
        old = before_rank(a.before)
    except subprocess.CalledProcessError as e:
        print(f"rank_quality: cannot read revision {a.before!r}: {e.stderr.strip()}",
              file=sys.stderr)
        return 2
    print(f"| dispatch | points | Spearman before ({a.before}) | after |")
    print("|---|---|---|---|")
    for it in bench_search.items(arch, a.only):
        e = best["dispatches"].get(it.id)
        if not e or e["method"] != "every point":
            continue
        keys = [tunedb.score_key(it.fingerprint, arch, c.knobs, version) for c in it.legal]
        rows = store.get_many("scores", keys)
        xs_old, xs_new, ts = [], [], []
        for c, k in zip(it.legal, keys):
            t = rows.get(k, {}).get("time_us")
            if not t:
                continue
            try:
                kern = lower(it.graph, it.dispatch, c.knobs, arch)
            except Exception:  # noqa: BLE001 - a point that does not lower has no rank
                continue
            eo, en = old.estimate(kern, arch), rank.estimate(kern, arch)
            if math.isfinite(eo.us) and math.isfinite(en.us):
                xs_old.append(eo.us)
                xs_new.append(en.us)
                ts.append(t)
        print(f"| {it.id} | {len(ts)} | {rank.spearman(xs_old, ts):.2f} | "
              f"{rank.spearman(xs_new, ts):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
