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
from compiler.ir.graph import Graph
from compiler.lower import lower
from compiler.schedule import check, schedule_space
from compiler.lower.common import memory_image
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan, max_error
from compiler.ir.reference import evaluate, random_inputs

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
        # the check fusion asks before every merge (issue 16) holds for every dispatch
        assert check(g, d) == "", f"{d.name}: {check(g, d)} in graph {describe(g)}"
        space = schedule_space(g, d, get_arch(arch))
        legal = [c for c in space if c.legal and not c.opt_in]
        assert legal, (f"{d.name} ops {d.ops} outputs {d.outputs}: no legal schedule "
                       f"({sorted({c.reason for c in space})}) in graph {describe(g)}")
        # the space's legality is decided before lowering; a point whose kernel then
        # does not fit on a CU (its VGPRs, known only lowered) is refused by the simulator
        # with that reason, and the search counts it illegal: the next point is taken
        res, unfit = None, []
        for step in range(len(legal)):
            knobs = legal[(pick + step) % len(legal)].knobs
            where = f"{d.name} {knobs} ops {d.ops} of graph {describe(g)}"
            k = lower(g, d, knobs, arch)
            ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
                   if b.intent == "in"}
            try:
                res = gpusim.simulate(k, arch, inputs=ins)
                break
            except gpusim.KernelError as e:
                if "does not fit on one CU" not in str(e):
                    raise AssertionError(f"{e} in {where}") from None
                unfit.append(str(e))
        assert res is not None, f"no legal point of {d.name} fits on a CU: {unfit[:2]}"
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
    simulated = 0
    for c in schedule_space(g, d, GFX942):  # every placement and tile: the failing one
        if not c.legal:                       # was the first FMA tile, swizzle none
            continue
        k = lower(g, d, c.knobs, "gfx942")
        ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
               if b.intent == "in"}
        try:
            res = gpusim.simulate(k, "gfx942", inputs=ins)
        except gpusim.KernelError as e:  # a tile whose estimated VGPRs leave no room for
            assert "does not fit" in str(e), e  # its workgroup: the search drops it too
            continue
        simulated += 1
        for o in d.outputs:
            np.testing.assert_allclose(np.asarray(res.outputs[o]).reshape(env[o].shape),
                                       env[o], rtol=1e-5, atol=1e-6, err_msg=str(c.knobs))
    assert simulated


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
    _simulate_every_schedule(g, d, env, exact=True)


def _simulate_every_schedule(g, d, env, limit=None, exact=False):
    """Lowers ``d`` with each legal schedule (the first ``limit``) and checks every output
    against the reference values ``env`` (bit for bit with ``exact``); returns how many
    schedules ran."""
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.opt_in]
    assert legal, [c.reason for c in schedule_space(g, d, GFX942)]
    for c in legal[:limit]:
        k = lower(g, d, c.knobs, "gfx942")
        ins = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
               if b.intent == "in"}
        res = gpusim.simulate(k, "gfx942", inputs=ins)
        for o in d.outputs:
            got = np.asarray(res.outputs[o]).reshape(env[o].shape)
            if exact:
                np.testing.assert_array_equal(got, env[o], err_msg=str(c.knobs))
            else:
                np.testing.assert_allclose(got, env[o], rtol=1e-5, atol=1e-6,
                                           err_msg=str(c.knobs))
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
    # the GEMM with its epilogue, and one copy for both slice views (the unfused
    # baseline copies each: no walk over neg's (2, 4) covers a (2, 2) slice)
    assert (plan.num_dispatches, plan.num_dispatches_unfused) == (2, 4)
    assert plan.bytes_fused <= plan.bytes_unfused
    inputs = random_inputs(g, 3)
    want = evaluate(g, inputs)
    assert max_error(want, execute_plan(plan, inputs)) == 0.0
    env = evaluate(g, inputs, keep_all=True)
    for d in plan.dispatches:
        _simulate_every_schedule(g, d, env, limit=4)


