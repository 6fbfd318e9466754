"""The VGPR estimate of contraction (GEMM / conv) tiles against hipcc's count.

Recorded with hipcc (Debian package: HIP 5.2, clang 15) for gfx90a, ``-O3``, on the kernels
``wavefuse export`` writes, by ``python tools/vgpr_sweep.py --kinds contraction
--per-dispatch 6 --models mlp conv_add_relu:c=256,k=64 conv_add_relu
tests/data/bert_2layer.onnx`` (the sweep also prints how many of its points meet the rule).
The estimate must meet ``wavefuse check``'s rule (within 10% of hipcc, or the same
VGPR-limited occupancy). bert's 16-token GEMMs pin the dead-code rule: a 64-row tile over
16 rows keeps one live row per thread in hipcc's ISA. The known gaps are pinned as strict
xfails, so fixing one fails the test until it moves to the agreeing list.
"""
from __future__ import annotations

import shutil

import pytest

from codegen_hip.check import VGPR_AGREEMENT_REL, compile_to_asm, parse_asm
from codegen_hip.emit import emit_kernel
from codegen_hip.simfacts import vgpr_occupancy
from compiler.lower import lower
from compiler.models import load_model
from compiler.passes import fuse
from gpusim.occupancy import estimate_vgprs

ARCH = "gfx90a"
BERT = "tests/data/bert_2layer.onnx"
#: ResNet-50's stride-2 3x3 conv shape, scaled down (``_conv3x3_s2``)
CONV3 = "conv3x3_s2"


def _k(mma, bm, bn, bk, tm, tn, kw, pad=4, swizzle="none", va=4, vb=4):
    return {"mma": mma, "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": kw,
            "lds_pad": pad, "vec_a": va, "vec_b": vb, "swizzle": swizzle}


#: (model, dispatch, knobs, hipcc's gfx90a .vgpr_count)
AGREE = [
    ("mlp", "d0_matmul_0", _k("fma", 16, 32, 64, 2, 4, 8), 62),
    ("mlp", "d1_matmul_10", _k("fma", 32, 32, 32, 4, 4, 4, swizzle="after_fusion"), 102),
    ("mlp", "d1_matmul_10", _k("fma", 64, 32, 64, 4, 4, 8, swizzle="before_fusion"), 106),
    ("conv_add_relu:c=256,k=64", "d0_conv2d_0", _k("fma", 64, 32, 64, 4, 4, 8), 100),
    ("mlp", "d1_matmul_10", _k("mfma", 32, 32, 128, 32, 32, 8), 58),
    ("conv_add_relu:c=256,k=64", "d0_conv2d_0",
     _k("mfma", 32, 32, 32, 32, 32, 8, swizzle="before_fusion"), 42),
    # 16 tokens: rows past 16 are dead code (hipcc 34; 92 before the dead-code rule)
    (BERT, "d5__inner_encoder_layer_0_attention_self_MatMul_output_0",
     _k("fma", 64, 64, 16, 4, 4, 1, va=1, vb=1), 34),
    (BERT, "d9__inner_encoder_layer_0_attention_self_MatMul_1_output_0",
     _k("fma", 128, 128, 16, 8, 8, 1), 36),
    # the GEMM after encoder_layer's attention as `export --budget 3` picks it: a 5-trip
    # K loop hipcc keeps, whose LDS store and global address parts LICM holds in VGPRs
    # over the loop (73 before that rule, a recorded gap)
    ("encoder_layer", "d4_matmul_24",
     _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=1, vb=4), 82),
    # the batched P.V GEMM of encoder_layer's unfused attention (K = 2 tiles, straight
    # line), as `export --budget 3` picks it: each 16-byte fragment read is one register
    # tuple, freed when its last component is (68 before that rule)
    ("encoder_layer", "d5_matmul_21",
     _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion"), 76),
    # implicit-GEMM 3x3 conv, M = 196 rows (guarded): hipcc sinks the peeled last K
    # tile's FMAs below the barrier into the epilogue's guarded stores, so its 32 fragment
    # reads are live together (115, 4 waves, before that rule; 148 now, 3 waves like hipcc)
    (CONV3, "d0_conv2d_0", _k("fma", 64, 64, 16, 4, 4, 1, va=1), 168),
    # the 16x32x64 KW 8 tile `export` picks for ResNet-50's convolutions: guarded scalar
    # gathers in the K loop, so hipcc interleaves the 12 fragment reads with the FMAs
    # (7 up front); 80 (5 waves) before the fragment-cap rule, 70 now (7 waves like hipcc)
    (CONV3, "d0_conv2d_0", _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=1), 68),
    # MFMA tiles: the 32x64x64 KW2 tile (opt-in, MFMA_OPT_IN) that `tune encoder_layer
    # --arch gfx90a` picks for its projections and its FFN GEMM when it may (80
    # estimated, 88 = 72 VGPRs + 16 AGPRs), a 32x64x64 and a 32x32x128 point of the sweep,
    # and the default 16x16x64 KW4 tile (the default 32x32x32 KW8 tile is pinned above)
    ("encoder_layer", "d0_matmul_0",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("encoder_layer", "d6_matmul_37",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("mlp", "d1_matmul_10", _k("mfma", 32, 64, 64, 32, 32, 2), 84),
    ("conv_add_relu", "d0_conv2d_0", _k("mfma", 16, 16, 64, 16, 16, 4), 32),
    ("mlp", "d0_matmul_0", _k("mfma", 32, 32, 128, 32, 32, 8), 39),
]

#: known gaps (see gpusim.occupancy's docstring): hipcc's scheduler sinks the second half
#: of a straight-line K tile's fragment reads below the first half's FMAs, yet hoists all
#: of a K loop's reads to the loop top when the tile is small enough
GAPS = [
    # hipcc issues 14 of the 16 fragment reads up front and the last two after the first
    # FMAs, into tuples those freed: 86 estimated (80 without the tuple rule)
    ("mlp", "d0_matmul_0", _k("fma", 32, 64, 64, 4, 4, 8, swizzle="after_fusion"), 76),
    (BERT, "d8__inner_encoder_layer_0_intermediate_dense_MatMul_output_0",
     _k("fma", 64, 64, 16, 4, 4, 1, swizzle="after_fusion"), 144),
    ("conv_add_relu:c=256,k=64", "d0_conv2d_0", _k("fma", 32, 32, 64, 4, 4, 16), 82),
    # the same 64x64x16 tile on the 1x1 conv with a residual: 98 estimated, the sunk-tile
    # rule does not fire here
    ("conv_add_relu", "d0_conv2d_0", _k("fma", 64, 64, 16, 4, 4, 1), 138),
    # the MFMA_OPT_IN classes: hipcc keeps the next K tile's global loads, the LDS store
    # addresses and epilogue address parts live across the first tile's MFMAs (64 vs 72
    # with K = 64, a one-trip K loop; 56 vs 72 for 32x32x64 KW4 with K = 256)
    ("mlp", "d0_matmul_0", _k("mfma", 64, 64, 32, 32, 32, 1, swizzle="before_fusion"), 72),
    ("mlp", "d1_matmul_10", _k("mfma", 32, 32, 64, 32, 32, 4), 72),
    # 32x64x64 KW2 (opt-in since `export --budget 3` picked it and check disagreed): K of
    # one tile 68 vs 60; two tiles (a one-trip K loop) 68 vs 88; a kept 24-trip loop
    # 108 vs 88 (80 on gfx940)
    ("mlp", "d0_matmul_0", _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 60),
    ("encoder_layer", "d5_matmul_21",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("encoder_layer", "d9_matmul_47",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    # 32x32x128 KW8 (opt-in): a K loop of 11 trips hipcc keeps and the estimate unrolls
    # (53 vs 65); a gathered A operand (vec_a 1) whose 64-bit addresses take two VGPRs each
    # (61 vs 77)
    ("encoder_layer", "d7_matmul_47", _k("mfma", 32, 32, 128, 32, 32, 8), 65),
    ("encoder_layer", "d4_matmul_24", _k("mfma", 32, 32, 128, 32, 32, 8, va=1), 77),
]

_GRAPHS: dict = {}


def _conv3x3_s2() -> str:
    """Conv(1x64x28x28, 64x64x3x3, pad 1, stride 2) + bias + Relu as ONNX (opset 17),
    written with onnx.helper into a temporary file (tests/data holds only the torch
    exports its MANIFEST lists); the weights are initializers the kernel reads as
    buffers, so their values do not change the code."""
    import tempfile

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["y"], ["z"])]
    g = helper.make_graph(nodes, "conv3x3_s2",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64, 14, 14])],
                          [w, b])
    path = f"{tempfile.mkdtemp(prefix='wavefuse_conv3_')}/conv3x3_s2.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _kernel(model, dispatch, knobs):
    if model not in _GRAPHS:
        if model == CONV3:
            path = _conv3x3_s2()
            g = load_model(path)
            shutil.rmtree(path.rsplit("/", 1)[0])
        else:
            g = load_model(model)
        _GRAPHS[model] = (g, fuse(g).dispatches + fuse(g, aggressive=False).dispatches
                          + fuse(g, attention=False).dispatches)
    g, ds = _GRAPHS[model]
    [d] = [d for d in ds if d.name == dispatch][:1]
    return lower(g, d, knobs, ARCH)


