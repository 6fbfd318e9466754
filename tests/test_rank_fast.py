"""The ranking's fast walk (``rank._walk_fast``, what ``rank_candidates`` runs) against
the plain reference walk (``rank._walk``): equal estimates, feature for feature, on every
legal point of real spaces of each kernel family (bounds on every point, exact estimates
on a sample: those count VGPRs, which neither walk touches). Differential: an estimate
that differs anywhere names the point."""
from __future__ import annotations

import numpy as np
import pytest

from gpusim.hw import GFX942, GFX1100
from compiler.fusion import fuse
from compiler.ir import builders
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.lower import lower
from compiler.schedule import schedule_space
from compiler.tuning import rank
from compiler.tuning.bench_search import _conv
from compiler.tuning.search import legal_candidates


def _channel_norm() -> Graph:
    g = Graph("channel_norm")
    x = g.input("x", (1, 32, 196))
    g.output(builders.layer_norm(g, x, axis=1))
    return g


#: one space per family: fused attention with key splits (flash-decoding's combine is a
#: later kernel), a GEMM and a 3x3 implicit-GEMM conv with split-K and stream-K points
#: (their reduction kernels), a depthwise conv, a transpose through LDS (bank conflicts),
#: a row reduction and a strided (channel) reduction
SPACES = {
    "attention": lambda: load_model("attention:heads=2,seq=256,dim=64"),
    "gemm": lambda: load_model("mlp:tokens=64,hidden=64,ffn=256"),
    "conv3x3": _conv("c3", (1, 14, 14, 16), (16, 3, 3, 16), (1, 1), (1, 1, 1, 1)),
    "dwconv3x3": _conv("dw", (1, 14, 14, 32), (32, 3, 3, 1), (1, 1), (1, 1, 1, 1),
                       groups=32),
    "transpose": lambda: load_model("transpose_add:rows=256,cols=256"),
    "layernorm": lambda: load_model("layernorm:rows=256,cols=768"),
    "channel-norm": _channel_norm,
}


def _forget_reference_entries() -> None:
    for cache in (rank._LATER, rank._LATER_BY_BODY):
        for key in [key for key in cache if key[-1]]:
            del cache[key]


def _same(a: rank.Estimate, b: rank.Estimate) -> bool:
    return (a.us, a.error, a.bound, a.features) == (b.us, b.error, b.bound, b.features)


_CASES = ([(n, GFX942) for n in sorted(SPACES)]
          + [(n, GFX1100) for n in ("gemm", "transpose", "layernorm")])


@pytest.mark.parametrize("name,arch", _CASES, ids=[f"{n}-{a.name}" for n, a in _CASES])
def test_fast_walk_gives_the_reference_estimates(name, arch):
    """(RDNA too: wave32, its own banks and lines)"""
    g = SPACES[name]()
    d = fuse(g).dispatches[0]
    legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
    assert len(legal) >= 20
    # what the ranking runs is the fast walk
    head = legal[:8]
    assert all(_same(a, rank.estimate(lower(g, d, c.knobs, arch), arch, bound=True))
               for a, c in zip(rank.rank_candidates(g, d, head, arch, lower, bound=True),
                               head))
    sequences = 0
    rank._LATER.clear()
    rank._LATER_BY_BODY.clear()
    for i, cand in enumerate(legal):
        try:
            k = lower(g, d, cand.knobs, arch)
        except Exception:  # noqa: BLE001 - a point that fails to lower has no walk
            continue
        sequences += len(rank._kernels(k)) > 1
        # the fast path keeps its cache of later kernels across the space's points (a
        # hit must be right); the reference estimates every later kernel afresh
        fast = rank.estimate(k, arch, bound=True)
        _forget_reference_entries()
        ref = rank.estimate(k, arch, bound=True, reference=True)
        assert _same(ref, fast), (name, cand.knobs, ref, fast)
        if i % 41 == 0:
            fast = rank.estimate(k, arch)
            _forget_reference_entries()
            ref = rank.estimate(k, arch, reference=True)
            assert _same(ref, fast), (name, cand.knobs, ref, fast)
    if name in ("attention", "gemm", "conv3x3"):
        assert sequences > 0  # the later kernels' cache was exercised
    rank._LATER.clear()
    rank._LATER_BY_BODY.clear()


def test_bank_degree_is_the_per_phase_count():
    """``_bank_degree`` (one pass) against the reference's loop over phases, on random
    access patterns with broadcasts, negative words and two phases."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        words = rng.integers(-40, 200, 64) * rng.choice([1, 2, 32, 33])
        phase = np.arange(64) // 32
        want = 1
        for p in np.unique(phase):
            w = np.unique(words[phase == p])
            want = max(want, int(np.bincount(w % 32, minlength=32).max()))
        assert rank._bank_degree(phase, words, 32) == want
