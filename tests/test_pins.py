"""``export --pin-occupancy`` keeps a pin only where hipcc fits the kernel in it.

With hipcc: ResNet-50's first-stage 1x1 conv tile (16x32x32 KW 4, K = 64: straight-line
K, estimated 72 VGPRs, W = 7) spills 6-7 VGPRs pinned (``test_contraction_vgprs``'s
PINNED_GAPS), so it is emitted unpinned with the figures; the vectorised elementwise
kernel fits and keeps its pin. Without hipcc the pins are written unverified with one
warning. The decision rule itself is tested against a fake compiler, so it runs anywhere.
"""
from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import codegen_kernels as ck
from codegen_hip import check as check_mod
from codegen_hip import write_project
from codegen_hip.check import check_dir
from codegen_hip.pins import NO_HIPCC, pin_summary, pin_targets, verify_pins
from gpusim.hw import get_arch

needs_hipcc = [pytest.mark.hip,
               pytest.mark.skipif(shutil.which("hipcc") is None,
                                  reason="hipcc not installed (Debian package 'hipcc')")]


def _conv1x1_k64():
    """ResNet-50's 1x1 conv of the 56x56 stage with the tile `export` picks (K = 64)."""
    from test_contraction_vgprs import _KW4_1x1, CONV1_56, _kernel
    return _kernel(CONV1_56, "d0_conv2d_0", _KW4_1x1, "gfx942")


def _project(tmp_path, kernels, **kw):
    launches = []
    for k in kernels:
        if k.name == "elementwise_f4":
            launches.append((k, {"x": "ex", "y": "ey", "n": 4096, "alpha": 2.0}))
        else:
            launches.append((k, {p.name: p.name for p in k.params}))
    return write_project(tmp_path / "proj", kernels, launches, {}, pin_occupancy=True, **kw)


def _sidecars(out):
    return {p.name[:-len(".sim.json")]: json.loads(p.read_text())
            for p in out.glob("*.sim.json")}


@needs_hipcc[0]
@needs_hipcc[1]
def test_spilling_pin_is_dropped_and_fitting_pin_kept(tmp_path):
    conv = _conv1x1_k64()
    out = _project(tmp_path, [conv, ck.elementwise_f4()])
    side = _sidecars(out)
    [conv_c] = [c for c in side if c != "elementwise_f4"]
    dropped, kept = side[conv_c], side["elementwise_f4"]
    assert dropped["pin_asked"] == 7 and dropped["waves_per_eu"] is None
    assert "amdgpu_waves_per_eu(7)" in dropped["pin_dropped"]
    assert "VGPRs spilled" in dropped["pin_dropped"] and "estimate 72" in dropped["pin_dropped"]
    assert all(f["vgpr_spills"] for f in dropped["pin_figures"].values())
    src = (out / f"{conv_c}.hip").read_text()
    assert "WF_WAVES_PER_EU" not in src and "left to the compiler" in src.split("#include")[0]
    assert kept["waves_per_eu"] == kept["pin_asked"] == 8
    assert kept["pin_verified_on"] == ["gfx90a", "gfx940"] and kept["pin_dropped"] is None
    assert "WF_WAVES_PER_EU(8)" in (out / "elementwise_f4.hip").read_text()
    assert pin_summary(out) == {"asked": True, "pinned": 1, "dropped": {conv_c: dropped["pin_dropped"]},
                                "verified_on": ["gfx90a", "gfx940"], "unverified": None}
    # what `check` then sees: no spill, no scratch, no missed pin
    report = check_dir(out)
    assert not [d for d in report["disagreements"] if d["what"] in ("scratch", "spills", "pin")]


def test_without_hipcc_pins_are_written_unverified_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(check_mod, "hipcc_path", lambda: None)
    with pytest.warns(UserWarning) as caught:
        out = _project(tmp_path, [ck.elementwise_f4()])
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "hipcc not found" in msgs[0] and "install hipcc" in msgs[0]
    for info in _sidecars(out).values():
        assert info["waves_per_eu"] == info["pin_asked"] and info["waves_per_eu"]
        assert info["pin_unverified"] == NO_HIPCC and info["pin_verified_on"] is None
    assert "The pin is not verified" in (out / "elementwise_f4.hip").read_text()
    assert pin_summary(out)["unverified"] == NO_HIPCC


def test_cli_says_how_many_pins_and_warns_once_without_hipcc(tmp_path, monkeypatch, capsys):
    from compiler import cli
    monkeypatch.setattr(check_mod, "hipcc_path", lambda: None)
    out = tmp_path / "proj"
    with pytest.warns(UserWarning) as caught:
        assert cli.main(["export", "softmax", "-o", str(out), "--budget", "1",
                         "--pin-occupancy"]) == 0
    assert len(caught) == 1
    line = cli._one_line_warning(caught[0].message, caught[0].category, "", 0)
    assert line.count("\n") == 1 and "hipcc not found" in line and "install hipcc" in line
    text = capsys.readouterr().out
    assert "occupancy pinned in" in text and "unverified" in text
    assert main_json(cli, tmp_path)["pins"]["unverified"] == NO_HIPCC


def main_json(cli, tmp_path):
    """``export --json --pin-occupancy`` without hipcc: the document says the pins are unverified."""
    import contextlib
    import io
    buf = io.StringIO()
    with pytest.warns(UserWarning), contextlib.redirect_stdout(buf):
        assert cli.main(["export", "softmax", "-o", str(tmp_path / "j"), "--budget", "1",
                         "--pin-occupancy", "--json"]) == 0
    return json.loads(buf.getvalue())