def _agrees(est, hip):
    return (abs(est - hip) <= VGPR_AGREEMENT_REL * hip
            or vgpr_occupancy(est, ARCH) == vgpr_occupancy(hip, ARCH))


def _ids(cases):
    return [f"{m.split('/')[-1]}-{d[:12]}-{k['mma']}{k['BM']}x{k['BN']}x{k['BK']}"
            f"kw{k['KW']}-{k['swizzle']}" for m, d, k, _ in cases]


@pytest.mark.parametrize("model,dispatch,knobs,hip", AGREE, ids=_ids(AGREE))
def test_estimate_meets_checks_rule_against_recorded_hipcc(model, dispatch, knobs, hip):
    est = estimate_vgprs(_kernel(model, dispatch, knobs), ARCH)
    assert _agrees(est, hip), (f"estimate {est} VGPRs ({vgpr_occupancy(est, ARCH)} waves) vs "
                               f"hipcc {hip} ({vgpr_occupancy(hip, ARCH)} waves)")


@pytest.mark.parametrize("model,dispatch,knobs,hip", GAPS, ids=_ids(GAPS))
@pytest.mark.xfail(strict=True, reason="known gap of the program-order estimate (docstring)")
def test_known_gaps_still_miss(model, dispatch, knobs, hip):
    assert _agrees(estimate_vgprs(_kernel(model, dispatch, knobs), ARCH), hip)


@pytest.mark.slow
@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("model,dispatch,knobs,hip", AGREE + GAPS, ids=_ids(AGREE + GAPS))
def test_recorded_counts_are_what_hipcc_allocates(model, dispatch, knobs, hip, tmp_path):
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(_kernel(model, dispatch, knobs), ARCH))
    r = compile_to_asm(src, ARCH, tmp_path / "k.s")
    assert r["rc"] == 0, r["stderr"]
    got = parse_asm((tmp_path / "k.s").read_text())["vgprs"]
    assert got == hip, f"hipcc now allocates {got} VGPRs, recorded {hip}: record it again"
