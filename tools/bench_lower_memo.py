"""How much the shared split-K reductions (``compiler.lower.contraction.reduce_kernel``)
save when ranking a space: every legal point's lower bound (lowering included, as the
staged search does), with the memo and with each point's reduction built afresh,
alternating, medians over ``--repeats``; first it checks that both give the same
kernels on every point. Wall times on whatever machine runs it (load printed)::

    python tools/bench_lower_memo.py --spaces conv3x3,gemm
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import bench_rank  # noqa: E402
from gpusim.hw import get_arch  # noqa: E402

from compiler.lower import contraction, lower  # noqa: E402
from compiler.tuning import rank  # noqa: E402


def afresh(graph, dispatch, gemm, s, sk=None):
    return contraction._Builder(graph, dispatch, gemm, s, phase="reduce",
                                stream_k=sk).build()


def _texts(g, d, knobs, arch) -> list:
    out = []
    for k in knobs:
        try:
            out.append(repr(lower(g, d, k, arch)))
        except Exception as e:  # noqa: BLE001 - a refusal must be the same refusal
            out.append(f"{type(e).__name__}: {e}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spaces", default="conv3x3,gemm", help=f"of {sorted(bench_rank.NAMED)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--arch", default="gfx942")
    a = p.parse_args(argv)
    arch = get_arch(a.arch)
    memo = contraction.reduce_kernel
    for name in a.spaces.split(","):
        label, spec, which = bench_rank.NAMED[name]
        g, d, legal = bench_rank._space(spec, which, arch)
        knobs = [c.knobs for c in legal]
        contraction.reduce_kernel = afresh
        plain = _texts(g, d, knobs, arch)
        contraction.reduce_kernel = memo
        same = sum(x == y for x, y in zip(plain, _texts(g, d, knobs, arch)))
        ts: dict = {"afresh": [], "memo": []}
        for _ in range(a.repeats):
            for lab, fn in (("afresh", afresh), ("memo", memo)):
                contraction.reduce_kernel = fn
                g.__dict__.pop("_analysed_gemms", None)
                rank._LATER.clear()
                rank._LATER_BY_BODY.clear()
                t = time.perf_counter()
                rank.rank_candidates(g, d, knobs, arch, lower, bound=True)
                ts[lab].append(time.perf_counter() - t)
        contraction.reduce_kernel = memo
        f, m = statistics.median(ts["afresh"]), statistics.median(ts["memo"])
        print(f"{label}: {len(knobs)} points, {same} identical kernels; afresh {f:.2f} s "
              f"({len(knobs) / f:.0f} points/s), shared {m:.2f} s ({len(knobs) / m:.0f} "
              f"points/s), ratio {f / m:.2f}; load {open('/proc/loadavg').read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
