"""Row-reduction and elementwise lowerings, run functionally in gpusim, equal numpy for
random shapes and every kind of schedule (hypothesis picks the points)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.hw import GFX942, get_arch
from gpusim.program import kernels_of
import gpusim
from compiler.ir.graph import Graph
from compiler.lower import LoweringError, lower
from compiler.schedule import schedule_space
from compiler.lower.common import memory_image
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run_dispatch(graph, dispatch, knobs, arch="gfx942"):
    env = evaluate(graph, random_inputs(graph, 1), keep_all=True)
    k = lower(graph, dispatch, knobs, arch)
    ins = {b.name: memory_image(graph, b.name, env[b.name]) for b in k.buffers
           if b.intent == "in"}
    res = gpusim.simulate(k, arch, inputs=ins)
    for o in dispatch.outputs:
        np.testing.assert_allclose(res.outputs[o].reshape(env[o].shape), env[o],
                                   rtol=2e-4, atol=2e-5, err_msg=f"{knobs}")
    return k, res


@SETTINGS
@given(model=st.sampled_from(["softmax", "layernorm", "rmsnorm"]),
       rows=st.integers(1, 9), cols=st.sampled_from([4, 16, 60, 64, 72, 128, 200, 256, 520]),
       pick=st.integers(0, 10_000), arch=st.sampled_from(["gfx942", "gfx1100"]))
def test_row_schedules_compute_the_reference(model, rows, cols, pick, arch):
    g = load_model(f"{model}:rows={rows},cols={cols}")
    d = fuse(g).dispatches[0]
    legal = [c for c in schedule_space(g, d, get_arch(arch)) if c.legal]
    assert legal
    run_dispatch(g, d, legal[pick % len(legal)].knobs, arch)


@pytest.mark.parametrize("passes", ["multi", "single"])
@pytest.mark.parametrize("mapping,reduce", [("wave", "wave"), ("wave", "shuffle"),
                                            ("workgroup", "wave"), ("workgroup", "lds_tree")])
def test_every_reduction_strategy_on_layernorm(mapping, reduce, passes):
    g = load_model("layernorm:rows=6,cols=384")
    d = fuse(g).dispatches[0]
    knobs = {"mapping": mapping, "workgroup": 128, "vector": 2, "cache": "reread",
             "reduce": reduce, "passes": passes}
    k, res = run_dispatch(g, d, knobs)
    assert k.meta["passes_over_row"] == (2 if passes == "single" else 3)


def test_register_cache_reads_the_row_once():
    g = load_model("softmax:rows=64,cols=1024")
    d = fuse(g).dispatches[0]
    base = {"mapping": "wave", "workgroup": 256, "vector": 4, "reduce": "wave",
            "passes": "multi"}
    _, reread = run_dispatch(g, d, {**base, "cache": "reread"})
    _, regs = run_dispatch(g, d, {**base, "cache": "registers"})
    loads = lambda r: r.counters["global_load_requests"]  # noqa: E731
    assert loads(reread) == 3 * loads(regs)  # max pass, sum pass, output pass vs once


@pytest.mark.parametrize("mapping,reduce", [("wave", "shuffle"), ("workgroup", "lds_tree")])
def test_single_pass_variance_keeps_its_digits_on_a_large_mean(mapping, reduce):
    """Welford's update: rows of mean 1000 and spread 1 (ragged: 500 columns) normalise as
    accurately in one pass as in two; E[x^2] - E[x]^2 in f32 would be off by ~0.1-1."""
    g = load_model("layernorm:rows=8,cols=500")
    d = fuse(g).dispatches[0]
    rng = np.random.default_rng(3)
    x = {n: v for n, v in random_inputs(g, 1).items()}
    x["x"] = (1000 + rng.standard_normal((8, 500))).astype(np.float32)
    want = evaluate(g, x)[g.outputs[0]]
    for passes in ("multi", "single"):
        k = lower(g, d, {"mapping": mapping, "workgroup": 128, "vector": 1, "cache": "reread",
                         "reduce": reduce, "passes": passes})
        out = gpusim.simulate(k, inputs={b.name: memory_image(g, b.name, x[b.name])
                                         for b in k.buffers if b.intent == "in"})
        err = np.abs(out.outputs[g.outputs[0]] - want).max()
        assert err < 2e-3, (passes, err)


def test_single_pass_needs_a_mergeable_pair():
    g = load_model("rmsnorm")
    d = fuse(g).dispatches[0]
    with pytest.raises(LoweringError, match="no mean/variance"):
        lower(g, d, {"passes": "single"})


def _chain_graph(rows, cols, layout, bias_shape):
    g = Graph("chain")
    x = g.input("x", (rows, cols), layout=layout)
    b = g.input("b", bias_shape)
    y = g.relu(g.add(g.mul(x, 0.5), b))
    g.output(y, g.exp(y))
    return g


@SETTINGS
@given(rows=st.integers(1, 40), cols=st.sampled_from([1, 4, 8, 12, 64, 100]),
       transposed=st.booleans(), bias=st.sampled_from(["row", "col", "full"]),
       pick=st.integers(0, 10_000))
def test_elementwise_schedules_compute_the_reference(rows, cols, transposed, bias, pick):
    shape = {"row": (cols,), "col": (rows, 1), "full": (rows, cols)}[bias]
    g = _chain_graph(rows, cols, (1, 0) if transposed else None, shape)
    plan = fuse(g)
    for d in plan.dispatches:
        legal = [c for c in schedule_space(g, d, GFX942) if c.legal]
        run_dispatch(g, d, legal[pick % len(legal)].knobs)


def test_walking_a_transposed_input_in_its_own_order_coalesces_it():
    g = _chain_graph(256, 256, (1, 0), (256,))
    d = fuse(g).dispatches[0]
    knobs = {"workgroup": 256, "vector": 1, "elems": 1}
    _, out_order = run_dispatch(g, d, {**knobs, "order": "output"})
    _, in_order = run_dispatch(g, d, {**knobs, "order": "input:x"})
    # walking the output row-major reads x with a 256-element stride; walking x's own order
    # writes the outputs strided instead — the same number of lines either way, moved
    # from loads to stores
    assert out_order.counters["global_load_lines"] > in_order.counters["global_load_lines"]
    assert out_order.counters["global_store_lines"] < in_order.counters["global_store_lines"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
                             "reduce_mean"]),
       rows=st.integers(1, 6), cols=st.sampled_from([1, 3, 64, 70, 128, 300]),
       pick=st.integers(0, 10_000), arch=st.sampled_from(["gfx942", "gfx1100"]),
       epilogue=st.booleans(), seed=st.integers(0, 1000))
def test_integer_row_reductions_are_exact(kind, rows, cols, pick, arch, epilogue, seed):
    """i32 rows accumulate in i32 from the combine's identity under every kind of schedule
    (wave / workgroup mapping, wave / shuffle / LDS-tree combines, the generic fallback),
    on both wave sizes; a per-row integer epilogue fuses. Exact equality with numpy."""
    g = Graph("int_rows")
    x = g.input("x", (rows, cols), "i32")
    r = g.reduce(kind, x, -1, True)
    g.output(g.sub(x, r) if epilogue else r)
    (d,) = fuse(g).dispatches
    legal = [c for c in schedule_space(g, d, get_arch(arch)) if c.legal]
    assert legal
    knobs = legal[pick % len(legal)].knobs
    rng = np.random.default_rng(seed)
    lo, hi = (-1, 2) if kind == "reduce_prod" else (-1000, 1000)
    feed = {"x": rng.integers(lo, hi, (rows, cols)).astype(np.int32)}
    env = evaluate(g, feed, keep_all=True)
    k = lower(g, d, knobs, arch)
    res = gpusim.simulate(k, arch, inputs={"x": memory_image(g, "x", feed["x"])})
    for o in d.outputs:
        np.testing.assert_array_equal(res.outputs[o].reshape(env[o].shape), env[o],
                                      err_msg=f"{knobs}")


def _load_widths(stmts) -> list:
    """Widths of every global Load in a kernel body (For/If bodies included)."""
    import gpusim.program as program
    out = []
    for s in stmts:
        if isinstance(s, program.Load):
            out.append(len(s.dsts))
        elif isinstance(s, program.For):
            out += _load_widths(s.body)
        elif isinstance(s, program.If):
            out += _load_widths(s.then) + _load_widths(s.orelse)
    return out


@SETTINGS
@given(model=st.sampled_from(["softmax", "layernorm", "rmsnorm"]),
       rows=st.integers(1, 9), cols=st.sampled_from([3, 6, 16, 60, 64, 66, 128]),
       wg=st.sampled_from([64, 256]), arch=st.sampled_from(["gfx942", "gfx1100"]))
def test_generic_fallback_reads_contiguous_rows_with_vector_loads(model, rows, cols, wg,
                                                                  arch):
    """The serial fallback steps its innermost reduction loop by 4 (or 2) and loads each
    group at once where the row is consecutive and aligned (what hipcc would merge the
    scalar loads into), and still equals numpy."""
    g = load_model(f"{model}:rows={rows},cols={cols}")
    d = fuse(g).dispatches[0]
    k, _ = run_dispatch(g, d, {"lowering": "generic", "workgroup": wg}, arch)
    want = 4 if cols % 4 == 0 else 2 if cols % 2 == 0 else 1
    assert max(_load_widths(k.body)) == want
    assert set(k.meta["vector_widths"].values()) <= {want}


@pytest.mark.parametrize("layout,axis,want", [(None, -1, 4), ((1, 0), -1, 1), (None, 0, 1)])
def test_generic_fallback_keeps_scalar_loads_off_a_consecutive_row(layout, axis, want):
    """A row stored transposed, or a reduction along the outer axis, is not consecutive
    in memory: the loads stay scalar (the offset tables decide, not the shape)."""
    g = Graph("r")
    x = g.input("x", (8, 16), layout=layout)
    g.output(g.reduce_mean(x, axis, keepdims=False))
    d = fuse(g).dispatches[0]
    k, _ = run_dispatch(g, d, {"lowering": "generic", "workgroup": 64})
    assert max(_load_widths(k.body)) == want


def test_generic_fallback_vector_loads_tell_hipcc_their_alignment():
    """In the generic loop (rolled), hipcc loses a float4's alignment when it strength-
    reduces the pointer and splits the load; the emitted source states the alignment the
    offset tables proved. Other kernels print the plain cast."""
    from codegen_hip.emit import emit_kernel
    g = load_model("layernorm:rows=4,cols=64")
    d = fuse(g).dispatches[0]
    src = emit_kernel(lower(g, d, {"lowering": "generic", "workgroup": 64}, "gfx942"))
    assert "#pragma unroll 1" in src
    assert "reinterpret_cast<const float4*>(__builtin_assume_aligned(" in src
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and
             c.knobs.get("lowering") != "generic" and c.knobs.get("vector") == 4]
    other = emit_kernel(lower(g, d, legal[0].knobs, "gfx942"))
    assert "float4" in other and "__builtin_assume_aligned" not in other


# ------------------------------------------------------------ strided rows: mapping=columns
def _strided_graph(kind, shape, axes):
    """A reduction over ``axes`` that are not the last (rows are strided), with its
    per-element consumers: layer norm or softmax over those axes, or a plain mean."""
    from compiler.ir import builders
    g = Graph(f"strided_{kind}")
    x = g.input("x", shape)
    if kind == "layernorm":
        pshape = tuple(n if d in axes else 1 for d, n in enumerate(shape))
        out = builders.layer_norm(g, x, g.input("gamma", pshape), g.input("beta", pshape),
                           axis=axes[0] if len(axes) == 1 else axes)
    elif kind == "softmax":
        out = builders.softmax(g, x, axis=axes[0])
    else:
        out = g.reduce_mean(x, axes, keepdims=False)
    g.output(out)
    return g


@SETTINGS
@given(kind=st.sampled_from(["layernorm", "softmax", "mean"]),
       shape_axes=st.sampled_from([((1, 96, 10, 10), (1,)), ((2, 24, 7, 7), (1,)),
                                   ((1, 7, 7, 40), (1, 2)), ((3, 5, 33), (1,)),
                                   ((2, 16, 4, 64), (1,))]),
       pick=st.integers(0, 10_000), arch=st.sampled_from(["gfx942", "gfx1100"]))
def test_strided_rows_read_across_lanes_compute_the_reference(kind, shape_axes, pick, arch):
    """Rows whose elements are strided (a norm over the channels of NCHW, a pool over H
    and W of NHWC) get ``mapping=columns`` candidates only, and every one of them (ragged
    row counts, every split of the reduced axis) computes the numpy reference in gpusim."""
    shape, axes = shape_axes
    if kind == "softmax" and len(axes) > 1:
        axes = axes[:1]
    g = _strided_graph(kind, shape, axes)
    d = fuse(g).dispatches[0]
    legal = [c for c in schedule_space(g, d, get_arch(arch)) if c.legal and not c.fallback]
    assert len(fuse(g).dispatches) == 1
    assert legal and all(c.knobs["mapping"] == "columns" for c in legal)
    run_dispatch(g, d, legal[pick % len(legal)].knobs, arch)


def test_columns_loads_are_coalesced_and_the_row_thread_fallback_is_not():
    """The point of mapping=columns: a wave's loads cover whole cache lines, where the
    generic fallback's thread-per-row loop of a pool over H and W of NHWC does not."""
    g = _strided_graph("mean", (1, 7, 7, 256), (1, 2))
    d = fuse(g).dispatches[0]
    k, res = run_dispatch(g, d, {"mapping": "columns", "workgroup": 256, "row_lanes": 64})
    assert res.counters["coalescing_pct"] == 100
    assert k.grid == 4 and k.meta["slices"] == 4


