"""A dispatch lowered to a sequence of kernels (split-K, stream-K, flash-decoding) exports as one
.hip per kernel, launched in order by the harness with its workspace allocated there; each
kernel compiles with hipcc for gfx90a and gfx940 and `check` finds the ISA in agreement
with the simulator (widths, LDS, scratch, occupancy)."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from compiler.cli import main

pytestmark = [pytest.mark.hip,
              pytest.mark.skipif(shutil.which("hipcc") is None,
                                 reason="hipcc not installed (Debian package 'hipcc')")]

CASES = [
    # a 1x1 conv on a 7x7 image: 8 output tiles, K split four ways
    ("conv_add_relu:c=256,k=64", ("--fix", "split_k=4"),
     ("_gemm_partial", "_gemm_reduce"), "_splitk_partials"),
    ("conv_add_relu:c=256,k=64", ("--fix", "split_k=4", "--pin-occupancy"),
     ("_gemm_partial", "_gemm_reduce"), "_splitk_partials"),
    # stream-K: 304 persistent workgroups walk the tiles x K-tiles of a 2048-deep 1x1 conv,
    # the fix-up kernel sums each tile's segments (loops with per-workgroup bounds)
    ("conv_add_relu:c=2048,k=128", ("--fix", "stream_k=1"),
     ("_gemm_partial", "_gemm_reduce"), "_splitk_partials"),
    # stream-K with one K tile (K = BK = 16): 385 tiles on 304 workgroups, no K loop in
    # the partial kernel (the case that once had a dead loop reading past the filter)
    ("conv_add_relu:h=33,w=33,c=16,k=330", ("--fix", "stream_k=1", "--fix", "BK=16"),
     ("_gemm_partial", "_gemm_reduce"), "_splitk_partials"),
    # 2 heads x 16 query blocks: keys split eight ways, then the combine
    ("attention:heads=2,seq=256", ("--mode", "aggressive", "--fix", "key_splits=8"),
     ("_fd_split", "_fd_combine"), "_fd_partial_out"),
    # the same on the matrix cores: the MFMA split kernel, the same combine
    ("attention:heads=2,seq=256", ("--mode", "aggressive", "--fix", "key_splits=8",
                                   "--fix", "mma=mfma"),
     ("_fd_split", "_fd_combine"), "_fd_partial_out"),
]


@pytest.mark.parametrize("model,extra,suffixes,workspace", CASES)
def test_sequence_exports_compiles_and_checks(model, extra, suffixes, workspace, tmp_path,
                                              capsys):
    out = tmp_path / "proj"
    assert main(["export", model, "-o", str(out), "--budget", "2", "--json", *extra]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert [any(k.endswith(s) for k in kernels) for s in suffixes] == [True, True]
    main_hip = (out / "main.hip").read_text()
    # launched in order, the workspace an array of the harness with no data file
    first, second = (main_hip.index(f"{k}<<<") for k in kernels)
    assert first < second
    assert re.search(rf'"\w*{workspace}", "\w*{workspace}", wfh::F32, \d+u, false, false',
                     main_hip)
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"]
                                                     for d in report["disagreements"]]
    assert len(report["kernels"]) == 2 * len(kernels)   # gfx90a and gfx940
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
