"""`check` compiles each distinct kernel source once per arch: a model's identical layers
give sources that differ only in graph-derived names (kernel, parameters, locals built
from them), and 12 layers x 7-10 s of hipcc per kernel per arch is what made `check` on
a whole model take hours. A stand-in hipcc (a script that counts its runs and writes a
minimal assembly listing) keeps this test fast and runnable without the real compiler."""
import json
import re
import stat
from pathlib import Path

import numpy as np

import codegen_kernels as ck
from codegen_hip import check_dir, write_project
from codegen_hip.check import source_key

FAKE_HIPCC = """#!/bin/sh
echo run >> "{log}"
# as clang does: a scratch folder under TMPDIR that it never removes
scratch=$(mktemp -d "${{TMPDIR:-/tmp}}/kernel-XXXXXX")
echo "$scratch" >> "{log}.scratch"
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
printf '\\t.vgpr_count:     8\\n\\t.group_segment_fixed_size: 0\\n\\t.private_segment_fixed_size: 0\\n\\tglobal_load_dwordx4 v[0:3], v0, s[0:1]\\n\\tglobal_store_dwordx4 v0, v[0:3], s[0:1]\\n' > "$out"
"""


def _renamed(text, pairs):
    for a, b in pairs:
        text = text.replace(a, b)
    return text


def _project(tmp_path):
    k = ck.elementwise_f4()
    out = write_project(tmp_path / "export", [k], [(k, {"x": "x", "y": "y", "n": 4096,
                                                         "alpha": 0.5})],
                        {"x": np.zeros(4096, np.float32)})
    # a second layer: the same kernel under other kernel and tensor names
    pairs = [("elementwise_f4", "layer1_elementwise_f4"), ("x", "hidden_1_in"),
             ("y", "hidden_1_out")]
    src = out / "elementwise_f4.hip"
    side = json.loads((out / "elementwise_f4.sim.json").read_text())
    text = src.read_text()
    # as the emitter names them: whole identifiers and underscore-delimited parts of
    # locals (x_v4), never a member (.x)
    text2 = re.sub(r"(?<![A-Za-z0-9.])(elementwise_f4|x|y)(?![A-Za-z0-9])",
                   lambda m: dict(pairs)[m.group(1)], text)
    (out / "layer1_elementwise_f4.hip").write_text(text2)
    side["c_name"] = "layer1_elementwise_f4"
    (out / "layer1_elementwise_f4.sim.json").write_text(json.dumps(side))
    return out, text, text2


def _fake_hipcc(tmp_path):
    log = tmp_path / "runs.log"
    exe = tmp_path / "hipcc"
    exe.write_text(FAKE_HIPCC.format(log=log))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe), log


def test_identical_layers_are_compiled_once_per_arch_and_each_keeps_its_entry(tmp_path):
    out, a, b = _project(tmp_path)
    assert source_key(a, "elementwise_f4") == source_key(b, "layer1_elementwise_f4")
    hipcc, log = _fake_hipcc(tmp_path)
    report = check_dir(out, ("gfx90a", "gfx940"), hipcc=hipcc)
    assert len(log.read_text().splitlines()) == 2  # one kernel source x two archs
    assert report["distinct_sources"] == 1
    entries = {(e["kernel"], e["arch"]): e for e in report["kernels"]}
    assert set(entries) == {(k, a) for k in ("elementwise_f4", "layer1_elementwise_f4")
                            for a in ("gfx90a", "gfx940")}
    shared = entries[("layer1_elementwise_f4", "gfx90a")]
    assert shared["same_source_as"] == "elementwise_f4"
    assert shared["widths"] == entries[("elementwise_f4", "gfx90a")]["widths"]


