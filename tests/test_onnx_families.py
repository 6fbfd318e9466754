"""The ops and model families of issue 28: InstanceNormalization, GroupNormalization and
Resize decomposed into primitives, each against onnx's ReferenceEvaluator on the modes
exporters use; and each block of ``tests/data/families`` (written by
``tools/export_families.py`` with torch.onnx dynamo, opset 18) imports, matches onnx's
evaluator, and fuses into plans equal to the unfused graph. No torch needed."""
import json
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from compiler.frontends.onnx import from_model, load_onnx
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir import numerics
from compiler.ir.graph import UnsupportedError
from compiler.ir.reference import evaluate, random_inputs

FAMILIES = pathlib.Path(__file__).parent / "data" / "families"
MANIFEST = json.loads((FAMILIES / "MANIFEST.json").read_text())


def _model(nodes, x_shape, out_shape, inits=(), opset=18, dtype=TensorProto.FLOAT):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", dtype, x_shape)],
                          [helper.make_tensor_value_info("y", dtype, out_shape)],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _agrees(model, x, tol=1e-5):
    g = from_model(model, "t")
    ours = evaluate(g, {g.meta["onnx_inputs"]["x"]: x})[g.meta["onnx_outputs"]["y"]]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert ours.shape == want.shape
    ok, err = numerics.compare(ours, want, tol)
    assert ok, err
    return g


def _init(name, arr):
    return onnx.numpy_helper.from_array(np.asarray(arr), name)


def test_instance_norm_is_a_layer_norm_over_the_spatial_axes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    m = _model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)],
               x.shape, x.shape, [_init("s", rng.random(3, np.float32)),
                                  _init("b", rng.random(3, np.float32))])
    g = _agrees(m, x)
    assert {op.kind for op in g.ops} >= {"reduce_mean", "rsqrt"}


@pytest.mark.parametrize("opset,per", [(21, "channel")])
def test_group_norm_per_channel_parameters(opset, per):
    """(opset 18's per-group form is deprecated: onnx's checker refuses such a model.)"""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    n = 3 if per == "group" else 6
    m = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                                 epsilon=1e-4)], x.shape, x.shape,
               [_init("s", rng.random(n, np.float32) + 0.5),
                _init("b", rng.standard_normal(n).astype(np.float32))], opset=opset)
    _agrees(m, x)


def test_group_norm_float16_normalises_in_float32_by_its_stash_type():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((1, 4, 4, 4)) * 3 + 1).astype(np.float16)
    m = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
               x.shape, x.shape, [_init("s", np.ones(4, np.float16)),
                                  _init("b", np.zeros(4, np.float16))], opset=21,
               dtype=TensorProto.FLOAT16)
    g = _agrees(m, x, tol=2e-3)
    assert any(op.kind == "cast" for op in g.ops)


#: the Resize attributes torch's exporter writes for F.interpolate, and a few more
RESIZES = [
    ("nearest", dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor"), [1, 1, 2, 2]),
    ("bilinear", dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
     [1, 1, 2, 2]),
    ("bilinear_align_corners", dict(mode="linear",
                                    coordinate_transformation_mode="align_corners"),
     [1, 1, 2.5, 1.5]),
    ("half_pixel_downscale", dict(mode="linear"), [1, 1, 0.5, 0.75]),
    ("bicubic", dict(mode="cubic", cubic_coeff_a=-0.75,
                     coordinate_transformation_mode="pytorch_half_pixel"), [1, 1, 2, 2]),
    ("nearest_round", dict(mode="nearest"), [1, 1, 3, 0.6]),
]


@pytest.mark.parametrize("name,attrs,scales", RESIZES, ids=[r[0] for r in RESIZES])
def test_resize_matches_onnx(name, attrs, scales):
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 6)).astype(np.float32)
    out = [int(np.floor(s * d)) for s, d in zip(scales, x.shape)]
    m = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)], x.shape,
               out, [_init("scales", np.array(scales, np.float32))])
    g = _agrees(m, x)
    if attrs["mode"] == "nearest":  # a selection: gathers only, no arithmetic
        assert not {op.kind for op in g.ops} & {"mul", "add"}


def test_resize_by_sizes_and_fused_plans_agree():
    x = np.random.default_rng(4).standard_normal((1, 3, 4, 4)).astype(np.float32)
    m = _model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
               x.shape, (1, 3, 7, 9), [_init("sizes", np.array([1, 3, 7, 9], np.int64))])
    g = _agrees(m, x)
    inputs = {g.meta["onnx_inputs"]["x"]: x}
    want = evaluate(g, inputs)
    for aggressive in (True, False):
        got = execute_plan(fuse(g, aggressive=aggressive), inputs)
        for o in want:
            assert numerics.compare(got[o], want[o], 1e-5)[0]


def test_resize_crop_mode_is_refused_in_one_line():
    x_shape = (1, 1, 4, 4)
    m = _model([helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="linear",
                                 coordinate_transformation_mode="tf_crop_and_resize")],
               x_shape, (1, 1, 8, 8), [_init("roi", np.array([0, 0, 0, 0, 1, 1, 1, 1],
                                                               np.float32)),
                                       _init("scales", np.array([1, 1, 2, 2], np.float32))])
    with pytest.raises(UnsupportedError) as e:
        from_model(m, "t")
    assert "tf_crop_and_resize" in str(e.value) and "\n" not in str(e.value)


