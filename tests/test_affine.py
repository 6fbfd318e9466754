"""Closed-form offset tables (compiler.lower.affine) against the materialised tables."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.ir.graph import Graph
from compiler.lower import affine
from compiler.lower.contraction import Gemm
from compiler.lower.emitter import offset_table, vector_access
from compiler.lower.transpose import _contiguous_dim
from compiler.ir.models import load_model
from compiler.fusion import fuse


@st.composite
def view_chains(draw):
    """A tensor (maybe permuted layout) and a chain of transpose/reshape/broadcast views."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=rank,
                                max_size=rank)))
    layout = tuple(draw(st.permutations(range(rank))))
    g = Graph("chain")
    x = g.input("x", shape, layout=layout)
    v = x
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["transpose", "reshape", "broadcast", "slice"]))
        cur = v.shape
        if kind == "transpose":
            v = g.transpose(v, tuple(draw(st.permutations(range(len(cur))))))
        elif kind == "slice":
            starts = tuple(draw(st.integers(0, n - 1)) for n in cur)
            steps = tuple(draw(st.sampled_from([1, 2, -1])) for _ in cur)
            sizes = tuple(draw(st.integers(1, len(range(n)[s0::sp])))
                          for n, s0, sp in zip(cur, starts, steps))
            v = g.slice(v, starts, steps, sizes)
        elif kind == "reshape":
            n = math.prod(cur)
            divs = [d for d in range(1, n + 1) if n % d == 0]
            a = draw(st.sampled_from(divs))
            b = draw(st.sampled_from([d for d in range(1, n // a + 1) if (n // a) % d == 0]))
            new = (a, b, n // a // b)
            v = g.reshape(v, new)
        else:
            new = tuple(draw(st.sampled_from([s, 2] if s == 1 else [s])) for s in cur)
            if len(new) < 4 and draw(st.booleans()):
                new = (draw(st.sampled_from([1, 2, 3])),) + new
            v = g.broadcast(v, new)
    path = []
    t = v.name
    while t != "x":
        op = g.op(t)
        path.append(op)
        t = op.inputs[0]
    return g, list(reversed(path))


@settings(max_examples=150, deadline=None)
@given(view_chains(), st.sampled_from([1, 2, 4]))
def test_closed_form_answers_equal_the_table(chain, width):
    g, path = chain
    table = offset_table(g, "x", None, path)
    form = affine.of_path(g, "x", path)
    if form is None:  # a reshape strides cannot express: the caller uses the table
        return
    assert form.shape == table.shape
    assert np.array_equal(form.table(), table)
    unique = form.injective()
    if unique is not None:
        assert unique == (np.unique(table).size == table.size)
    if table.ndim:
        assert form.contiguous_dim() == _contiguous_dim(table)
    assert form.vector_access(width) == vector_access(table, width)


def test_separable_operand_analysis_equals_the_full_table():
    checked = 0
    for spec in ("attention:heads=2,seq=64,dim=32", "mlp", "encoder_layer"):
        g = load_model(spec)
        for d in fuse(g).dispatches:
            if g.op(d.root).kind != "matmul":
                continue
            gemm = Gemm(g, d)
            for opnd in (gemm.A, gemm.B):
                if not opnd.separable:
                    continue
                fast = (dict(opnd.max_vec), opnd.inner)
                opnd.separable = False
                opnd.analyse(gemm.batch)
                assert (dict(opnd.max_vec), opnd.inner) == fast, (spec, d.name, opnd.tensor)
                checked += 1
    assert checked >= 6


@settings(max_examples=150, deadline=None)
@given(view_chains())
def test_root_tables_in_closed_form_equal_the_materialised_ones(chain):
    """Fusion's root tables (compiler.fusion.layout) through the same view chains: the
    closed-form table, its permutation answer and the output-dim map equal numpy's."""
    from compiler.fusion import layout
    g, path = chain
    out = path[-1].name if path else "x"
    x = g.op("x").type
    tables = layout.root_tables(g, "x", {op.name for op in path})
    tab = tables[out]
    ref = np.arange(x.size).reshape(x.shape)
    for op in path:  # what the old, materialised tables were
        if op.kind == "transpose":
            ref = np.transpose(ref, op.attrs["perm"])
        elif op.kind == "reshape":
            ref = np.ascontiguousarray(ref).reshape(op.type.shape)
        elif op.kind == "slice":
            from compiler.ir.graph import slice_windows
            ref = ref[slice_windows(op.attrs)]
        else:
            ref = np.broadcast_to(ref, op.type.shape)
    assert np.array_equal(layout.as_array(tab), ref)
    flat = ref.reshape(-1)
    counted = ref.size == x.size and np.array_equal(np.sort(flat), np.arange(x.size))
    assert layout.is_permutation(tab, x.size) == counted
    assert layout.is_permutation(layout.as_array(tab), x.size) == counted


@settings(max_examples=150, deadline=None)
@given(view_chains())
def test_digit_form_equals_the_table(chain):
    """The mixed-radix form (a reshape merging dims not adjacent in memory) gives the
    materialised table whenever it exists, and exists wherever the strided form does."""
    g, path = chain
    table = offset_table(g, "x", None, path)
    form = affine.digits_of_path(g, "x", path)
    if affine.of_path(g, "x", path) is not None:
        assert form is not None
    if form is None:
        return
    assert form.shape == table.shape
    assert np.array_equal(form.table(), table)


def test_attention_output_heads_merge_is_a_digit_form():
    """(heads, seq, dim) -> (seq, heads, dim) -> (seq, heads * dim): no strides express it
    (``of_path`` is None); its digits are the head at seq * dim, the head dim at 1."""
    g = Graph("heads")
    x = g.input("x", (1, 12, 128, 64))
    v = g.reshape(g.transpose(x, (0, 2, 1, 3)), (1, 128, 768))
    path = [g.op(v.name).inputs[0], v.name]
    path = [g.op(n) for n in path]
    assert affine.of_path(g, "x", path) is None
    form = affine.digits_of_path(g, "x", path)
    assert form.digits[1:] == (((128, 64),), ((12, 128 * 64), (64, 1)))
    ref = np.arange(12 * 128 * 64).reshape(1, 12, 128, 64).transpose(0, 2, 1, 3)
    assert np.array_equal(form.table(), ref.reshape(1, 128, 768))
