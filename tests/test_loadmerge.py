"""Merged scalar loads (compiler/lower/loadmerge.py): pooling windows read through strided
slices are deduplicated and merged into 16-byte loads where alignment is provable; the
result must compute the same values (gpusim against the numpy reference, every legal
elementwise schedule) and use the load widths hipcc emits."""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import gpusim
from codegen_hip.check import compile_to_asm, parse_asm
from codegen_hip.emit import emit_kernel
from compiler.frontends.onnx import from_model
from compiler.lower import dispatch_kind, lower
from compiler.lower.common import memory_image
from compiler.fusion import fuse
from compiler.ir.reference import evaluate
from compiler.schedule import schedule_space
from gpusim.hw import get_arch
from gpusim.program import Load, walk

ARCH = "gfx942"


def pool_graph(op, shape, **kw):
    out = [shape[0], shape[1]] + [(s + 2 * kw.get("pads", [0] * 4)[0] - kw["kernel_shape"][0])
                                  // kw.get("strides", [1, 1])[0] + 1 for s in shape[2:]]
    g = h.make_graph([h.make_node(op, ["x"], ["y"], **kw)], "pool",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return from_model(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))


CASES = [
    ("MaxPool", [1, 8, 16, 16], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
    ("MaxPool", [1, 4, 12, 12], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("AveragePool", [1, 4, 10, 10], dict(kernel_shape=[3, 3], strides=[1, 1])),
    ("MaxPool", [2, 3, 9, 9], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
]


@pytest.mark.parametrize("op,shape,kw", CASES)
def test_pooling_kernels_match_numpy_under_every_schedule(op, shape, kw):
    g = pool_graph(op, shape, **kw)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    name = g.meta["onnx_inputs"]["x"]
    env = evaluate(g, {name: x}, keep_all=True)
    checked = 0
    for d in fuse(g).dispatches:
        if dispatch_kind(g, d) != "elementwise" or len(d.ops) == 1:
            continue  # the pooling windows, not the Pad in front of them
        for c in (c for c in schedule_space(g, d, get_arch(ARCH)) if c.legal):
            k = lower(g, d, c.knobs, ARCH)
            mem = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers
                   if b.intent == "in"}
            res = gpusim.simulate(k, ARCH, inputs=mem)
            for o in d.outputs:
                np.testing.assert_allclose(res.outputs[o].reshape(env[o].shape), env[o],
                                           rtol=1e-6, atol=1e-6, err_msg=f"{d.name} {c.knobs}")
            checked += 1
    assert checked


def _maxpool_kernel():
    """ResNet-50's stem MaxPool (3x3, stride 2, pad 1) at 64x112x112, as `export` picks it."""
    g = pool_graph("MaxPool", [1, 64, 112, 112], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                   strides=[2, 2])
    [d] = [d for d in fuse(g).dispatches if dispatch_kind(g, d) == "elementwise"
           and len(d.ops) > 1]
    return lower(g, d, {"workgroup": 256, "vector": 4, "elems": 4, "order": "output"}, ARCH)


def test_maxpool_windows_are_deduplicated_and_merged():
    """4 outputs x 9 taps = 36 scalar loads before; 27 distinct elements: the 16-byte
    aligned rows (0 and 2: the padded width 114 is 2 mod 4) as two float4 each, the rest
    scalar."""
    widths = [len(s.dsts) for s in walk(_maxpool_kernel().body) if isinstance(s, Load)]
    assert sorted(widths) == [1] * 11 + [4] * 4


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc")
def test_maxpool_ir_widths_are_the_isa_widths(tmp_path):
    """hipcc reads the same windows with global_load_dwordx4 and global_load_dword only
    (6 and 3), so `wavefuse check` finds no width it did not see in the IR."""
    k = _maxpool_kernel()
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(k, ARCH))
    r = compile_to_asm(src, "gfx940", tmp_path / "k.s")
    assert r["rc"] == 0, r["stderr"]
    isa = parse_asm((tmp_path / "k.s").read_text())["widths"]["global_load"]
    ir = {4 * len(s.dsts) for s in walk(k.body) if isinstance(s, Load)}
    assert set(isa) == ir == {4, 16}


def _four_keys(kk_value, twice=False):
    """A lane's four consecutive keys named one register each (``key_i = kk + i``, as the
    MFMA attention's score epilogue names them), each read with one scalar load."""
    from gpusim.program import Assign, Var, i32, lane
    kk = Var("kk", "i32")
    keys = [Var(f"key{i}", "i32") for i in range(4)]
    body = [Assign(kk, kk_value(lane()))]
    body += [Assign(k, kk + i32(i) if i else kk) for i, k in enumerate(keys)]
    if twice:  # a key register written again: not one value, so not looked through
        body.append(Assign(keys[2], kk + i32(2)))
    body += [Load((Var(f"x{i}"),), "bias", k + i32(64)) for i, k in enumerate(keys)]
    return tuple(body)


def test_loads_are_merged_through_index_registers_assigned_once():
    from compiler.lower.loadmerge import merge_loads
    merged = merge_loads(_four_keys(lambda l: (l / 16) * 4), 64)
    loads = [s for s in walk(merged) if isinstance(s, Load)]
    assert [len(s.dsts) for s in loads] == [4]
    assert [d.name for d in loads[0].dsts] == ["x0", "x1", "x2", "x3"]
    # not provably 16-byte aligned (kk = lane), or a key assigned twice: scalar
    for body in (_four_keys(lambda l: l), _four_keys(lambda l: (l / 16) * 4, twice=True)):
        assert [len(s.dsts) for s in walk(merge_loads(body, 64)) if isinstance(s, Load)] \
            == [1, 1, 1, 1]


def test_swin_attention_bias_loads_merged_and_values_match_numpy():
    """Swin's windowed attention on the matrix cores (the schedule `export --budget 1`
    picked, tests/test_check_families.py): the relative-position bias is read with one
    16-byte load per lane (hipcc's global_load_dwordx4), and gpusim's kernel still
    computes the reference's values."""
    from pathlib import Path

    from compiler.ir.models import load_model
    g = load_model(str(Path(__file__).parent / "data" / "families" / "swin_window.onnx"))
    d = next(x for x in fuse(g).dispatches if x.name == "d4_matmul_1")
    k = lower(g, d, {"mma": "mfma", "BQ": 16, "BK": 16, "waves": 1, "RM": 1, "q_in": "lds",
                     "row_stats": "registers", "lds_pad": 4}, ARCH)
    widths = {s.buffer: len(s.dsts) for s in walk(k.body) if isinstance(s, Load)}
    assert widths["bias"] == 4
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(g.op(n).type.shape).astype(np.float32)
             for n in g.inputs}
    env = evaluate(g, feeds, keep_all=True)
    mem = {b.name: memory_image(g, b.name, env[b.name]) for b in k.buffers if b.intent == "in"}
    res = gpusim.simulate(k, ARCH, inputs=mem)
    for o in d.outputs:
        np.testing.assert_allclose(res.outputs[o].reshape(env[o].shape), env[o],
                                   rtol=1e-4, atol=1e-5)


def _row_loads(offsets, buffer="x"):
    """One scalar load per element offset of a row, at ``lane() * 10 + offset``."""
    from gpusim.program import Var, i32, lane
    return tuple(Load((Var(f"r{o}"),), buffer, lane() * 10 + i32(o)) for o in offsets)


@pytest.mark.parametrize("offsets,dwords,widths", [
    ((0, 1, 2), True, [3]),                  # a window row: one dwordx3, no alignment needed
    ((5, 6, 7, 20, 21, 22), True, [3, 3]),   # two rows
    ((0, 1, 2), False, [1, 1, 1]),           # a 2-byte buffer: 6 bytes is no dwordx3
    ((0, 1, 2, 3, 4), True, [1] * 5),        # longer runs are the 4-wide rule's or scalar
    ((0, 1, 3), True, [1, 1, 1]),            # not consecutive
])
def test_runs_of_exactly_three_dwords_become_one_load(offsets, dwords, widths):
    from compiler.lower.loadmerge import merge_loads
    merged = merge_loads(_row_loads(offsets), 64, frozenset(),
                         frozenset({"x"}) if dwords else frozenset())
    loads = [s for s in walk(merged) if isinstance(s, Load)]
    assert [len(s.dsts) for s in loads] == widths
    assert sorted(d.name for s in loads for d in s.dsts) == sorted(f"r{o}" for o in offsets)


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc")
def test_average_pool_rows_are_dwordx3_in_ir_and_isa(tmp_path):
    """A 3x3 stride-1 average pool: three 3-wide loads per output in the IR, three
    global_load_dwordx3 in hipcc's ISA (gfx90a and gfx940), and the values of every
    legal schedule are numpy's (``test_pooling_kernels_match_numpy_under_every_schedule``)."""
    g = pool_graph("AveragePool", [1, 4, 10, 10], kernel_shape=[3, 3], strides=[1, 1])
    [d] = [d for d in fuse(g).dispatches if dispatch_kind(g, d) == "elementwise"
           and len(d.ops) > 1]
    k = lower(g, d, {"workgroup": 64, "vector": 1, "elems": 1, "order": "output"}, ARCH)
    assert sorted(len(s.dsts) for s in walk(k.body) if isinstance(s, Load)) == [1, 3, 3, 3]
    src = tmp_path / "k.hip"
    src.write_text(emit_kernel(k, ARCH))
    for target in ("gfx90a", "gfx940"):
        r = compile_to_asm(src, target, tmp_path / f"k_{target}.s")
        assert r["rc"] == 0, r["stderr"]
        loads = parse_asm((tmp_path / f"k_{target}.s").read_text())["widths"]["global_load"]
        assert loads.get(12) == 3, loads
