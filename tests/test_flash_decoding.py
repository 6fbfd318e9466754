"""Flash-decoding: a fused attention whose keys are split across workgroups (partial
outputs, maxima and sums in workspaces) and a combine kernel. Values equal numpy within
the fused kernel's bound through both kernels; the space offers key splits only where
the query blocks do not fill the GPU; decoding (one query row per head) is predicted
faster split (simulated)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpusim import program
from gpusim.hw import GFX90A, GFX942

from compiler.fusion import fuse
from compiler.lower.attention import Attention, check_schedule
from compiler.schedule import schedule_space
from compiler.tuning.search import score, tune_dispatches, verify_dispatches

from test_attention import attention_graph, run

REGS = dict(mma="fma", BQ=16, BK=32, waves=1, RM=1, q_in="registers",
            row_stats="registers", lds_pad=4)
LDS = dict(mma="fma", BQ=16, BK=32, waves=1, RM=2, q_in="lds", row_stats="lds", lds_pad=1)


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "attention")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.integers(1, 3), sq=st.integers(1, 40), blocks=st.integers(2, 6),
       tail=st.integers(0, 31), dk=st.sampled_from([8, 16, 24]),
       dv=st.sampled_from([8, 16, 20]), mask=st.sampled_from(["none", "additive", "causal"]),
       knobs=st.sampled_from([REGS, LDS]), ks=st.sampled_from([2, 3, 6]))
def test_flash_decoding_equals_numpy(heads, sq, blocks, tail, dk, dv, mask, knobs, ks):
    """Any head count, query rows (a ragged last query block), key count (a ragged last
    key block), head dims, masks (causal with Sq < Sk), both row-statistics paths."""
    sk = blocks * 32 - tail
    g = attention_graph(heads, sq, sk, dk, dv, mask)
    a = Attention(g, _dispatch(g))
    kn = {**knobs, "key_splits": ks}
    why = check_schedule(a, kn, GFX942)
    if why:
        assert f"divide the {blocks} key blocks" in why, why
        return
    k, _, err, bound = run(g, kn)
    assert isinstance(k, program.KernelSequence) and len(k.kernels) == 2
    split, combine = k.kernels
    assert split.grid == ks * heads * -(-sq // 16)
    assert {w.name for w in k.workspaces} <= {b.name for b in combine.buffers}


def test_key_splits_rules():
    g = attention_graph(2, 20, 20, 16, 16, "causal")
    a = Attention(g, _dispatch(g))
    # a causal mask over Sq = Sk splits too (tests/test_flash_decoding_causal.py)
    assert check_schedule(a, {**REGS, "BK": 16, "key_splits": 2}, GFX942) == ""
    assert "not in" in check_schedule(a, {**REGS, "key_splits": 5}, GFX942)


def test_space_splits_keys_only_where_query_blocks_do_not_fill_the_gpu():
    g = attention_graph(8, 1, 1024, 64, 64)
    space = [c for c in schedule_space(g, _dispatch(g), GFX942) if c.legal]
    splits = [c for c in space if c.knobs.get("key_splits", 1) > 1]
    # one tile's split tried whatever the budget, combined by a second kernel and by
    # the last arrival (its twin)
    always = [c.knobs for c in splits if c.always]
    assert sorted(k["split_reduce"] for k in always) == ["kernel", "last_wg"]
    assert {**always[0], "split_reduce": "-"} == {**always[1], "split_reduce": "-"}
    # the always-tried one is an FMA tile's; the matrix-core tiles get split points too
    assert always[0]["mma"] == "fma"
    assert {c.knobs["mma"] for c in splits} == {"fma", "mfma"}
    many = attention_graph(64, 512, 512, 64, 64)   # 64 heads x 32 query blocks
    assert not any("key_splits" in c.knobs for c in schedule_space(many, _dispatch(many),
                                                                   GFX942))


def test_decoding_is_predicted_faster_split():
    """One query row per head, 4096 keys, 8 heads: 8 workgroups on 304 CUs unsplit."""
    g = attention_graph(8, 1, 4096, 64, 64)
    d = _dispatch(g)
    best = next(c for c in schedule_space(g, d, GFX942) if c.always)
    t_split = score(g, d, best.knobs, GFX942)
    t_one = score(g, d, {**best.knobs, "key_splits": 1}, GFX942)
    assert t_split.time_us < 0.25 * t_one.time_us, (t_split.time_us, t_one.time_us)
    assert t_split.counters["kernels"] == 2


@pytest.mark.parametrize("arch", [GFX942, GFX90A])
def test_search_picks_and_checks_flash_decoding(arch):
    g = attention_graph(2, 1, 512, 16, 16, "additive")
    d = _dispatch(g)
    t = tune_dispatches(g, [d], arch, budget=1)[0]   # the always-tried split point
    assert t.best.knobs["key_splits"] > 1 and isinstance(t.kernel, program.KernelSequence)
    for check_all in (True, False):
        t.verified = None
        verify_dispatches(g, [t], arch, check_all=check_all)
        assert t.verified, t.max_error
