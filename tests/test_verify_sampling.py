"""verify's sampling of identical dispatches: one instance of each distinct kernel is run
(identical layers run one program), the others say which instance they share; the sampled
check still fails on a wrong kernel, and --check-all runs every dispatch."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from gpusim import program
from gpusim.hw import GFX942
from compiler.cli.commands import verify
from compiler.fusion import fuse
from compiler.ir import builders
from compiler.ir.graph import Graph
from compiler.tuning import sampling, search
from compiler.tuning.search import tune, tune_dispatches, verify_dispatches


def three_softmaxes(rows: int = 4096, cols: int = 256) -> Graph:
    """Three softmax layers in a row. The conservative plan gives each two dispatches (the
    row max; the rest): the second and third layers' are identical (the first reads the
    graph input, so its fingerprints differ), like a model's layers. The aggressive plan
    fuses all three into one dispatch, so the tests pin the conservative one."""
    g = Graph("three_softmaxes")
    x = g.input("x", (rows, cols), "f32")
    for _ in range(3):
        x = builders.softmax(g, x)
    g.output(x)
    return g


def _plus(stmts, amount: float):
    """Every stored value plus ``amount``: a wrong kernel that is wrong in every tile."""
    out = []
    for s in stmts:
        if isinstance(s, program.Store):
            s = program.Store(s.buffer, s.index, tuple(program.as_expr(v, "f32")
                                                       + program.f32(amount) for v in s.values))
        elif isinstance(s, program.For):
            s = dataclasses.replace(s, body=_plus(s.body, amount))
        elif isinstance(s, program.If):
            s = dataclasses.replace(s, then=_plus(s.then, amount), orelse=_plus(s.orelse, amount))
        out.append(s)
    return tuple(out)


def test_one_instance_per_kernel_maps_repeats_to_the_first():
    assert sampling.one_instance_per_kernel(["a", "b", "a", None, None, "b", "a"]) == \
        {2: 0, 5: 1, 6: 0}
    assert sampling.one_instance_per_kernel([]) == {}


@pytest.fixture(scope="module")
def tuned_three():
    g = three_softmaxes()
    return g, tune_dispatches(g, fuse(g, aggressive=False).dispatches, GFX942, budget=2)


def test_identical_dispatches_are_run_once_and_say_so(tuned_three):
    g, tuned = tuned_three
    assert len(tuned) == 6
    assert [d.best.knobs for d in tuned[2:4]] == [d.best.knobs for d in tuned[4:]]
    verify_dispatches(g, tuned, GFX942, check_all=False)
    assert all(d.verified for d in tuned[:4])
    assert any(f"of {d.kernel.grid} workgroups" in d.check for d in tuned[:4])
    for d, first in zip(tuned[4:], tuned[2:4]):
        assert d.verified is None and d.max_error is None
        assert d.check.startswith(sampling.SHARED_PREFIX) and first.name in d.check
    verify_dispatches(g, tuned, GFX942, check_all=True)
    assert all(d.verified for d in tuned)
    assert all(d.check == f"all {d.kernel.grid} workgroups" for d in tuned)


def test_a_wrong_shared_kernel_fails_the_sampled_check(tuned_three):
    """A lowering bug gives every instance of a kernel the same wrong program: the one
    instance the sampled check runs finds it."""
    g, tuned = tuned_three
    tuned = [copy.copy(d) for d in tuned]  # the fixture's list stays as tuned
    for d in (tuned[3], tuned[5]):  # the shared kernel of the second and third layers'
        k = d.kernel                # sum-and-divide, as its lowering would give it
        d.__dict__["_kernel"] = dataclasses.replace(k, body=_plus(k.body, 0.01))
        assert not d.__dict__.get("_custom")
    verify_dispatches(g, tuned, GFX942, check_all=False)
    assert all(d.verified for d in tuned[:3])
    assert tuned[3].verified is False and tuned[3].max_error > 0.005
    assert tuned[5].verified is None  # shared: not run, its first instance failed


def _wrong_lowering(monkeypatch):
    """search.lower gives a wrong program for the row max of the layers that read an
    earlier layer (the second and third: one shared kernel)."""
    real = search.lower

    def lower(graph, dispatch, knobs, arch):
        k = real(graph, dispatch, knobs, arch)
        if graph.op(dispatch.root).kind == "reduce_max" and \
                any(graph.op(t).kind != "input" for t in dispatch.inputs):
            k = dataclasses.replace(k, body=_plus(k.body, 0.01))
        return k
    monkeypatch.setattr(search, "lower", lower)


def _conservative(monkeypatch):
    """verify tunes with mode auto; the repeats exist in the conservative plan only."""
    real = verify.tune
    monkeypatch.setattr(verify, "tune", lambda *a, **kw: real(*a, **{**kw,
                                                                   "mode": "conservative"}))


def test_tune_reports_the_mismatch_of_a_wrong_shared_kernel(monkeypatch):
    _wrong_lowering(monkeypatch)
    result = tune(three_softmaxes(), GFX942, budget=2, mode="conservative", baseline=False)
    assert [d.name for d in result.mismatches] == [result.dispatches[2].name]


def test_verify_fails_on_a_wrong_shared_kernel_and_says_what_it_sampled(monkeypatch):
    _conservative(monkeypatch)
    ok = {r.name: r for r in verify.run_checks("three", three_softmaxes(), budget=2)}
    sim = ok["simulated kernels"]
    assert sim.status == "pass"
    assert "4 distinct kernel(s) run, one instance each" in sim.detail
    assert "other 2 dispatch(es) run one of them" in sim.detail
    _wrong_lowering(monkeypatch)
    bad = {r.name: r for r in verify.run_checks("three", three_softmaxes(), budget=2)}
    assert bad["simulated kernels"].status == "fail"
    assert "mismatch in" in bad["simulated kernels"].detail
    every = {r.name: r for r in verify.run_checks("three", three_softmaxes(), budget=2,
                                                   check_all=True)}
    assert every["simulated kernels"].status == "fail"
    assert "every workgroup of every dispatch" in every["simulated kernels"].detail
