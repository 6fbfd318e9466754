"""Two-stage rows (``row_splits`` = P > 1): few long rows split over P workgroups each; a
partial kernel writes each workgroup's partial state (sum, Welford's count/mean/M2, online
softmax's max/sum), a combine kernel merges them in split order and applies the epilogue
once. Values equal numpy (hypothesis over row counts, lengths, models and splits); the
rules refuse with a reason; the space offers it only where rows cannot fill the GPU; the
search takes it with its value check."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpusim import program
from gpusim.hw import GFX90A, GFX942

from compiler.fusion import fuse
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.lower import LoweringError, lower
from compiler.lower.reduction import ROW_DEFAULTS, ROW_SPLITS, RowShape, check_schedule
from compiler.schedule import schedule_space
from compiler.tuning.search import tune_dispatches, verify_dispatches

from test_lower_rows import _strided_graph, run_dispatch

BASE = {"mapping": "workgroup", "workgroup": 128, "vector": 2, "cache": "reread",
        "reduce": "wave", "passes": "single"}


def pool(n, c, h, w, kind="reduce_mean"):
    """A global pool over H and W of NCHW (a contiguous row of H*W per channel)."""
    g = Graph(f"pool_{kind}")
    x = g.input("x", (n, c, h, w))
    g.output(getattr(g, kind)(x, axes=(2, 3), keepdims=True))
    return g


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["softmax", "layernorm", "rmsnorm"]), rows=st.integers(1, 5),
       cols=st.integers(64, 3000), wg=st.sampled_from([64, 128, 256]),
       vec=st.sampled_from([1, 2, 4]), P=st.sampled_from(ROW_SPLITS[1:]),
       passes=st.sampled_from(["single", "multi"]))
def test_two_stage_rows_equal_numpy(model, rows, cols, wg, vec, P, passes):
    g = load_model(f"{model}:rows={rows},cols={cols}")
    d = fuse(g).dispatches[0]
    knobs = {**BASE, "workgroup": wg, "vector": vec, "passes": passes, "row_splits": P}
    why = check_schedule(RowShape(g, d), {**ROW_DEFAULTS, **knobs}, GFX942)
    if why:
        with pytest.raises(LoweringError):
            lower(g, d, knobs, GFX942)
        return
    k, res = run_dispatch(g, d, knobs)
    assert isinstance(k, program.KernelSequence) and len(k.kernels) == 2
    partial, combine = k.kernels
    assert partial.grid == rows * P and combine.grid == rows * P
    assert not any(b.intent == "out" for b in partial.buffers if b.name != k.workspaces[0].name)


@pytest.mark.parametrize("kind", ["reduce_mean", "reduce_max", "reduce_sum"])
def test_two_stage_pool(kind):
    """A global pool: the combine runs one workgroup per row (nothing per element)."""
    g = pool(1, 3, 60, 60, kind)  # rows of 3600: 15 chunks of 256, the last one ragged
    d = fuse(g).dispatches[0]
    k, _ = run_dispatch(g, d, {**BASE, "passes": "multi", "workgroup": 64, "vector": 4,
                               "row_splits": 4})
    assert k.kernels[0].grid == 12 and k.kernels[1].grid == 3


def test_welford_merge_keeps_digits_of_a_large_mean():
    """Partial (count, mean, M2) states merged by the parallel formula: a row whose mean
    is 1e4 times its spread keeps its variance (no E[x^2] - E[x]^2)."""
    g = load_model("layernorm:rows=2,cols=4096")
    d = fuse(g).dispatches[0]
    from compiler.ir.reference import evaluate, random_inputs
    import gpusim
    from compiler.lower.common import memory_image
    x = random_inputs(g, 1)
    x["x"] = (x["x"] + 1e4).astype(np.float32)
    k = lower(g, d, {**BASE, "row_splits": 8}, GFX942)
    ins = {b.name: memory_image(g, b.name, x[b.name]) for b in k.kernels[0].buffers
           if b.intent == "in"}
    ins.update({b.name: memory_image(g, b.name, x[b.name]) for b in k.kernels[1].buffers
                if b.intent == "in" and b.name in x})
    res = gpusim.simulate(k, GFX942, inputs=ins)
    ref = evaluate(g, x)
    for o in d.outputs:
        np.testing.assert_allclose(res.outputs[o].reshape(ref[o].shape), ref[o],
                                   rtol=2e-3, atol=2e-3)


def test_rules_refuse_with_a_reason():
    g = load_model("layernorm:rows=2,cols=1000")
    rows = RowShape(g, fuse(g).dispatches[0])
    assert "dependency levels" in check_schedule(rows, {**BASE, "passes": "multi",
                                                        "row_splits": 2, "row_lanes": 64},
                                                 GFX942)
    assert "mapping=workgroup or columns" in check_schedule(
        rows, {**BASE, "mapping": "wave", "workgroup": 64, "row_splits": 2, "row_lanes": 64},
        GFX942)
    assert "cache=reread" in check_schedule(rows, {**BASE, "cache": "registers",
                                                   "row_splits": 2, "row_lanes": 64}, GFX942)
    assert "without columns" in check_schedule(rows, {**BASE, "row_splits": 8,
                                                      "row_lanes": 64}, GFX942)
    assert "not in" in check_schedule(rows, {**BASE, "row_splits": 3, "row_lanes": 64},
                                      GFX942)


def test_space_offers_splits_only_for_few_rows():
    few = load_model("layernorm:rows=8,cols=65536")
    sp = schedule_space(few, fuse(few).dispatches[0], GFX942)
    two = [c for c in sp if c.knobs.get("row_splits", 1) > 1 and c.legal]
    assert two and sum(c.always for c in two) == 1
    # 256 and 512 workgroups around the 304 CUs; 16 where a 4096-column chunk leaves
    # no more than 16 splits with columns
    assert {32, 64} <= {c.knobs["row_splits"] for c in two} <= {16, 32, 64}
    many = load_model("layernorm:rows=4096,cols=1024")
    assert not any("row_splits" in c.knobs for c in schedule_space(many, fuse(many).dispatches[0],
                                                                   GFX942))


# ------------------------------------------------- strided rows (mapping=columns), two-stage
COLUMN_SHAPES = [((1, 96, 10, 10), (1,)), ((2, 24, 7, 7), (1,)), ((1, 7, 7, 40), (1, 2)),
                 ((3, 70, 33), (1,)), ((1, 300, 5, 5), (1,)), ((2, 5, 9, 48), (1, 2))]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["layernorm", "softmax", "mean"]),
       shape_axes=st.sampled_from(COLUMN_SHAPES), wg=st.sampled_from([64, 128, 256]),
       row_lanes=st.sampled_from([16, 32, 64]), P=st.sampled_from(ROW_SPLITS[1:]),
       passes=st.sampled_from(["single", "multi"]))
def test_two_stage_columns_equal_numpy(kind, shape_axes, wg, row_lanes, P, passes):
    """Strided rows split over P workgroups per block of ``row_lanes`` rows: values equal
    numpy (ragged blocks of rows, ragged splits of the reduced axis, Welford and online
    softmax states, pools over two axes), or the rule refuses and the lowering says so."""
    shape, axes = shape_axes
    if kind == "softmax":
        axes = axes[:1]
    g = _strided_graph(kind, shape, axes)
    d = fuse(g).dispatches[0]
    knobs = {"mapping": "columns", "workgroup": wg, "row_lanes": row_lanes,
             "passes": passes, "row_splits": P}
    rows = RowShape(g, d)
    why = check_schedule(rows, {**ROW_DEFAULTS, **knobs}, GFX942)
    if why:
        with pytest.raises(LoweringError):
            lower(g, d, knobs, GFX942)
        return
    k, res = run_dispatch(g, d, knobs)
    partial, combine = k.kernels
    blocks = math.prod(rows.outer) * -(-rows.inner_size // row_lanes)
    assert partial.grid == blocks * P
    assert combine.grid == (blocks if kind == "mean" else blocks * P)
    assert not any(b.intent == "out" for b in partial.buffers if b.name != k.workspaces[0].name)


def test_two_stage_columns_state_loads_are_coalesced():
    """The workspace is ``[split][field][row]``: the partial kernel's stores and the
    combine's loads of a wave's rows are consecutive words, as its strided row loads."""
    g = _strided_graph("layernorm", (1, 768, 8, 8), (1,))
    d = fuse(g).dispatches[0]
    k, res = run_dispatch(g, d, {"mapping": "columns", "workgroup": 256, "row_lanes": 16,
                                 "passes": "single", "row_splits": 16})
    assert [r.counters["coalescing_pct"] for r in res.parts] == [100, 100]


def test_space_offers_column_splits_where_blocks_do_not_fill_the_gpu():
    """ConvNeXt's last-stage channel norm (49 rows: 4 blocks of 16 to 1 of 64) gets
    two-stage columns points, one tried whatever the budget, none over two workgroups
    per CU; a norm with blocks enough for every CU (8 images of 56x56: 392 to 1568
    blocks) gets none."""
    few = _strided_graph("layernorm", (1, 768, 7, 7), (1,))
    sp = schedule_space(few, fuse(few).dispatches[0], GFX942)
    two = [c for c in sp if c.knobs.get("row_splits", 1) > 1]
    assert two and all(c.legal and c.knobs["mapping"] == "columns" for c in two)
    assert sum(c.always for c in two) == 1
    assert all(4 * 16 // c.knobs["row_lanes"] * c.knobs["row_splits"] <= 2 * GFX942.num_cus
               for c in two)
    many = _strided_graph("layernorm", (8, 96, 56, 56), (1,))
    assert not any(c.knobs.get("row_splits", 1) > 1
                   for c in schedule_space(many, fuse(many).dispatches[0], GFX942))


@pytest.mark.parametrize("arch", [GFX942, GFX90A], ids=lambda a: a.name)
def test_search_with_pinned_row_splits_checks_values(arch):
    g = load_model("softmax:rows=4,cols=8192")
    d = fuse(g).dispatches[0]
    t = tune_dispatches(g, [d], arch, budget=2, fixed={"row_splits": 16})[0]
    assert t.best.knobs["row_splits"] == 16 and isinstance(t.kernel, program.KernelSequence)
    for check_all in (True, False):
        t.verified = None
        verify_dispatches(g, [t], arch, check_all=check_all)
        assert t.verified, t.max_error


@pytest.mark.hip
@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
@pytest.mark.parametrize("model,fix", [("layernorm:rows=4,cols=16384", "row_splits=32"),
                                       ("softmax:rows=8,cols=8192", "row_splits=16")])
def test_two_stage_rows_export_compile_and_check(model, fix, tmp_path, capsys):
    """Both kernels compile with hipcc for gfx90a and gfx940 and `check` agrees."""
    import json

    from compiler.cli import main
    out = tmp_path / "proj"
    assert main(["export", model, "-o", str(out), "--budget", "2", "--json",
                 "--fix", fix]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert any(k.endswith("_rows_partial") for k in kernels)
    assert any(k.endswith("_rows_combine") for k in kernels)
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [d["message"]
                                                     for d in report["disagreements"]]
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
