"""Flash-decoding under a causal mask over Sq = Sk (issue 27: GPT-2's causal attention
waited on one workgroup running every key block of the last query block): each split
stops at its query block's last row, so a light query block's later splits run no key
block and store (NEG, 0, 0), which the combine weighs 0. Values equal numpy within the
fused kernel's bound (FMA and MFMA split kernels, combined by a second kernel or by the
last arrival); the key loop's trips hint counts each split's own blocks; the space
offers the splits; the heaviest workgroup's key loop is a split's share (simulated)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpusim import program
from gpusim.hw import GFX942

from compiler.fusion import fuse
from compiler.lower.attention import Attention, _Builder, check_schedule
from compiler.schedule import schedule_space
from compiler.tuning.search import score

from test_attention import attention_graph, run

FMA = dict(mma="fma", BQ=16, BK=16, waves=1, RM=1, q_in="registers",
           row_stats="registers", lds_pad=4)
FMA_LDS = dict(mma="fma", BQ=16, BK=16, waves=1, RM=2, q_in="lds", row_stats="lds",
               lds_pad=1)
MFMA = dict(mma="mfma", BQ=16, BK=16, waves=1, RM=1, q_in="registers",
            row_stats="registers", lds_pad=4)


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "attention")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.integers(1, 3), blocks=st.sampled_from([2, 4, 6]),
       tail=st.integers(0, 15), dk=st.sampled_from([8, 16, 64]),
       knobs=st.sampled_from([FMA, FMA_LDS, MFMA]), ks=st.sampled_from([2, 3, 6]),
       reduce=st.sampled_from(["kernel", "last_wg"]))
def test_causal_key_splits_equal_numpy(heads, blocks, tail, dk, knobs, ks, reduce):
    """Sq = Sk with a ragged last block: splits past a query block's last row are empty."""
    s = blocks * 16 - tail
    g = attention_graph(heads, s, s, dk, dk, "causal")
    a = Attention(g, _dispatch(g))
    kn = {**knobs, "key_splits": ks, "split_reduce": reduce}
    why = check_schedule(a, kn, GFX942)
    if why:
        assert f"divide the {blocks} key blocks" in why, why
        return
    k, _, _, _ = run(g, kn)
    assert isinstance(k, program.KernelSequence)
    assert k.kernels[0].grid == ks * heads * -(-s // 16)


def test_causal_splits_are_legal_and_offered():
    g = attention_graph(12, 128, 128, 64, 64, "causal")
    a = Attention(g, _dispatch(g))
    assert check_schedule(a, {**FMA, "key_splits": 2}, GFX942) == ""
    space = [c for c in schedule_space(g, _dispatch(g), GFX942) if c.legal]
    assert any(c.knobs.get("key_splits", 1) > 1 for c in space)


def test_trips_hint_counts_each_splits_own_blocks():
    """8 query blocks of 16 over 8 key blocks, 4 splits of 2 blocks: workgroup 0 (split 0
    of the last query block) runs 2 blocks, not 8; split 3 of query block 0 runs none."""
    g = attention_graph(1, 128, 128, 16, 16, "causal")
    a = Attention(g, _dispatch(g))
    one = _Builder(a, {**FMA, "key_splits": 1}, 64)
    assert one.mean_key_blocks() == 8
    split = _Builder(a, {**FMA, "key_splits": 4}, 64, phase="split", cus=1)
    # every workgroup on one CU: the mean over the 4 splits x 8 query blocks
    trips = [min(max(-(-min(q * 16 + 16, 128) // 16) - sp * 2, 0), 2)
             for sp in range(4) for q in range(8)]
    assert split.mean_key_blocks() == pytest.approx(sum(trips) / len(trips))
    assert min(trips) == 0 and max(trips) == 2


def test_causal_split_is_predicted_faster_than_the_one_kernel_loop():
    """GPT-2 small's attention at 128 tokens: 12 heads x 8 query blocks of 16 leave most
    of 304 CUs idle and the last query block runs all 8 key blocks; split 4 ways its
    heaviest workgroup runs 2 (simulated times, gfx942)."""
    g = attention_graph(12, 128, 128, 64, 64, "causal")
    d = _dispatch(g)
    one = score(g, d, {**FMA, "key_splits": 1}, GFX942)
    split = score(g, d, {**FMA, "key_splits": 4, "split_reduce": "last_wg"}, GFX942)
    assert one.ok and split.ok, (one.error, split.error)
    assert split.time_us < one.time_us
