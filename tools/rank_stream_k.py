"""How well the analytic ranking (``compiler.tuning.rank``) orders stream-K points against
the simulator, on a few GEMMs whose tiles do not divide over the CUs (simulated
predictions of gpusim on gfx942, not measurements).

Per case: a seeded sample of the legal stream-K points (``stream_k`` 1 and 2) and as many
one-kernel points of the same space; each is estimated by the ranking and simulated as the
search scores it. Prints the Spearman correlation of estimate and simulated time over the
stream-K points alone, over the one-kernel points alone, and over both together (whether
the ranking puts stream-K on the right side of the one-kernel tiles), and the best point
of each kind by either measure.

    python tools/rank_stream_k.py [--per-kind 6]
"""
from __future__ import annotations

import argparse
import random
import sys

from compiler.fusion import fuse
from compiler.ir.graph import Graph
from compiler.lower import lower
from compiler.schedule import schedule_space
from compiler.tuning import rank
from compiler.tuning.search import score
from gpusim.hw import get_arch

ARCH = "gfx942"


def matmul(m, n, k) -> Graph:
    g = Graph(f"matmul_{m}x{k}x{n}")
    g.output(g.matmul(g.input("a", (m, k)), g.input("b", (k, n))))
    return g


def conv3x3(hw, c) -> Graph:
    """ResNet-50's 3x3 conv of a late stage, NCHW, with its bias and relu."""
    g = Graph(f"conv3x3_{hw}x{hw}_{c}")
    x, w = g.input("x", (1, c, hw, hw)), g.input("w", (c, c, 3, 3))
    y = g.conv2d(x, w, padding=(1, 1, 1, 1))
    g.output(g.relu(g.add(y, g.input("bias", (1, c, 1, 1)))))
    return g


CASES = (lambda: conv3x3(14, 256),              # 104 tiles of 16x32 on 304 CUs
         lambda: matmul(128, 768, 3072),        # BERT-base FFN down
         lambda: matmul(512, 3072, 768))        # a 512-token FFN up


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--per-kind", type=int, default=6, help="points of each kind per case")
    a = p.parse_args(argv)
    arch = get_arch(ARCH)
    print(f"ranking vs simulation on {arch.name}, {a.per_kind} points of each kind "
          f"(simulated us)")
    print(f"{'case':<26} {'rho SK':>7} {'rho 1K':>7} {'rho all':>8}  best by rank -> "
          f"simulated / best simulated")
    for case in CASES:
        g = case()
        d = fuse(g).dispatches[0]
        space = [c for c in schedule_space(g, d, arch) if c.legal and not c.fallback]
        sk = [c for c in space if c.knobs.get("stream_k")]
        one = [c for c in space if not c.knobs.get("stream_k")
               and c.knobs.get("split_k", 1) == 1]
        rnd = random.Random(0)
        pts = rnd.sample(sk, min(a.per_kind, len(sk))) + rnd.sample(one, min(a.per_kind,
                                                                             len(one)))
        rows = []
        for c in pts:
            est = rank.estimate(lower(g, d, c.knobs, arch), arch).us
            sc = score(g, d, c.knobs, arch)
            if sc.ok:
                rows.append((bool(c.knobs.get("stream_k")), est, sc.time_us, c.knobs))

        def rho(sel):
            xs = [r[1] for r in rows if sel(r)]
            ys = [r[2] for r in rows if sel(r)]
            return rank.spearman(xs, ys) if len(xs) > 2 else float("nan")
        by_rank = min(rows, key=lambda r: r[1])
        by_sim = min(rows, key=lambda r: r[2])
        kind = {True: "stream-K", False: "one kernel"}
        print(f"{g.name[:26]:<26} {rho(lambda r: r[0]):>7.2f} {rho(lambda r: not r[0]):>7.2f} "
              f"{rho(lambda r: True):>8.2f}  {kind[by_rank[0]]} {by_rank[2]:.2f} / "
              f"{kind[by_sim[0]]} {by_sim[2]:.2f}  "
              f"({sum(r[0] for r in rows)} stream-K, {sum(not r[0] for r in rows)} one kernel)")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
