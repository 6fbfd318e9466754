"""Property test of the whole pipeline: random graphs are fused, every dispatch is
lowered with a randomly chosen legal schedule and run functionally in gpusim, and the
kernels' outputs, fed dispatch to dispatch, equal the numpy reference of the graph."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.hw import GFX942, get_arch
import gpusim
from compiler.graph import Graph
from compiler.lower import lower
from compiler.schedule import schedule_space
from compiler.lower.common import memory_image
from compiler.passes import fuse
from compiler.plan import execute_plan, max_error
from compiler.reference import evaluate, random_inputs

from test_fusion_property import graphs  # noqa: E402  (the fusion tests' graph generator)


def describe(g) -> str:
    return "; ".join(f"{op.name}={op.kind}({','.join(op.inputs)}){list(op.type.shape)}"
                     f"{op.attrs.get('axes', '')}{op.attrs.get('perm', '')}"
                     for op in g.ops if op.kind != "constant")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(g=graphs(), aggressive=st.booleans(), pick=st.integers(0, 10_000),
       arch=st.sampled_from(["gfx942", "gfx90a", "gfx1100"]))
def test_simulated_kernels_compute_the_graph(g, aggressive, pick, arch):
    plan = fuse(g, aggressive=aggressive)
    env = evaluate(g, random_inputs(g, 3), keep_all=True)
    values = {n: env[n] for n in g.topo_order() if g.op(n).kind in ("input", "constant")}
    for d in plan.dispatches:
        space = schedule_space(g, d, get_arch(arch))
        legal = [c for c in space if c.legal and not c.opt_in]
        assert legal, (f"{d.name} ops {d.ops} outputs {d.outputs}: no legal schedule "
                       f"({sorted({c.reason for c in space})}) in graph {describe(g)}")
        knobs = legal[pick % len(legal)].knobs
        where = f"{d.name} {knobs} ops {d.ops} of graph {describe(g)}"
        k = lower(g, d, knobs, arch)
        ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
               if b.intent == "in"}
        try:
            res = gpusim.simulate(k, arch, inputs=ins)
        except gpusim.KernelError as e:
            raise AssertionError(f"{e} in {where}") from None
        for o in d.outputs:
            got = np.asarray(res.outputs[o]).reshape(env[o].shape)
            np.testing.assert_allclose(got, env[o], rtol=1e-4, atol=1e-5,
                                       err_msg=f"output {o} of {where}")
            values[o] = got  # the next dispatch reads what this kernel wrote


def _square_matmul_transpose_neg(then_transpose_back: bool) -> Graph:
    g = Graph("square_transpose_epilogue")
    x = g.input("x", (3, 2))
    w = g.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    t = g.neg(g.transpose(g.matmul(x, w), (1, 0)))
    if then_transpose_back:
        t = g.neg(g.transpose(t, (1, 0)))
    g.output(t)
    return g


@pytest.mark.parametrize("aggressive", [False, True])
@pytest.mark.parametrize("back", [False, True])
def test_square_gemm_epilogue_keeps_its_transpose(aggressive, back):
    """Regression (found by the ``long`` profile): a square matmul -> transpose -> neg has
    the GEMM's shape, so a shape test alone let the transpose into the epilogue, whose
    tile then wrote each result at its accumulator's own index and dropped the transpose.
    With layout propagation (``passes.layout``) the tile writes in the view's order: one
    dispatch, and the values of the graph (transposed back or not)."""
    g = _square_matmul_transpose_neg(back)
    plan = fuse(g, aggressive=aggressive)
    assert plan.num_dispatches == 1
    env = evaluate(g, random_inputs(g, 5), keep_all=True)
    values = {n: env[n] for n in g.topo_order() if g.op(n).kind in ("input", "constant")}
    (d,) = plan.dispatches
    for c in schedule_space(g, d, GFX942):  # every placement and tile: the failing one
        if not c.legal:                       # was the first FMA tile, swizzle none
            continue
        k = lower(g, d, c.knobs, "gfx942")
        ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
               if b.intent == "in"}
        res = gpusim.simulate(k, "gfx942", inputs=ins)
        for o in d.outputs:
            np.testing.assert_allclose(np.asarray(res.outputs[o]).reshape(env[o].shape),
                                       env[o], rtol=1e-5, atol=1e-6, err_msg=str(c.knobs))


@pytest.mark.parametrize("aggressive", [False, True])
def test_outputs_beside_a_reshaped_root_share_its_iteration_space(aggressive):
    """Regression (issue 16): ``neg(v)`` (2,) and ``reshape(add(x, neg(v)), (4,))`` form one
    dispatch; its iteration space is the root's (2, 2), which the (2,) output broadcasts
    against and the (4,) view covers, so the dispatch has legal schedules and every one
    of them computes the graph (the largest output's (4,) shape left none)."""
    g = Graph("views")
    x, v = g.input("x", (2, 2)), g.input("v", (2,))
    n = g.neg(v)
    g.output(n)
    g.output(g.reshape(g.add(x, n), (4,)))
    plan = fuse(g, aggressive=aggressive)
    (d,) = plan.dispatches
    env = evaluate(g, random_inputs(g, 2), keep_all=True)
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.opt_in]
    assert legal, [c.reason for c in schedule_space(g, d, GFX942)]
    for c in legal:
        k = lower(g, d, c.knobs, "gfx942")
        ins = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
               if b.intent == "in"}
        res = gpusim.simulate(k, "gfx942", inputs=ins)
        for o in d.outputs:
            np.testing.assert_array_equal(np.asarray(res.outputs[o]).reshape(env[o].shape),
                                          env[o], err_msg=str(c.knobs))