def _tensor_and_uncovered_views() -> Graph:
    """relu -> neg, graph outputs: neg's reshape broadcast to (4, 12), a slice of neg, and
    max(reshape, broadcast). No walk over neg's (3, 4) covers the (4, 12) broadcast or
    the (2, 4) slice."""
    g = Graph("uncovered_views")
    n = g.neg(g.relu(g.input("x", (3, 4))))
    r = g.reshape(n, (1, 12))
    b = g.broadcast(r, (4, 12))
    g.output(g.binary("max", r, b), b, g.slice(n, (1, 0), (1, 1), (2, 4)), n)
    return g


@pytest.mark.parametrize("aggressive", [False, True])
def test_views_a_walk_does_not_cover_get_a_copy(aggressive):
    """Regression (found this session by sampling the property graphs): a graph output
    that broadcasts a computed tensor to a shape its walk does not cover (reshape (1, 12)
    -> broadcast (4, 12) of a (3, 4) tensor) or slices it was written by the tensor's own
    dispatch, which then had no legal schedule, fused or not (the unfused baseline
    counted it the same way). Such a view now gets a copy dispatch in both, and fusion
    still merges relu into neg (the merge check refused it while the view was there)."""
    g = _tensor_and_uncovered_views()
    plan = fuse(g, aggressive=aggressive)
    assert plan.num_dispatches <= plan.num_dispatches_unfused
    assert plan.bytes_fused <= plan.bytes_unfused
    (home,) = plan.dispatch_of("relu_0")
    assert "neg_1" in home.ops
    assert not any("no legal schedule" in d.reason for d in plan.decisions)
    inputs = random_inputs(g, 4)
    assert max_error(evaluate(g, inputs), execute_plan(plan, inputs)) == 0.0
    env = evaluate(g, inputs, keep_all=True)
    for d in plan.dispatches:
        assert check(g, d) == ""
        _simulate_every_schedule(g, d, env, limit=3)


def _neg_v_reshaped_beside_add() -> Graph:
    g = Graph("reshaped_beside_add")
    x, v = g.input("x", (3, 4)), g.input("v", (4,))
    a = g.neg(v)
    g.output(g.add(x, a), g.reshape(a, (2, 2)))
    return g


def test_a_merge_without_a_legal_schedule_is_refused_and_explained(tmp_path, capsys):
    """Issue 16, item 2: fusion asks the schedule spaces' own check before committing a
    merge. neg(v) (4,) with the graph output reshape(neg(v), (2, 2)) would join
    add(x, neg(v)) over (3, 4), whose walk covers neither the (2, 2) view nor its 4
    elements: the one dispatch formed before had no legal schedule. The merge is
    refused, the reason recorded and shown by ``view explain``, and both dispatches
    lower and compute the graph."""
    g = _neg_v_reshaped_beside_add()
    for aggressive in (False, True):
        plan = fuse(g, aggressive=aggressive)
        assert plan.num_dispatches == 2
        (dec,) = [d for d in plan.decisions if (d.producer, d.consumer) == ("neg_0", "add_1")]
        assert not dec.fused and "no legal schedule" in dec.reason
        assert "share no iteration space" in dec.reason
        env = evaluate(g, random_inputs(g, 6), keep_all=True)
        for d in plan.dispatches:
            assert check(g, d) == ""
            _simulate_every_schedule(g, d, env, limit=2)

    from onnx import TensorProto, helper as h, numpy_helper
    from compiler import cli
    nodes = [h.make_node("Neg", ["v"], ["a"]), h.make_node("Add", ["x", "a"], ["y"]),
             h.make_node("Reshape", ["a", "shape"], ["r"])]
    onnx_g = h.make_graph(
        nodes, "refused",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         h.make_tensor_value_info("v", TensorProto.FLOAT, [4])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
         h.make_tensor_value_info("r", TensorProto.FLOAT, [2, 2])],
        initializer=[numpy_helper.from_array(np.array([2, 2], np.int64), "shape")])
    path = tmp_path / "refused.onnx"
    path.write_bytes(h.make_model(onnx_g, opset_imports=[h.make_opsetid("", 17)])
                     .SerializeToString())
    assert cli.main(["view", "explain", str(path), "--width", "200"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no legal schedule" in out and "share no iteration space" in out
