"""`wavefuse check` on the kernels of the family exports (tests/data/families) that still
disagree with hipcc after issue 28's VGPR work (docs/check.md, "What stays"). Each is a
strict xfail naming its cause, with the schedule `export --budget 1` picked for it, so a
fix shows up as an XPASS; the split-K partial kernel that now agrees is a test in
tests/test_check_conv.py."""
import shutil
from pathlib import Path

import pytest

from codegen_hip import check_dir, write_project

pytestmark = [pytest.mark.hip,
              pytest.mark.skipif(shutil.which("hipcc") is None,
                                 reason="hipcc not installed (Debian package 'hipcc')")]

FAMILIES = Path(__file__).parent / "data" / "families"
#: the 64x64x16 FMA tile with split-K the family exports pick for their small 1x1 convs
#: and projections
SPLIT_K = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "KW": 1, "lds_pad": 4,
           "vec_a": 4, "vec_b": 4, "swizzle": "none", "mma": "fma"}


def _check(fixture, dispatch, knobs, suffix, tmp_path):
    from compiler.fusion import fuse
    from compiler.ir.models import load_model
    from compiler.lower import lower
    from gpusim.program import kernels_of
    g = load_model(str(FAMILIES / fixture))
    d = next(x for x in fuse(g).dispatches if x.name == dispatch)
    ks = [k for k in kernels_of(lower(g, d, knobs, "gfx942")) if k.name.endswith(suffix)]
    assert len(ks) == 1
    out = write_project(tmp_path / "export", ks,
                        [(k, {p.name: p.name for p in k.buffers}) for k in ks], {})
    return check_dir(out, ("gfx90a", "gfx940"))


@pytest.mark.xfail(strict=True, reason=(
    "VGPR estimate of a split-K reduce kernel whose epilogue has guarded bias loads "
    "(YOLO neck's 1x1 conv, 3 splits): 69 estimated (7 waves/SIMD), hipcc 78 / 80 "
    "(6 waves) on gfx90a / gfx940. The estimate counts what the ISA shows live across the "
    "guarded bias loads (48 partials, LLVM's Sink moving the sums into the store blocks; "
    "16 biases); the other ~10 VGPRs of hipcc's count are not traced (address registers "
    "of the guarded blocks are the likely part, not verified). The same class: Swin's "
    "fc2 reduce (8 splits, a residual too), 165 vs 195-196"))
def test_split_k_reduce_with_guarded_epilogue_occupancy_agrees_with_hipcc(tmp_path):
    report = _check("yolo_neck.onnx", "d8_conv2d_29", {**SPLIT_K, "split_k": 3},
                    "reduce", tmp_path)
    assert [x for x in report["disagreements"] if x["what"] == "occupancy"] == []


@pytest.mark.xfail(strict=True, reason=(
    "global access width: the MFMA attention's score epilogue reads a lane's 4 consecutive "
    "keys of Swin's relative-position bias with 4 scalar loads, and LLVM's load/store "
    "vectorizer merges them into one global_load_dwordx4 (global memory needs only dword "
    "alignment on gfx9, SIISelLowering::allowsMisalignedMemoryAccesses). The IR keeps them "
    "scalar: compiler/lower/loadmerge.py forms a vector load only where Divisibility "
    "proves 16-byte alignment, as the simulator's vector accesses are aligned, and it "
    "does not prove the key offset a multiple of 4 here (tried on this kernel)"))
def test_attention_bias_load_widths_agree_with_hipcc(tmp_path):
    knobs = {"mma": "mfma", "BQ": 16, "BK": 16, "waves": 1, "RM": 1, "q_in": "lds",
             "row_stats": "registers", "lds_pad": 4}
    report = _check("swin_window.onnx", "d4_matmul_1", knobs, "", tmp_path)
    assert [x for x in report["disagreements"] if x["what"].startswith("global_")] == []
