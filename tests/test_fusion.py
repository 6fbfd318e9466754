"""Fusion plans of the built-in models: counts, boundaries, decisions, layouts, CLI."""
import json

import numpy as np
import pytest

from compiler import cli
from compiler.ir.graph import Graph
from compiler.ir.models import MODELS, load_model
from compiler.fusion import check_plan, fuse
from compiler.fusion.plan import execute_plan, max_error
from compiler.ir.reference import evaluate, random_inputs

COUNTS = {  # model: (aggressive, conservative)
    "softmax": (1, 2), "layernorm": (1, 2), "rmsnorm": (1, 1), "conv_add_relu": (1, 1),
    "conv_add_relu_mismatch": (1, 1), "mlp": (2, 2), "attention": (1, 4),
    "transpose_add": (1, 1), "encoder_layer": (9, 14),
}
#: aggressive without the attention rule (the fused attention's 3-dispatch rival in the search)
SPLIT_ATTENTION = {"attention": 3, "encoder_layer": 11}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dispatch_counts_and_numerics(name):
    g = load_model(name)
    for aggressive, want in zip((True, False), COUNTS[name]):
        plan = fuse(g, aggressive=aggressive)
        assert plan.num_dispatches == want, (name, aggressive, plan.to_dict()["dispatches"])
        assert plan.bytes_fused <= plan.bytes_unfused
    for mode, err in check_plan(g):
        assert err == 0.0, (name, mode)
    split = fuse(g, attention=False)
    assert split.num_dispatches == SPLIT_ATTENTION.get(name, COUNTS[name][0])
    inputs = random_inputs(g)
    assert max_error(evaluate(g, inputs), execute_plan(split, inputs)) == 0.0


def test_softmax_reads_input_once_and_writes_once():
    g = load_model("softmax")
    plan = fuse(g)
    (d,) = plan.dispatches
    assert d.kind == "reduction" and d.inputs == ["x"] and d.outputs == g.outputs
    assert d.iteration.parallel == (64,) and d.iteration.reduction == (256,)
    assert plan.bytes_fused == 2 * 64 * 256 * 4


def test_layernorm_conservative_split_matches_iree_default():
    g = load_model("layernorm")
    mean, rest = fuse(g, aggressive=False).dispatches
    assert [g.op(n).kind for n in mean.ops] == ["reduce_mean"]
    assert mean.outputs == [mean.root] and mean.root in rest.inputs
    kinds = [g.op(n).kind for n in rest.ops]
    assert kinds.count("reduce_mean") == 1 and "rsqrt" in kinds
    refused = [d for d in fuse(g, aggressive=False).decisions if not d.fused]
    assert any("one root per dispatch" in d.reason for d in refused)


def test_conv_epilogue_layout_facts():
    same = fuse(load_model("conv_add_relu:c=8,k=4")).dispatches[0]
    diff = fuse(load_model("conv_add_relu_mismatch:c=8,k=4")).dispatches[0]
    assert same.kind == diff.kind == "contraction"
    assert [(e.tensor, e.layout_matches_output) for e in same.epilogue_inputs] == \
        [("residual", True)]
    assert [(e.tensor, e.layout_matches_output) for e in diff.epilogue_inputs] == \
        [("residual", False)]


def test_mlp_bias_and_gelu_are_the_first_matmuls_epilogue():
    g = load_model("mlp")
    first, second = fuse(g).dispatches
    assert g.op(first.root).kind == "matmul" and "erf" in {g.op(n).kind for n in first.ops}
    assert second.ops == [second.root] and first.outputs[0] in second.inputs


def test_views_become_index_maps_of_the_reader():
    g = load_model("attention")
    qk = fuse(g).dispatches[0]
    assert "k" in qk.inputs and any(g.op(n).kind == "transpose" for n in qk.ops)


def test_boundary_bug_is_caught():
    """Dropping an output a later dispatch needs must fail, not borrow reference values."""
    g = load_model("softmax")
    plan = fuse(g, aggressive=False)
    plan.dispatches[0].outputs.clear()
    with pytest.raises(KeyError):
        execute_plan(plan, random_inputs(g))


def test_every_edge_has_a_decision():
    g = load_model("encoder_layer")
    plan = fuse(g)
    pairs = {(d.producer, d.consumer) for d in plan.decisions}
    for n in g.topo_order():
        op = g.op(n)
        if op.kind in ("input", "constant") or op.is_view:
            continue
        for i in op.inputs:
            while g.op(i).is_view:
                i = g.op(i).inputs[0]
            if g.op(i).kind not in ("input", "constant"):
                assert (i, n) in pairs


