"""Horizontal fusion of sibling GEMMs (``compiler.fusion.horizontal``): the rewrite to one
wide GEMM computes what the separate GEMMs compute, forms one dispatch for Q, K and V and
for a SwiGLU's gate and up projections, refuses what it cannot concatenate with the
reason, and the search scores the plan with it against the plan without it."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.fusion import fuse, horizontal
from compiler.fusion.plan import execute_plan
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.ir.reference import evaluate, random_inputs
from test_fusion_property import check_structure

#: numpy's matmul may block a wider N differently: the same sums, another order
TOL = 1e-5


def _close(want, got):
    for name, w in want.items():
        w = np.asarray(w, np.float64)
        g = np.asarray(got[name], np.float64).reshape(w.shape)
        assert np.allclose(g, w, rtol=TOL, atol=TOL), name


@st.composite
def sibling_graphs(draw):
    """2-4 matmuls reading one activation (rank 2 or 3), each with or without a bias,
    sometimes one with a weight that is a graph input or a second reader of its bare
    product, and a consumer joining them."""
    g = Graph("siblings")
    lead = draw(st.sampled_from([(), (2,)]))
    m, k = draw(st.sampled_from([3, 8])), draw(st.sampled_from([4, 16]))
    x = g.input("x", lead + (m, k))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    outs = []
    for i in range(draw(st.integers(2, 4))):
        n = draw(st.sampled_from([2, 8, 12]))
        if draw(st.integers(0, 5)) == 0:
            w = g.input(f"w{i}", (k, n))
        else:
            w = g.constant(rng.standard_normal((k, n)).astype(np.float32), f"w{i}")
        y = g.matmul(x, w)
        if draw(st.booleans()):
            b = g.constant(rng.standard_normal((n,)).astype(np.float32), f"b{i}")
            y2 = g.add(y, b) if draw(st.booleans()) else g.add(b, y)
            if draw(st.integers(0, 4)) == 0:
                # the bare product has a second reader (reduced, so every output joins)
                outs.append(g.reduce_sum(g.relu(y), -1, keepdims=True))
            y = y2
        outs.append(g.reduce_sum(g.tanh(y), -1, keepdims=True))
    total = outs[0]
    for o in outs[1:]:
        total = g.add(total, o)
    g.output(total)
    return g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sibling_graphs(), st.integers(0, 3))
def test_wide_gemm_plans_equal_the_graph(g, seed):
    inputs = random_inputs(g, seed)
    want = evaluate(g, inputs)
    for aggressive in (True, False):
        plan = fuse(g, aggressive=aggressive, horizontal_gemms=True)
        check_structure(plan.graph, plan)
        assert plan.graph.outputs == g.outputs
        _close(want, execute_plan(plan, inputs))
    fused = [d for d in plan.decisions if d.rule == "horizontal" and d.fused]
    consts = all(g.op(g.op(u).inputs[1]).kind == "constant"
                 for u in g.users("x") if g.op(u).kind == "matmul")
    assert bool(fused) == consts


def test_qkv_projections_become_one_dispatch():
    g = load_model("encoder_layer:seq=32,hidden=64,heads=4,ffn=128")
    plain = fuse(g)
    wide = fuse(g, horizontal_gemms=True)
    assert wide.num_dispatches == plain.num_dispatches - 2
    (d,) = [d for d in wide.decisions if d.rule == "horizontal"]
    assert d.fused and d.producer == "x" and "N = 64 + 64 + 64 = 192" in d.reason
    assert "biases too" in d.reason
    inputs = random_inputs(g, 0)
    _close(evaluate(g, inputs), execute_plan(wide, inputs))


def test_swiglu_gate_and_up_become_one_gemm():
    g = load_model("tests/data/llama_block.onnx")
    new, decisions = horizontal.rewrite(g)
    fused = [d for d in decisions if d.fused]
    assert len(fused) == 2  # q/k/v of the attention, gate/up of the MLP
    assert any("128 + 128 = 256" in d.reason for d in fused)
    inputs = random_inputs(g, 0)
    _close(evaluate(g, inputs), evaluate(new, inputs))


def test_weights_that_are_inputs_are_refused_with_the_reason():
    g = Graph("t")
    x = g.input("x", (4, 8))
    g.output(g.add(g.matmul(x, g.input("w0", (8, 4))),
                   g.matmul(x, g.constant(np.ones((8, 4), np.float32), "w1"))))
    new, decisions = horizontal.rewrite(g)
    assert new is g
    (d,) = decisions
    assert not d.fused and "w0 is not a constant" in d.reason


def test_the_search_scores_the_wide_gemm_against_the_separate_ones():
    from compiler.tuning.search import SEPARATE_CONTRACTIONS, tune
    g = Graph("two_projections")
    x = g.input("x", (64, 64))
    rng = np.random.default_rng(0)
    ys = [g.matmul(x, g.constant(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}"))
          for i in range(2)]
    g.output(g.mul(ys[0], ys[1]))
    r = tune(g, "gfx942", budget=2, baseline=False)
    assert SEPARATE_CONTRACTIONS in r.plan_choice["predicted_us"]
    (d,) = [d for d in r.plan.decisions if d.rule == "search" and d.cost
            and "wide_plan_us" in d.cost]
    assert d.fused == (d.cost["wide_plan_us"] <= d.cost["separate_plan_us"])
    assert all(t.verified for t in r.dispatches)


def test_the_commands_show_the_plan_tune_forms(capsys):
    """`fuse` and `view --dispatch` name the wide GEMM as tune does (they once formed the
    plan without it, so tune's ``..._hcat_1`` dispatch was unknown to `view`)."""
    import json

    from compiler.cli import main
    assert main(["fuse", "encoder_layer", "--json"]) == 0
    names = [d["name"] for d in json.loads(capsys.readouterr().out)["dispatches"]]
    (wide,) = [n for n in names if "hcat" in n]
    assert main(["view", "candidates", "encoder_layer", "--dispatch", wide, "--budget", "2",
                 "--no-cache"]) == 0
    assert wide in capsys.readouterr().out