def test_the_compiler_scratch_folders_are_removed(tmp_path):
    """clang leaves an empty folder in TMPDIR per compile: check gives it a private one."""
    out, _, _ = _project(tmp_path)
    hipcc, log = _fake_hipcc(tmp_path)
    check_dir(out, ("gfx90a", "gfx940"), hipcc=hipcc)
    scratch = Path(str(log) + ".scratch").read_text().split()
    assert len(scratch) == 2
    assert all("wavefuse-hipcc-" in s and not Path(s).exists() for s in scratch)


def test_a_different_body_is_compiled_on_its_own(tmp_path):
    out, a, _ = _project(tmp_path)
    # the copy computes something else (another constant): its own compile
    changed = (out / "layer1_elementwise_f4.hip").read_text().replace("1.0f", "2.0f", 1)
    assert changed != (out / "layer1_elementwise_f4.hip").read_text()
    (out / "layer1_elementwise_f4.hip").write_text(changed)
    hipcc, log = _fake_hipcc(tmp_path)
    report = check_dir(out, ("gfx90a",), hipcc=hipcc)
    assert len(log.read_text().splitlines()) == 2 and report["distinct_sources"] == 2
    assert not any(e.get("same_source_as") for e in report["kernels"])


def test_only_declared_names_are_renamed_and_one_to_one():
    def key(src):
        return source_key(src, "k")
    # two parameters merged into one name change the program
    assert key("void k(int a, int b) { a = b; }") != key("void k(int c, int d) { c = c; }")
    assert key("void k(int a, int b) { a = b; }") == key("void k(int c, int d) { c = d; }")
    # a builtin or type is never renamed
    assert key("void k(float a) { a = expf(a); }") != key("void k(float a) { a = logf(a); }")
    assert key("void k(float a) { float t = a; }") != key("void k(float a) { int t = a; }")
    assert key("void k(float a) { a = 1; }") != key("void k(float a) { a = 2; }")


def test_a_uniform_load_read_through_the_scalar_cache_is_a_warning():
    """The per-row mean of a layer norm is one address per wave: hipcc loads it with
    s_load_dword. The sidecar marks the load uniform (gpusim.analysis), so the missing
    global_load_dword is a warning naming why; a per-lane load missing is still an error."""
    from codegen_hip.check import compare
    entry = {"kernel": "k", "arch": "gfx90a", "rc": 0, "scratch_bytes": 0, "lds_bytes": 0,
             "flat_insts": 0, "vgprs": None,
             "mem_insts": {"global_load_dwordx4": 9, "s_load_dword": 1, "s_load_dwordx2": 5},
             "widths": {"global_load": {16: 9}, "global_store": {}, "lds_load": {},
                        "lds_store": {}}}
    acc = [{"space": "global", "op": "load", "bytes": 16, "name": "x", "uniform": False},
           {"space": "global", "op": "load", "bytes": 4, "name": "mean", "uniform": True}]
    found = compare({"kernels": [entry]}, sim_info={"k": {"lds_bytes": 0, "accesses": acc}})
    assert [(d["what"], d["severity"]) for d in found] == [("global_load_width", "warning")]
    acc[1]["uniform"] = False
    found = compare({"kernels": [entry]}, sim_info={"k": {"lds_bytes": 0, "accesses": acc}})
    assert [d["severity"] for d in found] == ["error"]


def test_the_sidecar_marks_wave_uniform_global_loads():
    from codegen_hip.simfacts import memory_accesses
    from compiler.lower import lower
    from compiler.ir.models import load_model
    from compiler.fusion import fuse
    g = load_model("layernorm:rows=64,cols=256")
    plan = fuse(g, aggressive=False)
    marks = {}
    for d in plan.dispatches:
        from compiler.schedule import schedule_space
        from gpusim.hw import GFX942
        knobs = next(c.knobs for c in schedule_space(g, d, GFX942) if c.legal)
        for a in memory_accesses(lower(g, d, knobs, "gfx942")):
            if a["space"] == "global" and a["op"] == "load":
                marks.setdefault(a["name"], set()).add(a["uniform"])
    assert any(True in v for v in marks.values())
    assert any(False in v for v in marks.values())
