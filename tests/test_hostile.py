"""Hostile input (issue 16): what a careless or hostile user gives each command.

Every case asserts the promise of the bad-input paragraph of docs/commands.md: exit status 2, exactly
one line on stderr (``wavefuse: error: ...`` naming the problem), no traceback, nothing on
stdout, and no file left behind in the working folder, the temporary folder or next to an
export target. Commands run in-process through ``cli.main``; only signals and concurrent
exports use real processes. Export cases also prove the target is checked before any
tuning: the search is replaced by a function that fails the test if it is reached.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper

from compiler import cli
from compiler.cli.commands import export as export_cmd

ROOT = Path(__file__).resolve().parents[1]
REAL_RUN_TUNE = export_cmd.run_tune
OPSET = [h.make_opsetid("", 17)]


# ------------------------------------------------------------------ ONNX files, good and bad
def _vi(name, shape, elem=TensorProto.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, name="g"):
    return h.make_model(h.make_graph(nodes, name, inputs, outputs, list(inits)),
                        opset_imports=opset)


def _save(path: Path, model) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def build_onnx_files(d: Path) -> dict[str, Path]:
    """Every ONNX file the cases use, built with onnx.helper (several deliberately broken)."""
    from onnx.external_data_helper import convert_model_to_external_data
    d.mkdir()
    f = {}
    relu = lambda shape, elem=TensorProto.FLOAT: _model(  # noqa: E731
        [h.make_node("Relu", ["x"], ["y"])], [_vi("x", shape, elem)], [_vi("y", shape, elem)])
    f["garbage"] = d / "garbage.onnx"
    f["garbage"].write_bytes(b"\x08\x07garbage\xff\x00\x01")
    f["empty"] = d / "empty.onnx"
    f["empty"].write_bytes(b"")
    f["text"] = d / "text.onnx"
    f["text"].write_text("ir_version: 8\ngraph { name: 'x' }\n")
    f["zero_dim"] = _save(d / "zero_dim.onnx", relu([0, 4]))
    f["negative_dim"] = _save(d / "negative_dim.onnx", relu([-3, 4]))
    f["conv3d"] = _save(d / "conv3d.onnx", _model(
        [h.make_node("Conv", ["x", "w"], ["y"])], [_vi("x", [1, 2, 4, 4, 4])],
        [_vi("y", [1, 3, 2, 2, 2])],
        [numpy_helper.from_array(np.zeros((3, 2, 3, 3, 3), np.float32), "w")]))
    f["edge_crop"] = _save(d / "edge_crop.onnx", _model(
        [h.make_node("Pad", ["x", "p"], ["y"], mode="edge")], [_vi("x", [2, 4])],
        [_vi("y", [2, 4])], [numpy_helper.from_array(np.array([0, -1, 0, 1]), "p")],
        opset=[h.make_opsetid("", 18)]))
    f["dynamic"] = _save(d / "dynamic.onnx", relu(["batch", 4]))
    f["int_input"] = _save(d / "int_input.onnx", relu([2, 4], TensorProto.UINT8))
    f["huge"] = _save(d / "huge.onnx", relu([2**20, 2**20]))
    f["no_ops"] = _save(d / "no_ops.onnx", _model([], [_vi("x", [4, 4])], [_vi("x", [4, 4])]))
    f["unsupported"] = _save(d / "unsupported.onnx", _model(
        [h.make_node("Sinh", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])]))
    f["custom_domain"] = _save(d / "custom_domain.onnx", _model(
        [h.make_node("Relu", ["x"], ["y"], domain="com.evil")], [_vi("x", [4])], [_vi("y", [4])],
        opset=OPSET + [h.make_opsetid("com.evil", 1)]))
    f["old_opset"] = _save(d / "old_opset.onnx", _model(
        [h.make_node("Relu", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])],
        opset=[h.make_opsetid("", 7)]))
    f["undefined_input"] = _save(d / "undefined_input.onnx", _model(
        [h.make_node("Add", ["x", "ghost"], ["y"])], [_vi("x", [4])], [_vi("y", [4])]))
    f["cycle"] = _save(d / "cycle.onnx", _model(
        [h.make_node("Add", ["x", "b"], ["a"]), h.make_node("Relu", ["a"], ["b"])],
        [_vi("x", [4])], [_vi("a", [4])]))
    f["bad_reshape"] = _save(d / "bad_reshape.onnx", _model(
        [h.make_node("Reshape", ["x", "s"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [5, 2])],
        [numpy_helper.from_array(np.array([5, -1], np.int64), "s")]))
    f["wrong_output_shape"] = _save(d / "wrong_output_shape.onnx", _model(
        [h.make_node("Relu", ["x"], ["y"])], [_vi("x", [4, 4])], [_vi("y", [4, 5])]))
    f["shape_mismatch"] = _save(d / "shape_mismatch.onnx", _model(
        [h.make_node("Add", ["x", "z"], ["y"])], [_vi("x", [4, 3]), _vi("z", [5])],
        [_vi("y", [4, 3])]))
    short = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    short.raw_data = short.raw_data[:10]
    f["short_initializer"] = _save(d / "short_initializer.onnx", _model(
        [h.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [4, 4])], [_vi("y", [4, 4])], [short]))
    f["two_producers"] = _save(d / "two_producers.onnx", _model(
        [h.make_node("Relu", ["x"], ["y"]), h.make_node("Neg", ["x"], ["y"])], [_vi("x", [4])],
        [_vi("y", [4])]))
    f["no_producer"] = _save(d / "no_producer.onnx", _model(
        [h.make_node("Relu", ["x"], ["a"])], [_vi("x", [4])], [_vi("y", [4])]))
    f["shape_input"] = _save(d / "shape_input.onnx", _model(
        [h.make_node("Reshape", ["x", "s"], ["y"])], [_vi("x", [2, 3]), _vi("s", [2], TensorProto.INT64)],
        [_vi("y", [3, 2])]))
    f["repeated_perm"] = _save(d / "repeated_perm.onnx", _model(
        [h.make_node("Transpose", ["x"], ["y"], perm=[0, 0])], [_vi("x", [2, 3])],
        [_vi("y", [2, 3])]))
    f["reshape_huge"] = _save(d / "reshape_huge.onnx", _model(
        [h.make_node("Constant", [], ["s"], value_ints=[2**31, 2**31]),
         h.make_node("Reshape", ["x", "s"], ["y"])], [_vi("x", [4])], [_vi("y", [2**31, 2**31])]))
    ext = _model([h.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [4, 4])], [_vi("y", [4, 4])],
                 [numpy_helper.from_array(np.ones((4, 4), np.float32), "w")])
    convert_model_to_external_data(ext, all_tensors_to_one_file=True, location="weights.bin",
                                   size_threshold=0)
    f["missing_external"] = _save(d / "missing_external.onnx", ext)
    for t in ext.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../../../../etc/passwd"
    f["traversal"] = _save(d / "traversal.onnx", ext)
    (d / "folder.onnx").mkdir()
    f["folder"] = d / "folder.onnx"
    return f


# ------------------------------------------------------------------ the sandbox
def tree(*roots: Path) -> set[str]:
    out = set()
    for r in roots:
        for dirpath, dirnames, filenames in os.walk(r):
            for n in dirnames + filenames:
                out.add(os.path.join(dirpath, n))
    return out


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory):
    return build_onnx_files(tmp_path_factory.mktemp("hostile") / "models")


@pytest.fixture(scope="module")
def tampered_exports(tmp_path_factory):
    """Export-like folders whose sidecar was damaged (read only by the cases)."""
    root = tmp_path_factory.mktemp("tampered")
    for name, content in TAMPERED.items():
        d = root / name
        d.mkdir()
        (d / ".wavefuse-export").write_text("{}\n")
        (d / "main.hip").write_text("int main() { return 0; }\n")
        (d / "k.hip").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
        if content is not None:
            (d / "k.sim.json").write_bytes(content)
    return root


@pytest.fixture
def box(tmp_path, monkeypatch, onnx_files, tampered_exports):
    """A working folder (the cwd, also $HOME), a private temporary folder, prepared
    export targets and export-like folders; tuning fails the test if it is reached."""
    work = tmp_path / "work"
    work.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("WAVEFUSE_MAX_MEMORY", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))

    def no_tuning(*a, **k):
        raise AssertionError("an export with a bad target reached the search")
    monkeypatch.setattr(export_cmd, "run_tune", no_tuning)
    (work / "notes.txt").write_text("mine\n")
    (work / "full").mkdir()
    (work / "full" / "thesis.tex").write_text("years of work\n")
    (work / "prev").mkdir()  # a previous export, with the marker, for --force cases
    (work / "prev" / ".wavefuse-export").write_text("{}\n")
    (work / "prev" / "k.hip").write_text("// old\n")
    (work / "emptydir").mkdir()
    (work / "onnxdir").mkdir()
    for name in ("garbage", "huge"):
        (work / "onnxdir" / f"{name}.onnx").write_bytes(onnx_files[name].read_bytes())
    (work / "link").symlink_to(work / "full")
    return {"work": work, "tmp": tmp, "onnx": onnx_files, "tampered": tampered_exports}


def _sidecar(**change) -> bytes:
    info = {"format": "wavefuse.sim/1", "kernel": "k", "c_name": "k", "arch": "gfx942",
            "grid": 1, "block": 64, "accesses": [], "lds_bytes": 0, "estimated_vgprs": 8}
    info.update(change)
    return json.dumps({k: v for k, v in info.items() if v is not None}).encode()


TAMPERED = {
    "truncated": _sidecar()[:25],
    "array": b"[1, 2, 3]\n",
    "string": b'"wavefuse.sim/1"\n',
    "binary": b"\xff\xfe\x00garbage",
    "missing": None,
    "format": _sidecar(format="wavefuse.sim/0"),
    "other_kernel": _sidecar(c_name="other"),
    "bad_field": _sidecar(lds_bytes="lots"),
    "bad_access": _sidecar(accesses=[{"space": "gds", "op": "load", "bytes": 4, "name": "x"}]),
    "huge": b" " * (16 << 20) + _sidecar(),
}


def expect_usage_error(capsys, box, argv, pattern):
    before = tree(box["work"], box["tmp"])
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert err.startswith("wavefuse: error: ") and err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    assert pattern.lower() in err.lower(), (pattern, err)
    assert tree(box["work"], box["tmp"]) == before, "files were left behind"


# ------------------------------------------------------------------ the cases
MODEL_CASES = [
    (["show", "nosuch"], "unknown model"),
    (["show", ""], "unknown model"),
    (["show", "softmax:rows=8,rows=16"], "given twice"),
    (["show", "layernorm:rows=8,cols=4,rows=16"], "given twice"),
    (["show", "softmax:cols"], "'cols' has no value"),
    (["show", "softmax:cols="], "'cols' has no value"),
    (["show", "softmax:rows=x"], "rows='x'"),
    (["show", "softmax:rows=0"], "positive integer"),
    (["show", "softmax:rows=-3"], "positive integer"),
    (["show", "softmax:rows=²"], "positive integer"),
    (["show", "softmax:rows=1e3"], "positive integer"),
    (["show", "softmax:rows=4.5"], "positive integer"),
    (["show", "softmax:bogus=1"], "no parameter 'bogus'"),
    (["show", "softmax:dtype=f64"], "f64"),
    (["show", "encoder_layer:hidden=7,heads=2"], "multiple of heads"),
    (["tune", "layernorm:rows=1000000000000"], "over the memory limit of 8 GiB"),
    (["tune", "softmax:rows=2147483648,cols=2"], "over the memory limit"),
    (["tune", "softmax:rows=1000000,cols=1024"], "needs about"),
    (["verify", "layernorm:rows=1000000000000"], "--max-memory"),
    (["demo", "layernorm:rows=1000000000000", "--json"], "over the memory limit"),
    (["view", "timeline", "softmax:rows=1000000,cols=1024"], "over the memory limit"),
    (["fuse", "mlp:hidden=1000000,ffn=1000000"], "a weight of shape 1000000x1000000"),
    (["show", "encoder_layer:hidden=120000,heads=2"], "over the memory limit"),
    (["tune", "softmax:rows=4096,cols=1024", "--max-memory", "1M"], "limit of 1 MiB"),
    (["tune", "softmax", "--max-memory", "1K"], "at least 1M"),
    (["tune", "softmax", "--max-memory", "lots"], "expected a size"),
    (["tune", "softmax", "--max-memory=-5G"], "expected a size"),
]

OPTION_CASES = [
    (["tune", "softmax", "--fix", "vector=²"], "not a knob value"),
    (["tune", "softmax", "--fix", "vector=--4"], "not a knob value"),
    (["tune", "softmax", "--fix", "vector="], "expected KNOB=VALUE"),
    (["tune", "softmax", "--fix", "=4"], "expected KNOB=VALUE"),
    (["tune", "softmax", "--fix", "vector"], "expected KNOB=VALUE"),
    (["tune", "softmax", "--fix", "vec tor=4"], "not a knob name"),
    (["tune", "softmax", "--fix", "vector=4", "--fix", "vector=2"], "given twice"),
    (["export", "softmax", "-o", "out", "--fix", "vector=4", "--fix", "vector=4"],
     "given twice"),
    (["tune", "softmax", "--seed", "-1"], "out of range"),
    (["tune", "softmax", "--seed", "abc"], "not a whole number"),
    (["tune", "softmax", "--seed", str(2**64)], "out of range"),
    (["verify", "softmax", "--seed", "-1"], "out of range"),
    (["tune", "softmax", "--budget", "0"], "at least 1"),
    (["tune", "softmax", "--budget", "-5"], "at least 1"),
    (["tune", "softmax", "--workers", "0"], "1 to 256"),
    (["tune", "softmax", "--workers", "100000"], "1 to 256"),
    (["tune", "softmax", "--arch", "gfx000"], "unknown arch 'gfx000'"),
    (["tune", "softmax", "--arch", "MI300X"], "MI300X is gfx942"),
    (["tune", "softmax", "--arch", ""], "unknown arch"),
    (["tune", "softmax", "--mode", "fastest"], "invalid choice"),
    (["tune", "softmax", "--bogus"], "unrecognized arguments"),
    (["models", "softmax"], "unrecognized arguments: softmax"),
    (["show", "softmax", "extra"], "unrecognized arguments: extra"),
    (["tune"], "required"),
    ([], "no command given"),
    (["nosuchcommand"], "invalid choice"),
    (["view", "nosuchkind", "softmax"], "invalid choice"),
    (["view", "timeline", "softmax", "--width", "5"], "at least 20"),
    (["view", "timeline", "softmax", "--width", "abc"], "not a whole number"),
    (["view", "coalescing", "softmax", "--inst", "-1"], "0 or more"),
    (["view", "timeline", "softmax", "--from", "-5"], "not a cycle"),
    (["view", "timeline", "softmax", "--to", "nan"], "not a cycle"),
    (["view", "timeline", "softmax", "--arch", "gfx000"], "unknown arch"),
    (["view", "candidates", "softmax", "--sort", "nosuch"], "no sort key"),
    (["view", "timeline", "softmax", "--dispatch", "nosuch"], "nosuch"),
    (["view", "timeline", "softmax", "--svg", "missing/x.svg"], "does not exist"),
    (["view", "plan", "softmax", "--svg", "emptydir"], "give a file name"),
]

ONNX_CASES = [
    ("garbage", ["show"], "not a readable ONNX model"),
    ("empty", ["show"], "not an ONNX model"),
    ("text", ["show"], "not a readable ONNX model"),
    ("folder", ["show"], "is a directory"),
    ("zero_dim", ["show"], "'y' is empty (shape (0, 4))"),
    ("negative_dim", ["show"], "dimension 0"),
    ("conv3d", ["show"], "only 1-D and 2-D convolutions"),
    ("edge_crop", ["show"], "negative pads with mode 'edge' (onnx's evaluator refuses them "
                            "too); crop with Slice first"),
    ("dynamic", ["show"], "symbolic dimension 0 ('batch'); wavefuse needs static shapes (pin it with --dim batch=VALUE)"),
    ("int_input", ["show"], "UINT8"),
    ("huge", ["tune"], "1048576x1048576"),
    ("huge", ["verify"], "over the memory limit"),
    ("no_ops", ["tune"], "nothing to compute"),
    ("no_ops", ["verify"], "nothing to compute"),
    ("unsupported", ["show"], "Sinh"),
    ("custom_domain", ["show"], "com.evil.Relu"),
    ("old_opset", ["show"], "opset"),
    ("undefined_input", ["show"], "ghost"),
    ("cycle", ["show"], "not a valid ONNX model"),
    ("bad_reshape", ["show"], "Reshape"),
    ("wrong_output_shape", ["show"], "differ in dimension 1: (4) vs (5)"),
    ("shape_mismatch", ["show"], "shape"),
    ("short_initializer", ["show"], "raw_data size (10 bytes) is too small"),
    ("two_producers", ["show"], "single static assignment"),
    ("no_producer", ["show"], "'y' is not an output of any node"),
    ("shape_input", ["show"], "the target shape must be a constant"),
    ("repeated_perm", ["show"], "repeated value"),
    ("reshape_huge", ["show"], "cannot reshape (4,)"),
    ("missing_external", ["show"], "weights.bin"),
    ("traversal", ["show"], "outside the model's folder"),
]

EXPORT_CASES = [
    (["-o", "", "--force"], "refusing"),
    (["-o", ".", "--force"], "refusing"),
    (["-o", "..", "--force"], "refusing"),
    (["-o", "./"], "refusing"),
    (["-o", "~", "--force"], "refusing"),
    (["-o", "{work}", "--force"], "refusing"),
    (["-o", "/", "--force"], "refusing"),
    (["-o", "/proc/x"], "cannot export to /proc/x"),
    (["-o", "no/such/parent"], "does not exist"),
    (["-o", "notes.txt"], "not a directory"),
    (["-o", "link", "--force"], "not a directory"),
    (["-o", "full"], "not empty"),
    (["-o", "full", "--force"], "not a wavefuse export"),
    (["-o", "prev"], "not empty"),
    (["-o", "out", "--arch", "MI300X"], "unknown arch"),
    (["-o", "out", "--budget", "0"], "at least 1"),
]

CHECK_CASES = [
    (["check", "emptydir"], "nothing to check"),
    (["check", "onnxdir"], "nothing to check"),
    (["check", "nosuchdir"], "no such directory"),
    (["check", "notes.txt"], "not a directory"),
    (["check", "prev", "--arch", ","], "no arch to check"),
    (["check", "prev", "--arch", ""], "no arch to check"),
    (["check", "prev", "--arch", "gfx000"], "unknown arch 'gfx000'"),
    (["check", "prev", "--arch", "gfx90a,gfx90a"], "given twice"),
    (["check", "{tampered}/truncated"], "not valid JSON"),
    (["check", "{tampered}/array"], "expected a JSON object"),
    (["check", "{tampered}/string"], "expected a JSON object"),
    (["check", "{tampered}/binary"], "expected a JSON object"),
    (["check", "{tampered}/missing"], "no k.sim.json"),
    (["check", "{tampered}/format"], "wavefuse.sim/0"),
    (["check", "{tampered}/other_kernel"], "'other'"),
    (["check", "{tampered}/bad_field"], "lds_bytes"),
    (["check", "{tampered}/bad_access"], "accesses"),
    (["check", "{tampered}/huge"], "far more than a sidecar holds"),
]


@pytest.mark.parametrize("argv, pattern", MODEL_CASES, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_models_and_parameters(capsys, box, argv, pattern):
    expect_usage_error(capsys, box, argv, pattern)


@pytest.mark.parametrize("argv, pattern", OPTION_CASES, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_options_and_pins(capsys, box, argv, pattern):
    expect_usage_error(capsys, box, argv, pattern)


@pytest.mark.parametrize("name, command, pattern", ONNX_CASES,
                         ids=[f"{c[1][0]} {c[0]}" for c in ONNX_CASES])
def test_onnx_files(capsys, box, name, command, pattern):
    expect_usage_error(capsys, box, [*command, str(box["onnx"][name])], pattern)


@pytest.mark.parametrize("args, pattern", EXPORT_CASES, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_export_targets_fail_before_tuning(capsys, box, args, pattern):
    args = [a.format(work=box["work"]) for a in args]
    expect_usage_error(capsys, box, ["export", "softmax", *args], pattern)
    assert (box["work"] / "full" / "thesis.tex").read_text() == "years of work\n"
    assert (box["work"] / "prev" / "k.hip").read_text() == "// old\n"


def test_export_of_a_locked_target_is_refused(capsys, box):
    """A second export of a folder another export holds fails at once, even with --force."""
    from codegen_hip.export import ExportTarget
    with ExportTarget(box["work"] / "prev", force=True) as held:
        expect_usage_error(capsys, box, ["export", "softmax", "-o", "prev", "--force"],
                           "being written by another wavefuse export")
        assert held.lock_path.exists()
    assert not held.lock_path.exists()


@pytest.mark.parametrize("model, pattern", [
    ("nosuch", "unknown model"),
    ("layernorm:rows=1000000000000", "over the memory limit"),
    ("{no_ops}", "nothing to compute"),
    ("softmax:rows=8,rows=8", "given twice"),
])
def test_export_of_a_bad_model_releases_its_target(capsys, box, monkeypatch, model, pattern):
    """The target is locked before the model is read; a bad model must unlock it and leave
    neither the folder nor the lock file."""
    monkeypatch.setattr(export_cmd, "run_tune", REAL_RUN_TUNE)
    model = model.format(no_ops=box["onnx"]["no_ops"])
    expect_usage_error(capsys, box, ["export", model, "-o", "out", "--budget", "1"], pattern)
    assert not (box["work"] / "out").exists()


@pytest.mark.parametrize("argv, pattern", CHECK_CASES, ids=lambda v: " ".join(v)
                         if isinstance(v, list) else None)
def test_check_never_claims_success_on_nothing(capsys, box, argv, pattern):
    argv = [a.format(tampered=box["tampered"]) for a in argv]
    expect_usage_error(capsys, box, argv, pattern)


@pytest.mark.parametrize("damage, pattern", [
    (lambda side: side.write_text(side.read_text()[:-40]), "not valid JSON"),
    (lambda side: side.write_text("null\n"), "expected a JSON object"),
    (lambda side: side.unlink(), ".sim.json beside it"),
    (lambda side: side.write_text(side.read_text().replace('"c_name"', '"cname"')), "c_name"),
], ids=["truncated", "null", "deleted", "renamed field"])
def test_check_of_a_real_export_tampered_after_writing(capsys, box, damage, pattern):
    import codegen_kernels as ck
    from codegen_hip import write_project
    k = ck.elementwise_f4()
    out = write_project(box["tmp"].parent / "real", [k],
                        [(k, {"x": "x", "y": "y", "n": 4096, "alpha": 2.0})],
                        {"x": np.arange(4096, dtype=np.float32)})
    damage(next(out.glob("*.sim.json")))
    expect_usage_error(capsys, box, ["check", str(out)], pattern)


def test_running_out_of_memory_is_one_line(capsys, box, monkeypatch):
    """The last resort behind the estimate: a MemoryError anywhere is one line, exit 2."""
    from compiler.cli.commands import common

    def exhausted(args, compute=True):
        raise MemoryError
    monkeypatch.setattr(common, "load", exhausted)
    expect_usage_error(capsys, box, ["show", "softmax"], "out of memory")


# ------------------------------------------------------------------ real processes
EXPORT_SCRIPT = """
import sys, time
from pathlib import Path
import codegen_hip.export as ex
from compiler import cli
ready = Path(sys.argv[1])
real = ex._write_files
def slow(tmp, *a, **k):
    real(tmp, *a, **k)
    ready.write_text(str(tmp))   # the temporary folder exists and is full
    time.sleep(float(sys.argv[2]))