def test_columns_refuses_contiguous_rows_and_strided_rows_refuse_the_others():
    g = load_model("layernorm:rows=6,cols=64")
    d = fuse(g).dispatches[0]
    with pytest.raises(LoweringError, match="mapping=columns needs strided rows"):
        lower(g, d, {"mapping": "columns"}, "gfx942")
    g = _strided_graph("layernorm", (1, 8, 4, 4), (1,))
    d = fuse(g).dispatches[0]
    with pytest.raises(LoweringError, match="use mapping=columns"):
        lower(g, d, {"mapping": "wave"}, "gfx942")
    with pytest.raises(LoweringError, match="vector=1"):
        lower(g, d, {"mapping": "columns", "vector": 2}, "gfx942")


def test_a_pool_over_the_last_two_axes_is_a_contiguous_row():
    """A global average pool of NCHW reduces H and W, the last two axes: one contiguous
    row per channel, lowered by the row mappings instead of the serial fallback."""
    g = _strided_graph("mean", (2, 64, 7, 7), (2, 3))
    d = fuse(g).dispatches[0]
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.fallback]
    # (a workgroup per row is left out: 64 threads for a row of 49)
    assert {c.knobs["mapping"] for c in legal} == {"wave"}
    for knobs in ({"mapping": "wave", "workgroup": 256},
                  {"mapping": "workgroup", "workgroup": 64, "reduce": "lds_tree"}):
        run_dispatch(g, d, knobs)


