"""A long loop timed from truncated runs (``gpusim.steady``, ``simulate(extrapolate_loops=
True)``) against the full simulation: the extrapolated time is within its stated bound of
the time with every trip simulated, for the loops the search extrapolates (the fused
attention's key loop, a GEMM's K loop, a row reduction's chunk loop); kernels with several
long passes, short loops and runs with a trace are not extrapolated; the value check's
address probe and store ranges agree with the full kernel."""
from __future__ import annotations

import random

import numpy as np
import pytest

import gpusim
from gpusim import steady
from gpusim.analysis import store_ranges
from gpusim.hw import get_arch
from gpusim.program import Assign, Buffer, For, Kernel, Load, Store, Var, i32, kernels_of, thread_id
from compiler.tuning import sampling
from compiler.lower import lower
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.fusion.plan import unfused_dispatches
from compiler.schedule import schedule_space
from compiler.tuning.search import _address_probe

ARCH = get_arch("gfx942")


def _long_loop_kernels(spec, pick, count, seed=0, unfused=False, knobs=lambda k: True):
    """Up to ``count`` lowered candidates (seeded, with ``knobs`` true) of the dispatches
    ``pick`` selects whose kernel has one long loop."""
    g = load_model(spec)
    dispatches = unfused_dispatches(g) if unfused else fuse(g).dispatches
    out = []
    for d in dispatches:
        if not pick(g, d):
            continue
        space = [c for c in schedule_space(g, d, ARCH) if c.legal and knobs(c.knobs)]
        random.Random(seed).shuffle(space)
        for c in space:
            try:
                k = lower(g, d, c.knobs, ARCH)
            except Exception:  # an illegal point the space could not see: not ours to test
                continue
            try:  # a tile whose estimated VGPRs leave no room: the search skips it too
                for kk in kernels_of(k):
                    gpusim.occupancy(kk, ARCH)
            except gpusim.KernelError:
                continue
            for kk in kernels_of(k):  # a split-K sequence: each of its kernels
                if steady.long_loop(kk) is not None and len(out) < count:
                    out.append(kk)
            if len(out) == count:
                return out
    return out


def _is(kind):
    return lambda g, d: d.kind == kind


def _reduce(g, d):
    return any(g.op(n).kind.startswith("reduce") for n in d.ops)


FAMILIES = {
    # the fused attention's key loop: 64 key blocks of 16
    "attention key loop": ("attention:heads=1,seq=1024,dim=64", _is("attention"), False,
                           lambda k: k["BK"] == 16),
    # a GEMM's K loop: the MLP's second matmul, K = 4096
    "contraction K loop": ("mlp:tokens=128,hidden=64,ffn=4096", _is("contraction"), False,
                           lambda k: True),
    # a row reduction over 65536 columns, one pass (the unfused softmax's row max)
    "row reduction": ("softmax:rows=8,cols=65536", _reduce, True, lambda k: True),
}


def _check(kernel):
    """(extrapolated, full) results, asserting the stated bound holds."""
    ext = gpusim.simulate(kernel, ARCH, functional=False, extrapolate_loops=True)
    full = gpusim.simulate(kernel, ARCH, functional=False)
    assert "extrapolate" not in full.method and full.loop_error_bound == 0
    if "cut to" in ext.method:
        assert ext.loop_error_bound <= steady.LOOP_TOL
        err = abs(ext.cycles - full.cycles) / full.cycles
        assert err <= ext.loop_error_bound * ext.cycles / full.cycles + 1e-9, \
            (kernel.name, kernel.meta, ext.cycles, full.cycles, ext.method)
    else:
        assert ext.cycles == full.cycles and "every trip" in ext.method
    return ext, full


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_extrapolated_time_is_within_its_bound(family):
    spec, pick, unfused, knobs = FAMILIES[family]
    kernels = _long_loop_kernels(spec, pick, 2, unfused=unfused, knobs=knobs)
    assert kernels, f"no {family} kernel with a long loop: the test would check nothing"
    cut = 0
    for k in kernels:
        ext, full = _check(k)
        cut += "cut to" in ext.method
        if "cut to" in ext.method:  # counters follow the time: instructions exactly
            for name in ("valu_insts", "vmem_insts", "global_load_bytes"):
                assert ext.counters[name] == pytest.approx(full.counters[name], rel=1e-6)
    assert cut, f"no {family} kernel was extrapolated"


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_extrapolated_time_is_within_its_bound_more_schedules(family, seed):
    spec, pick, unfused, knobs = FAMILIES[family]
    kernels = _long_loop_kernels(spec, pick, 3, seed=seed, unfused=unfused, knobs=knobs)
    assert kernels
    for k in kernels:
        _check(k)


def test_what_is_not_extrapolated():
    # several long passes over one row (softmax's max, sum and normalise): every trip
    g = load_model("softmax:rows=8,cols=65536")
    d = fuse(g).dispatches[0]
    multi = None
    for c in schedule_space(g, d, ARCH):
        if c.legal:
            k = lower(g, d, c.knobs, ARCH)
            if len(steady._outer_long(k.body, [], steady.MIN_TRIPS)) > 1:
                multi = k
                break
    assert multi is not None
    assert steady.long_loop(multi) is None
    r = gpusim.simulate(multi, ARCH, functional=False, extrapolate_loops=True)
    assert "cut to" not in r.method and r.loop_error_bound == 0
    # a traced run is the kernel's own
    [k] = _long_loop_kernels(*FAMILIES["contraction K loop"][:2], 1)
    r = gpusim.simulate(k, ARCH, functional=False, trace=True, extrapolate_loops=True)
    assert "cut to" not in r.method


