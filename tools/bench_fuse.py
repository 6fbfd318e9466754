"""How long `fuse` takes: on a long elementwise chain (the fusion core's bookkeeping
cost), or on an ONNX model (``--model``: the rules' cost on a real graph).

    python tools/bench_fuse.py [--ops 3000] [--repeats 3]
    python tools/bench_fuse.py --model bert_base.onnx [--repeats 3]

Without ``--model`` it builds x -> exp/neg/relu/... repeated ``--ops`` times on a 64x256
input; runs ``compiler.fusion.fuse`` ``--repeats`` times and prints the median wall time
and the dispatch count (one: the whole chain is one elementwise dispatch). With
``--model`` it imports the file once (not timed) and times ``fuse`` in both modes
(aggressive, conservative). Full-size transformers (BERT-base seq 128, ~650 ops) are the
case to watch: an O(result size) check per merge attempt made them take minutes. Wall-clock
figures depend on machine load; say so when quoting them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.ir.graph import Graph, GraphError  # noqa: E402  (after the path set-up above)
from compiler.fusion import fuse  # noqa: E402

KINDS = ("exp", "neg", "relu", "tanh", "sigmoid")


def chain(n: int) -> Graph:
    g = Graph(f"chain{n}")
    v = g.input("x", (64, 256))
    for i in range(n):
        v = g.unary(KINDS[i % len(KINDS)], v)
    g.output(v)
    return g


def _time(g: Graph, repeats: int, aggressive: bool = True) -> tuple[float, int]:
    times, n = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan = fuse(g, aggressive=aggressive)
        times.append(time.perf_counter() - t0)
        n = len(plan.dispatches)
    return statistics.median(times), n


def _load(path: str) -> Graph:
    from compiler.frontends.onnx import load_onnx
    return load_onnx(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--model", metavar="PATH",
                   help="time fuse on this .onnx file (both modes) instead of the chain")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.ops < 1 or args.repeats < 1:
        p.error("--ops and --repeats must be at least 1")
    if args.model:
        try:
            g = _load(args.model)
        except GraphError as exc:   # the frontend's message names the problem and the fix
            print(f"bench_fuse: {exc}", file=sys.stderr)
            return 2
        for aggressive in (True, False):
            med, n = _time(g, args.repeats, aggressive)
            mode = "aggressive" if aggressive else "conservative"
            print(f"fuse {mode} on {Path(args.model).name} ({len(g)} ops): median "
                  f"{med:.3f} s over {args.repeats} run(s), {n} dispatch(es)")
        return 0
    g = chain(args.ops)
    med, n = _time(g, args.repeats)
    print(f"fuse on a {args.ops}-op elementwise chain: median {med:.3f} s "
          f"over {args.repeats} run(s), {n} dispatch(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