@pytest.mark.parametrize("graph", ["layernorm", "strided"])
def test_row_lanes_is_offered_by_mapping_columns_only(graph):
    """``row_lanes`` changes nothing under mapping=wave/workgroup, so only the columns
    points carry it: no two legal points of a rows space lower to the same kernel for
    want of it, and refinement has no knob to step over that does nothing."""
    g = (load_model("layernorm:rows=64,cols=256") if graph == "layernorm"
         else _strided_graph("layernorm", (1, 96, 10, 10), (1,)))
    d = fuse(g).dispatches[0]
    legal = [c for c in schedule_space(g, d, GFX942) if c.legal and not c.fallback]
    assert legal
    for c in legal:
        assert ("row_lanes" in c.knobs) == (c.knobs["mapping"] == "columns"), c.knobs
    kernels = {}
    for c in legal:
        k = lower(g, d, c.knobs, GFX942)  # a two-stage point: both kernels
        key = tuple((repr(x.body), x.grid, x.block) for x in kernels_of(k))
        kernels.setdefault(key, []).append(c.knobs)
    assert all(len(v) == 1 for v in kernels.values()), [v for v in kernels.values() if len(v) > 1]


@pytest.mark.hip
@pytest.mark.skipif(__import__("shutil").which("hipcc") is None,
                    reason="hipcc not installed (Debian package 'hipcc')")
