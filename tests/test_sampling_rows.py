"""The sampled check's reference on some rows (compiler.ir.partial) against the whole
reference, gpusim's partial inputs, and the memory estimate of a sampled tune."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpusim
from gpusim.program import KernelSequence
from gpusim.hw import GFX942
from compiler.ir import limits
from compiler.ir import numerics, partial
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs
from compiler.tuning.search import tune_dispatches, verify_dispatches

#: a matmul over fewer rows may sum its dot products in another order inside the BLAS
#: (a one-row product is a GEMV): a tenth of the plan's tolerance (float ops regrouped),
#: a hundredth of the simulated check's
def rows_tolerance(dtype: str) -> float:
    return numerics.tolerance("plan", dtype) / 10

MODELS = ["attention:heads=2,seq=64,dim=32", "attention:heads=2,seq=64,dim=32,mask=causal",
          "attention:heads=2,seq=48,dim=16,mask=padding", "encoder_layer", "mlp",
          "layernorm", "softmax:dtype=f16", "transpose_add:rows=64,cols=32"]


@pytest.mark.parametrize("spec", MODELS)
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), count=st.integers(1, 12))
def test_rows_equal_the_whole_reference_on_those_rows(spec, seed, count):
    """Every tensor the demand reaches, on the rows it computed, equals the whole
    reference (the differential test of the sampled reference)."""
    g = _model(spec)
    inputs = random_inputs(g, 0)
    env = _env(spec)
    rng = np.random.default_rng(seed)
    names = [n for n in g.topo_order() if g.op(n).kind not in ("input", "constant")]
    name = names[int(rng.integers(len(names)))]
    t = g.op(name).type
    r = max(t.rank - 1, 0)
    ids = np.unique(rng.integers(0, int(np.prod(t.shape[:r])), count))
    got = partial.evaluate_rows(g, inputs, {name: (r, ids)})
    assert got[name].r <= r
    for n, rows in got.items():
        shape = g.op(n).type.shape
        full = np.asarray(env[n])
        want = full[None] if rows.r == 0 else \
            full[tuple(partial._unravel(rows.ids, shape[:rows.r]).T)]
        assert rows.values.shape == want.shape, n
        assert numerics.compare(rows.values, want, rows_tolerance(g.op(n).type.dtype))[0], n


def test_a_score_sized_demand_stays_rows():
    """Attention's softmax output asked for 3 rows reaches Q by rows and K, V by head,
    never the whole score matrix."""
    g = load_model("attention:heads=4,seq=256,dim=32")
    out = g.outputs[0]
    need = partial.demands(g, {out: (2, np.array([0, 300, 1023]))})
    assert need["q"].r == 2 and len(need["q"].ids) == 3
    assert need["k"].r == 1 and need["v"].r == 1
    scores = [n for n in need if g.op(n).type.shape == (4, 256, 256)]
    assert scores and all(need[n].r == 2 and len(need[n].ids) == 3 for n in scores)


def test_memory_offsets_and_rows_follow_the_layout():
    from compiler.ir.graph import TensorType
    t = TensorType((3, 4, 5), "f32", layout=(2, 0, 1))
    rows = partial.Rows(2, np.array([1, 7]), None)
    offs = partial.memory_offsets(t, rows)
    idx = partial.logical_index(t, offs)
    assert [tuple(i[:2]) for i in idx[::5]] == [(0, 1), (1, 3)]
    assert sorted(np.ravel_multi_index(tuple(idx.T), t.shape)) == \
        sorted(np.ravel_multi_index(tuple(np.array(
            [(a, b, c) for a, b in [(0, 1), (1, 3)] for c in range(5)]).T), t.shape))
    assert partial.row_ids(t, offs) == (2, pytest.approx(np.array([1, 7])))


def test_partial_inputs_fill_only_their_elements():
    g = load_model("softmax:rows=64,cols=256")
    k = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=1)[0].kernel
    x = next(b for b in k.buffers if b.intent == "in")
    vals = np.linspace(-1, 1, 256, dtype=np.float32)
    res = gpusim.simulate(k, "gfx942", inputs={x.name: gpusim.Partial(np.arange(256), vals)})
    out = next(b for b in k.buffers if b.intent == "out")
    row0 = np.asarray(res.outputs[out.name]).reshape(64, 256)[0]
    assert np.allclose(row0, np.exp(vals - vals.max()) / np.exp(vals - vals.max()).sum(),
                       rtol=1e-5)
    with pytest.raises(gpusim.KernelError, match="partial input"):
        gpusim.simulate(k, "gfx942", inputs={x.name: gpusim.Partial(np.array([k.grid * 10**6]),
                                                                     np.ones(1))})


def test_sampled_check_decides_by_rows_and_agrees_with_the_whole_check(monkeypatch):
    """The split attention plan (two dispatches read an intermediate): every sampled check
    is decided by the rows, and the verdict and the error equal the whole check's on the
    same workgroups' elements, within the rows' rounding."""
    from compiler.tuning import search
    g = load_model("attention:heads=8,seq=256,dim=32")
    tuned = tune_dispatches(g, fuse(g, attention=False).dispatches, GFX942, budget=2)
    decided = []
    real = search._check_rows
    monkeypatch.setattr(search, "_check_rows",
                        lambda *a, **k: decided.append(real(*a, **k)) or decided[-1])
    verify_dispatches(g, tuned, GFX942, check_all=False)
    # a kernel sequence (split-K) is checked against the whole reference: no rows decide
    single = [not isinstance(d.kernel, KernelSequence) for d in tuned]
    assert len(decided) == len(tuned) == 3 and any(single)
    assert all((x is not None) == one for x, one in zip(decided, single))
    assert all(d.verified and "of" in d.check for d in tuned)
    env = evaluate(g, random_inputs(g, 0), keep_all=True)
    from compiler.tuning.sampling import sample_workgroups
    for d, got, one in zip(tuned, decided, single):
        if not one:
            continue
        err = got[0]
        whole = search._check_whole(g, d, GFX942, env, sample_workgroups(d.kernel.grid, 0))
        assert whole[1] and abs(whole[0] - err) <= 1e-5


def test_sampled_tune_estimate_fits_attention_at_4096():
    """tune at sequence 4096 runs under the default limit (no --max-memory): its sampled
    check holds one score-sized output image, not the whole graph (limits docstring)."""
    g = load_model("attention:heads=8,seq=4096,dim=64")
    sampled, whole = limits.working_set_bytes(g, False), limits.working_set_bytes(g)
    assert sampled < 1 << 30 < limits.DEFAULT_MAX_MEMORY < whole
    limits.check_graph(g, limits.DEFAULT_MAX_MEMORY, "attention", whole=False)
    with pytest.raises(limits.ResourceError, match="max-memory"):
        limits.check_graph(g, limits.DEFAULT_MAX_MEMORY, "attention", whole=True)


_MODELS: dict = {}
_ENVS: dict = {}


def _model(spec):
    if spec not in _MODELS:
        _MODELS[spec] = load_model(spec)
    return _MODELS[spec]


def _env(spec):
    if spec not in _ENVS:
        g = _model(spec)
        _ENVS[spec] = evaluate(g, random_inputs(g, 0), keep_all=True)
    return _ENVS[spec]
