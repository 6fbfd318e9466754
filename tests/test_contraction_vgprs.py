"""The VGPR estimate of contraction (GEMM / conv) tiles against hipcc's count.

Recorded with hipcc (Debian package: HIP 5.2, clang 15) for gfx90a, ``-O3``, on the kernels
``wavefuse export`` writes, by ``python tools/vgpr_sweep.py --kinds contraction
--per-dispatch 6 --models mlp conv_add_relu:c=256,k=64 conv_add_relu
tests/data/bert_2layer.onnx`` (the sweep also prints how many of its points meet the rule).
The estimate must meet ``wavefuse check``'s rule (within 10% of hipcc, or the same
VGPR-limited occupancy). bert's 16-token GEMMs pin the dead-code rule: a 64-row tile over
16 rows keeps one live row per thread in hipcc's ISA. The known gaps are pinned as strict
xfails, so fixing one fails the test until it moves to the agreeing list. The gfx940
gaps (``GAPS_GFX940``: emitted for gfx942 and compiled for gfx940, as ``export`` and
``check`` do), where hipcc scheduled ViT-B/16's projection and ResNet-50's 16x32x32 KW 4
tiles for fewer waves, are both closed (the projection's A loads 4-wide since issue 27
item 7). Pinned at the simulator's occupancy (``export --pin-occupancy``, ``PINNED``)
they agree; the stem conv then spills (``PINNED_GAPS``).
"""
from __future__ import annotations

import shutil

import pytest

from codegen_hip.check import VGPR_AGREEMENT_REL, compile_to_asm, parse_asm
from codegen_hip.emit import emit_kernel
from codegen_hip.simfacts import pinned_waves, vgpr_occupancy
from compiler.lower import lower
from compiler.ir.models import load_model
from compiler.fusion import fuse
from gpusim.occupancy import estimate_vgprs

ARCH = "gfx90a"
BERT = "tests/data/bert_2layer.onnx"
#: ResNet-50's stride-2 3x3 conv shape, scaled down (``_conv3x3_s2``)
CONV3 = "conv3x3_s2"
#: ViT-B/16's attention output projection (``_vit_o_proj``)
VIT_O = "vit_o_proj"
#: ResNet-50's 7x7 stem conv and a first-stage 3x3 conv (``_stem7x7``, ``_conv3x3_56``)
STEM = "stem7x7"
CONV3_56 = "conv3x3_56"
CONV1_56 = "conv1x1_56"


def _k(mma, bm, bn, bk, tm, tn, kw, pad=4, swizzle="none", va=4, vb=4):
    return {"mma": mma, "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": kw,
            "lds_pad": pad, "vec_a": va, "vec_b": vb, "swizzle": swizzle}


