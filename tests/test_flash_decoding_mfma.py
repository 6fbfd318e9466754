"""Flash-decoding on the matrix cores (``mma=mfma`` with ``key_splits`` > 1): the MFMA
split kernel writes the same workspaces as the FMA one (unnormalised O^T registers, each
row's max and sum) and the one combine kernel rescales, normalises and applies the
epilogue. Values equal numpy within the fused kernel's bound (hypothesis over heads,
ragged query and key blocks, head dims, masks, block shapes, Q in registers or LDS, KS);
the space offers it beside the FMA split points; the search's value check passes."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpusim import program
from gpusim.hw import GFX90A, GFX942, GFX1100, get_arch

from compiler.fusion import fuse
from compiler.lower.attention import Attention, check_schedule
from compiler.schedule import schedule_space
from compiler.tuning.search import score, tune_dispatches, verify_dispatches

from test_attention import attention_graph, run

MFMA16 = dict(mma="mfma", BQ=16, BK=32, waves=1, RM=1, q_in="registers",
              row_stats="registers", lds_pad=4)
MFMA32 = dict(mma="mfma", BQ=32, BK=64, waves=1, RM=1, q_in="lds",
              row_stats="registers", lds_pad=4)


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "attention")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.integers(1, 3), sq=st.integers(1, 40), blocks=st.integers(2, 6),
       tail=st.integers(0, 31), dk=st.sampled_from([8, 16, 24, 64]),
       dv=st.sampled_from([8, 16, 20, 64]),
       mask=st.sampled_from(["none", "additive", "causal"]),
       knobs=st.sampled_from([MFMA16, {**MFMA16, "q_in": "lds"}, MFMA32]),
       ks=st.sampled_from([2, 3, 6]), arch=st.sampled_from(["gfx942", "gfx90a"]))
def test_mfma_flash_decoding_equals_numpy(heads, sq, blocks, tail, dk, dv, mask, knobs, ks,
                                          arch):
    """``run`` asserts the error bound; the split kernel runs on the matrix cores."""
    sk = blocks * knobs["BK"] - tail
    g = attention_graph(heads, sq, sk, dk, dv, mask)
    a = Attention(g, _dispatch(g))
    kn = {**knobs, "key_splits": ks}
    why = check_schedule(a, kn, get_arch(arch))
    if why:
        assert f"divide the {blocks} key blocks" in why, why
        return
    k, _, _, _ = run(g, kn, arch)
    assert isinstance(k, program.KernelSequence) and len(k.kernels) == 2
    split, combine = k.kernels
    assert split.grid == ks * heads * -(-sq // knobs["BQ"])
    assert any(isinstance(x, program.Mfma) for x in program.walk(split.body))
    assert split.meta["flash_decoding"] == "split" and split.meta["mfma_shape"]
    assert {w.name for w in k.workspaces} <= {b.name for b in combine.buffers}


def test_mfma_key_splits_rules():
    g = attention_graph(2, 1, 96, 16, 16)
    a = Attention(g, _dispatch(g))
    assert check_schedule(a, {**MFMA16, "key_splits": 3}, GFX942) == ""
    assert "divide the 3 key blocks" in check_schedule(a, {**MFMA16, "key_splits": 2}, GFX942)
    # no matrix cores: the MFMA rule answers, split or not
    assert "mma=mfma" in check_schedule(a, {**MFMA16, "key_splits": 3}, GFX1100)


def test_decoding_on_the_matrix_cores_is_predicted_faster_split():
    """One query row per head, 4096 keys, 8 heads: 8 workgroups on 304 CUs unsplit."""
    g = attention_graph(8, 1, 4096, 64, 64)
    d = _dispatch(g)
    split = next(c for c in schedule_space(g, d, GFX942)
                 if c.legal and c.knobs["mma"] == "mfma" and c.knobs.get("key_splits", 1) > 1
                 and not c.opt_in)
    t_split = score(g, d, split.knobs, GFX942)
    t_one = score(g, d, {**split.knobs, "key_splits": 1}, GFX942)
    assert t_split.time_us < 0.25 * t_one.time_us, (t_split.time_us, t_one.time_us)
    assert t_split.counters["kernels"] == 2


@pytest.mark.parametrize("arch", [GFX942, GFX90A])
def test_search_checks_mfma_flash_decoding(arch):
    g = attention_graph(2, 1, 512, 16, 16, "additive")
    d = _dispatch(g)
    ks = next(c.knobs["key_splits"] for c in schedule_space(g, d, arch)
              if c.legal and c.knobs["mma"] == "mfma" and c.knobs["key_splits"] > 1)
    t = tune_dispatches(g, [d], arch, budget=1, fixed={"mma": "mfma", "key_splits": ks})[0]
    assert t.best.knobs["mma"] == "mfma" and t.best.knobs["key_splits"] == ks
    assert isinstance(t.kernel, program.KernelSequence)
    for check_all in (True, False):
        t.verified = None
        verify_dispatches(g, [t], arch, check_all=check_all)
        assert t.verified, t.max_error


#: ViT-B/16's best attention point after issue 27 item 7: 64 queries on 4 waves (one
#: 16x16 block each), 64-key blocks, the keys split 4 ways
MFMA64_4W = dict(mma="mfma", BQ=64, BK=64, waves=4, RM=1, q_in="registers",
                 row_stats="registers", lds_pad=4)


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_four_wave_query_block_split_equals_numpy(arch):
    """197 keys (4 blocks of 64, the last ragged) and 70 queries (a ragged query block)
    split 4 ways on the 4-wave MFMA block: values within the fused kernel's bound."""
    g = attention_graph(1, 70, 197, 64, 64)
    k, _, _, _ = run(g, {**MFMA64_4W, "key_splits": 4}, arch)
    split, _ = k.kernels
    assert split.grid == 4 * 2 and split.block == 4 * 64


def test_space_splits_keys_of_every_query_block_that_fits_the_queries():
    """A short sequence of many heads (ViT-B/16: 197 tokens, 12 heads; 48 workgroups of 64
    queries): key splits are offered on the larger query blocks too, not only on the
    smallest (decoding's rule: there a larger block is padding)."""
    g = attention_graph(12, 197, 197, 64, 64)
    space = schedule_space(g, _dispatch(g), GFX942)
    split = [c.knobs for c in space if c.legal and c.knobs.get("key_splits", 1) > 1]
    assert {**MFMA64_4W, "key_splits": 4, "split_reduce": "kernel"} in split
    assert max(k["BQ"] for k in split) > min(k["BQ"] for k in split)
    # decoding keeps the old rule: only the smallest query block of each kind splits
    g = attention_graph(8, 1, 4096, 64, 64)
    dec = [c.knobs for c in schedule_space(g, _dispatch(g), GFX942)
           if c.legal and c.knobs.get("key_splits", 1) > 1]
    assert {k["BQ"] for k in dec if k["mma"] == "mfma"} == {16}