def _simulate_every_schedule(g, d, env, limit=None):
    """Lowers ``d`` with each legal schedule (the first ``limit``) and checks every output
    against the reference values ``env``; returns how many schedules ran."""
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.opt_in]
    assert legal, [c.reason for c in schedule_space(g, d, GFX942)]
    for c in legal[:limit]:
        k = lower(g, d, c.knobs, "gfx942")
        ins = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
               if b.intent == "in"}
        res = gpusim.simulate(k, "gfx942", inputs=ins)
        for o in d.outputs:
            np.testing.assert_allclose(np.asarray(res.outputs[o]).reshape(env[o].shape),
                                       env[o], rtol=1e-5, atol=1e-6, err_msg=str(c.knobs))
    return len(legal[:limit])


W23 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def _gemm_neg_two_transposes() -> Graph:
    g = Graph("gemm_two_transposes")
    x = g.input("x", (2, 2))
    t1 = g.transpose(g.neg(g.matmul(x, g.constant(W23))), (1, 0))
    g.output(g.transpose(t1, (0, 1)), t1)
    return g


@pytest.mark.parametrize("aggressive", [False, True])
def test_view_outputs_of_an_epilogue_are_written_by_the_tile(aggressive):
    """Regression (issue 16, found by the ``long`` profile): x @ w -> neg -> transpose ->
    identity transpose, both transposes graph outputs. Each view output got a copy
    dispatch of its own (3 dispatches against the unfused 2, the tile's result read
    twice); the tile now writes both in the view's order (layout propagation): one
    dispatch reading x and w (40 bytes) and writing two 3x2 results (48 bytes)."""
    g = _gemm_neg_two_transposes()
    plan = fuse(g, aggressive=aggressive)
    assert (plan.num_dispatches, plan.num_dispatches_unfused) == (1, 2)
    assert (plan.bytes_fused, plan.bytes_unfused) == (88, 160)
    (d,) = plan.dispatches
    assert sorted(d.outputs) == sorted(g.outputs)
    inputs = random_inputs(g, 1)
    want = np.transpose(-(inputs["x"] @ W23))
    got = execute_plan(plan, inputs)
    for o in g.outputs:
        np.testing.assert_array_equal(got[o], want)
    env = evaluate(g, inputs, keep_all=True)
    assert _simulate_every_schedule(g, d, env, limit=12) >= 1


@pytest.mark.parametrize("aggressive", [False, True])
def test_views_no_dispatch_can_write_share_one_copy(aggressive):
    """Two graph outputs that are views of one tensor with one shape, which no dispatch
    computing it can write (a graph input here; a slice of a GEMM result below), are
    written by one copy dispatch reading the tensor once, never by a copy each."""
    g = Graph("input_views")
    x = g.input("x", (2, 3))
    t = g.transpose(x, (1, 0))
    g.output(t, g.transpose(t, (0, 1)))
    plan = fuse(g, aggressive=aggressive)
    assert plan.num_dispatches == 1 and plan.bytes_fused == 24 * 3
    assert plan.num_dispatches <= plan.num_dispatches_unfused
    env = evaluate(g, random_inputs(g, 2), keep_all=True)
    _simulate_every_schedule(g, plan.dispatches[0], env, limit=12)

    g = Graph("gemm_slices")
    x = g.input("x", (2, 2))
    w = g.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    n = g.neg(g.matmul(x, w))
    s = g.slice(n, starts=(0, 1), steps=(1, 1), shape=(2, 2))
    g.output(s, g.transpose(g.transpose(s, (1, 0)), (1, 0)))
    plan = fuse(g, aggressive=aggressive)
    assert plan.num_dispatches <= plan.num_dispatches_unfused == 2
    assert plan.bytes_fused <= plan.bytes_unfused
    inputs = random_inputs(g, 3)
    want = evaluate(g, inputs)
    assert max_error(want, execute_plan(plan, inputs)) == 0.0
    env = evaluate(g, inputs, keep_all=True)
    for d in plan.dispatches:
        _simulate_every_schedule(g, d, env, limit=4)