def test_columns_kernels_compile_and_pass_check(tmp_path):
    """mapping=columns kernels (one per row_lanes, a ragged one, the single pass) compile
    with hipcc for gfx90a and gfx940 and agree with the simulator (``check``)."""
    import dataclasses
    from codegen_hip import check_dir, write_project
    kernels, launches = [], []
    cases = [("layernorm", (1, 96, 10, 10), (1,), {"row_lanes": 16, "workgroup": 256}),
             ("layernorm", (1, 96, 10, 10), (1,), {"row_lanes": 64, "workgroup": 512,
                                                    "passes": "single",
                                                    "cache": "registers"}),
             ("softmax", (2, 24, 7, 7), (1,), {"row_lanes": 32, "workgroup": 128}),
             ("mean", (1, 7, 7, 40), (1, 2), {"row_lanes": 16, "workgroup": 64})]
    for i, (kind, shape, axes, knobs) in enumerate(cases):
        g = _strided_graph(kind, shape, axes)
        d = fuse(g).dispatches[0]
        k = lower(g, d, {"mapping": "columns", **knobs}, "gfx942")
        k = dataclasses.replace(k, name=f"columns_{i}")
        kernels.append(k)
        launches.append((k, {p.name: f"{k.name}/{p.name}" for p in k.params}))
    out = write_project(tmp_path / "export", kernels, launches, {})
    report = check_dir(out, ("gfx90a", "gfx940"))
    assert all(e["rc"] == 0 for e in report["kernels"]), report["kernels"]
    assert len(report["kernels"]) == 2 * len(cases)
    assert not report["disagreements"], report["disagreements"]


