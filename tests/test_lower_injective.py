"""Lowering of integer/bool values and the injective ops (gather, pad, concat), slice
views, comparisons and select: every dispatch of small graphs that use them, under several
elementwise schedules, simulated by gpusim, equals the numpy reference."""
from __future__ import annotations

import numpy as np
import pytest

import gpusim
from compiler.ir.graph import Graph
from compiler.lower import LoweringError, lower
from compiler.schedule import schedule_space
from gpusim.hw import GFX942
from compiler.lower.common import memory_image
from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs


def check_all_dispatches(g: Graph, picks=(0, 7, -1)):
    inputs = random_inputs(g, 3)
    env = evaluate(g, inputs, keep_all=True)
    plan = fuse(g)
    ran = 0
    for d in plan.dispatches:
        legal = [c for c in schedule_space(g, d, GFX942) if c.legal]
        assert legal, d.name
        for pick in picks:
            knobs = legal[pick % len(legal)].knobs
            try:
                k = lower(g, d, knobs)
            except LoweringError:
                continue
            ins = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
                   if b.intent == "in"}
            res = gpusim.simulate(k, "gfx942", inputs=ins)
            for o in d.outputs:
                want = env[o]
                got = res.outputs[o].reshape(want.shape)
                if want.dtype.kind in "biu":
                    np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=str(knobs))
                else:
                    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=str(knobs))
            ran += 1
    assert ran
    return plan


def test_embedding_gather_with_position_add():
    g = Graph("embed")
    ids = g.input("ids", (2, 6), "i32")
    g.meta["index_bounds"] = {"ids": 10}
    table = g.constant(np.random.default_rng(0).uniform(-1, 1, (10, 8)).astype(np.float32))
    pos = g.constant(np.random.default_rng(1).uniform(-1, 1, (6, 8)).astype(np.float32))
    g.output(g.add(g.gather(table, ids, 0), pos))
    check_all_dispatches(g)


def test_mask_compare_select_and_casts():
    g = Graph("mask")
    x = g.input("x", (4, 16))
    m = g.input("m", (1, 16), "i32")
    keep = g.compare("gt", m, g.constant(np.array([0], np.int32)))
    y = g.select(keep, x, g.constant(np.array([-np.inf], np.float32)))
    flag = g.logical_not(g.compare("lt", x, g.constant(np.array([0.0], np.float32))))
    g.output(y, g.cast(flag, "f32"), g.cast(g.cast(x, "i32"), "f32"), flag)
    check_all_dispatches(g)


def test_pad_slice_concat_rotate_half():
    g = Graph("rot")
    x = g.input("x", (2, 3, 8))
    a = g.slice(x, (0, 0, 4), (1, 1, 1), (2, 3, 4))
    b = g.slice(x, (0, 0, 0), (1, 1, 1), (2, 3, 4))
    rot = g.concat([g.neg(a), b], 2)
    padded = g.pad(g.relu(x), ((0, 0), (1, 1), (2, 0)), -1.5)
    strided = g.slice(padded, (0, 4, 9), (1, -2, -3), (2, 3, 4))
    g.output(g.add(rot, x), strided)
    check_all_dispatches(g)


def test_max_pool_as_windows_of_a_pad():
    g = Graph("pool")
    x = g.input("x", (1, 2, 7, 7))
    xp = g.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), -np.inf)
    acc = None
    for i in range(3):
        for j in range(3):
            w = g.slice(xp, (0, 0, i, j), (1, 1, 2, 2), (1, 2, 4, 4))
            acc = w if acc is None else g.max(acc, w)
    g.output(acc)
    plan = check_all_dispatches(g)
    # the strided windows are not projections of the pad's loops, so the pad stays its
    # own dispatch and the nine windows + max form the other
    assert plan.num_dispatches == 2


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def injective_graphs(draw):
    """x -> pad -> strided slice, concatenated with relu(x)'s window, then a select
    against a threshold: random sizes, pads, starts, steps and concat axis."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    g = Graph("prop")
    x = g.input("x", shape)
    p = g.pad(x, pads, draw(st.sampled_from([0.0, -1.0, 2.5])))
    starts, steps, out = [], [], []
    for n in p.shape:
        step = draw(st.sampled_from([1, 1, 2, -1]))
        count = draw(st.integers(1, max(1, (n + abs(step) - 1) // abs(step))))
        span = (count - 1) * abs(step) + 1
        first = draw(st.integers(0, n - span))
        starts.append(first if step > 0 else first + span - 1)
        steps.append(step)
        out.append(count)
    win = g.slice(p, starts, steps, out)
    axis = draw(st.integers(0, rank - 1))
    other = list(out)
    other[axis] = draw(st.integers(1, 4))
    y = g.input("y", tuple(other))
    cat = g.concat([win, g.relu(y)], axis)
    keep = g.compare("gt", cat, g.constant(np.array([0.25], np.float32)))
    g.output(g.select(keep, cat, g.neg(cat)))
    return g, draw(st.integers(0, 10**6))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=injective_graphs())
def test_property_pad_slice_concat_select_lower_to_the_reference(case):
    g, pick = case
    check_all_dispatches(g, picks=(pick,))