def test_manifest_lists_every_family_file():
    files = {p.name for p in FAMILIES.glob("*.onnx")}
    assert files == {f["file"] for f in MANIFEST["fixtures"].values()}
    assert sum(p.stat().st_size for p in FAMILIES.glob("*.onnx")) < 4 << 20


@pytest.mark.parametrize("name", sorted(MANIFEST["fixtures"]))
def test_family_block_imports_matches_onnx_and_fuses(name):
    """float16 blocks (NAME_f16) round at every op, in both evaluators, in their own
    order: compared at float16's tolerance."""
    tol = 2e-2 if name.endswith("_f16") else 1e-4
    g = load_onnx(FAMILIES / f"{name}.onnx")
    inputs = random_inputs(g, seed=1)
    ours = evaluate(g, inputs)
    meta = g.meta
    feeds = {k: inputs[v] for k, v in meta["onnx_inputs"].items()}
    theirs = ReferenceEvaluator(meta["onnx_model"]).run(list(meta["onnx_outputs"]), feeds)
    for onnx_name, want in zip(meta["onnx_outputs"], theirs):
        ok, err = numerics.compare(ours[meta["onnx_outputs"][onnx_name]], want, tol)
        assert ok, (onnx_name, err)
    counts = []
    for aggressive in (True, False):
        plan = fuse(g, aggressive=aggressive)
        got = execute_plan(plan, inputs)
        for o, want in ours.items():
            assert numerics.compare(got[o], want, tol)[0], (plan.mode, o)
        counts.append(plan.num_dispatches)
    assert counts[0] <= counts[1]


def test_an_unsupported_op_is_refused_naming_the_family_that_needs_it(tmp_path, capsys):
    from compiler import cli
    g = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"])], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])],
        initializer=[_init("grid", np.zeros((1, 3, 3, 2), np.float32))])
    path = tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), path)
    assert cli.main(["fuse", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "GridSample (needed by deformable attention" in err


def test_an_unsupported_dtype_is_refused_naming_the_models_that_use_it():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], (4,), (4,),
               dtype=TensorProto.DOUBLE)
    with pytest.raises(UnsupportedError) as e:
        from_model(m, "t")
    assert "DOUBLE (needed by float64 exports" in str(e.value)


@pytest.mark.parametrize("op,mode,shape", [
    ("DepthToSpace", "DCR", (1, 8, 3, 2)), ("DepthToSpace", "CRD", (2, 12, 2, 3)),
    ("SpaceToDepth", None, (1, 3, 4, 6))])
def test_pixel_shuffle_and_focus_are_data_movement(op, mode, shape):
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    attrs = {"blocksize": 2, **({"mode": mode} if mode else {})}
    n, c, h, w = shape
    out = (n, c // 4, h * 2, w * 2) if op == "DepthToSpace" else (n, c * 4, h // 2, w // 2)
    g = _agrees(_model([helper.make_node(op, ["x"], ["y"], **attrs)], shape, out), x)
    assert {op.kind for op in g.ops} <= {"reshape", "transpose", "input"}


def test_space_to_depth_crd_inverts_depth_to_space_crd():
    """SpaceToDepth's mode (opset 28) is newer than onnx's evaluator here can check, so
    CRD is checked as the inverse of DepthToSpace CRD, which the evaluator does check."""
    x = np.random.default_rng(7).standard_normal((1, 8, 2, 3)).astype(np.float32)
    g = from_model(_model([helper.make_node("DepthToSpace", ["x"], ["t"], blocksize=2,
                                            mode="CRD"),
                           helper.make_node("SpaceToDepth", ["t"], ["y"], blocksize=2,
                                            mode="CRD")], x.shape, x.shape, opset=28), "t")
    y = evaluate(g, {g.meta["onnx_inputs"]["x"]: x})[g.meta["onnx_outputs"]["y"]]
    assert np.array_equal(y, x)


@pytest.mark.parametrize("exclusive,reverse,axis", [(0, 0, 1), (1, 0, 1), (0, 1, 0), (1, 1, -1)])
def test_cumsum_matches_onnx(exclusive, reverse, axis):
    x = np.random.default_rng(8).standard_normal((3, 5)).astype(np.float32)
    x[1, 2] = np.inf  # selected, never multiplied by a 0: no NaN where onnx has none
    m = _model([helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=exclusive,
                                 reverse=reverse)], x.shape, x.shape,
               [_init("a", np.array(axis, np.int64))])
    _agrees(m, x)


def test_position_ids_from_an_attention_mask_simulate(tmp_path):
    """RoBERTa's position ids: cumsum(mask) * mask + padding index, an int64 CumSum; the
    fused kernels run in gpusim and agree (``wavefuse verify``)."""
    from compiler import cli
    nodes = [helper.make_node("CumSum", ["x", "a"], ["c"]),
             helper.make_node("Mul", ["c", "x"], ["m"]),
             helper.make_node("Add", ["m", "pad"], ["y"])]
    m = _model(nodes, (2, 16), (2, 16), [_init("a", np.array(1, np.int64)),
                                         _init("pad", np.array(1, np.int64))],
               dtype=TensorProto.INT64)
    x = (np.arange(32).reshape(2, 16) % 7 != 0).astype(np.int64)
    g = from_model(m, "t")
    ours = evaluate(g, {g.meta["onnx_inputs"]["x"]: x})[g.meta["onnx_outputs"]["y"]]
    assert np.array_equal(ours, ReferenceEvaluator(m).run(None, {"x": x})[0])
    onnx.save(m, tmp_path / "pos.onnx")
    assert cli.main(["verify", str(tmp_path / "pos.onnx")]) == 0