#: (model, dispatch, knobs, hipcc's gfx90a .vgpr_count)
AGREE = [
    ("mlp", "d0_matmul_0", _k("fma", 16, 32, 64, 2, 4, 8), 62),
    ("mlp", "d1_matmul_10", _k("fma", 32, 32, 32, 4, 4, 4, swizzle="after_fusion"), 102),
    ("mlp", "d1_matmul_10", _k("fma", 64, 32, 64, 4, 4, 8, swizzle="before_fusion"), 106),
    ("conv_add_relu:c=256,k=64", "d0_conv2d_0", _k("fma", 64, 32, 64, 4, 4, 8), 101),
    ("mlp", "d1_matmul_10", _k("mfma", 32, 32, 128, 32, 32, 8), 58),
    ("conv_add_relu:c=256,k=64", "d0_conv2d_0",
     _k("mfma", 32, 32, 32, 32, 32, 8, swizzle="before_fusion"), 42),
    # 16 tokens: rows past 16 are dead code (hipcc 34; 92 before the dead-code rule)
    (BERT, "d5__inner_encoder_layer_0_attention_self_MatMul_output_0",
     _k("fma", 64, 64, 16, 4, 4, 1, va=1, vb=1), 34),
    (BERT, "d9__inner_encoder_layer_0_attention_self_MatMul_1_output_0",
     _k("fma", 128, 128, 16, 8, 8, 1), 36),
    # the GEMM after encoder_layer's attention: a 5-trip K loop hipcc keeps, whose LDS
    # store and global address parts LICM holds in VGPRs over the loop (73 before that
    # rule, a recorded gap). Its A (the heads merged by transpose + reshape) is addressed
    # in the digits of K since issue 27 item 7 (``lower.affine.Digits``), so it loads
    # 4-wide (recorded again with hipcc 5.2: 81; 82 at vec_a 1 through the emitter before)
    ("encoder_layer", "d4_matmul_24",
     _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=4, vb=4), 81),
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
    # (68 before the im2col split's hoisted row registers, 72 since)
    (CONV3, "d0_conv2d_0", _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=1), 72),
    # the same tile on ViT-B/16's attention output projection (M = 197 rows guarded, A
    # read through the heads' transpose view, bias and residual in the epilogue): at
    # vec_a 1 through the emitter it was 71 vs 78 on gfx90a and a gap on gfx940 (86);
    # with A in digit form at vec_a 4 (what the space offers since issue 27 item 7) 83
    # estimated, hipcc 80 on both targets (recorded again with hipcc 5.2)
    (VIT_O, "d0_m", _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=4), 80),
    # ResNet-50's 1x1 convs with K = 64 (straight-line K): 72 vs 78, within 10%, yet
    # pinned at the estimate's 7 waves hipcc spills (PINNED_GAPS)
    (CONV1_56, "d0_conv2d_0", _k("fma", 16, 32, 32, 2, 4, 4, swizzle="after_fusion"), 80),
    # MFMA tiles: the 32x64x64 KW2 tile (opt-in, MFMA_OPT_IN) that `tune encoder_layer
    # --arch gfx90a` picks for its projections and its FFN GEMM when it may (80
    # estimated, 88 = 72 VGPRs + 16 AGPRs), a 32x64x64 and a 32x32x128 point of the sweep,
    # and the default 16x16x64 KW4 tile (the default 32x32x32 KW8 tile is pinned above)
    ("encoder_layer", "d0_matmul_0",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("encoder_layer", "d6_matmul_37",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("mlp", "d1_matmul_10", _k("mfma", 32, 64, 64, 32, 32, 2), 84),
    ("conv_add_relu", "d0_conv2d_0", _k("mfma", 16, 16, 64, 16, 16, 4), 36),
    ("mlp", "d0_matmul_0", _k("mfma", 32, 32, 128, 32, 32, 8), 39),
    # 32x64x64 KW2 with K of one tile: 68 vs 60 (a gap) while each index temporary took a
    # VGPR; 66 with the index-tree (Sethi-Ullman) rule of ``_temps``
    ("mlp", "d0_matmul_0", _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 60),
    ("encoder_layer", "d4_matmul_24", _k("mfma", 32, 32, 128, 32, 32, 8), 59),
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
    # two tiles (a one-trip K loop) 68 vs 88; a kept 24-trip loop 108 vs 88 (80 on gfx940)
    ("encoder_layer", "d5_matmul_21",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    ("encoder_layer", "d9_matmul_47",
     _k("mfma", 32, 64, 64, 32, 32, 2, swizzle="after_fusion"), 88),
    # 32x32x128 KW8 (opt-in): a K loop of 11 trips hipcc keeps and the estimate unrolls
    # (53 vs 65); the heads-merged A at vec_a 1 (pinned: the space offers 4 since its
    # digit-form address): 56 vs 74, not traced (61 vs 77 when it was a gather through
    # the emitter with 64-bit addresses); at vec_a 4 it agrees (54 vs 59, AGREE)
    ("encoder_layer", "d7_matmul_47", _k("mfma", 32, 32, 128, 32, 32, 8), 65),
    ("encoder_layer", "d4_matmul_24", _k("mfma", 32, 32, 128, 32, 32, 8, va=1), 74),
]

#: known gaps on gfx940 (the kernel emitted for gfx942, as `export` does, compiled for
#: gfx940 as `check` does): (model, dispatch, knobs, hipcc's gfx940 .vgpr_count).
#: ViT-B/16's output projection at vec_a 1: hipcc for gfx940 issued all 12 fragment
#: reads up front (86) where gfx90a issued 7; ResNet-50's tiles of the same class issue 8
#: or 10 on gfx940 (66-76, agreeing with the capped estimate), so no per-target rule is
#: adopted
#: (gpusim.occupancy's docstring; ``tools/fragment_schedule.py`` shows the order)
GAPS_GFX940 = [
    # (ViT-B/16's projection was the gap here, 71 vs 86, while its A was read scalar
    # through the emitter; at vec_a 4 in digit form hipcc allocates 80, which the
    # estimate meets: AGREE)
    # (ResNet-50's 16x32x32 KW 4 first-stage 3x3 conv tile was a gap here, 69 vs 82 on
    # gfx940, until the im2col split: hipcc now allocates 78, which the estimate meets)
]
EMIT_ARCH_GFX940 = "gfx942"

#: ``wavefuse export --pin-occupancy`` pins each kernel at the residency the simulator
#: assumed (``amdgpu_waves_per_eu(W)``, W = ``Occupancy.waves_per_eu``): hipcc then
#: allocates within W's budget or spills, so the export keeps only the pins hipcc fits
#: (``codegen_hip.pins``; ``tests/test_pins.py`` drops CONV1_56's). (model, dispatch, knobs, emit arch, hipcc target, hipcc's
#: VGPRs at that W, the largest W hipcc fits without spilling). Recorded with hipcc 5.2;
#: ViT's projection (vec_a 4 since issue 27 item 7: W = 4 from its estimate of 83;
#: hipcc allocates 80 and fits without spilling up to W = 6 on both targets, spills 7
#: VGPRs at 7; at vec_a 1 it was W = 6, 78, fitting 7 on gfx90a). The stem and
#: the small-K KW 4 tiles miss (``PINNED_GAPS``): their estimate is below what LLVM fits
#: (the stem: 70, W = 7 since the index-tree temporaries rule of gpusim.occupancy's
#: ``_temps``, 76 and W = 6 before it; hipcc 85 free, 72 with spills at W = 7, 80 + one
#: spilled VGPR at W = 6).
_STEM_KNOBS = _k("fma", 16, 32, 32, 2, 4, 4, swizzle="after_fusion", va=1, vb=1)
_KW4 = _k("fma", 16, 32, 32, 2, 4, 4, swizzle="after_fusion", va=1)
_KW4_1x1 = _k("fma", 16, 32, 32, 2, 4, 4, swizzle="after_fusion")
_VIT_KNOBS = _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=1)
#: the same tile on ViT's projection at vec_a 4 (its A in digit form): W = 4, hipcc 80
#: without spilling up to W = 6 on both targets, 7 VGPRs spilled at W = 7
_VIT_O_KNOBS = _k("fma", 16, 32, 64, 2, 4, 8, swizzle="before_fusion", va=4)
PINNED = [
    (VIT_O, "d0_m", _VIT_O_KNOBS, "gfx942", "gfx940", 80, 6),
    (VIT_O, "d0_m", _VIT_O_KNOBS, "gfx90a", "gfx90a", 80, 6),
    (CONV3_56, "d0_conv2d_0", _KW4, "gfx942", "gfx940", 70, 8),
    (CONV3_56, "d0_conv2d_0", _KW4, "gfx90a", "gfx90a", 70, 8),
    (CONV3, "d0_conv2d_0", _VIT_KNOBS, "gfx942", "gfx940", 68, 7),
]
PINNED_GAPS = [
    (STEM, "d0_conv2d_0", _STEM_KNOBS, "gfx942", "gfx940", 80, 5),
    (STEM, "d0_conv2d_0", _STEM_KNOBS, "gfx90a", "gfx90a", 80, 5),
    # the same 16x32x32 KW 4 tile on a 1x1 conv with K = 64 (two K tiles, straight
    # line): 72 estimated (W = 7), hipcc 78 free (within 10%, so check agrees unpinned),
    # 72 with 6-7 VGPRs spilled at W = 7. ResNet-50 has 11 such kernels, ViT-B/16's QK^T
    # GEMM (K = 64) is another (74 free, 8 spilled at 7)
    (CONV1_56, "d0_conv2d_0", _KW4_1x1, "gfx942", "gfx940", 72, 6),
    (CONV1_56, "d0_conv2d_0", _KW4_1x1, "gfx90a", "gfx90a", 72, 6),
]


def _pin_ids(cases):
    return [f"{m}-{t}" for m, _, _, _, t, _, _ in cases]

_GRAPHS: dict = {}


def _conv3x3_s2() -> str:
    """Conv(1x64x28x28, 64x64x3x3, pad 1, stride 2) + bias + Relu as ONNX (opset 17),
    written with onnx.helper into a temporary file (tests/data holds only the torch
    exports its MANIFEST lists); the weights are initializers the kernel reads as
    buffers, so their values do not change the code."""
    return _conv_relu("conv3x3_s2", 64, 64, 28, 3, 2, 1)


def _stem7x7() -> str:
    """ResNet-50's stem: Conv(1x3x224x224, 64x3x7x7, pad 3, stride 2) + bias + Relu."""
    return _conv_relu("stem7x7", 3, 64, 224, 7, 2, 3)


def _conv3x3_56() -> str:
    """ResNet-50's first-stage 3x3 conv: Conv(1x64x56x56, 64x64x3x3, pad 1) + bias + Relu."""
    return _conv_relu("conv3x3_56", 64, 64, 56, 3, 1, 1)


def _conv1x1_56() -> str:
    """ResNet-50's first-stage 1x1 conv: Conv(1x64x56x56, 64x64x1x1) + bias + Relu (K = 64:
    two K tiles, straight-line code)."""
    return _conv_relu("conv1x1_56", 64, 64, 56, 1, 1, 0)


def _conv_relu(name, cin, cout, size, ksize, stride, pad) -> str:
    """Conv + bias + Relu as ONNX (see ``_conv3x3_s2``)."""
    import tempfile

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(
        rng.standard_normal((cout, cin, ksize, ksize)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[ksize, ksize],
                              pads=[pad] * 4, strides=[stride, stride]),
             helper.make_node("Relu", ["y"], ["z"])]
    out = (size + 2 * pad - ksize) // stride + 1
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, cin, size, size])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                         [1, cout, out, out])],
                          [w, b])
    path = f"{tempfile.mkdtemp(prefix='wavefuse_conv_')}/{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _vit_o_proj() -> str:
    """ViT-B/16's attention output projection as ONNX (opset 17): the attention context
    (1x12x197x64) through Transpose(0,2,1,3) and Reshape to 1x197x768, MatMul with a
    768x768 weight, plus bias and the residual, written like ``_conv3x3_s2``."""
    import tempfile

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((768, 768)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(768).astype(np.float32), "B"),
             numpy_helper.from_array(np.array([1, 197, 768], dtype=np.int64), "S")]
    nodes = [helper.make_node("Transpose", ["ctx"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t", "S"], ["r"]),
             helper.make_node("MatMul", ["r", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["mb"]),
             helper.make_node("Add", ["mb", "res"], ["y"])]
    f32 = TensorProto.FLOAT
    g = helper.make_graph(nodes, "vit_o_proj",
                          [helper.make_tensor_value_info("ctx", f32, [1, 12, 197, 64]),
                           helper.make_tensor_value_info("res", f32, [1, 197, 768])],
                          [helper.make_tensor_value_info("y", f32, [1, 197, 768])], inits)
    path = f"{tempfile.mkdtemp(prefix='wavefuse_vito_')}/vit_o_proj.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


_BUILT = {CONV3: _conv3x3_s2, VIT_O: _vit_o_proj, STEM: _stem7x7, CONV3_56: _conv3x3_56,
          CONV1_56: _conv1x1_56}


def _kernel(model, dispatch, knobs, arch=ARCH):
    if model not in _GRAPHS:
        if model in _BUILT:
            path = _BUILT[model]()
            g = load_model(path)
            shutil.rmtree(path.rsplit("/", 1)[0])
        else:
            g = load_model(model)
        _GRAPHS[model] = (g, fuse(g).dispatches + fuse(g, aggressive=False).dispatches
                          + fuse(g, attention=False).dispatches)
    g, ds = _GRAPHS[model]
    [d] = [d for d in ds if d.name == dispatch][:1]
    return lower(g, d, knobs, arch)


def _agrees(est, hip, target=ARCH):
    return (abs(est - hip) <= VGPR_AGREEMENT_REL * hip
            or vgpr_occupancy(est, target) == vgpr_occupancy(hip, target))


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


@pytest.mark.parametrize("model,dispatch,knobs,hip", GAPS_GFX940, ids=_ids(GAPS_GFX940))
@pytest.mark.xfail(strict=True, reason="known gfx940 gap of the fragment-cap rule (docstring)")
def test_known_gfx940_gaps_still_miss(model, dispatch, knobs, hip):
    kernel = _kernel(model, dispatch, knobs, EMIT_ARCH_GFX940)
    assert _agrees(estimate_vgprs(kernel, EMIT_ARCH_GFX940), hip, "gfx940")


@pytest.mark.slow
@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("model,dispatch,knobs,hip", GAPS_GFX940, ids=_ids(GAPS_GFX940))
def test_recorded_gfx940_counts_are_what_hipcc_allocates(model, dispatch, knobs, hip, tmp_path):
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(_kernel(model, dispatch, knobs, EMIT_ARCH_GFX940),
                               EMIT_ARCH_GFX940))
    r = compile_to_asm(src, "gfx940", tmp_path / "k.s")
    assert r["rc"] == 0, r["stderr"]
    got = parse_asm((tmp_path / "k.s").read_text())["vgprs"]
    assert got == hip, f"hipcc now allocates {got} VGPRs for gfx940, recorded {hip}"


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


def _pinned_fits(model, dispatch, knobs, emit_arch, target, hip, fits):
    kernel = _kernel(model, dispatch, knobs, emit_arch)
    w = pinned_waves(kernel, emit_arch)
    est = estimate_vgprs(kernel, emit_arch)
    return w, est


@pytest.mark.parametrize("model,dispatch,knobs,emit_arch,target,hip,fits", PINNED,
                         ids=_pin_ids(PINNED))
def test_pinned_occupancy_is_one_hipcc_reaches(model, dispatch, knobs, emit_arch, target,
                                               hip, fits):
    """The residency the simulator assumed is achievable: hipcc fits the kernel at the
    pinned W without spilling (W <= the recorded largest such W), its count there meets
    check's rule against the estimate, and the pin holds (hipcc's count allows W)."""
    w, est = _pinned_fits(model, dispatch, knobs, emit_arch, target, hip, fits)
    assert w <= fits, f"pinned at {w} waves; hipcc spills above {fits}"
    assert vgpr_occupancy(hip, target) >= w
    assert _agrees(est, hip, target), f"estimate {est} vs pinned hipcc {hip}"


@pytest.mark.parametrize("model,dispatch,knobs,emit_arch,target,hip,fits", PINNED_GAPS,
                         ids=_pin_ids(PINNED_GAPS))
@pytest.mark.xfail(strict=True, reason="the estimate is below what LLVM fits (PINNED's comment)")
def test_pinned_gaps_still_spill(model, dispatch, knobs, emit_arch, target, hip, fits):
    w, _ = _pinned_fits(model, dispatch, knobs, emit_arch, target, hip, fits)
    assert w <= fits, f"pinned at {w} waves; hipcc spills above {fits}"


@pytest.mark.slow
@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
@pytest.mark.parametrize("model,dispatch,knobs,emit_arch,target,hip,fits",
                         PINNED + PINNED_GAPS, ids=_pin_ids(PINNED + PINNED_GAPS))
def test_recorded_pinned_counts_are_what_hipcc_allocates(model, dispatch, knobs, emit_arch,
                                                         target, hip, fits, tmp_path):
    """At the simulator's W hipcc allocates the recorded count (without scratch where W
    fits); at the recorded largest W it fits without spilling, one more spills."""
    kernel = _kernel(model, dispatch, knobs, emit_arch)
    w = pinned_waves(kernel, emit_arch)

    def compiled(waves):
        src = tmp_path / f"k{waves}.hip"
        src.write_text(emit_kernel(kernel, emit_arch, waves_per_eu=waves))
        r = compile_to_asm(src, target, tmp_path / f"k{waves}.s")
        assert r["rc"] == 0, r["stderr"]
        assert f"WF_WAVES_PER_EU({waves})" in src.read_text()
        return parse_asm((tmp_path / f"k{waves}.s").read_text())

    at_w = compiled(w)
    assert at_w["vgprs"] == hip, f"hipcc now allocates {at_w['vgprs']} at W = {w}, recorded {hip}"
    spilled = bool(at_w["scratch_bytes"] or at_w["vgpr_spills"])
    assert spilled == (w > fits)
    if not spilled:
        assert vgpr_occupancy(at_w["vgprs"], target) >= w
    fit = compiled(fits)
    assert not fit["scratch_bytes"] and not fit["vgpr_spills"]
    if fits < 8:
        over = compiled(fits + 1)
        assert over["scratch_bytes"] or over["vgpr_spills"]