def test_broadcast_walks_run_in_full():
    """A two-stage combine's loop over 64 splits loads each split's one-word partial max
    with a broadcast (a wave-uniform index), 4 bytes on per trip: one miss every 32
    trips, a period the cuts do not span, so every trip runs (extrapolated, it was 5%
    off). A GEMM's K loop has no broadcast load; an index that reaches the counter only
    through a register the loop computes gives no advance (None), and runs in full."""
    g = load_model("softmax:rows=8,cols=65536")
    d = next(d for d in unfused_dispatches(g) if _reduce(g, d))
    combine = lower(g, d, {"mapping": "workgroup", "workgroup": 256, "row_splits": 64},
                    ARCH).kernels[1]
    loop = steady.long_loop(combine)
    assert loop is not None and loop.trips == 64
    assert steady.broadcast_advances(combine, loop) == [4]
    r = gpusim.simulate(combine, ARCH, functional=False, extrapolate_loops=True)
    assert "a broadcast load walks 4 bytes per trip" in r.method and r.loop_error_bound == 0
    assert r.cycles == gpusim.simulate(combine, ARCH, functional=False).cycles
    [k] = _long_loop_kernels(*FAMILIES["contraction K loop"][:2], 1)
    assert steady.broadcast_advances(k, steady.long_loop(k)) == []
    p, x, y = Var("p", "i32"), Var("x", "i32"), Var("y")
    body = (Assign(x, p * 16), Load((y,), "a", x), Store("o", thread_id(), (y,)))
    via_register = Kernel("k", (Buffer("a", "f32", (2048,)), Buffer("o", "f32", (64,), "out")),
                          1, 64, (For(p, i32(0), i32(128), 1, body),))
    assert steady.broadcast_advances(via_register, steady.long_loop(via_register)) == [None]


def test_cut_changes_only_the_loop_bound():
    [k] = _long_loop_kernels(*FAMILIES["contraction K loop"][:2], 1)
    loop = steady.long_loop(k)
    c = steady.cut(k, {loop.stmt: 5})
    before = {(x.stmt.var.name, x.trips) for x in steady.constant_loops(k)}
    after = {(x.stmt.var.name, x.trips) for x in steady.constant_loops(c)}
    assert after == before - {(loop.stmt.var.name, loop.trips)} | {(loop.stmt.var.name, 5)}
    assert steady.long_loop(c) is None and (c.grid, c.block, c.params) == (k.grid, k.block,
                                                                          k.params)
    assert gpusim.simulate(c, ARCH, functional=False).cycles < \
        gpusim.simulate(k, ARCH, functional=False).cycles
    assert steady.cut(k, {}).body == k.body  # the same statement objects


def test_extrapolate_bounds_a_bend():
    fit = steady.extrapolate((4, 8, 12), [np.array([40.0]), np.array([80.0]),
                                          np.array([121.0])], 100)
    assert fit.value[0] == pytest.approx(121 + 88 * 41 / 4)
    assert fit.bound[0] == pytest.approx(88 * (41 / 4 - 10 + 1 / 4))
    exact = steady.extrapolate((4, 8, 12), [np.array([40.0]), np.array([80.0]),
                                            np.array([120.0])], 100)
    assert exact.value[0] == 1000 and exact.bound[0] == 88 / 4


@pytest.mark.parametrize("spec,pick,unfused", [
    ("attention:heads=2,seq=1024,dim=64", _is("contraction"), False),
    ("softmax:rows=512,cols=4096", _reduce, False)])
def test_probe_and_store_ranges_cover_what_the_sample_writes(spec, pick, unfused):
    """The probe (loops that store nothing cut to one trip) writes what the kernel
    writes, and the elements written lie inside the store ranges."""
    g = load_model(spec)
    d = [d for d in fuse(g, attention=False).dispatches if pick(g, d)][-1]  # PV: K = seq
    c = next(c for c in schedule_space(g, d, ARCH) if c.legal)
    k = lower(g, d, c.knobs, ARCH)
    wgs = sampling.sample_workgroups(k.grid, 0)
    probe = _address_probe(k)
    assert probe is not None
    outs = [b for b in k.buffers if b.intent == "out"]
    sent = {b.name: sampling.sentinel_like(b.dtype, b.shape) for b in outs}
    full = gpusim.simulate(k, ARCH, inputs=dict(sent), workgroups=wgs)
    short = gpusim.simulate(probe, ARCH, inputs=dict(sent), workgroups=wgs)
    per_wg = [store_ranges(k, ARCH.wave_size, w) for w in wgs]
    for b in outs:
        got = np.flatnonzero(sampling.written(full.outputs[b.name], b.dtype))
        assert got.size and np.array_equal(
            got, np.flatnonzero(sampling.written(short.outputs[b.name], b.dtype)))
        inside = np.zeros(b.size, bool)
        for r in per_wg:
            lo, hi = r[b.name]
            inside[lo:hi + 1] = True
        assert inside[got].all() and inside.sum() < b.size
