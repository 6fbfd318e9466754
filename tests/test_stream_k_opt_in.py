"""The larger MFMA tiles (``MFMA_OPT_IN``) under stream-K: default candidates of an f32
matmul's space (``compiler.schedule.contraction.stream_k_opt_in``), their values equal
numpy in gpusim, and hipcc's VGPRs meet the estimate for their partial kernels
(docs/kernels.md, "Larger MFMA tiles under stream-K")."""
from __future__ import annotations

import shutil

import pytest

from gpusim.hw import GFX942
from compiler.ir import models
from compiler.fusion import fuse
from compiler.lower.contraction import lower_contraction
from compiler.schedule import schedule_space
from compiler.schedule.contraction import MFMA_OPT_IN
from compiler.tuning.search import select_candidates

from test_lower_contraction import whole
from test_stream_k import _assert_matches, few_cus, matmul


def _tile(k):
    return (k["BM"], k["BN"], k["BK"], k["TM"], k["TN"], k["KW"])


def _mfma(t, **kw):
    bm, bn, bk, tm, tn, k = t
    return {"mma": "mfma", "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": k,
            "lds_pad": 4, "vec_a": 4, "vec_b": 4, "swizzle": "none", **kw}


def test_space_offers_the_opt_in_tiles_under_stream_k_only():
    """A 128 x 1536 x 768 matmul (the tiles leave a partial wave on 304 CUs): every
    MFMA_OPT_IN tile's stream-K points with the before_fusion swizzle are searched by
    default; its one-kernel and split-K points and its other swizzles stay opt-in, and
    so does every point of a conv."""
    g = matmul(128, 1536, 768)
    d = whole(g)
    default, _ = select_candidates(schedule_space(g, d, GFX942), {}, None, 0, d.name)
    opt = [c.knobs for c in default if c.knobs.get("mma") == "mfma"
           and _tile(c.knobs) in MFMA_OPT_IN]
    assert {_tile(k) for k in opt} == MFMA_OPT_IN
    assert all(k["stream_k"] in (1, 2) for k in opt)
    assert {k["stream_k"] for k in opt} == {1, 2}
    assert {k["swizzle"] for k in opt} == {"before_fusion"}
    conv = models.conv_add_relu(c=256, k=64)
    cd = fuse(conv).dispatches[0]
    default, _ = select_candidates(schedule_space(conv, cd, GFX942), {}, None, 0, cd.name)
    assert not any(c.knobs.get("mma") == "mfma" and _tile(c.knobs) in MFMA_OPT_IN
                   for c in default)


@pytest.mark.parametrize("tile", sorted(MFMA_OPT_IN), ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("w", [1, 2])
def test_opt_in_tiles_under_stream_k_equal_numpy(tile, w):
    """Ragged M and N (guards), K of five and a bit K tiles, bias + relu: equal to numpy
    on 3 CUs (several segments per workgroup, tiles shared by several workgroups)."""
    g = matmul(70, 100, 5 * tile[2] + 3)
    arch = few_cus(3)
    k = lower_contraction(g, whole(g), _mfma(tile, stream_k=w, vec_a=1, vec_b=1), arch)
    assert len(k.kernels) == 2
    _assert_matches(g, k, arch)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("tile", [(64, 64, 32, 32, 32, 1), (32, 64, 64, 32, 32, 2)],
                         ids=["64x64x32kw1", "32x64x64kw2"])
def test_hip_compiles_and_check_agrees(tile, tmp_path):
    """BERT-base's FFN up projection shape (128 x 768 -> 3072, bias and relu), stream-K 2: both
    kernels compile for gfx90a and gfx940 without scratch and ``check`` agrees, the
    partial kernel's VGPRs included (hipcc 88 / 100, estimated 88 / 112 with one
    64x64 or 32x64 tile; before_fusion: the fix-up's sums go through LDS)."""
    from hip_check import assert_clean, check_kernels
    g = matmul(128, 3072, 768)
    seq = lower_contraction(g, whole(g), _mfma(tile, stream_k=2, swizzle="before_fusion"),
                            GFX942)
    report = check_kernels(list(seq.kernels), tmp_path)
    assert len(report["kernels"]) == 4
    assert_clean(report)


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
def test_fix_up_gap_without_the_lds_round_trip(tmp_path):
    """Why only before_fusion is a default (``stream_k_opt_in``): ViT-B/16's QKV shape
    (197 x 768 -> 2304, bias and relu), 64x64x32 KW1, stream-K 1, swizzle none: the partial
    kernel agrees with hipcc, the fix-up's estimate is below hipcc's (it issues every
    slot and bias load before the first add). Fails once the estimate closes the gap."""
    from hip_check import check_kernels
    g = matmul(197, 2304, 768)
    seq = lower_contraction(g, whole(g), _mfma((64, 64, 32, 32, 32, 1), stream_k=1), GFX942)
    report = check_kernels(list(seq.kernels), tmp_path)
    assert all(e["rc"] == 0 and not e["scratch_bytes"] for e in report["kernels"])
    names = {d["kernel"] for d in report["disagreements"]}
    assert names and all(n.endswith("_reduce") for n in names), names