def test_sibling_reductions_share_one_dispatch():
    g = Graph("var")
    x = g.input("x", (16, 32))
    m = g.reduce_mean(x)
    m2 = g.reduce_mean(g.mul(x, x))
    g.output(g.sub(m2, g.mul(m, m)))
    for aggressive in (True, False):
        plan = fuse(g, aggressive=aggressive)
        red = [d for d in plan.dispatches if d.kind == "reduction"]
        assert len(red) == 1 and red[0].inputs.count("x") == 1
        assert any(d.rule == "sibling" and d.fused for d in plan.decisions)
        assert execute_plan(plan, random_inputs(g))[g.outputs[0]].shape == (16, 1)


def test_consumer_reducing_across_the_roots_rows_is_not_fused():
    """z[j] = sum_i x[i, j] * rowsum(x)[i] needs every row's sum first: two dispatches."""
    g = Graph("t")
    x = g.input("x", (8, 8))
    s = g.reduce_sum(x, axes=1)
    z = g.reduce_sum(g.mul(x, s), axes=0)
    g.output(z)
    plan = fuse(g)
    assert plan.num_dispatches == 2
    assert any(not d.fused and "serial/reduction loop" in d.reason for d in plan.decisions)
    inputs = random_inputs(g)
    np.testing.assert_array_equal(execute_plan(plan, inputs)[z.name], evaluate(g, inputs)[z.name])


def test_transposed_read_of_a_root_pairs_rows_with_columns():
    """y[j, i] = x[j, i] * rowsum(x)[i]: legal with the root's rows on y's columns."""
    g = Graph("t")
    x = g.input("x", (8, 8))
    s = g.reduce_sum(x, axes=1)
    y = g.mul(x, g.transpose(s, (1, 0)))
    g.output(y)
    plan = fuse(g)
    assert plan.num_dispatches == 1
    inputs = random_inputs(g)
    np.testing.assert_array_equal(execute_plan(plan, inputs)[y.name], evaluate(g, inputs)[y.name])


def test_cheap_chain_over_inputs_is_recomputed():
    g = Graph("r")
    a = g.input("a", (4, 8))
    b = g.input("b", (4, 8))
    t = g.tanh(a)
    g.output(g.reduce_sum(g.mul(t, b)), g.reduce_max(g.add(t, b), axes=0))
    plan = fuse(g)
    rec = [d for d in plan.dispatches if d.recomputed]
    assert len(rec) == 2 and all(d.recomputed == [t.name] for d in rec)
    assert any(d.rule == "multi_use" and "recomputed" in d.reason for d in plan.decisions)
    for mode, err in check_plan(g):
        assert err == 0.0


def test_view_output_of_an_input_gets_a_copy_dispatch():
    g = Graph("c")
    x = g.input("x", (4, 6))
    g.output(g.transpose(x, (1, 0)), g.exp(x))
    plan = fuse(g)
    assert sorted(d.kind for d in plan.dispatches) == ["elementwise", "transpose"]
    assert check_plan(g) == [("aggressive", 0.0), ("conservative", 0.0)]


