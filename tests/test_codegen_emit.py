"""HIP backend checks that need no compiler: names, literals, declarations, the exporter's
safety rules, the sidecar comparison logic and (with g++) the harness's .npy reader."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import codegen_kernels as ck
from codegen_hip import ExportError, c_identifier, compare, emit_kernel, render_check, write_project
from codegen_hip import export as export_mod
from codegen_hip.check import parse_asm
from codegen_hip.emit import f32_literal, i32_literal
from codegen_hip.harness import _NPY_READER
from codegen_hip.names import CXX_KEYWORDS, Namer
from codegen_hip.simfacts import sim_info, vgpr_occupancy
from gpusim.program import (Assign, Buffer, For, If, Kernel, Load, Store, Var, f32, thread_id)


# ------------------------------------------------------------------------------ names
@pytest.mark.parametrize("raw, want", [("my-kernel.0", "my_kernel_0"), ("float", "float_"),
                                       ("int", "int_"), ("9lives", "n9lives"), ("__x", "x"),
                                       ("threadIdx", "threadIdx_"), ("", "v"), ("main", "main_")])
def test_c_identifier(raw, want):
    assert c_identifier(raw) == want


def test_namer_unique_even_when_sanitised_names_collide():
    n = Namer()
    got = [n.fresh(s) for s in ("a-b", "a_b", "a.b", "A_B", "float", "float_")]
    assert len({g.lower() for g in got}) == len(got)
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", g) for g in got)


def test_keyword_kernel_prints_valid_distinct_identifiers():
    src = emit_kernel(ck.keyword_names())
    sig = re.search(r"\n(\w+)\((.*)\) \{", src)
    assert sig.group(1) == "float_"
    params = [p.split()[-1] for p in sig.group(2).split(",")]
    assert len(set(params)) == 4
    assert not set(params) & CXX_KEYWORDS
    decls = re.findall(r"^\s+(?:const )?(?:float|int) (\w+) =", src, re.M)
    assert not set(decls) & CXX_KEYWORDS and len(set(decls)) == len(decls)


# ---------------------------------------------------------------------------- literals
@pytest.mark.parametrize("v", [0.1, -2.5, 1e-30, 3.4e38, 1.0, 123456789.0, -0.0])
def test_f32_literal_round_trips_exactly(v):
    text = f32_literal(v).strip("()").rstrip("f")
    assert np.float32(float(text)) == np.float32(v)
    assert np.signbit(np.float32(float(text))) == np.signbit(np.float32(v))


def test_special_literals():
    assert "huge_val" in f32_literal(float("inf")) and f32_literal(float("-inf")).startswith("(-")
    assert "nan" in f32_literal(float("nan"))
    assert i32_literal(-2**31) == "(-2147483647 - 1)" and i32_literal(-3) == "(-3)"
    with pytest.raises(ValueError):
        i32_literal(2**31)


# ------------------------------------------------------------------------ printing
def test_vector_load_and_store_use_float4_at_element_offset():
    src = emit_kernel(ck.elementwise_f4())
    assert "*reinterpret_cast<const float4*>(x + i)" in src
    assert "*reinterpret_cast<float4*>(y + i) = make_float4(" in src
    assert "const float* __restrict__ x" in src and "float* __restrict__ y" in src
    assert "const int n, const float alpha" in src
    assert "__launch_bounds__(256)" in src and 'extern "C" __global__' in src


def test_wave_reduce_is_a_warpsize_butterfly():
    src = emit_kernel(ck.row_sum())
    assert "for (int offset = warpSize / 2; offset > 0; offset /= 2)" in src
    assert "__shfl_xor(total, offset, warpSize)" in src
    assert "% warpSize" in src and "/ warpSize" in src  # lane and wave ids, not 64


def test_lds_padded_shape_and_barrier():
    src = emit_kernel(ck.transpose_lds())
    assert re.search(r"__shared__ __align__\(\d+\) float tile\[32 \* 33\];", src)
    assert "__syncthreads();" in src and "#pragma unroll" in src


def test_f16_widening_and_narrowing():
    src = emit_kernel(ck.half_io())
    assert "__half2float" in src or "__low2float" in src
    assert "__floats2half2_rn" in src and "__float2half(" in src
    assert "struct __align__(8) wf_half4" in src


def test_header_has_schedule_and_counters():
    src = emit_kernel(ck.elementwise_f4(), counters={"hbm_bytes": 32768, "coalescing_pct": 100.0},
                      header_comment="line one\nline */ two\\")
    head = src.split("#include")[0]
    assert "vector_width: 4" in head and "hbm_bytes: 32768" in head and "coalescing_pct: 100" in head
    assert all(line.startswith("//") for line in head.strip().splitlines())


def test_register_first_set_in_if_and_read_after_is_hoisted():
    t, i = Var("t"), Var("i", "i32")
    body = (Assign(i, thread_id()),
            If(i < 10, (Assign(t, f32(2.0)),)),
            Store("y", i, (t,)))
    k = Kernel("k", (Buffer("y", "f32", (64,), "out"),), grid=1, block=64, body=body)
    src = emit_kernel(k)
    assert src.index("float t = 0.0f;") < src.index("if (i < 10)")
    assert re.search(r"^\s+t = 2\.0f;", src, re.M)


def test_loop_carried_register_declared_outside_loop():
    acc, j = Var("acc"), Var("j", "i32")
    body = (For(j, 0, 4, 1, (Assign(acc, acc + f32(1.0)),)), Store("y", thread_id(), (acc,)))
    k = Kernel("k", (Buffer("y", "f32", (64,), "out"),), grid=1, block=64, body=body)
    src = emit_kernel(k)
    assert src.index("float acc = 0.0f;") < src.index("for (int j = 0;")


def test_bad_width_is_rejected():
    """Width 3 is a global load of 4-byte elements only (a dwordx3); width 5 never."""
    v = [Var(f"v{i}") for i in range(5)]
    k = Kernel("k", (Buffer("x", "f32", (64,)),), grid=1, block=64, body=(Load(tuple(v), "x", 0),))
    with pytest.raises(ValueError, match="width 5"):
        emit_kernel(k)
    half = Kernel("k", (Buffer("x", "f16", (64,)),), grid=1, block=64,
                  body=(Load(tuple(v[:3]), "x", 0),))
    with pytest.raises(ValueError, match="width 3"):
        emit_kernel(half)
    ok = Kernel("k", (Buffer("x", "f32", (64,)),), grid=1, block=64,
                body=(Load(tuple(v[:3]), "x", 0),))
    assert "struct wf_float3 { float x, y, z; };" in emit_kernel(ok)


# ------------------------------------------------------------------------------ export
def _simple_project(tmp_path, name="proj", **kw):
    k = ck.elementwise_f4()
    x = np.arange(4096, dtype=np.float32)
    return write_project(tmp_path / name, [k], [(k, {"x": "x", "y": "y", "n": 4096, "alpha": 2.0})],
                         {"x": x}, expected={"y": np.maximum(x * 2 + 1, 0)}, **kw)


def test_export_contents(tmp_path):
    out = _simple_project(tmp_path)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if "nvidia" not in p.parts)
    assert names == [".wavefuse-export", "CMakeLists.txt", "README.md", "build.sh", "data", "data/x.npy",
                     "data/y.expected.npy", "elementwise_f4.hip", "elementwise_f4.sim.json", "main.hip"]
    assert (out / "nvidia" / "hip" / "hip_runtime.h").exists()
    cm = (out / "CMakeLists.txt").read_text()
    assert "LANGUAGES CXX HIP" in cm and "set(CMAKE_HIP_ARCHITECTURES gfx942)" in cm
    assert "hipcc --offload-arch=gfx942" in (out / "README.md").read_text()
    info = json.loads((out / "elementwise_f4.sim.json").read_text())
    assert info["lds_bytes"] == 0 and {a["bytes"] for a in info["accesses"]} == {16}
    np.testing.assert_array_equal(np.load(out / "data" / "x.npy"), np.arange(4096, dtype=np.float32))
    assert oct(out.stat().st_mode & 0o777) != oct(0o700)


def test_exported_kernel_pins_the_simulated_residency(tmp_path):
    """The .hip carries amdgpu_waves_per_eu at the waves per SIMD the simulator's
    occupancy runs (its sidecar says which), behind a macro nvcc sees as empty."""
    from gpusim.occupancy import occupancy
    plain = _simple_project(tmp_path, name="plain")   # unpinned unless asked
    assert json.loads((plain / "elementwise_f4.sim.json").read_text())["waves_per_eu"] is None
    assert "WF_WAVES_PER_EU" not in (plain / "elementwise_f4.hip").read_text()
    out = _simple_project(tmp_path, pin_occupancy=True)
    info = json.loads((out / "elementwise_f4.sim.json").read_text())
    want = occupancy(ck.elementwise_f4(), "gfx942").waves_per_eu
    assert info["waves_per_eu"] == want
    src = (out / "elementwise_f4.hip").read_text()
    assert f"__launch_bounds__(256) WF_WAVES_PER_EU({want})" in src
    assert "#if defined(__HIP__)\n#define WF_WAVES_PER_EU(w) __attribute__((amdgpu_waves_per_eu(w)))" in src
    assert f"Occupancy pinned at {want} waves per SIMD" in src.split("#include")[0]
    assert "WF_WAVES_PER_EU" not in emit_kernel(ck.elementwise_f4())   # unpinned by default


def test_waves_per_eu_is_the_busiest_simds_share_of_resident_workgroups():
    """A 512-thread workgroup with 7 waves' worth of VGPRs runs 3 per CU: 6 waves per
    SIMD (ViT-B/16's projection, 71 VGPRs); 256 threads run 7; an LDS-bound 1024-thread
    workgroup runs alone: 4."""
    from gpusim.occupancy import residency
    assert residency(512, 16384, 71, "gfx942").waves_per_eu == 6
    assert residency(256, 6144, 71, "gfx942").waves_per_eu == 7
    assert residency(1024, 40960, 64, "gfx90a").waves_per_eu == 4
    assert residency(64, 0, 8, "gfx90a").waves_per_eu == 8


def test_export_refuses_non_empty_dir_without_force(tmp_path):
    target = tmp_path / "proj"
    _simple_project(tmp_path)
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        _simple_project(tmp_path)
    assert (target / "keep.txt").read_text() == "mine"
    _simple_project(tmp_path, force=True)  # a previous export (it holds the marker) is replaced
    assert not (target / "keep.txt").exists() and (target / "main.hip").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # no temp or backup left


def test_force_never_replaces_a_folder_wavefuse_did_not_write(tmp_path):
    target = tmp_path / "proj"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not a wavefuse export"):
        _simple_project(tmp_path, force=True)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


@pytest.mark.parametrize("spelling", [".", "", "./", "..", " ", "~"])
def test_force_never_exports_into_the_current_or_home_folder(tmp_path, monkeypatch, spelling):
    """The data-loss case of issue 16: `-o . --force` used to replace the current folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "precious.txt").write_text("keep me")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))
    k = ck.elementwise_f4()
    with pytest.raises(ExportError, match="refusing"):
        write_project(spelling, [k], [(k, {"x": "x", "y": "y", "n": 4096, "alpha": 2.0})], {},
                      force=True)
    with pytest.raises(ExportError, match="refusing"):
        write_project(work, [k], [(k, {"x": "x", "y": "y", "n": 4096, "alpha": 2.0})], {},
                      force=True)
    assert sorted(p.name for p in work.iterdir()) == ["precious.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_export_failure_leaves_nothing_half_written(tmp_path, monkeypatch):
    target = tmp_path / "proj"
    _simple_project(tmp_path)
    (target / "old.txt").write_text("old")
    before = sorted(p.name for p in target.iterdir())

    def boom(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(export_mod, "main_hip", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        _simple_project(tmp_path, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]
    assert sorted(p.name for p in target.iterdir()) == before
    with pytest.raises(RuntimeError):
        _simple_project(tmp_path, name="fresh")
    assert not (tmp_path / "fresh").exists()


def test_export_paths_stay_inside(tmp_path):
    k = Kernel("../../evil/k", (Buffer("../x", "f32", (64,), "in"), Buffer("/etc/y", "f32", (64,), "out")),
               grid=1, block=64, body=(Load((Var("v"),), "../x", thread_id()),
                                       Store("/etc/y", thread_id(), (Var("v"),))))
    inner = tmp_path / "a"
    inner.mkdir()
    out = write_project(inner / "out", [k], [(k, {"../x": "../../x", "/etc/y": "/etc/passwd"})],
                        {"../../x": np.zeros(64, np.float32)})
    assert sorted(p.name for p in tmp_path.rglob("*") if not str(p).startswith(str(out))) == ["a"]
    assert all(p.resolve().is_relative_to(out) for p in out.rglob("*"))


def test_export_parent_errors(tmp_path):
    with pytest.raises(ExportError, match="does not exist"):
        _simple_project(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="not a directory"):
        _simple_project(tmp_path, name="file")
    if os.geteuid() == 0:
        # root ignores permission bits; /proc refuses new directories even to root
        with pytest.raises(ExportError, match="cannot export to /proc/wavefuse-proj"):
            _simple_project(Path("/proc"), name="wavefuse-proj")
        assert not os.path.exists("/proc/wavefuse-proj")
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ExportError, match="not writable"):
            _simple_project(ro)
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("binding, msg", [
    ({"x": "x", "y": "y", "n": 1}, "'alpha' is not bound"),
    ({"x": "x", "y": "y", "n": 1, "alpha": 1.0, "z": "z"}, "no parameter"),
    ({"x": "x", "y": "x", "n": 1, "alpha": 1.0}, "must not alias"),
    ({"x": "small", "y": "y", "n": 1, "alpha": 1.0}, "f32\\[4096\\] but array 'small'"),
])
def test_export_validates_launches(tmp_path, binding, msg):
    k = ck.elementwise_f4()
    with pytest.raises(ExportError, match=msg):
        write_project(tmp_path / "p", [k], [(k, binding)], {"small": np.zeros(8, np.float32)})
    assert not (tmp_path / "p").exists()


# ---------------------------------------------------------------- comparison logic
def _entry(**kw):
    e = {"kernel": "elementwise_f4", "arch": "gfx90a", "checked_as": "gfx90a", "rc": 0,
         "vgprs": 8, "sgprs": 10, "lds_bytes": 0, "scratch_bytes": 0, "flat_insts": 0,
         "widths": {"global_load": {16: 1}, "global_store": {16: 1}, "lds_load": {}, "lds_store": {}}}
    e.update(kw)
    return e


def test_compare_agrees_and_flags_each_kind_of_disagreement():
    info = sim_info(ck.elementwise_f4(), "gfx942", c_name="elementwise_f4", estimated_vgprs=8,
                    pin=True)
    assert compare({"kernels": [_entry()]}, None, {"elementwise_f4": info}) == []
    bad = _entry(scratch_bytes=64, lds_bytes=128, vgprs=200,
                 widths={"global_load": {4: 4}, "global_store": {16: 1}, "lds_load": {}, "lds_store": {}})
    found = compare({"kernels": [bad]}, None, {"elementwise_f4": info})
    assert sorted((d["what"], d["severity"]) for d in found) == [
        ("global_load_width", "error"), ("global_load_width", "error"), ("lds_bytes", "error"),
        ("pin", "error"), ("scratch", "error"), ("vgprs", "warning")]
    # the sidecar pinned 8 waves (amdgpu_waves_per_eu); an unpinned one is judged on occupancy
    assert info["waves_per_eu"] == 8
    # a grid of many workgroups per CU: the VGPR-limited residency is what the CU runs
    unpinned = {**info, "waves_per_eu": None, "grid": 64 * 304}
    found = compare({"kernels": [bad]}, None, {"elementwise_f4": unpinned})
    assert ("occupancy", "error") in [(d["what"], d["severity"]) for d in found]
    # two workgroups per CU (a persistent stream-K grid): 8 VGPRs would run more, 200
    # (two 4-wave workgroups) runs both as well, so the prediction's residency holds
    two = {**unpinned, "grid": 2 * 304, "block": 256}
    found = compare({"kernels": [bad]}, None, {"elementwise_f4": two})
    assert ("occupancy", "warning") in [(d["what"], d["severity"]) for d in found]
    assert "or the grid" in next(d["message"] for d in found if d["what"] == "occupancy")
    failed = compare({"kernels": [_entry(rc=1, stderr="k.hip:3: error: oops")]}, None, {})
    assert failed[0]["what"] == "compile" and "oops" in failed[0]["message"]


def test_compare_reports_spills_and_weighs_occupancy_by_residency():
    """Spills into AGPRs (no scratch) are a disagreement; a VGPR-limited occupancy
    difference that leaves the simulated workgroups per CU unchanged (LDS binds first) is
    a warning: the prediction's residency holds."""
    info = sim_info(ck.elementwise_f4(), "gfx942", c_name="elementwise_f4", estimated_vgprs=8,
                    pin=True)
    found = compare({"kernels": [_entry(vgpr_spills=3)]}, None, {"elementwise_f4": info})
    assert [(d["what"], d["severity"]) for d in found] == [("spills", "error")]
    assert "pinned 8 waves" in found[0]["message"]
    # 1024 threads and 40 KiB of LDS: one workgroup per CU (4 waves per SIMD) whatever
    # the VGPRs allow, so 64 (8 waves) against 84 (5 waves) changes no residency
    lds = {**info, "block": 1024, "lds_bytes": 40960, "estimated_vgprs": 64, "waves_per_eu": 4,
           "grid": 64 * 304}
    e = _entry(vgprs=84, lds_bytes=40960)
    found = compare({"kernels": [e]}, None, {"elementwise_f4": lds})
    assert [(d["what"], d["severity"]) for d in found] == [("occupancy", "warning")]
    # without the LDS, 64 VGPRs run two such workgroups and 84 one: an error
    found = compare({"kernels": [_entry(vgprs=84)]}, None,
                    {"elementwise_f4": {**lds, "lds_bytes": 0, "waves_per_eu": 8}})
    assert ("pin", "error") in [(d["what"], d["severity"]) for d in found]
    found = compare({"kernels": [_entry(vgprs=84)]}, None,
                    {"elementwise_f4": {**lds, "lds_bytes": 0, "waves_per_eu": None}})
    assert ("occupancy", "error") in [(d["what"], d["severity"]) for d in found]


def test_vgpr_occupancy_table():
    assert [vgpr_occupancy(v, "gfx90a") for v in (1, 64, 65, 128, 256, 512)] == [8, 8, 7, 4, 2, 1]
    assert vgpr_occupancy(24, "gfx1100") == 16


def test_vgpr_occupancy_of_an_unknown_arch_is_an_error():
    """No silent fallback to another arch's register file."""
    from gpusim.errors import KernelError
    with pytest.raises(KernelError, match="unknown arch 'gfx1030'"):
        vgpr_occupancy(32, "gfx1030")


ASM = """\t.text
elementwise:
\ts_load_dwordx4 s[0:3], s[4:5], 0x0
\tglobal_load_dwordx4 v[0:3], v4, s[0:1]
\tds_read2_b32 v[1:2], v0 offset1:1
\tds_write_b128 v0, v[0:3]
\tds_bpermute_b32 v1, v2, v3
\tv_add_f32_e32 v0, v1, v2
\tglobal_store_short v[0:1], v2, off
\ts_endpgm
; Occupancy: 8
    .group_segment_fixed_size: 4224
    .private_segment_fixed_size: 0
    .sgpr_count:     9
    .vgpr_count:     11
"""


def test_parse_asm():
    r = parse_asm(ASM)
    assert (r["vgprs"], r["sgprs"], r["lds_bytes"], r["scratch_bytes"], r["occupancy"]) == (11, 9, 4224, 0, 8)
    # ds_read2_b32 with neighbouring slots (offset1:1) is one 8-byte read, split in two
    assert r["widths"] == {"global_load": {16: 1}, "global_store": {2: 1}, "lds_load": {8: 1},
                           "lds_store": {16: 1}}
    assert r["cross_lane_insts"] == 1 and r["valu_insts"] == 1 and r["salu_insts"] == 2


def test_render_check_lists_disagreements():
    from rich.console import Console
    info = sim_info(ck.elementwise_f4(), c_name="elementwise_f4")
    e = _entry(compile_s=0.5, occupancy=8, valu_insts=10, widths={"global_load": {4: 4}, "global_store": {16: 1},
                                                                 "lds_load": {}, "lds_store": {}})
    rep = {"dir": "x", "kernels": [e], "notes": ["gfx942 is checked as gfx940"]}
    rep["disagreements"] = compare(rep, None, {"elementwise_f4": info})
    con = Console(record=True, width=200)
    render_check(rep, con)
    text = con.export_text()
    assert "elementwise_f4" in text and "disagreement" in text and "gfx940" in text


# ------------------------------------------------------------------ .npy reader (g++)
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_harness_npy_reader_matches_numpy(tmp_path):
    prog = ("#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstring>\n"
            "#include <string>\n#include <vector>\n" + _NPY_READER + r'''
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    wfh::HostArray a; std::string err;
    if (!wfh::read_npy(argv[i], a, err)) { std::printf("ERR %s\n", err.c_str()); continue; }
    double s = 0; for (size_t j = 0; j < a.count; ++j) s += wfh::value_at(a.bytes.data(), a.dtype, j) * (j + 1);
    std::printf("OK %s %zu %zu %.9g\n", wfh::dtype_name(a.dtype), a.shape.size(), a.count, s);
  }
}''')
    (tmp_path / "r.cpp").write_text(prog)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "r"), str(tmp_path / "r.cpp")], check=True)
    rng = np.random.default_rng(1)
    cases = {"f32": rng.standard_normal((3, 5)).astype(np.float32),
             "f16": np.array([0, 1, -2, 65504, 6e-8, 1e-5, np.inf], np.float16),
             "i32": np.arange(-7, 17, dtype=np.int32).reshape(2, 3, 4), "scalar": np.float32(3.5)}
    paths = []
    for name, arr in cases.items():
        np.save(tmp_path / f"{name}.npy", arr)
        paths.append(tmp_path / f"{name}.npy")
    with open(tmp_path / "v2.npy", "wb") as f:
        np.lib.format.write_array(f, cases["f32"], version=(2, 0))
    np.save(tmp_path / "be.npy", cases["f32"].astype(">f4"))
    np.save(tmp_path / "fo.npy", np.asfortranarray(cases["f32"]))
    np.save(tmp_path / "f64.npy", cases["f32"].astype(np.float64))
    paths += [tmp_path / n for n in ("v2.npy", "be.npy", "fo.npy", "f64.npy")]
    out = subprocess.run([str(tmp_path / "r")] + [str(p) for p in paths], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    for line, (name, arr) in zip(out, list(cases.items()) + [("v2", cases["f32"])]):
        tag, dt, ndim, count, s = line.split()
        flat = np.asarray(arr, np.float64).ravel()
        want = float(np.sum(flat * np.arange(1, flat.size + 1)))
        assert tag == "OK" and int(ndim) == np.ndim(arr) and int(count) == flat.size
        assert float(s) == pytest.approx(want, rel=1e-6), name
    assert [line.split()[0] for line in out[5:]] == ["ERR"] * 3
    assert "Fortran" in out[6] and "dtype" in out[7]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (NVIDIA path is optional)")
def test_same_sources_compile_with_nvcc(tmp_path):
    """Compile-only: no NVIDIA GPU here; the shim maps HIP names to CUDA, warpSize is 32."""
    kernels = ck.all_kernels()
    out = write_project(tmp_path / "p", kernels,
                        [(k, {p.name: f"{k.name}.{p.name}" if isinstance(p, Buffer) else 1
                              for p in k.params}) for k in kernels], {})
    srcs = ["main.hip"] + sorted(p.name for p in out.glob("*.hip") if p.name != "main.hip")
    r = subprocess.run(["nvcc", "-I", "nvidia", "-arch=sm_90", "-x", "cu", *srcs, "-o", "app_nv"],
                       cwd=out, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