def _fake_compiler(monkeypatch, figures, calls):
    """hipcc replaced by a function writing the metadata lines parse_asm reads."""
    def fake(src, arch, asm_path, hipcc=None, timeout=180):
        calls.append((src.name, arch))
        f = figures(src.read_text(), arch)
        if f is None:
            return {"rc": 1, "stderr": "error: boom", "compile_s": 0.0, "command": "fake"}
        vg, spills, scratch = f
        asm_path.write_text(f"    .vgpr_count: {vg}\n    .vgpr_spill_count: {spills}\n"
                            f"    .private_segment_fixed_size: {scratch}\n")
        return {"rc": 0, "stderr": "", "compile_s": 0.0, "command": "fake"}
    monkeypatch.setattr(check_mod, "compile_to_asm", fake)
    monkeypatch.setattr(check_mod, "hipcc_path", lambda: "/fake/hipcc")


def test_decision_rule_and_one_compile_per_distinct_source(monkeypatch):
    """Kept only when every target fits: no spill, no scratch, enough waves, compiled;
    kernels that differ only in their names share one compile per target."""
    src = ("extern \"C\" __global__ void {n}(float* __restrict__ {p}) WF_WAVES_PER_EU(7) "
           "{{ {p}[0] = {v}; }}\n")
    sources = {"same_a": (src.format(n="same_a", p="x", v="1.0f"), 7),
               "same_b": (src.format(n="same_b", p="y", v="1.0f"), 7),
               "spills": (src.format(n="spills", p="x", v="2.0f"), 7),
               "scratch": (src.format(n="scratch", p="x", v="3.0f"), 7),
               "few": (src.format(n="few", p="x", v="4.0f"), 7),
               "broken": (src.format(n="broken", p="x", v="5.0f"), 7)}
    per = {"1.0f": (64, 0, 0), "2.0f": (72, 6, 0), "3.0f": (72, 0, 16), "4.0f": (80, 0, 0),
           "5.0f": None}

    def figures(text, arch):
        v = next(k for k in per if k in text)
        if v == "2.0f" and arch == "gfx90a":
            return 64, 0, 0          # fits on one target only: still dropped
        return per[v]
    calls = []
    _fake_compiler(monkeypatch, figures, calls)
    got = verify_pins(sources, get_arch("gfx942"), estimates={"spills": 64})
    assert len(calls) == 5 * 2                      # same_a and same_b: one compile each target
    assert got["same_a"].kept and got["same_b"].kept
    assert got["same_a"].targets == ("gfx90a", "gfx940")
    assert not got["spills"].kept and "gfx940: 72 VGPRs + 6 VGPRs spilled" in got["spills"].reason
    assert "gfx90a" not in got["spills"].reason and "estimate 64" in got["spills"].reason
    assert not got["scratch"].kept and "16 B scratch" in got["scratch"].reason
    assert not got["few"].kept and "80 VGPRs allow only 6 waves/SIMD" in got["few"].reason
    assert not got["broken"].kept and "hipcc failed (error: boom)" in got["broken"].reason
    # a shared ``compiled`` memo: a second call (the export after the schedule choice,
    # compiler.tuning.pinned_schedules) compiles only programs the first did not
    memo = {}
    verify_pins(sources, get_arch("gfx942"), compiled=memo)
    calls.clear()
    again = verify_pins({"renamed": (src.format(n="renamed", p="z", v="1.0f"), 7),
                         "new": (src.format(n="new", p="x", v="4.0f")
                                 .replace("PER_EU(7)", "PER_EU(6)"), 6)},
                        get_arch("gfx942"), compiled=memo)
    assert sorted(calls) == [("new.hip", "gfx90a"), ("new.hip", "gfx940")]
    assert again["renamed"].kept and again["new"].kept      # 80 VGPRs fit 6 waves


def test_pin_targets_follow_check():
    """A CDNA export is held to check's default pair; RDNA to its own target."""
    assert pin_targets(get_arch("gfx942")) == pin_targets(get_arch("gfx90a")) == ("gfx90a", "gfx940")
    assert pin_targets(get_arch("gfx1100")) == ("gfx1100",)


def test_unpinned_export_records_no_pin(tmp_path):
    k = ck.elementwise_f4()
    x = np.arange(4096, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = write_project(tmp_path / "plain", [k], [(k, {"x": "x", "y": "y", "n": 4096,
                                                           "alpha": 2.0})], {"x": x})
    assert pin_summary(out)["asked"] is False
    assert _sidecars(out)["elementwise_f4"]["waves_per_eu"] is None


def test_interrupted_verification_leaves_nothing_behind(tmp_path, monkeypatch):
    """Ctrl-C while hipcc verifies the pins: no export folder, no temporary one."""
    def interrupted(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(check_mod, "compile_to_asm", interrupted)
    monkeypatch.setattr(check_mod, "hipcc_path", lambda: "/fake/hipcc")
    with pytest.raises(KeyboardInterrupt):
        _project(tmp_path, [ck.elementwise_f4()])
    assert list(tmp_path.iterdir()) == []


def test_summary_line_names_each_cause():
    from compiler.cli.commands.export import _pin_line
    pins = {"asked": True, "pinned": 45, "verified_on": ["gfx90a", "gfx940"], "unverified": None,
            "dropped": {"a": "hipcc does not fit amdgpu_waves_per_eu(7): gfx90a: 72 VGPRs + "
                             "7 VGPRs spilled", "b": "... gfx940: hipcc failed (error: x)"}}
    line = _pin_line(pins)
    assert line.startswith("occupancy pinned in 45 kernel(s) (hipcc fits them on gfx90a, gfx940)")
    assert "; 1 left to the compiler, because the VGPR estimate is below" in line
    assert "; 1 left unpinned because hipcc failed" in line and "pin_dropped" in line
    assert "left" not in _pin_line({**pins, "dropped": {}})