def test_cli_fuse_json_and_explain(capsys):
    assert cli.main(["fuse", "layernorm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_dispatches"] == 1 and data["bytes_fused"] < data["bytes_unfused"]
    assert {"name", "root", "ops", "inputs", "outputs"} <= set(data["dispatches"][0])
    assert data["decisions"] and all("reason" in d for d in data["decisions"])
    assert cli.main(["fuse", "layernorm", "--no-aggressive", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_dispatches"] == 2
    assert cli.main(["fuse", "conv_add_relu_mismatch:c=8,k=4", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "does not match" in out and "traffic" in out and "root_consumer" not in out


@pytest.mark.parametrize("aggressive", [True, False])
def test_epilogue_writes_a_view_of_the_contraction(aggressive):
    """A (2, 1) GEMM result read as (1, 2) through a unit-dim transpose holds the same
    elements one-to-one: the consumer joins the epilogue and the tile writes the (1, 2)
    view in its own order (layout propagation); every swizzle placement computes it."""
    import gpusim
    from compiler.lower import lower
    from compiler.schedule import schedule_space
    from gpusim.hw import GFX942
    from compiler.lower.common import memory_image
    from compiler.ir.reference import evaluate, random_inputs
    g = Graph("unit_transpose")
    y = g.matmul(g.input("x", (2, 3)), g.input("w", (3, 1)))
    g.output(g.neg(g.transpose(y, (1, 0))))
    plan = fuse(g, aggressive=aggressive)
    assert len(plan.dispatches) == 1
    d = plan.dispatches[0]
    assert [g.op(o).type.shape for o in d.outputs] == [(1, 2)]
    x = random_inputs(g)
    ref = evaluate(g, x)[g.outputs[0]]
    simulated = 0
    for c in schedule_space(g, d, GFX942):
        if c.legal and not c.opt_in and c.knobs["KW"] == 1:
            k = lower(g, d, c.knobs)
            try:
                res = gpusim.simulate(k, "gfx942", inputs={n: memory_image(g, n, v)
                                                           for n, v in x.items()})
            except gpusim.KernelError as e:  # too many estimated VGPRs for its workgroup:
                assert "does not fit" in str(e), e  # the search drops such a tile too
                continue
            simulated += 1
            np.testing.assert_allclose(res.outputs[g.outputs[0]].reshape(ref.shape), ref,
                                       rtol=1e-5)
    assert simulated
    for mode, err in check_plan(g):
        assert err == 0.0, mode


def test_epilogue_leaves_out_a_smaller_tensor_needed_outside():
    """neg(rowsum) is (2, 1), added to a (2, 3) GEMM result and also a graph output: the
    GEMM dispatch cannot write it, so it is computed in its own dispatch."""
    from compiler.lower import lower
    from compiler.schedule import schedule_space
    from gpusim.hw import GFX942
    g = Graph("side_output")
    x = g.input("x", (2, 2))
    side = g.neg(g.reduce_sum(x, 1, keepdims=True))
    y = g.matmul(x, g.input("w", (2, 3)))
    g.output(side, g.neg(g.add(y, side)))
    for aggressive in (True, False):
        plan = fuse(g, aggressive=aggressive)
        for d in plan.dispatches:
            if any(g.op(n).is_contraction for n in d.ops):
                assert all(g.op(o).type.shape == (2, 3) for o in d.outputs)
            legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.opt_in]
            lower(g, d, legal[0].knobs)
    for mode, err in check_plan(g):
        assert err == 0.0, mode


@pytest.mark.parametrize("name", ["encoder_layer", "layernorm", "attention"])
@pytest.mark.parametrize("aggressive", [True, False])
def test_incremental_bookkeeping_matches_a_rebuild(name, aggressive):
    """The core updates the condensed graph, each group's leaving edges and its op counts
    merge by merge; after every rule has run they equal what a rebuild gives."""
    from compiler.fusion import CONDITIONS, RULES, SPACE_CONDITIONS
    from compiler.fusion.core import FusionState, RootKind
    g = load_model(name)
    st = FusionState.start(g, aggressive, CONDITIONS, SPACE_CONDITIONS)
    while any(rule.apply(st) for rule in RULES):
        pass
    assert set(st.condensed().edges) == set(st._build_condensed().edges)
    for grp in st.groups.values():
        assert grp.out == [e for e in st.edges if e.src in grp.ops and e.dst not in grp.ops]
        assert grp.n_roots == sum(RootKind.of(g.op(o)) > RootKind.ELEMENTWISE for o in grp.ops)
        assert grp.n_other == sum(not g.op(o).is_elementwise for o in grp.ops)
        assert all(st.owner[o] == grp.id for o in grp.ops)
    assert [grp.id for grp in st.sorted_groups()] == \
        [grp.id for grp in sorted(st.groups.values(), key=lambda x: st.order[x.root])]


def _bench_fuse():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "tools" / "bench_fuse.py"
    spec = importlib.util.spec_from_file_location("bench_fuse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_fuse_model_reports_both_modes(capsys):
    """tools/bench_fuse.py --model: one line per mode, with the plan's dispatch count
    (timings are the script's business, not asserted here)."""
    from pathlib import Path
    from compiler.frontends.onnx import load_onnx
    path = Path(__file__).parent / "data" / "bert_2layer.onnx"
    assert _bench_fuse().main(["--model", str(path), "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    g = load_onnx(path)
    for line, aggressive in zip(lines, (True, False), strict=True):
        assert ("aggressive" if aggressive else "conservative") in line
        assert f"{len(fuse(g, aggressive=aggressive).dispatches)} dispatch(es)" in line


def test_bench_fuse_missing_model_is_one_line_exit_2(capsys, tmp_path):
    assert _bench_fuse().main(["--model", str(tmp_path / "none.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]
