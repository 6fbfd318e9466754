"""Flash-decoding combined in the one kernel by each query block's last-arriving split
workgroup (``split_reduce=last_wg``): values equal numpy (FMA and MFMA split kernels,
ragged query and key blocks, masks, head dims not a multiple of 4) and equal the
two-kernel combine's bit for bit; the arrival counters are zero after the launch; one
launch is charged; the space offers the twin of every split point; HIP compiles for
gfx90a and gfx940 and ``check`` agrees."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gpusim
from gpusim import program
from gpusim.hw import GFX942, get_arch

from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs
from compiler.lower import lower
from compiler.lower.attention import Attention, arrivals_name, check_schedule
from compiler.lower.common import memory_image
from compiler.schedule import schedule_space
from compiler.tuning.search import score

from test_attention import attention_graph, run
from test_flash_decoding import LDS, REGS
from test_flash_decoding_mfma import MFMA16, MFMA32, MFMA64_4W

LAST = {"split_reduce": "last_wg"}


def _dispatch(g):
    return next(d for d in fuse(g).dispatches if d.kind == "attention")


def _simulate(g, k, arch="gfx942"):
    env = evaluate(g, random_inputs(g, 3), keep_all=True)
    ins = {b.name: memory_image(g, b.name, env[b.name])
           for kk in k.kernels for b in kk.buffers if b.intent == "in" and b.name in env}
    return gpusim.simulate(k, arch, inputs=ins)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.integers(1, 3), sq=st.integers(1, 40), blocks=st.integers(2, 6),
       tail=st.integers(0, 31), dk=st.sampled_from([8, 16, 64]),
       dv=st.sampled_from([8, 20, 22, 64]),
       mask=st.sampled_from(["none", "additive", "causal"]),
       knobs=st.sampled_from([REGS, LDS, MFMA16, {**MFMA16, "q_in": "lds"}, MFMA32]),
       ks=st.sampled_from([2, 3, 6]), arch=st.sampled_from(["gfx942", "gfx90a"]))
def test_last_wg_flash_decoding_equals_numpy(heads, sq, blocks, tail, dk, dv, mask, knobs,
                                             ks, arch):
    """``run`` asserts the fused kernel's error bound; one kernel with the counters as a
    zeroed i32 workspace, left zero."""
    sk = blocks * knobs["BK"] - tail
    g = attention_graph(heads, sq, sk, dk, dv, mask)
    a = Attention(g, _dispatch(g))
    kn = {**knobs, "key_splits": ks, **LAST}
    why = check_schedule(a, kn, get_arch(arch))
    if why:
        assert f"divide the {blocks} key blocks" in why or "causal" in why \
            or "registers" in why, why
        return
    k, res, _, _ = run(g, kn, arch)
    assert isinstance(k, program.KernelSequence) and len(k.kernels) == 1
    [one] = k.kernels
    assert one.grid == ks * heads * -(-sq // knobs["BQ"])
    cnt = next(w for w in k.workspaces if w.name == arrivals_name(a))
    assert cnt.dtype == "i32" and cnt.zeroed
    assert any(isinstance(x, program.AtomicAdd) for x in program.walk(one.body))
    assert not res.parts[0].outputs[cnt.name].any()   # every counter reset


@pytest.mark.parametrize("knobs,shape", [
    (MFMA64_4W, (2, 70, 197, 64, 64)),      # ViT's point: a ragged query and key block
    (REGS, (3, 1, 192, 16, 20)),            # decoding, Dv not a multiple of 4 on one path
    (LDS, (2, 21, 96, 24, 16)),
])
def test_last_wg_equals_the_combine_kernel_bit_for_bit(knobs, shape):
    """The tail sums the splits in split order with the combine kernel's formula, its
    own partial read back: whoever arrives last, the output is the two-kernel one."""
    g = attention_graph(*shape, "additive")
    d = _dispatch(g)
    ks = next(n for n in (4, 3, 2) if not check_schedule(
        Attention(g, d), {**knobs, "key_splits": n}, GFX942))
    out = {}
    for sr in ("kernel", "last_wg"):
        k = lower(g, d, {**knobs, "key_splits": ks, "split_reduce": sr}, GFX942)
        out[sr] = _simulate(g, k).outputs[d.outputs[0]]
    np.testing.assert_array_equal(out["kernel"], out["last_wg"])


def test_one_launch_is_charged_and_the_vit_block_is_faster():
    """ViT-B/16's attention (12 heads, 197 tokens, head dim 64) on its tuned point:
    the one kernel is charged one launch (simulated predictions)."""
    g = attention_graph(12, 197, 197, 64, 64)
    d = _dispatch(g)
    two = score(g, d, {**MFMA64_4W, "key_splits": 4, "split_reduce": "kernel"}, GFX942)
    one = score(g, d, {**MFMA64_4W, "key_splits": 4, **LAST}, GFX942)
    assert two.counters["kernels"] == 2 and one.counters["kernels"] == 1
    assert one.time_us < two.time_us, (one.time_us, two.time_us)


def test_space_offers_a_last_wg_twin_of_every_split_point():
    g = attention_graph(12, 197, 197, 64, 64)
    space = schedule_space(g, _dispatch(g), GFX942)
    splits = [c for c in space if c.legal and c.knobs.get("key_splits", 1) > 1]
    kernel = {tuple(sorted({**c.knobs, "split_reduce": "-"}.items()))
              for c in splits if c.knobs["split_reduce"] == "kernel"}
    last = {tuple(sorted({**c.knobs, "split_reduce": "-"}.items()))
            for c in splits if c.knobs["split_reduce"] == "last_wg"}
    assert kernel and kernel == last
    assert {**MFMA64_4W, "key_splits": 4, **LAST} in [c.knobs for c in splits]
    always = [c.knobs["split_reduce"] for c in splits if c.always]
    assert sorted(always) == ["kernel", "last_wg"]
    # a point without a split has no combine to place
    assert all(c.knobs.get("split_reduce", "kernel") == "kernel"
               for c in space if c.knobs.get("key_splits", 1) == 1)
    assert "split_reduce" in check_schedule(Attention(g, _dispatch(g)),
                                            {**MFMA64_4W, "key_splits": 4,
                                             "split_reduce": "atomic"}, GFX942)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
@pytest.mark.parametrize("knobs,shape,ks", [
    (MFMA64_4W, (12, 197, 197, 64, 64), 4),   # ViT-B/16's attention
    (MFMA16, (2, 70, 90, 64, 20), 3),          # Dv = 20: scalar tail columns
    (REGS, (3, 1, 512, 64, 64), 16),           # decoding on the FMA split kernel
])
def test_last_wg_attention_compiles_and_checks(knobs, shape, ks, tmp_path):
    from hip_check import assert_clean, check_kernels
    g = attention_graph(*shape, "additive")
    k = lower(g, _dispatch(g), {**knobs, "key_splits": ks, **LAST}, GFX942)
    assert_clean(check_kernels(list(k.kernels), tmp_path))
