"""Every primitive op of the graph appears in every table that must know it: the numpy
reference, the kernel IR emitter, the IR's own op lists, the engine's compiler, the HIP
printer and the ONNX converter. Adding an op and forgetting one table fails here (the
files to touch are listed in CONTRIBUTING.md, which test_contributing keeps true)."""
import pytest

from codegen_hip.emit import emit_kernel
from compiler import graph as G
from compiler import reference
from compiler.frontends import onnx as onnx_frontend
from compiler.lower import lower
from compiler.lower.emitter import BINARY_IR, UNARY_IR
from compiler.passes import fuse
from gpusim import compile as gcompile
from gpusim import program as P

#: graph ops an ONNX model cannot produce, with the reason (the exception list is short
#: on purpose: a new op either gets a converter or a line here).
NOT_FROM_ONNX = {
    "rsqrt": "ONNX has no Rsqrt; an ONNX model spells it Reciprocal(Sqrt(x))",
}
#: how the HIP printer spells each IR unary function (the default is the C math name + f)
HIP_UNARY = {"neg": "(-", "relu": "fmaxf(", "recip": "(1.0f / ", "sigmoid": "expf(-"}


def onnx_produced() -> set:
    t = set(onnx_frontend._UNARY.values()) | set(onnx_frontend._BINARY.values())
    t |= set(onnx_frontend._VARIADIC.values()) | set(onnx_frontend._REDUCE.values())
    t |= set(onnx_frontend._COMPARE.values()) | set(onnx_frontend._LOGICAL.values())
    convs = {"MatMul": "matmul", "Conv": "conv2d", "Transpose": "transpose",
             "Reshape": "reshape", "Cast": "cast", "Not": "not", "Where": "select",
             "Slice": "slice", "Expand": "broadcast", "Gather": "gather", "Pad": "pad",
             "Concat": "concat"}
    t |= {op for name, op in convs.items() if name in onnx_frontend.CONVERTERS}
    return t


def test_every_elementwise_op_is_in_the_reference_and_the_ir():
    for k in G.UNARY:
        assert k in reference.UNARY_FUNCS, k
        assert UNARY_IR[k] in P.UNARY_OPS and UNARY_IR[k] in gcompile.UN, k
    for k in G.BINARY:
        assert k in reference.BINARY_FUNCS, k
        assert BINARY_IR[k] in P.BINARY_OPS and BINARY_IR[k] in gcompile.FBIN, k
    for k in G.REDUCE:
        assert k in reference.REDUCE_FUNCS, k
    assert set(UNARY_IR) == set(G.UNARY) and set(BINARY_IR) == set(G.BINARY)


def test_every_op_has_an_onnx_converter_or_a_stated_reason():
    ops = (set(G.ELEMENTWISE) | set(G.REDUCE) | set(G.VIEWS) | set(G.INJECTIVE)
           | {"matmul", "conv2d"})
    missing = ops - onnx_produced() - set(NOT_FROM_ONNX)
    assert not missing, f"no ONNX converter and no reason given for {sorted(missing)}"
    assert not set(NOT_FROM_ONNX) & onnx_produced(), "a listed exception now has a converter"


@pytest.mark.parametrize("kind", G.UNARY + G.BINARY)
def test_every_elementwise_op_prints_as_hip(kind):
    g = G.Graph(kind)
    x = g.input("x", (4, 64))
    y = g.unary(kind, x) if kind in G.UNARY else g.binary(kind, x, g.input("y", (4, 64)))
    g.output(y)
    d = fuse(g).dispatches[0]
    src = emit_kernel(lower(g, d, {"workgroup": 64, "vector": 1, "elems": 1,
                                   "order": "output"}))
    if kind in G.UNARY:
        ir = UNARY_IR[kind]
        assert HIP_UNARY.get(ir, f"{ir}f(") in src, (kind, src)
    else:
        assert any(s in src for s in (f" {P.BINARY_OPS[BINARY_IR[kind]]} ", "fmaxf(",
                                      "fminf(", "powf(")), (kind, src)


def _int_bool_and_injective_graphs():
    """One small graph per non-float or injective op (compare, logic, select, casts,
    slice, gather, pad, concat) and the HIP spelling its kernel must contain."""
    import numpy as np
    out = []
    for kind in G.COMPARE:
        g = G.Graph(kind)
        g.output(g.compare(kind, g.input("x", (4, 64)), g.input("y", (4, 64))))
        out.append((kind, g, f" {P.BINARY_OPS[kind]} "))
    for kind in G.LOGICAL:
        g = G.Graph(kind)
        g.output(g.binary(kind, g.input("x", (4, 64), "bool"), g.input("y", (4, 64), "bool")))
        out.append((kind, g, f" {P.BINARY_OPS[kind]} "))
    g = G.Graph("not")
    g.output(g.logical_not(g.input("x", (4, 64), "bool")))
    out.append(("not", g, "!"))
    g = G.Graph("select")
    g.output(g.select(g.input("c", (4, 64), "bool"), g.input("x", (4, 64)), g.input("y", (64,))))
    out.append(("select", g, " ? "))
    g = G.Graph("cast")
    g.output(g.cast(g.cast(g.input("x", (4, 64)), "i32"), "f32"))
    out.append(("cast", g, "(int)"))
    g = G.Graph("slice")
    g.output(g.relu(g.slice(g.input("x", (4, 64)), (1, 0), (1, 2), (3, 32))))
    out.append(("slice", g, "x["))
    g = G.Graph("gather")
    g.output(g.gather(g.constant(np.ones((10, 64), np.float32)), g.input("i", (4,), "i32")))
    out.append(("gather", g, "ld_i"))
    g = G.Graph("pad")
    g.output(g.pad(g.input("x", (4, 60)), ((0, 0), (2, 2)), -1.0))
    out.append(("pad", g, " ? "))
    g = G.Graph("concat")
    g.output(g.concat([g.input("x", (4, 32)), g.input("y", (4, 32))], 1))
    out.append(("concat", g, " ? "))
    return out


@pytest.mark.parametrize("kind,graph,spelling", _int_bool_and_injective_graphs(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_int_bool_and_injective_ops_print_as_hip(kind, graph, spelling):
    d = fuse(graph).dispatches[0]
    src = emit_kernel(lower(graph, d, {"workgroup": 64, "vector": 1, "elems": 1,
                                       "order": "output"}))
    assert spelling in src, (kind, src)
