"""Kernels that fill the GPU: per dispatch, the predicted time and its multiple of the
dispatch's roofline before and after split-K / flash-decoding (simulated predictions,
gpusim's model of the arch, not measurements).

"before" is the search with the splits pinned off (``split_k=1``, ``key_splits=1``,
``stream_k=0``: the one-kernel lowerings) over a seeded sample of ``--budget``
candidates; "split" the best of that and of up to ``--budget`` split-K / flash-decoding
candidates of the same space (the one the search always tries first, then a seeded
sample); "stream-K" the best of that and of up to ``--budget`` stream-K candidates
(likewise); "taps" the best of that, of up to ``--budget`` points with the staging
knobs (``tap_mask=1``, ``k_order=tap``, ``prefetch=2``; likewise, one-kernel and split
points alike) and of the search with nothing pinned (its ranking sees every point), each
scored as the search scores a candidate: what the search finds when the split points join the
same sample, without a second draw of the one-kernel points muddying the comparison. The roofline of a dispatch is the search's
(``compiler.tuning.search.roofline_us``: max(bytes across its boundary / achievable
bandwidth, flops / FP32 vector peak) plus one launch)::

    python tools/fill_bench.py                       # the built-in cases, budget 8
    python tools/fill_bench.py --budget 16 --cases conv14,conv7
    python tools/fill_bench.py --onnx tests/data/resnet_bottleneck.onnx

Cases: ResNet-50's 3x3 convolutions (NCHW, batch 1, bias and relu fused) at 28x28,
14x14 and 7x7, its 1x1 (14x14, 1024 -> 256) and its 7x7 stride-2 stem (224x224, 3 -> 64);
depthwise 3x3 (MobileNet, 14x14x512) and 7x7 (ConvNeXt, 14x14x384); BERT-base's FFN GEMMs
(128 tokens, 768 <-> 3072, bias + gelu; the up projection also at 512 tokens, whose 64x64
tiles leave a partial second wave); attention
as decoding (one query row, 12 heads of 64, 1024-4096 keys) and at 1024 queries and keys
with 4 heads.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from compiler.ir import builders  # noqa: E402
from compiler.ir.graph import Graph  # noqa: E402
from gpusim.hw import get_arch  # noqa: E402


def conv3x3(hw: int, c: int) -> Graph:
    g = Graph(f"resnet50_conv3x3_{hw}x{hw}_{c}")
    x, w = g.input("x", (1, c, hw, hw)), g.input("w", (c, c, 3, 3))
    bias = g.input("bias", (1, c, 1, 1))
    g.output(g.relu(g.add(g.conv2d(x, w, padding=(1, 1, 1, 1)), bias)))
    return g


def conv(name: str, hw: int, c: int, o: int, k: int, stride: int = 1, groups: int = 1) -> Graph:
    """A k x k NCHW convolution (same padding), bias and relu fused after it."""
    g = Graph(name)
    x, w = g.input("x", (1, c, hw, hw)), g.input("w", (o, c // groups, k, k))
    bias = g.input("bias", (1, o, 1, 1))
    p = k // 2
    y = g.conv2d(x, w, stride=(stride, stride), padding=(p, p, p, p), groups=groups)
    g.output(g.relu(g.add(y, bias)))
    return g


def ffn(tokens: int, d_in: int, d_out: int, act: bool) -> Graph:
    g = Graph(f"bert_ffn_{tokens}x{d_in}x{d_out}")
    x, w = g.input("x", (tokens, d_in)), g.input("w", (d_in, d_out))
    y = builders.bias_add(g, g.matmul(x, w), g.input("b", (d_out,)))
    g.output(builders.gelu(g, y) if act else y)
    return g


def attention(heads: int, sq: int, sk: int, d: int = 64) -> Graph:
    g = Graph(f"attention_h{heads}_q{sq}_k{sk}")
    q, k, v = (g.input(n, (heads, s, d)) for n, s in (("q", sq), ("k", sk), ("v", sk)))
    s = g.mul(g.matmul(q, g.transpose(k, (0, 2, 1))), 1.0 / math.sqrt(d))
    g.output(g.matmul(builders.softmax(g, s), v))
    return g


CASES = {
    "conv28": lambda: conv3x3(28, 128), "conv14": lambda: conv3x3(14, 256),
    "conv7": lambda: conv3x3(7, 512),
    "conv1x1": lambda: conv("resnet50_conv1x1_14x14_1024_256", 14, 1024, 256, 1),
    "stem7x7": lambda: conv("resnet50_stem7x7_224_s2", 224, 3, 64, 7, stride=2),
    "dw3x3": lambda: conv("mobilenet_dw3x3_14x14_512", 14, 512, 512, 3, groups=512),
    "dw7x7": lambda: conv("convnext_dw7x7_14x14_384", 14, 384, 384, 7, groups=384),
    "ffn_up": lambda: ffn(128, 768, 3072, True), "ffn_down": lambda: ffn(128, 3072, 768, False),
    # 512 tokens: 384 tiles of 64x64 on 304 CUs, a partial second wave (stream-K's case)
    "ffn512_up": lambda: ffn(512, 768, 3072, True),
    "decode1k": lambda: attention(12, 1, 1024), "decode4k": lambda: attention(12, 1, 4096),
    "attn1k": lambda: attention(4, 1024, 1024),
}
SPLIT_KNOBS = ("split_k", "key_splits")
#: each knob's one-kernel value
OFF = {"split_k": 1, "key_splits": 1, "stream_k": 0, "k_order": "layout", "tap_mask": 0,
       "prefetch": 1}
#: the staging knobs (``compiler.lower.conv``: the tap mask, the tap-major K order; two
#: tiles of prefetch), pinned to their defaults in the first three columns; the last
#: column adds their points
TAP_KNOBS = ("k_order", "tap_mask", "prefetch")


def _tune(graph, dispatches, arch, budget, fixed):
    from compiler.tuning.search import tune_dispatches
    return tune_dispatches(graph, dispatches, arch, budget=budget, seed=0, fixed=fixed)


def bench(graph, arch, budget: int, kinds=("contraction", "attention")) -> list[dict]:
    """One row per contraction/attention dispatch of the aggressive plan."""
    import random

    from compiler.fusion import fuse
    from compiler.lower import dispatch_kind
    from compiler.schedule import schedule_space
    from compiler.tuning.search import dispatch_bytes, dispatch_flops, roofline_us, score
    rows = []
    for d in fuse(graph).dispatches:
        if dispatch_kind(graph, d) not in kinds:
            continue
        space = schedule_space(graph, d, arch)
        knobs = {k for c in space for k in c.knobs}
        off = {k: v for k, v in OFF.items() if k in knobs}
        tap_off = {k: OFF[k] for k in TAP_KNOBS}
        plain = lambda k: all(k.get(n, v) == v for n, v in tap_off.items())  # noqa: E731
        roof = roofline_us(dispatch_bytes(graph, d), dispatch_flops(graph, d), arch)
        t0 = time.perf_counter()
        before = _tune(graph, [d], arch, budget, off)[0]
        best, split = before.best, "n/a (its tiles fill the GPU)"

        def sampled(pick):
            """The always-tried candidates of ``pick`` first, then a seeded sample."""
            cands = [c for c in space if c.legal and not c.opt_in and pick(c.knobs)]
            first = [c for c in cands if c.always]
            rest = [c for c in cands if not c.always]
            random.Random(0).shuffle(rest)
            return (first + rest)[:budget]

        if {k: v for k, v in off.items() if k not in TAP_KNOBS}:
            split = "1 (one kernel)"
            for c in sampled(lambda k: plain(k) and any(k.get(n, 1) > 1 for n in SPLIT_KNOBS)):
                sc = score(graph, d, c.knobs, arch)
                if sc.ok and sc.time_us < best.time_us:
                    best = sc
                    split = {k: c.knobs[k] for k in SPLIT_KNOBS + ("split_reduce",)
                             if k in c.knobs}
        after_split, sk_choice = best, split
        for c in sampled(lambda k: plain(k) and k.get("stream_k", 0) > 0):
            sc = score(graph, d, c.knobs, arch)
            if sc.ok and sc.time_us < best.time_us:
                best = sc
                sk_choice = {"stream_k": c.knobs["stream_k"],
                             "tile": f"{c.knobs['BM']}x{c.knobs['BN']}x{c.knobs['BK']}"}
        after_sk, tap_choice = best, sk_choice
        free = _tune(graph, [d], arch, budget, {})[0].best if any(
            n in knobs for n in TAP_KNOBS) else None
        for knobs_c, sc in ([(c.knobs, None) for c in sampled(lambda k: not plain(k))]
                            + ([(free.knobs, free)] if free else [])):
            sc = sc or score(graph, d, knobs_c, arch)
            if sc.ok and sc.time_us < best.time_us:
                best = sc
                tap_choice = {n: knobs_c[n] for n in TAP_KNOBS + ("split_k", "split_reduce",
                                                               "stream_k", "mma")
                              if n in knobs_c}
                if "BM" in knobs_c:
                    tap_choice["tile"] = f"{knobs_c['BM']}x{knobs_c['BN']}x{knobs_c['BK']}"
        rows.append({"graph": graph.name, "dispatch": d.name, "kind": before.kind,
                     "roofline_us": roof, "before_us": before.best.time_us,
                     "split_us": after_split.time_us, "split": split,
                     "after_us": after_sk.time_us, "chosen": sk_choice,
                     "taps_us": best.time_us, "taps": tap_choice,
                     "wall_s": time.perf_counter() - t0})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=8, help="candidates per dispatch (default 8)")
    p.add_argument("--arch", default="gfx942")
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--onnx", help="every contraction/attention dispatch of this model instead")
    args = p.parse_args(argv)
    arch = get_arch(args.arch)
    if args.onnx:
        from compiler.frontends.onnx import load_onnx
        graphs = [load_onnx(args.onnx)]
    else:
        bad = [c for c in args.cases.split(",") if c not in CASES]
        if bad:
            print(f"fill_bench: no case {bad[0]!r}; cases: {', '.join(CASES)}", file=sys.stderr)
            return 2
        graphs = [CASES[c]() for c in args.cases.split(",")]
    rows = []
    print(f"{'dispatch':40} {'roof us':>7} {'before':>8} {'x':>5} {'split':>8} {'x':>5} "
          f"{'stream-K':>8} {'x':>5} {'taps':>8} {'x':>5}  chosen   (simulated predictions, "
          f"{arch.name}, budget {args.budget})")
    for g in graphs:
        for r in bench(g, arch, args.budget):
            rows.append(r)
            xb, xs, xa, xt = (r[k] / r["roofline_us"]
                              for k in ("before_us", "split_us", "after_us", "taps_us"))
            print(f"{(r['graph'] + '/' + r['dispatch'])[-40:]:40} {r['roofline_us']:7.2f} "
                  f"{r['before_us']:8.2f} {xb:5.1f} {r['split_us']:8.2f} {xs:5.1f} "
                  f"{r['after_us']:8.2f} {xa:5.1f} {r['taps_us']:8.2f} {xt:5.1f}  "
                  f"{r['chosen']} -> {r['taps']}", flush=True)
    if rows:
        gains = [r["split_us"] / r["after_us"] for r in rows]
        print(f"median gain of stream-K over split {statistics.median(gains):.2f}x over "
              f"{len(rows)} dispatches; worst x-roofline before "
              f"{max(r['before_us'] / r['roofline_us'] for r in rows):.1f}, split "
              f"{max(r['split_us'] / r['roofline_us'] for r in rows):.1f}, stream-K "
              f"{max(r['after_us'] / r['roofline_us'] for r in rows):.1f}, taps "
              f"{max(r['taps_us'] / r['roofline_us'] for r in rows):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
