"""The command line: exit codes 0/1/2, --json, one-line errors without tracebacks."""
import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper

from compiler import __version__, cli
from compiler.cli.commands import verify


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def softmax_onnx(tmp_path, name="sm.onnx"):
    g = h.make_graph([h.make_node("Softmax", ["x"], ["y"])], "sm",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
    path = tmp_path / name
    path.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    return path


def test_commands_are_discovered():
    names = {m.__name__.rsplit(".", 1)[1] for m in cli.command_modules()}
    assert {"models", "show", "verify", "demo"} <= names
    assert "common" not in names


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"wavefuse {__version__}"


def test_models_json_lists_defaults(capsys):
    code, out, _ = run(capsys, "models", "--json")
    data = json.loads(out)
    assert code == 0
    ln = next(m for m in data["models"] if m["name"] == "layernorm")
    assert ln["params"]["rows"] == 64 and ln["inputs"]["x"] == "f32[64x256]"


def test_show_text_and_json(capsys):
    code, out, _ = run(capsys, "show", "conv_add_relu_mismatch:c=8,k=4")
    assert code == 0 and "conv2d" in out and "(0,3,1,2)" in out
    code, out, _ = run(capsys, "show", "layernorm:rows=4,cols=8", "--json")
    data = json.loads(out)
    assert data["primitive_ops"] == 9
    assert [o["op"] for o in data["ops"]][:3] == ["input"] * 3
    assert data["ops"][0]["shape"] == [4, 8]


def test_show_wide_terminal_uses_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    code, out, _ = run(capsys, "show", "softmax")
    assert code == 0 and "operands" in out and "reduce_max" in out


def test_verify_builtin_and_onnx(capsys, tmp_path):
    code, out, _ = run(capsys, "verify", "rmsnorm", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"]
    assert [c["name"] for c in data["checks"]] == [name for name, _ in verify.CHECKS]
    assert data["checks"][1]["status"] == "skip"
    code, out, _ = run(capsys, "verify", str(softmax_onnx(tmp_path)), "--json")
    data = json.loads(out)
    onnx_check = next(c for c in data["checks"] if c["name"] == "onnx ReferenceEvaluator")
    assert code == 0 and onnx_check["status"] == "pass" and onnx_check["max_error"] < 1e-6
    code, out, _ = run(capsys, "verify", str(softmax_onnx(tmp_path)))
    assert code == 0 and "max error" in out and "OK" in out


def test_verify_mismatch_exits_1(capsys, monkeypatch):
    def failing(ctx):
        return verify.CheckResult("always wrong", "fail", 1.0, 1e-4, "planted mismatch")
    monkeypatch.setattr(verify, "CHECKS", verify.CHECKS + [("always wrong", failing)])
    code, out, _ = run(capsys, "verify", "softmax:rows=2,cols=4", "--json")
    assert code == 1 and json.loads(out)["ok"] is False
    code, out, _ = run(capsys, "verify", "softmax:rows=2,cols=4")
    assert code == 1 and "MISMATCH" in out


def test_verify_checks_a_sample_of_workgroups_unless_check_all(capsys, monkeypatch):
    """verify's simulated-kernels check samples workgroups by default (full-size models
    have thousands per kernel) and checks all with --check-all; --budget is the tune's,
    tune's default when not given (so verify checks the kernels tune chose)."""
    from compiler.cli.commands import verify
    seen = []
    real = verify.tune

    def spy(*a, **kw):
        seen.append((kw["budget"], kw["check_all"]))
        return real(*a, **kw)
    monkeypatch.setattr(verify, "tune", spy)  # the name verify's check calls
    for extra, want in (((), ("default", False)), (("--check-all", "--budget", "2"),
                                                   (2, True))):
        code, out, _ = run(capsys, "verify", "softmax:rows=2,cols=4", "--json", *extra)
        detail = next(c["detail"] for c in json.loads(out)["checks"]
                      if c["name"] == "simulated kernels")
        assert code == 0 and seen[-1] == want
        assert ("every workgroup" if want[1] else "one instance each") in detail


def test_verify_skips_the_onnx_check_when_onnx_cannot_evaluate_the_model(
        capsys, tmp_path, monkeypatch):
    """onnx's ReferenceEvaluator has limits of its own (its GatherElements takes at most
    64 entries along the axis, less than BERT-base's 128 positions): the check is
    skipped with onnx's reason, the other checks run, no traceback."""
    import onnx.reference

    def broken(self, *a, **kw):
        raise ValueError("Need at least 0 and at most 64 array objects.")
    monkeypatch.setattr(onnx.reference.ReferenceEvaluator, "run", broken)
    code, out, err = run(capsys, "verify", str(softmax_onnx(tmp_path)), "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert code == 0 and checks["onnx ReferenceEvaluator"]["status"] == "skip"
    assert "at most 64" in checks["onnx ReferenceEvaluator"]["detail"]
    assert checks["fused plan"]["status"] == "pass" and "Traceback" not in err


def test_verify_runs_the_schedule_free_checks_when_a_dispatch_cannot_be_scheduled(
        capsys, monkeypatch):
    """A dispatch whose every candidate is illegal fails the simulated-kernels check only:
    the reference and fused-plan checks still run and pass; exit 1, no traceback."""
    from compiler.tuning import search
    from compiler.schedule import Candidate
    monkeypatch.setattr(search, "schedule_space",
                        lambda g, d, arch: [Candidate({"workgroup": 64}, False, "planted")])
    code, out, err = run(capsys, "verify", "softmax:rows=2,cols=4", "--json")
    data = json.loads(out)
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert code == 1 and not err
    assert status["reference interpreter"] == status["fused plan"] == "pass"
    sim = next(c for c in data["checks"] if c["name"] == "simulated kernels")
    assert sim["status"] == "fail" and "planted" in sim["detail"]


def test_compare_catches_errors_and_nan_mismatch():
    assert verify.compare(np.ones(3), np.ones(3), "f32")[0]
    ok, err, _ = verify.compare(np.array([1.0, 2.0]), np.array([1.0, 2.1]), "f32")
    assert not ok and abs(err - 0.1) < 1e-9
    assert not verify.compare(np.array([np.nan]), np.array([1.0]), "f32")[0]
    assert verify.compare(np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), "f32")[0]


def test_demo_json(capsys):
    code, out, _ = run(capsys, "demo", "layernorm", "--json")
    data = json.loads(out)
    assert code == 0 and data["model"] == "layernorm"
    assert data["graph"]["primitive_ops"] == 9 and data["graph"]["reductions"] == 2
    assert data["fusion"]["aggressive"]["num_dispatches"] == 1
    assert data["fusion"]["conservative"]["num_dispatches"] == 2
    tuned = data["tune"]
    assert tuned["num_dispatches"] == 1 and tuned["total_time_us"] < tuned["unfused_time_us"]


def bad_inputs(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage\x00\x01")
    unsupported = tmp_path / "abs.onnx"
    g = h.make_graph([h.make_node("Sinh", ["x"], ["a"]), h.make_node("Atan", ["a"], ["y"])],
                     "u", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    unsupported.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
                            .SerializeToString())
    shape = tmp_path / "shape.onnx"
    g = h.make_graph([h.make_node("Reshape", ["x", "s"], ["y"])], "r",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [5, 2])],
                     [numpy_helper.from_array(np.array([5, -1], np.int64), "s")])
    shape.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    return {"unknown model": (["show", "nosuch"], "unknown model"),
            "bad param": (["verify", "layernorm:rows=x"], "rows='x'"),
            "missing file": (["show", str(tmp_path / "missing.onnx")], "no such file"),
            "malformed file": (["verify", str(bad)], "not a readable ONNX model"),
            "unsupported": (["show", str(unsupported)], "Atan, Sinh"),
            "shape": (["show", str(shape)], "Reshape"),
            "directory": (["show", str(tmp_path) + "/"], "directory")}


def test_bad_input_exits_2_with_one_line(capsys, tmp_path):
    for label, (argv, pattern) in bad_inputs(tmp_path).items():
        code, out, err = run(capsys, *argv)
        assert code == 2, label
        assert err.startswith("wavefuse: error: ") and err.count("\n") == 1, (label, err)
        assert pattern in err, (label, err)
        assert out == ""


def test_real_process_has_no_traceback(tmp_path):
    """Through the interpreter, as a user runs it: exit status 2 and a single stderr line."""
    cases = bad_inputs(tmp_path)
    for label in ("unsupported", "bad param"):
        argv, pattern = cases[label]
        p = subprocess.run([sys.executable, "-m", "compiler.cli", *argv], capture_output=True,
                           text=True, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
        assert p.returncode == 2, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
        assert pattern in p.stderr


def test_usage_errors_are_one_line(capsys):
    """argparse's usage block plus error became one line pointing at --help (issue 16)."""
    for argv in ([], ["nosuchcommand"], ["show"], ["tune", "softmax", "--bogus"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, (argv, err)
        assert err.startswith("wavefuse: error: ") and "usage:" not in err
    code, _, err = run(capsys, "tune", "softmax", "--bogus")
    assert err == ("wavefuse: error: tune: unrecognized arguments: --bogus "
                   "(see `wavefuse tune --help`)\n")


def test_foreign_error_families_are_user_errors(monkeypatch):
    import types
    mod = types.ModuleType("gpusim.fake_errors")

    class KernelError(Exception):
        pass
    mod.KernelError = KernelError
    monkeypatch.setitem(sys.modules, "gpusim.fake_errors", mod)
    assert KernelError in cli.user_error_types()
    assert cli.error_line(FileNotFoundError(2, "No such file or directory", "x.onnx")) == \
        "x.onnx: No such file or directory"


@pytest.mark.parametrize("target", [".", ""])
def test_export_force_into_current_folder_is_refused(capsys, tmp_path, monkeypatch, target):
    """Issue 16's data loss: `export softmax -o . --force` replaced the current folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "precious.txt").write_text("keep me")
    code, out, err = run(capsys, "export", "softmax:rows=64,cols=64", "-o", target, "--force",
                         "--budget", "1", "--json")
    assert code == 2 and err.count("\n") == 1 and "refusing" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


def nan_weights_onnx(tmp_path):
    """y = x + w with NaN, +Inf and -Inf among the weights: legitimate values that must
    compare equal to themselves (issue 16: tune reported a mismatch, export refused)."""
    w = np.array([np.nan, np.inf, -np.inf, 1, 2, 3, 4, 5], np.float32)
    g = h.make_graph([h.make_node("Add", ["x", "w"], ["y"])], "nanw",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                     [numpy_helper.from_array(w, "w")])
    path = tmp_path / "nan_weights.onnx"
    path.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())
    return path


def test_compare_is_nan_aware():
    from compiler.ir import numerics
    a = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert numerics.compare(a, a.copy(), 1e-3) == (True, 0.0)
    assert numerics.compare(a, np.array([np.nan, np.inf, np.inf, 1.0]), 1e-3)[0] is False
    assert numerics.compare(np.array([np.nan]), np.array([1.0]), 1e-3) == (False, float("inf"))
    assert numerics.compare(np.array([1.0, 2.0]), np.array([1.0, 2.5]), 1e-3) == (False, 0.5)


@pytest.mark.slow
def test_nan_and_inf_weights_tune_verify_and_export(capsys, tmp_path):
    model = str(nan_weights_onnx(tmp_path))
    code, out, err = run(capsys, "tune", model, "--budget", "1", "--no-baseline", "--json")
    assert code == 0, err
    assert all(d["verified"] for d in json.loads(out)["dispatches"])
    code, out, err = run(capsys, "verify", model, "--json")
    assert code == 0 and json.loads(out)["ok"], out
    code, out, err = run(capsys, "export", model, "--budget", "1", "-o", str(tmp_path / "e"),
                         "--json")
    assert code == 0, err
    expected = np.load(next((tmp_path / "e" / "data").glob("*.expected.npy")))
    assert np.isnan(expected).sum() == 4 and np.isinf(expected).sum() == 8


def test_max_memory_option_and_environment(capsys, monkeypatch):
    """The limit is a documented override: --max-memory, else WAVEFUSE_MAX_MEMORY."""
    code, _, err = run(capsys, "verify", "softmax:rows=4096,cols=1024", "--max-memory", "8M")
    assert code == 2 and "over the memory limit of 8 MiB" in err
    monkeypatch.setenv("WAVEFUSE_MAX_MEMORY", "2M")
    code, _, err = run(capsys, "verify", "softmax:rows=4096,cols=1024")
    assert code == 2 and "limit of 2 MiB" in err
    monkeypatch.setenv("WAVEFUSE_MAX_MEMORY", "many")
    code, _, err = run(capsys, "verify", "softmax")
    assert code == 2 and "WAVEFUSE_MAX_MEMORY 'many'" in err
    code, out, _ = run(capsys, "show", "softmax:rows=4096,cols=1024", "--max-memory", "1M",
                       "--json")  # show computes nothing: no limit to pass
    assert code == 0 and json.loads(out)["primitive_ops"] == 5


def test_warnings_reach_the_user_as_one_line(capsys):
    """A warning raised while a command runs (e.g. gpusim's unwritable engine cache) is one
    stderr line without a source location, and main() leaves Python's format as it was."""
    import warnings

    before = warnings.formatwarning
    line = cli._one_line_warning("gpusim: no writable folder for the engine cache", RuntimeWarning,
                                 "/x/gpusim/engine_jit.py", 237, "_cache = _make_cache(run.py_func)")
    assert line == "wavefuse: warning: no writable folder for the engine cache\n"
    assert cli.main(["models"]) == 0
    assert warnings.formatwarning is before