ex._write_files = slow
sys.exit(cli.main(sys.argv[3:]))
"""


def _export_process(work: Path, ready: Path, hold_s: float, target="out"):
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", EXPORT_SCRIPT, str(ready), str(hold_s),
                             "export", "softmax:rows=2,cols=4", "--budget", "1", "-o", target,
                             "--json"], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)


def default_sigint():
    """A shell starts background jobs with SIGINT ignored, and a Python started so never
    raises KeyboardInterrupt: the child gets the default back, as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(path: Path, proc, timeout=300):
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"export ended early: {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError("export never reached the write")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_during_export_leaves_nothing(tmp_path, sig):
    work = tmp_path / "work"
    work.mkdir()
    ready = tmp_path / "ready"
    proc = _export_process(work, ready, 120)
    _wait_for(ready, proc)
    assert Path(ready.read_text()).is_dir()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert ("interrupted" if sig == signal.SIGINT else f"terminated by {sig.name}") in err
    assert sorted(os.listdir(work)) == [], "a temporary folder, lock or export was left"


@pytest.mark.slow
def test_concurrent_exports_of_one_target(tmp_path):
    """The first export holds the target; the second fails in one line without waiting
    and without replacing anything; the first then completes."""
    work = tmp_path / "work"
    work.mkdir()
    ready = tmp_path / "ready"
    first = _export_process(work, ready, 3)
    _wait_for(ready, first)
    second = _export_process(work, tmp_path / "ready2", 0)
    out2, err2 = second.communicate(timeout=300)
    out1, err1 = first.communicate(timeout=300)
    assert second.returncode == 2 and err2.count("\n") == 1 and "Traceback" not in err2
    assert "being written by another wavefuse export" in err2 and out2 == ""
    assert first.returncode == 0, err1
    assert json.loads(out1)["dir"] == str(work / "out")
    assert sorted(os.listdir(work)) == ["out"]
    assert (work / "out" / ".wavefuse-export").is_file()
