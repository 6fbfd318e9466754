"""Real architectures as torch exports them (tests/data, written by tools/export_models.py):
each imports in well under a second, matches onnx's ReferenceEvaluator, and fuses into
plans that equal the unfused graph. No torch needed: the .onnx files are committed."""
import json
import pathlib
import time

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from compiler import cli
from compiler.ir import numerics
from compiler.frontends.onnx import load_onnx
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir.reference import evaluate, random_inputs

DATA = pathlib.Path(__file__).parent / "data"
MANIFEST = json.loads((DATA / "MANIFEST.json").read_text())
FIXTURES = sorted(MANIFEST["fixtures"])
WHOLE = ("bert_2layer", "gpt2_2block", "resnet_tiny", "vit_tiny")


def onnx_feeds(g, inputs):
    """Our seeded inputs under their ONNX names, i32 widened back to the declared int64."""
    out = {}
    for onnx_name, g_name in g.meta["onnx_inputs"].items():
        v = inputs[g_name]
        out[onnx_name] = v.astype(np.int64) if v.dtype == np.int32 else v
    return out


def test_manifest_lists_every_file_and_the_versions():
    files = {p.name for p in DATA.glob("*.onnx")}
    assert files == {f["file"] for f in MANIFEST["fixtures"].values()}
    assert {"torch", "transformers", "onnx"} <= set(MANIFEST["versions"])
    assert sum(p.stat().st_size for p in DATA.glob("*.onnx")) < 8 << 20


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_imports_matches_onnx_and_fuses(name):
    t0 = time.perf_counter()
    g = load_onnx(DATA / f"{name}.onnx")
    assert time.perf_counter() - t0 < 30  # generous: the suite runs on 2 busy cores
    inputs = random_inputs(g, seed=1)
    ours = evaluate(g, inputs)
    meta = g.meta
    theirs = ReferenceEvaluator(meta["onnx_model"]).run(list(meta["onnx_outputs"]),
                                                        onnx_feeds(g, inputs))
    for onnx_name, want in zip(meta["onnx_outputs"], theirs):
        ok, err = numerics.compare(ours[meta["onnx_outputs"][onnx_name]], want, 1e-4)
        assert ok, (onnx_name, err)
    counts = []
    for aggressive in (True, False):
        plan = fuse(g, aggressive=aggressive)
        got = execute_plan(plan, inputs)
        for o, want in ours.items():
            assert numerics.compare(got[o], want, 1e-4)[0], (plan.mode, o)
        counts.append(plan.num_dispatches)
    compute = sum(1 for op in g.ops if op.kind not in ("input", "constant"))
    assert counts[0] <= counts[1] <= compute


def test_exporter_patterns_reach_the_graph():
    """The ops issue 12 names arrive as graph values, not as folded constants."""
    kinds = {n: {op.kind for op in load_onnx(DATA / f"{n}.onnx").ops}
             for n in ("gpt2_block", "llama_block", "bert_2layer", "vit_tiny", "bn_relu_pool")}
    assert "slice" in kinds["gpt2_block"]                      # the qkv Split
    assert {"slice", "concat"} <= kinds["llama_block"]         # rotate_half
    assert "gather" in kinds["bert_2layer"]                    # embedding lookups
    assert "concat" in kinds["vit_tiny"]                       # the CLS token
    assert {"pad", "slice", "max"} <= kinds["bn_relu_pool"]    # pools as windows
    g = load_onnx(DATA / "bert_2layer.onnx")
    ids = g.op(g.inputs[0]).type
    assert ids.dtype == "i32" and g.meta["index_bounds"] == {g.inputs[0]: 128}


def test_batch_norm_after_conv_is_its_epilogue():
    g = load_onnx(DATA / "conv_bn_relu_keep.onnx")
    assert fuse(g).num_dispatches == 1


def test_verify_runs_simulated_kernels_through_pools(capsys):
    code = cli.main(["verify", str(DATA / "bn_relu_pool.onnx"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out
    assert {c["name"]: c["status"] for c in out["checks"]}["simulated kernels"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_block", "gpt2_block", "bert_2layer", "gpt2_2block",
                                  "vit_tiny"])
def test_verify_transformers_end_to_end(name, capsys):
    """Gathers, masks, slices and concats lowered and simulated, equal to numpy."""
    code = cli.main(["verify", str(DATA / f"{name}.onnx"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"], out


def test_dim_option_pins_symbolic_dimensions(tmp_path, capsys):
    from onnx import TensorProto
    from onnx import helper as h
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "dyn",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    path = tmp_path / "dyn.onnx"
    path.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]).SerializeToString())
    assert cli.main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--dim batch=VALUE" in err
    assert cli.main(["show", str(path), "--dim", "batch=3", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ops"][0]["shape"] == [3, 4]
    assert cli.main(["show", str(path), "--dim", "seq=3"]) == 2
    assert "no symbolic input dimension" in capsys.readouterr().err
    assert cli.main(["show", "softmax", "--dim", "batch=2"]) == 2
    assert "built-in models take parameters" in capsys.readouterr().err


def test_verify_with_bool_and_int64_outputs(tmp_path, capsys):
    """Bool and int64 graph outputs go through every verify check (exact comparisons)."""
    from onnx import TensorProto
    from onnx import helper as h
    from onnx import numpy_helper
    nodes = [h.make_node("Greater", ["x", "z"], ["m"]),
             h.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
             h.make_node("Add", ["mi", "k"], ["y"])]
    g = h.make_graph(nodes, "b", [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                     [h.make_tensor_value_info("m", TensorProto.BOOL, [4, 8]),
                      h.make_tensor_value_info("y", TensorProto.INT64, [4, 8])],
                     initializer=[numpy_helper.from_array(np.array(0.0, np.float32), "z"),
                                  numpy_helper.from_array(np.array(3, np.int64), "k")])
    path = tmp_path / "b.onnx"
    path.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]).SerializeToString())
    assert cli.main(["verify", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in out["checks"]] == ["pass"] * 4
