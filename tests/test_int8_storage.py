"""int8/uint8 tensors in one byte per element (issue 28, item 2): which tensors the
importer stores as bytes, the i8/u8 kernel buffers and LDS tiles, simulated values
against numpy, and the bytes an int8 GEMM moves against the widened i32 storage."""
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpusim
from compiler.frontends.onnx import from_model, load_onnx
from compiler.fusion import fuse
from compiler.lower import lower
from compiler.lower.common import buffers
from compiler.lower.contraction import Gemm, lds_elems
from compiler.tuning.search import tune

DTYPES = pathlib.Path(__file__).parent / "data" / "dtypes"


def _model(nodes, ins, outs, inits=()):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(*i) for i in ins],
                          [helper.make_tensor_value_info(*o) for o in outs], list(inits))
    return from_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))


def _int8_gemm(m, k, n, seed=0):
    w = np.random.default_rng(seed).integers(-128, 128, (k, n)).astype(np.int8)
    return _model([helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
                  [("a", TensorProto.INT8, [m, k])], [("y", TensorProto.INT32, [m, n])],
                  [onnx.numpy_helper.from_array(w, "w")]), w


@pytest.mark.parametrize("name,byte_buffers", [
    # the activation quantisation writes the uint8 activation less its zero point of 128:
    # an i32 value the range analysis puts in [-128, 127], stored as i8; the weights are i8
    ("qlinear_matmul", {"d0_sub_9": {"sub_9": "i8"}, "d1_matmul_10": {"sub_9": "i8", "b": "i8"}}),
    ("qlinear_conv", {"d0_sub_9": {"sub_9": "i8"}, "d1_conv2d_10": {"sub_9": "i8", "w": "i8"}}),
    # uint8 input less a zero point of 131 spans [-131, 124]: the difference stays i32
    ("matmul_integer", {"d0_sub_0": {"a": "u8"}, "d1_y": {}}),
])
def test_fixtures_store_their_8bit_tensors_as_bytes(name, byte_buffers):
    g = load_onnx(DTYPES / f"{name}.onnx")
    got = {d.name: {b.name: b.dtype for b in buffers(g, d) if b.dtype in ("i8", "u8")}
           for d in fuse(g).dispatches}
    assert got == byte_buffers


def test_quantize_and_dequantize_kernels_write_and_read_bytes():
    """QuantizeLinear to a uint8 output and DequantizeLinear of an int8 input: the u8/i8
    buffers, simulated on every workgroup equal to the reference (exact)."""
    scale = onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zp = onnx.numpy_helper.from_array(np.array(17, np.uint8), "zp")
    g = _model([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"])],
               [("x", TensorProto.FLOAT, [8, 300])], [("q", TensorProto.UINT8, [8, 300])],
               [scale, zp])
    res = tune(g, "gfx942", budget=1, baseline=False, check_all=True)
    assert not res.mismatches
    assert [b.dtype for d in res.dispatches for b in d.kernel.buffers] == ["f32", "u8"]
    zp8 = onnx.numpy_helper.from_array(np.array(-3, np.int8), "zp")
    g = _model([helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["x"])],
               [("q", TensorProto.INT8, [8, 300])], [("x", TensorProto.FLOAT, [8, 300])],
               [scale, zp8])
    res = tune(g, "gfx90a", budget=1, baseline=False, check_all=True)
    assert not res.mismatches
    assert [b.dtype for d in res.dispatches for b in d.kernel.buffers] == ["i8", "f32"]


_MFMA = {"BM": 32, "BN": 32, "BK": 64, "TM": 32, "TN": 32, "KW": 2, "lds_pad": 4,
         "vec_a": 4, "vec_b": 4, "swizzle": "none", "mma": "mfma", "split_k": 1}
_FMA = {"BM": 32, "BN": 64, "BK": 16, "TM": 2, "TN": 4, "KW": 1, "lds_pad": 0,
        "vec_a": 4, "vec_b": 4, "swizzle": "none", "mma": "fma", "split_k": 1}


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("knobs", [_MFMA, _FMA], ids=["mfma", "fma"])
def test_int8_gemm_is_exact_and_moves_a_quarter_of_the_bytes(arch, knobs):
    """MatMulInteger int8 x int8 weights: the byte kernel equals numpy; its global loads
    ask for a quarter of the widened kernel's bytes (A and B, 1 byte an element instead
    of 4; the i32 result is the same), and on the matrix cores its operand tiles take a
    quarter of the LDS (plus the KW=2 partial sums' own i32 array)."""
    m, k, n = 64, 256, 96
    g, w = _int8_gemm(m, k, n)
    d = next(d for d in fuse(g).dispatches if g.op(d.root).kind == "matmul")
    kern = lower(g, d, knobs, arch)
    assert {b.name: b.dtype for b in kern.buffers} == {"a": "i8", "w": "i8", "y": "i32"}
    a = np.random.default_rng(1).integers(-128, 128, (m, k)).astype(np.int8)
    r = gpusim.simulate(kern, arch, {"a": a, "w": w})
    assert np.array_equal(r.outputs["y"], a.astype(np.int64) @ w.astype(np.int64))
    c8 = gpusim.simulate(kern, arch, functional=False).counters
    saved, g.byte_tensors = g.byte_tensors, {}
    try:
        wide = lower(g, d, knobs, arch)
    finally:
        g.byte_tensors = saved
    assert {b.dtype for b in wide.buffers} == {"i32"}
    c32 = gpusim.simulate(wide, arch, functional=False).counters
    assert c8["global_load_bytes"] * 4 == c32["global_load_bytes"]
    assert c8["global_store_bytes"] == c32["global_store_bytes"]
    if knobs["mma"] == "mfma":
        tiles = (32 + 32) * (64 + 4)
        assert [(x.dtype, x.nbytes) for x in kern.lds] == [("i8", tiles),
                                                          ("i32", 4 * 2 * 32 * 32)]
        # i32 tiles (earlier rounds) took 4 bytes an element in one array with the
        # partial sums: max(tiles, KW * BM * BN) = tiles elements here
        assert lds_elems(Gemm(g, d), _MFMA) == tiles
    else:  # the FMA path's i32 tiles: the products need no byte, only the loads shrink
        assert kern.lds_bytes == wide.lds_bytes


def test_byte_storage_follows_a_rename_and_is_refused_on_floats():
    from compiler.ir.graph import Graph, GraphError, Value
    g = Graph("g")
    x = g.input("x", (4,), "i32")
    f = g.input("f", (4,), "f32")
    g.set_byte_storage(x.name, "u8")
    g.rename("x", "x2")
    assert g.byte_storage("x2") == "u8" and g.tensor_bytes("x2") == 4
    assert g.byte_storage(g.reshape(Value(g, "x2"), (2, 2)).name) == "u8"  # a view: the same bytes
    with pytest.raises(GraphError, match="only i32 tensors"):
        g.set_byte_storage(f.name, "i8")


@pytest.mark.hip
def test_int8_fma_gemm_export_reads_bytes_and_checks_clean(tmp_path, capsys):
    """MatMulInteger int8 x int8 weights on the FMA path, exported for gfx942: the kernel
    takes ``signed char`` buffers (char4 loads: one dword), the harness's .npy inputs are
    int8 and it compiles; ``check`` on gfx90a and gfx940 finds no disagreement (widths,
    LDS bytes, occupancy)."""
    import json
    import os
    import shutil
    import subprocess
    from compiler.cli import main
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed (Debian package 'hipcc')")
    g_model = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.INT8, [64, 128])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [64, 128])],
        [onnx.numpy_helper.from_array(
            np.random.default_rng(0).integers(-128, 128, (128, 128)).astype(np.int8), "w")])
    path = tmp_path / "int8.onnx"
    onnx.save(helper.make_model(g_model, opset_imports=[helper.make_opsetid("", 21)]), path)
    out = tmp_path / "proj"
    assert main(["export", str(path), "-o", str(out), "--arch", "gfx942", "--budget", "2",
                 "--no-baseline", "--no-cache", "--json", "--fix", "mma=fma"]) == 0
    capsys.readouterr()
    src = "".join(p.read_text() for p in out.glob("*.hip") if p.name != "main.hip")
    assert "const signed char* __restrict__ a" in src and "char4" in src
    assert {p.name: np.load(p).dtype for p in (out / "data").glob("*.npy")} == {
        "a.npy": np.int8, "w.npy": np.int8, "y.expected.npy": np.int32}
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"] for d in report["disagreements"]]
    env = dict(os.environ, HIP_PLATFORM="amd", TMPDIR=str(tmp_path))
    r = subprocess.run(["hipcc", "-Wno-unused-command-line-argument", "--offload-arch=gfx90a",
                        "-c", "main.hip", "-o", str(tmp_path / "main.o")], cwd=out, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.hip
def test_byte_kernels_export_compile_and_check_on_both_archs(tmp_path):
    """IR kernels with i8/u8 buffers and a u8 LDS array (widths 1, 2, 4): exported with
    expected outputs from gpusim, compiled for gfx90a and gfx940 with ``check`` clean
    (byte, short and dword accesses where the IR has them); with nvcc, the same sources
    compile through the NVIDIA shim (char4/uchar4 are CUDA's own)."""
    import shutil
    import subprocess
    from codegen_hip import write_project
    from codegen_hip.check import check_dir, compare
    from test_gpusim_bytes import _copy, _lds_bytes
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed (Debian package 'hipcc')")
    rng = np.random.default_rng(3)
    kernels = [_copy("i8", "u8", 1024, 4, add=100), _copy("u8", "i8", 512, 2, add=-7),
               _copy("i8", "i32", 256, 1), _lds_bytes(1, 4)]
    launches, arrays, expected = [], {}, {}
    for k in kernels:
        a = k.buffer("a")
        arr = rng.integers(-128, 128, a.size).astype(np.int8) if a.dtype == "i8" else \
            rng.integers(0, 256, a.size).astype(np.uint8)
        names = {"a": f"{k.name}.a", "b": f"{k.name}.b"}
        arrays[names["a"]] = arr
        got = gpusim.simulate(k, "gfx942", {"a": arr}).outputs["b"]
        expected[names["b"]] = got.astype({"i8": np.int8, "u8": np.uint8, "i32": np.int32}[
            k.buffer("b").dtype])
        launches.append((k, names))
    out = write_project(tmp_path / "p", kernels, launches, arrays, expected=expected)
    report = check_dir(out, ("gfx90a", "gfx940"))
    assert all(e["rc"] == 0 for e in report["kernels"])
    bad = compare(report, kernels)
    assert not [d for d in bad if d["severity"] == "error"], [d["message"] for d in bad]
    widths = {e["kernel"]: e["widths"] for e in report["kernels"] if e["arch"] == "gfx90a"}
    assert widths["copy_i8_u8_x4"]["global_load"] == {4: 1}
    assert widths["copy_u8_i8_x2"]["global_store"] == {2: 1}
    assert widths["copy_i8_i32_x1"]["global_load"] == {1: 1}
    if shutil.which("nvcc"):
        srcs = ["main.hip"] + sorted(p.name for p in out.glob("*.hip") if p.name != "main.hip")
        r = subprocess.run(["nvcc", "-I", "nvidia", "-arch=sm_90", "-x", "cu", *srcs, "-o",
                            "app_nv"], cwd=out, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]


def test_an_int32_output_inside_a_byte_keeps_its_declared_type():
    """min(int32(q), 100) of a uint8 q as the graph output: its values fit a byte, but
    the caller reads the INT32 the model declares; the uint8 input is bytes."""
    g = _model([helper.make_node("Cast", ["q"], ["c"], to=TensorProto.INT32),
                helper.make_node("Min", ["c", "cap"], ["y"])],
               [("q", TensorProto.UINT8, [4, 64])], [("y", TensorProto.INT32, [4, 64])],
               [onnx.numpy_helper.from_array(np.array(100, np.int32), "cap")])
    (d,) = fuse(g).dispatches
    assert [b.dtype for b in buffers(g, d)] == ["u8", "i32"]
