"""How long `fuse` takes on a long elementwise chain (the fusion core's bookkeeping cost).

    python tools/bench_fuse.py [--ops 3000] [--repeats 3]

Builds x -> exp/neg/relu/... repeated ``--ops`` times on a 64x256 input, runs
``compiler.passes.fuse`` ``--repeats`` times and prints the median wall time and the
dispatch count (one: the whole chain is one elementwise dispatch). Wall-clock figures
depend on machine load; say so when quoting them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.graph import Graph  # noqa: E402  (after the path set-up above)
from compiler.passes import fuse  # noqa: E402

KINDS = ("exp", "neg", "relu", "tanh", "sigmoid")


def chain(n: int) -> Graph:
    g = Graph(f"chain{n}")
    v = g.input("x", (64, 256))
    for i in range(n):
        v = g.unary(KINDS[i % len(KINDS)], v)
    g.output(v)
    return g


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.ops < 1 or args.repeats < 1:
        p.error("--ops and --repeats must be at least 1")
    g = chain(args.ops)
    times, n = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        plan = fuse(g)
        times.append(time.perf_counter() - t0)
        n = len(plan.dispatches)
    print(f"fuse on a {args.ops}-op elementwise chain: median {statistics.median(times):.3f} s "
          f"over {args.repeats} run(s), {n} dispatch(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
