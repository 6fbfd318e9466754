"""`wavefuse check` on conv kernels (issue 28, item 3). hipcc merges a thread's consecutive
4-byte filter taps of the direct lowering into global_load_dwordx4; the lowering now emits
those vectors itself, so the ISA and the simulated kernel agree on every access width. The
VGPR disagreements that stay are strict xfails naming their cause."""
import shutil
import sys
from pathlib import Path

import pytest

from codegen_hip import check_dir, to_json, write_project

sys.path.insert(0, str(Path(__file__).parent))
from test_conv_shapes import grouped  # noqa: E402

pytestmark = [pytest.mark.hip,
              pytest.mark.skipif(shutil.which("hipcc") is None,
                                 reason="hipcc not installed (Debian package 'hipcc')")]


@pytest.mark.parametrize("c,groups,ks,fmt", [(32, 1, 1, "NCHW"), (16, 2, 1, "NHWC"),
                                             (8, 4, 3, "NHWC")])
def test_direct_conv_widths_agree_with_hipcc(c, groups, ks, fmt, tmp_path):
    from compiler.fusion import fuse
    from compiler.lower import lower
    from compiler.schedule import schedule_space
    from gpusim.hw import GFX942
    g = grouped(c=c, groups=groups, ks=ks, fmt=fmt)
    d = fuse(g).dispatches[0]
    knobs = next(s.knobs for s in schedule_space(g, d, GFX942)
                 if s.knobs.get("lowering") == "direct")
    k = lower(g, d, knobs, "gfx942")
    out = write_project(tmp_path / "export", [k],
                        [(k, {b.name: b.name for b in k.buffers})], {})
    report = check_dir(out, ("gfx90a", "gfx940"))
    widths = [x for x in report["disagreements"] if x["what"].startswith("global_")]
    assert widths == [], to_json(widths)
    if k.meta["vector_widths"]["filter"] == 4:
        assert all(e["widths"]["global_load"].get(16) for e in report["kernels"])


@pytest.mark.xfail(strict=True, reason=(
    "VGPR estimate of the direct lowering: its IR issues every tap's loads before the FMA "
    "chain (32 input + 32 filter values of a 32-channel pointwise conv) and "
    "gpusim.occupancy.estimate_vgprs keeps them all live (75 VGPRs: 6 waves/SIMD), while "
    "hipcc's scheduler starts the FMAs before the last loads and reuses their registers to "
    "stay at 7 waves (66 VGPRs, gfx90a and gfx940); the same with scalar filter loads (74)"))
def test_pointwise_direct_conv_occupancy_agrees_with_hipcc(tmp_path):
    from compiler.fusion import fuse
    from compiler.ir.graph import Graph
    from compiler.lower import lower
    g = Graph("pw")
    x, f = g.input("x", (1, 32, 28, 28)), g.input("w", (64, 32, 1, 1))
    b = g.input("b", (1, 64, 1, 1))
    g.output(g.relu(g.add(g.conv2d(x, f, data_format="NCHW"), b)))
    k = lower(g, fuse(g).dispatches[0], {"lowering": "direct", "workgroup": 256}, "gfx942")
    out = write_project(tmp_path / "export", [k],
                        [(k, {p.name: p.name for p in k.buffers})], {})
    report = check_dir(out, ("gfx90a", "gfx940"))
    assert [x for x in report["disagreements"] if x["what"] == "occupancy"] == []


#: resnet_tiny.onnx's 3x3 conv of 1x32x4x4 (K = 288: the K loop hipcc unrolls whole) with
#: the tile `export --budget 3` picks for it
RESNET_TINY_TILE = {"BM": 16, "BN": 32, "BK": 64, "TM": 2, "TN": 4, "KW": 8, "lds_pad": 4,
                    "vec_a": 1, "vec_b": 4, "swizzle": "before_fusion", "mma": "fma"}


@pytest.mark.xfail(strict=True, reason=(
    "VGPR estimate of an FMA conv tile whose short K loop hipcc unrolls whole (straight-line "
    "K, no loop left in the ISA: tools/fragment_schedule.py): 72 estimated (7 waves/SIMD), "
    "hipcc 82 (5 waves) on gfx90a and gfx940. The known straight-line-K gap of "
    "gpusim.occupancy's docstring (the same tile with K = 64 or 128: 72 vs 78-80, traced "
    "there to per-lane address values of the first tile held to the later tiles' stores; "
    "a value-numbering rule for it was measured and not adopted); not re-traced on this "
    "kernel. The issue's GEMM case (70 vs 82) was not reproduced here; this is the nearest "
    "found"))
def test_unrolled_k_conv_tile_occupancy_agrees_with_hipcc(tmp_path):
    from compiler.fusion import fuse
    from compiler.ir.models import load_model
    from compiler.lower import lower
    g = load_model(str(Path(__file__).parent / "data" / "resnet_tiny.onnx"))
    d = next(x for x in fuse(g).dispatches if x.name == "d7_conv2d_35")
    k = lower(g, d, RESNET_TINY_TILE, "gfx942")
    out = write_project(tmp_path / "export", [k],
                        [(k, {p.name: p.name for p in k.buffers})], {})
    report = check_dir(out, ("gfx90a", "gfx940"))
    assert [x for x in report["disagreements"] if x["what"] == "occupancy"] == []
