"""Every built-in model, tuned and exported, compiles with hipcc for gfx90a and gfx940,
and the ISA agrees with what the simulator assumed (widths, LDS bytes, scratch, occupancy)."""
from __future__ import annotations

import ast
import json
import shutil

import pytest

from compiler.cli import main
from compiler.models import MODELS
from test_contraction_vgprs import GAPS  # the estimate's known gaps, pinned against hipcc

pytestmark = [pytest.mark.hip,
              pytest.mark.skipif(shutil.which("hipcc") is None,
                                 reason="hipcc not installed (Debian package 'hipcc')")]

SMALL = {"conv_add_relu": "conv_add_relu:c=256,k=64",
         "conv_add_relu_mismatch": "conv_add_relu_mismatch:c=256,k=64"}


CASES = [(m, ()) for m in sorted(MODELS)] + [
    # the LDS-tiled permute, pinned (a budget of 3 samples may not draw it)
    ("transpose_add:rows=96,cols=64", ("--fix", "transpose=lds", "--fix", "lds_pad=1"))]


@pytest.mark.parametrize("model,extra", CASES)
def test_export_compiles_and_agrees_with_simulator(model, extra, tmp_path, capsys):
    spec = SMALL.get(model, model)
    out = tmp_path / "proj"
    assert main(["export", spec, "-o", str(out), "--budget", "3", "--json", *extra]) == 0
    exported = json.loads(capsys.readouterr().out)
    if extra:
        for k in exported["kernels"]:
            assert "'transpose': 'lds'" in (out / f"{k}.hip").read_text()
    assert (out / "main.hip").exists() and (out / "CMakeLists.txt").exists()
    # exit 0: an adjacent ds_read2_* pair (two IR reads merged, or one wide read split)
    # is not a width disagreement, and the VGPR estimate gives hipcc's occupancy
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    unknown = [d["message"] for d in report["disagreements"]
               if not (d["what"] == "occupancy" and _known_gap(spec, out, d["kernel"]))]
    assert not unknown and (rc == 0 or report["disagreements"]), unknown


def _known_gap(model: str, out, kernel: str) -> bool:
    """An occupancy disagreement on a kernel whose schedule is a recorded gap of the VGPR
    estimate (tests/test_contraction_vgprs.py GAPS, a strict xfail there: fixing the
    estimate fails that test until the case moves to its agreeing list)."""
    line = next(l for l in (out / f"{kernel}.hip").read_text().splitlines()
                if l.startswith("//   schedule: "))
    knobs = ast.literal_eval(line.split("schedule: ", 1)[1])
    def ops(name):   # the dispatch's number depends on the plan; its root op does not
        return name.split("_", 1)[1]
    return any(m == model and ops(kernel).startswith(ops(d)) and k == knobs
               for m, d, k, _ in GAPS)
    entries = report["kernels"]
    assert len(entries) == 2 * len(exported["kernels"])
    for e in entries:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
        assert not e.get("flat_insts"), f"{e['kernel']} uses flat memory instructions"
    for d in report["disagreements"]:
        # hipcc may merge adjacent narrow LDS/global loads into wider ones; that is reported
        # but is not a simulator error. Everything else must agree.
        assert d["what"] in ("lds_load_width", "global_load_width"), d["message"]
        assert d["what"] != "global_store_width"
    whats = {d["what"] for d in report["disagreements"]}
    assert not whats & {"lds_bytes", "scratch", "occupancy", "compile", "flat"}