GPT2_FIXTURE = "tests/data/gpt2_2block.onnx"
#: the rows schedules the GPT-2 final layer norm below runs (the two mappings, both pass
#: structures, a register-cached row)
NOOP_RESHAPE_POINTS = [
    {"mapping": "wave", "workgroup": 64, "vector": 1, "cache": "registers", "reduce": "wave",
     "passes": "multi"},
    {"mapping": "workgroup", "workgroup": 64, "vector": 1, "cache": "reread",
     "reduce": "lds_tree", "passes": "single"},
]


def _final_layer_norm():
    """GPT-2's final layer norm as the dynamo exporter writes it: the normalised rows end
    in a reshape to the output's own shape (1, 16, 64) -> (1, 16, 64)."""
    import os
    g = load_model(os.path.join(os.path.dirname(__file__), "data", "gpt2_2block.onnx"))
    d = fuse(g).dispatches[-1]
    assert [g.op(n).kind for n in d.ops][-1] == "reshape"
    return g, d


def test_row_dispatch_ending_in_a_unit_reshape_keeps_the_rows_lowering():
    """The no-op reshape used to send the whole layer norm to the generic fallback (a
    thread per element, a serial loop per reduction: 10 ms at GPT-2 small's 128 x 768);
    the fusion guard then split it, leaving a 26 us generic part. It is an alias: the rows
    lowering keeps the dispatch, and its values equal numpy."""
    g, d = _final_layer_norm()
    legal = [c.knobs for c in schedule_space(g, d, GFX942) if c.legal]
    assert any(k.get("mapping") == "wave" for k in legal)
    for knobs in NOOP_RESHAPE_POINTS:
        assert knobs in [{k: v for k, v in p.items() if k in knobs} for p in legal]
        k, _ = run_dispatch(g, d, knobs)
        assert k.meta["kind"] != "generic"


def test_a_reshape_that_splits_the_row_still_refuses_the_rows_lowering():
    """Only unit dims may change: a reshape that splits the reduced dim is not a row."""
    g = Graph("split_rows")
    x = g.input("x", (8, 64))
    m = g.reduce_mean(x, -1, keepdims=True)
    g.output(g.reshape(g.sub(x, m), (8, 8, 8)))
    d = fuse(g).dispatches[0]
    with pytest.raises(LoweringError, match="inside a row dispatch"):
        lower(g, d, NOOP_RESHAPE_POINTS[0], GFX942)


@pytest.mark.hip
@pytest.mark.parametrize("knobs", NOOP_RESHAPE_POINTS)
def test_row_dispatch_ending_in_a_unit_reshape_compiles_and_checks(knobs, tmp_path):
    import shutil

    from hip_check import check_kernels
    if shutil.which("hipcc") is None:
        pytest.skip("hipcc not installed")
    g, d = _final_layer_norm()
    ks = list(kernels_of(lower(g, d, knobs, GFX942)))
    report = check_kernels(ks, tmp_path)
    assert not report["disagreements"], [x["message"] for x in report["disagreements"]]
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")


