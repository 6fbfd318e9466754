"""A dispatch lowered to a sequence of kernels (split-K, stream-K, flash-decoding) exports as one
.hip per kernel, launched in order by the harness with its workspace allocated there; each
kernel compiles with hipcc for gfx90a and gfx940 and `check` finds the ISA in agreement
with the simulator (widths, LDS, scratch, occupancy)."""
from __future__ import annotations

import dataclasses
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
    # (reduced by a second kernel: the one-kernel reduction is predicted faster here)
    ("conv_add_relu:c=256,k=64", ("--fix", "split_k=4", "--fix", "split_reduce=kernel"),
     ("_gemm_partial", "_gemm_reduce"), "_splitk_partials"),
    ("conv_add_relu:c=256,k=64", ("--fix", "split_k=4", "--fix", "split_reduce=kernel",
                                  "--pin-occupancy"),
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
    # (``split_reduce=kernel``: the search may prefer the one kernel of the last arrival)
    ("attention:heads=2,seq=256", ("--mode", "aggressive", "--fix", "key_splits=8",
                                   "--fix", "split_reduce=kernel"),
     ("_fd_split", "_fd_combine"), "_fd_partial_out"),
    # the same on the matrix cores: the MFMA split kernel, the same combine
    ("attention:heads=2,seq=256", ("--mode", "aggressive", "--fix", "key_splits=8",
                                   "--fix", "mma=mfma", "--fix", "split_reduce=kernel"),
     ("_fd_split", "_fd_combine"), "_fd_partial_out"),
    # ViT's short-sequence split: 64 queries on 4 MFMA waves, 64-key blocks split 4 ways
    ("attention:heads=2,seq=256,dim=64", ("--mode", "aggressive", "--fix", "key_splits=4",
                                          "--fix", "mma=mfma", "--fix", "BQ=64",
                                          "--fix", "waves=4", "--fix", "BK=64",
                                          "--fix", "split_reduce=kernel"),
     ("_fd_split", "_fd_combine"), "_fd_partial_out"),
    # GPT-2's causal mask over Sq = Sk: each split stops at its query block's last row
    # (a loop bound from the split and the block), the partials at the block it runs
    ("attention:heads=2,seq=128,dim=64,mask=causal",
     ("--mode", "aggressive", "--fix", "key_splits=4", "--fix", "mma=fma",
      "--fix", "split_reduce=kernel"),
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


def test_two_stage_columns_compile_and_check(tmp_path):
    """Two-stage strided rows (``mapping=columns``, ``row_splits``): a channel LayerNorm of
    NCHW (Welford states, per-element combine), a softmax over channels (online softmax
    states, a ragged block of rows) and an NHWC global pool (the combine one workgroup
    per block): both kernels of each compile with hipcc for gfx90a and gfx940 and
    `check` finds no disagreement."""
    from codegen_hip import check_dir, write_project
    from compiler.fusion import fuse
    from compiler.lower import lower
    from test_lower_rows import _strided_graph
    cases = [("layernorm", (1, 768, 7, 7), (1,), {"workgroup": 256, "row_lanes": 16,
                                                  "passes": "single", "row_splits": 16}),
             ("softmax", (1, 64, 10, 10), (1,), {"workgroup": 128, "row_lanes": 32,
                                                 "passes": "single", "row_splits": 4}),
             ("mean", (1, 7, 7, 2048), (1, 2), {"workgroup": 256, "row_lanes": 32,
                                                "row_splits": 2})]
    kernels, launches = [], []
    for i, (kind, shape, axes, knobs) in enumerate(cases):
        g = _strided_graph(kind, shape, axes)
        seq = lower(g, fuse(g).dispatches[0], {"mapping": "columns", **knobs}, "gfx942")
        ws = seq.workspaces[0].name
        for k in seq.kernels:
            k = dataclasses.replace(k, name=f"cols{i}_{k.name}")
            kernels.append(k)
            launches.append((k, {p.name: f"c{i}_{p.name}" if p.name == ws
                                 else f"{k.name}/{p.name}" for p in k.params}))
    report = check_dir(write_project(tmp_path / "export", kernels, launches, {}),
                       ("gfx90a", "gfx940"))
    assert len(report["kernels"]) == 2 * len(kernels)
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
    assert not report["disagreements"], [d["message"] for d in report["disagreements"]]


def test_last_wg_split_exports_compiles_and_checks(tmp_path, capsys):
    """split_reduce=last_wg: one kernel; its arrival counters are an i32 array with no
    data file, which the harness zeroes once (hipMemset) and every launch leaves zero, so
    the harness's repeated timed runs need nothing more; compiled for gfx90a and gfx940,
    ``check`` agrees and nothing spills."""
    out = tmp_path / "proj"
    assert main(["export", "conv_add_relu:c=256,k=64", "-o", str(out), "--budget", "2",
                 "--json", "--fix", "split_k=4", "--fix", "split_reduce=last_wg"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert len(kernels) == 1 and kernels[0].endswith("_gemm")
    main_hip = (out / "main.hip").read_text()
    assert re.search(r'"\w*_splitk_arrivals", "\w*_splitk_arrivals", wfh::I32, \d+u, false, '
                     r'false', main_hip)
    assert "hipMemset(dev[i], 0" in main_hip
    src = (out / f"{kernels[0]}.hip").read_text()
    assert "atomicAdd(&" in src and "__threadfence();" in src
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"]
                                                     for d in report["disagreements"]]
    assert len(report["kernels"]) == 2
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
