"""Loads issued early within a basic block (compiler/lower/loadorder.py): the reordered
body computes the same values as the original on gpusim (a property over random
straight-line bodies), loads never cross what orders memory or defines their operands,
and a layer norm's row kernel waits on fewer memory latencies (simulated cycles)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpusim
from compiler.lower.loadorder import loads_early
from gpusim import program as p
from gpusim.analysis import expr_vars, stmt_defs, stmt_exprs

ARCH = "gfx942"
N = 64  # one wave, one element per lane and buffer


def _kernel(body):
    params = (p.Buffer("a", "f32", (N,)), p.Buffer("b", "f32", (N,)),
              p.Buffer("c", "f32", (N,), "inout"), p.Buffer("out", "f32", (4 * N,), "out"))
    return p.Kernel("k", params, 1, N, tuple(body), lds=(p.LdsArray("s", "f32", (N,)),))


@st.composite
def straight_line(draw):
    """A random run of global and LDS loads, arithmetic, stores (plain and guarded; c is
    read and written), LDS traffic and barriers over a few registers, then every register
    stored to ``out``."""
    regs = [p.Var(f"r{i}", "f32") for i in range(4)]
    tid = p.thread_id()
    body = [p.Assign(r, p.f32(float(i))) for i, r in enumerate(regs)]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["load", "load", "lds_load", "assign", "store", "guarded",
                                     "lds", "barrier"]))
        r, q = draw(st.sampled_from(regs)), draw(st.sampled_from(regs))
        if kind == "load":
            body.append(p.Load((r,), draw(st.sampled_from("abc")), tid))
        elif kind == "assign":
            body.append(p.Assign(r, r * q + p.f32(1.0)))
        elif kind == "lds_load":
            body.append(p.LdsLoad((r,), "s", tid))
        elif kind == "store":
            body.append(p.Store(draw(st.sampled_from(["c", "out"])), tid, (q,)))
        elif kind == "guarded":  # a row guard around a store: loads may rise above it
            buf = draw(st.sampled_from(["c", "out"]))
            body.append(p.If(tid < draw(st.integers(0, N)), (p.Store(buf, tid, (q,)),)))
        elif kind == "lds":
            body += [p.LdsStore("s", tid, (q,)), p.LdsLoad((r,), "s", tid)]
        else:
            body.append(p.Barrier())
    body += [p.Store("out", p.BinOp("add", tid, p.i32(i * N)), (r,)) for i, r in enumerate(regs)]
    return body


@settings(max_examples=60, deadline=None)
@given(straight_line())
def test_early_loads_compute_the_same_values(body):
    rng = np.random.default_rng(0)
    inputs = {b: rng.standard_normal(N).astype(np.float32) for b in "abc"}
    before = gpusim.simulate(_kernel(body), ARCH, inputs=dict(inputs), jit=False)
    after = gpusim.simulate(_kernel(loads_early(tuple(body))), ARCH, inputs=dict(inputs), jit=False)
    for o in ("c", "out"):
        np.testing.assert_array_equal(after.outputs[o], before.outputs[o])


def test_a_load_stops_at_what_it_depends_on():
    tid = p.thread_id()
    x, y, i = p.Var("x", "f32"), p.Var("y", "f32"), p.Var("i", "i32")
    acc = p.Var("acc", "f32")
    body = (p.Assign(i, tid), p.Load((x,), "a", i), p.Assign(acc, x * x),
            p.Store("c", tid, (acc,)), p.Assign(acc, acc + x),
            p.Load((y,), "b", i),          # moves above the arithmetic and the store to c
            p.Barrier(), p.Load((x,), "a", i),  # never above a barrier
            p.Assign(acc, acc + y), p.Load((y,), "c", tid))  # never above a store to c
    out = loads_early(body)
    kinds = [type(s).__name__ + (f":{s.buffer}" if isinstance(s, (p.Load, p.Store)) else "")
             for s in out]
    assert kinds == ["Assign", "Load:a", "Load:b", "Assign", "Store:c", "Assign", "Barrier",
                     "Load:a", "Assign", "Load:c"]
    # a load inside a branch stays there, and a branch ends the run it could rise through
    cond = p.If(tid < 3, (p.Assign(acc, acc * acc), p.Load((y,), "b", tid)))
    out = loads_early((p.Assign(acc, p.f32(0.0)), cond, p.Assign(acc, acc + y),
                       p.Load((x,), "a", tid)))
    assert isinstance(out[1], p.If) and isinstance(out[1].then[0], p.Load)
    assert isinstance(out[2], p.Load) and out[2].buffer == "a"  # up to the branch, no further
    # a branch holding only stores to other buffers (a row guard) does not stop it, unless
    # the store reads the register the load overwrites
    guard = p.If(tid < 3, (p.Store("c", tid, (acc,)),))
    out = loads_early((p.Assign(acc, p.f32(0.0)), guard, p.Load((x,), "a", tid),
                       p.Load((acc,), "b", tid)))
    assert [type(s).__name__ for s in out] == ["Load", "Assign", "If", "Load"]
    # LDS loads rise too, but not above a store to their array
    out = loads_early((p.LdsStore("s", tid, (acc,)), p.Assign(acc, acc + acc),
                       p.LdsLoad((x,), "s", tid), p.Assign(y, y * y), p.LdsLoad((y,), "s", tid)))
    assert [type(s).__name__ for s in out] == ["LdsStore", "LdsLoad", "Assign", "Assign",
                                              "LdsLoad"]


def _ln_rows():
    from onnx import TensorProto
    from onnx import helper as h

    from compiler.frontends.onnx import from_model
    from compiler.fusion import fuse
    from compiler.lower import dispatch_kind

    rng = np.random.default_rng(0)
    init = [h.make_tensor(n, TensorProto.FLOAT, [768], rng.standard_normal(768).tolist())
            for n in ("g", "b")]
    graph = h.make_graph(
        [h.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-12)],
        "ln", [h.make_tensor_value_info("x", TensorProto.FLOAT, [128, 768])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [128, 768])], init)
    g = from_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    [d] = [d for d in fuse(g).dispatches if dispatch_kind(g, d) == "reduction"]
    return g, d


LN_KNOBS = {"mapping": "wave", "workgroup": 64, "vector": 4, "cache": "registers",
            "reduce": "wave", "passes": "multi"}


def _ir_load_runs(body) -> list:
    """Lengths of the runs of global loads a wave issues before it first waits on one
    (a statement reading a loaded register, or a cross-lane op, ends a run)."""
    runs, cur, loaded = [], 0, set()
    for s in body:
        if isinstance(s, p.Load):
            cur += 1
            loaded |= {v.name for v in stmt_defs(s)}
            continue
        reads = set()
        for e in stmt_exprs(s):
            expr_vars(e, reads)
        if cur and (reads & loaded or isinstance(s, (p.WaveReduce, p.Shuffle))):
            runs.append(cur)
            cur = 0
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("arch", ["gfx90a", "gfx940"])
def test_load_runs_match_hipcc(arch, tmp_path):
    """Differential against the real compiler: the layer norm's IR issues its loads in
    the runs hipcc's ISA issues them (global loads between ``s_waitcnt vmcnt``): the
    three row chunks together, then gamma and beta together after the wave sums."""
    from codegen_hip.check import compile_to_asm, hipcc_path
    from codegen_hip.emit import emit_kernel
    from compiler.lower import lower

    if hipcc_path() is None:
        pytest.skip("hipcc not installed")
    g, d = _ln_rows()
    k = lower(g, d, LN_KNOBS, ARCH)
    src, asm = tmp_path / "ln.hip", tmp_path / "ln.s"
    src.write_text(emit_kernel(k, ARCH))
    assert compile_to_asm(src, arch, asm)["rc"] == 0
    runs, cur = [], 0
    for line in asm.read_text().splitlines():
        op = line.strip().split(" ")[0]
        if op.startswith("global_load"):
            cur += 1
        elif op == "s_waitcnt" and "vmcnt" in line and cur:
            runs.append(cur)
            cur = 0
    isa = runs + ([cur] if cur else [])
    assert _ir_load_runs(k.body) == isa == [3, 6]


def test_layer_norm_rows_wait_on_fewer_latencies(monkeypatch):
    """BERT-base's layer norm (128 rows of 768) with the row in registers: the three
    column chunks issue together, and gamma and beta together, instead of one latency
    each (simulated cycles of CU 0)."""
    from compiler.lower import lower

    g, d = _ln_rows()
    early = gpusim.simulate(lower(g, d, LN_KNOBS, ARCH), ARCH, functional=False)
    monkeypatch.setattr("compiler.lower.reduction.loads_early", lambda body: body)
    late = gpusim.simulate(lower(g, d, LN_KNOBS, ARCH), ARCH, functional=False)
    assert early.cycles < 0.5 * late.cycles, (early.cycles, late.cycles)


def _channel_norm():
    """A norm over the channels of NCHW (ConvNeXt's, seen through its transpose), 384
    channels of 14 x 14: ``mapping=columns``, a lane per pixel, a guarded store per
    channel (196 pixels are not a multiple of the row lanes)."""
    from onnx import TensorProto
    from onnx import helper as h

    from compiler.frontends.onnx import from_model
    from compiler.fusion import fuse
    from compiler.lower import dispatch_kind

    rng = np.random.default_rng(0)
    init = [h.make_tensor(n, TensorProto.FLOAT, [384], rng.standard_normal(384).tolist())
            for n in ("g", "b")]
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             h.make_node("LayerNormalization", ["t", "g", "b"], ["y"], axis=-1, epsilon=1e-6)]
    graph = h.make_graph(nodes, "cn", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [1, 384, 14, 14])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 14, 14, 384])],
                         init)
    g = from_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    [d] = [d for d in fuse(g).dispatches if dispatch_kind(g, d) == "reduction"]
    return g, d


CN_KNOBS = {"mapping": "columns", "workgroup": 512, "vector": 1, "cache": "registers",
            "reduce": "wave", "passes": "single", "row_lanes": 16, "row_splits": 1}


@pytest.mark.parametrize("arch", ["gfx90a", "gfx940"])
def test_guarded_stores_come_last_as_in_hipcc(arch, tmp_path):
    """Differential against the real compiler: hipcc sinks a columns kernel's guarded
    per-channel stores below every load (its gamma and beta loads issue in clusters), and
    the IR now orders them so; and the reordered kernel equals numpy in gpusim."""
    from codegen_hip.check import compile_to_asm, hipcc_path
    from codegen_hip.emit import emit_kernel
    from compiler.ir.reference import evaluate
    from compiler.lower import lower

    g, d = _channel_norm()
    k = lower(g, d, CN_KNOBS, ARCH)
    flat = [s for s in p.walk(k.body) if isinstance(s, (p.Load, p.Store))]
    last_load = max(i for i, s in enumerate(flat) if isinstance(s, p.Load))
    assert all(isinstance(s, p.Store) for s in flat[last_load + 1:]) and \
        sum(isinstance(s, p.Store) for s in flat) == 12
    name = g.meta["onnx_inputs"]["x"]
    x = np.random.default_rng(1).standard_normal((1, 384, 14, 14)).astype(np.float32)
    env = evaluate(g, {name: x}, keep_all=True)
    res = gpusim.simulate(k, ARCH, inputs={b.name: env[b.name] for b in k.buffers
                                           if b.intent == "in"})
    [o] = d.outputs
    np.testing.assert_allclose(res.outputs[o].reshape(env[o].shape), env[o], rtol=1e-4,
                               atol=1e-4)
    if hipcc_path() is None:
        pytest.skip("hipcc not installed")
    src, asm = tmp_path / "cn.hip", tmp_path / "cn.s"
    src.write_text(emit_kernel(k, ARCH))
    assert compile_to_asm(src, arch, asm)["rc"] == 0
    ops = [line.strip().split(" ")[0] for line in asm.read_text().splitlines()]
    loads = [i for i, op in enumerate(ops) if op.startswith("global_load")]
    stores = [i for i, op in enumerate(ops) if op.startswith("global_store")]
    assert len(stores) == 12 and max(loads) < min(stores)