# ------------------------------------------------- rows read through a transpose (ConvNeXt)
def _channels_last_norm(shape, perm=(0, 2, 3, 1), kind="layernorm"):
    """ConvNeXt's LayerNorm: an NCHW tensor transposed channels-last, normalised over its
    last axis (the channels), output channels-last."""
    from compiler.ir import builders
    g = Graph("channels_last_norm")
    x = g.transpose(g.input("x", shape), perm)
    c = x.shape[-1]
    if kind == "layernorm":
        out = builders.layer_norm(g, x, g.input("gamma", (c,)), g.input("beta", (c,)), axis=-1)
    else:
        out = g.reduce_mean(x, (len(shape) - 1,), keepdims=True)
    g.output(out)
    return g


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(1, 32, 14, 14), (2, 24, 5, 7), (1, 96, 8, 8)]),
       kind=st.sampled_from(["layernorm", "mean"]), pick=st.integers(0, 10_000),
       arch=st.sampled_from(["gfx942", "gfx90a"]))
def test_rows_read_through_a_transpose_are_columns_and_compute_the_reference(shape, kind,
                                                                               pick, arch):
    """A norm over the channels of NCHW written channels-last (transpose, then the last
    axis) is seen through the transpose: strided rows, ``mapping=columns`` only (lanes on
    consecutive pixels), and every point (row splits included) equals numpy in gpusim."""
    from compiler.lower.reduction import RowShape
    g = _channels_last_norm(shape, kind=kind)
    [d] = [d for d in fuse(g).dispatches if d.kind == "reduction"]
    rows = RowShape(g, d)
    assert rows.perm == (0, 2, 3, 1) and rows.red == (shape[1],) and not rows.trailing
    legal = [c for c in schedule_space(g, d, get_arch(arch)) if c.legal and not c.fallback]
    assert legal and all(c.knobs["mapping"] == "columns" for c in legal)
    run_dispatch(g, d, legal[pick % len(legal)].knobs, arch)


def test_rows_through_a_transpose_read_coalesced():
    g = _channels_last_norm((1, 64, 16, 16))
    [d] = [d for d in fuse(g).dispatches if d.kind == "reduction"]
    k, res = run_dispatch(g, d, {"mapping": "columns", "workgroup": 256, "row_lanes": 64})
    assert res.counters["coalescing_pct"] >= 50   # the channels-last store is not (stated)
    generic = [c for c in schedule_space(g, d, GFX942) if c.fallback][0]
    _, slow = run_dispatch(g, d, generic.knobs)
    assert res.cycles * 4 < slow.cycles


def test_a_transpose_onto_the_last_stored_axis_keeps_the_old_rules():
    """A reduction whose axis is the stored tensor's last one (an NHWC tensor seen as
    NCHW, reduced over its channels) is a contiguous row in memory: not rewritten."""
    from compiler.lower.reduction import RowShape
    from compiler.ir import builders
    g = Graph("nhwc_as_nchw")
    x = g.transpose(g.input("x", (1, 8, 8, 32)), (0, 3, 1, 2))
    g.output(g.reduce_mean(x, (1,), keepdims=True))
    [d] = [d for d in fuse(g).dispatches if d.kind == "reduction"]
    try:
        rows = RowShape(g, d)
    except LoweringError:
        return   # the transpose stays outside the rows lowering: the generic fallback
    assert rows.perm is None


@pytest.mark.hip
@pytest.mark.skipif(__import__("shutil").which("hipcc") is None, reason="hipcc not installed")
def test_convnext_block_norm_exports_compiles_and_checks(tmp_path, capsys):
    """The ConvNeXt block's LayerNorm, now a columns kernel, compiles with hipcc for
    gfx90a and gfx940 and `check` agrees."""
    import json
    from pathlib import Path

    from compiler.cli import main
    model = Path(__file__).parent / "data" / "families" / "convnext_block.onnx"
    out = tmp_path / "proj"
    assert main(["export", str(model), "-o", str(out), "--budget", "2", "--json",
                 "--no-cache", "--fix", "mapping=columns"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert any("reduce_mean" in k for k in kernels)
    rc = main(["check", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and not report["disagreements"], [x["message"]
                                                     for x in report["disagreements"]]
