"""The op tables agree: every graph op (compiler/ir/ops.py ``OPS``) has its numpy function,
its IR operator in the IR table (gpusim/program.py ``IR_UNARY``/``IR_BINARY``), an error
propagation rule (compiler/ir/errorbound.py ``RULES``, which ``verify`` needs), and an
ONNX converter or a stated reason; every IR operator has an engine opcode that the
engine evaluates and a HIP spelling that the printer uses. Adding an op and forgetting a
part fails here (the files to touch are listed in CONTRIBUTING.md, which
test_contributing keeps true)."""
import ast
import inspect

import pytest

from codegen_hip.emit import emit_kernel
from compiler.ir import graph as graph_ir
from compiler.ir import errorbound, reference
from compiler.frontends import onnx as onnx_frontend
from compiler.lower import lower
from compiler.lower.emitter import BINARY_IR, UNARY_IR
from compiler.ir.ops import CATEGORIES, OPS
from compiler.fusion import fuse
from gpusim import compile as gcompile
from gpusim import engine
from gpusim import program

#: graph ops an ONNX model cannot produce, with the reason (the exception list is short
#: on purpose: a new op either gets a converter or a line here).
NOT_FROM_ONNX = {
    "rsqrt": "ONNX has no Rsqrt; an ONNX model spells it Reciprocal(Sqrt(x))",
}


def onnx_produced() -> set:
    t = set(onnx_frontend._UNARY.values()) | set(onnx_frontend._BINARY.values())
    t |= set(onnx_frontend._VARIADIC.values()) | set(onnx_frontend._REDUCE.values())
    t |= set(onnx_frontend._COMPARE.values()) | set(onnx_frontend._LOGICAL.values())
    convs = {"MatMul": "matmul", "Conv": "conv2d", "Transpose": "transpose",
             "Reshape": "reshape", "Cast": "cast", "Not": "not", "Where": "select",
             "Slice": "slice", "Expand": "broadcast", "Gather": "gather", "Pad": "pad",
             "Concat": "concat", "Mod": "fmod"}
    t |= {op for name, op in convs.items() if name in onnx_frontend.CONVERTERS}
    return t


def test_every_graph_op_has_its_category_rule_and_numpy_function():
    for k, spec in OPS.items():
        assert spec.category in CATEGORIES, k
        if spec.category in ("unary", "binary", "compare", "logical", "reduce"):
            assert callable(spec.numpy), k
        elif spec.numpy is None:
            assert spec.note, f"{k}: no numpy function and no note saying where it is evaluated"
    for k in graph_ir.UNARY:
        assert reference.UNARY_FUNCS[k] is OPS[k].numpy, k
    for k in graph_ir.BINARY:
        assert reference.BINARY_FUNCS[k] is OPS[k].numpy, k
    for k in graph_ir.REDUCE:
        assert reference.REDUCE_FUNCS[k] is OPS[k].numpy, k
    assert set(UNARY_IR) == set(graph_ir.UNARY) and set(BINARY_IR) == set(graph_ir.BINARY)


def test_every_graph_op_has_an_error_propagation_rule():
    """``verify`` propagates a rounding-error scale through every op; a missing rule
    would crash it on the first graph using the op."""
    assert set(errorbound.RULES) == set(OPS), (
        f"no rule: {sorted(set(OPS) - set(errorbound.RULES))}; "
        f"rule for no op: {sorted(set(errorbound.RULES) - set(OPS))}")
    import numpy as np
    x = np.linspace(0.5, 2.0, 8)
    for k in graph_ir.UNARY:   # the unary rule's two per-op tables: own rounding and derivative
        if errorbound.RULES[k] == "step":  # round: whole-number results (errorbound._step)
            assert errorbound._step(x, x, 3.0, half=True).shape == x.shape, k
            continue
        assert errorbound.RULES[k] == "unary", k
        assert k in errorbound._UNARY_ROUNDING, k
        assert np.all(np.isfinite(errorbound._derivative(k, x))), k
    for k in graph_ir.BINARY:
        assert errorbound.RULES[k] == "binary", k
        assert errorbound._binary(k, x, x, x, x, x).shape == x.shape, k
    for k in graph_ir.COMPARE + graph_ir.LOGICAL + ("not",):
        assert errorbound.RULES[k] == "exact", k


def test_every_reduction_has_a_combine_in_the_lowering():
    """The reduction lowering's per-op table: how two partials of each reduce op combine
    (an IR binary operator) and, across lanes, which wave reduction does it."""
    from compiler.lower import reduction
    assert set(reduction.COMBINE) == set(graph_ir.REDUCE)
    for k, combine in reduction.COMBINE.items():
        assert combine in program.IR_BINARY, k
        assert combine in reduction.LANE_KIND, k


def test_every_graph_ops_ir_operator_is_in_the_ir_table():
    for k, spec in OPS.items():
        if spec.ir is None:
            continue
        table = program.IR_UNARY if spec.arity == 1 else program.IR_BINARY
        assert spec.ir in table, f"{k} lowers to {spec.ir!r}, which the IR does not have"
    for k in graph_ir.UNARY + graph_ir.BINARY + graph_ir.COMPARE + graph_ir.LOGICAL + ("not",):
        assert OPS[k].ir is not None, f"{k} has no IR operator"


def _engine_branches(fn) -> tuple:
    """The opcode constants ``fn`` tests (``op == NAME``) and whether its last statement
    evaluates an operator (a fall-through branch) rather than returning a default."""
    tree = ast.parse(inspect.getsource(fn))
    names = {n.comparators[0].id for n in ast.walk(tree) if isinstance(n, ast.Compare)
             and isinstance(n.left, ast.Name) and n.left.id == "op"
             and isinstance(n.comparators[0], ast.Name)}
    last = tree.body[0].body[-1]
    default = isinstance(last, ast.Return) and (
        isinstance(last.value, ast.Constant) or isinstance(last.value, ast.Attribute))
    return names, not default


def _evaluated(fn, prefix: str, code: int) -> bool:
    """Whether the engine function ``fn`` has a branch for opcode ``code``: a test of its
    constant, or the one fall-through of a function with no default."""
    consts = {v: k for k, v in vars(engine).items() if k.startswith(prefix) and isinstance(v, int)}
    names, falls_through = _engine_branches(fn)
    if consts[code] in names:
        return True
    untested = [n for n in consts.values() if n not in names]
    return falls_through and untested == [consts[code]]


@pytest.mark.parametrize("name", list(program.IR_BINARY) + list(program.IR_UNARY))
def test_every_ir_operator_has_an_engine_branch_and_a_hip_spelling(name):
    if name in program.IR_BINARY:
        o = program.IR_BINARY[name]
        fns = {"arith": [(engine.fbin, "B_"), (engine.ibin, "B_")], "float": [(engine.fbin, "B_")],
               "int": [(engine.ibin, "B_")], "cmp": [(engine.fcmp, "C_")]}[o.kind]
        assert "{a}" in o.hip and "{b}" in o.hip, name
    else:
        o = program.IR_UNARY[name]
        fns = {"float": [(engine.fun, "U_")], "any": [(engine.fun, "U_"), (engine.iun, "U_")],
               "truth": [(engine.iun, "U_")]}[o.kind]
        assert "{a}" in o.hip, name
    for fn, prefix in fns:
        assert _evaluated(fn, prefix, o.engine), f"engine.{fn.__name__} has no branch for {name}"
    if name in program.IR_UNARY:
        assert gcompile.UN[name] == o.engine
    else:
        assert gcompile.FBIN.get(name) == (o.engine if o.kind in ("arith", "float") else None)
        assert gcompile.IBIN.get(name) == (o.engine if o.kind in ("arith", "int") else None)
        assert gcompile.CMP.get(name) == (o.engine if o.kind == "cmp" else None)


def test_engine_opcodes_are_distinct_per_family():
    for fam in ({k: o for k, o in program.IR_BINARY.items() if o.kind != "cmp"},
                {k: o for k, o in program.IR_BINARY.items() if o.kind == "cmp"}, program.IR_UNARY):
        codes = {}
        for k, o in fam.items():
            codes.setdefault(o.engine, []).append(k)
        shared = {c: ks for c, ks in codes.items() if len(ks) > 1}
        # floordiv is div on the (non-negative) i32 operands it is used for
        assert all(sorted(ks) == ["div", "floordiv"] for ks in shared.values()), shared


def test_every_op_has_an_onnx_converter_or_a_stated_reason():
    ops = (set(graph_ir.ELEMENTWISE) | set(graph_ir.REDUCE) | set(graph_ir.VIEWS) | set(graph_ir.INJECTIVE)
           | {"matmul", "conv2d"})
    missing = ops - onnx_produced() - set(NOT_FROM_ONNX)
    assert not missing, f"no ONNX converter and no reason given for {sorted(missing)}"
    assert not set(NOT_FROM_ONNX) & onnx_produced(), "a listed exception now has a converter"


@pytest.mark.parametrize("kind", graph_ir.UNARY + graph_ir.BINARY)
def test_every_elementwise_op_prints_as_hip(kind):
    g = graph_ir.Graph(kind)
    x = g.input("x", (4, 64))
    y = g.unary(kind, x) if kind in graph_ir.UNARY else g.binary(kind, x, g.input("y", (4, 64)))
    g.output(y)
    d = fuse(g).dispatches[0]
    src = emit_kernel(lower(g, d, {"workgroup": 64, "vector": 1, "elems": 1,
                                   "order": "output"}))
    o = program.IR_UNARY[UNARY_IR[kind]] if kind in graph_ir.UNARY else program.IR_BINARY[BINARY_IR[kind]]
    assert all(p in src for p in _pieces(o, "f32")), (kind, src)


def _pieces(o, dtype: str) -> list:
    """The literal text of an IR operator's HIP spelling around its operands."""
    t = o.hip_int if dtype == "i32" and o.hip_int else o.hip
    return [p for p in t.replace("{b}", "{a}").split("{a}") if p]


def _int_bool_and_injective_graphs():
    """One small graph per non-float or injective op (compare, logic, select, casts,
    slice, gather, pad, concat) and the HIP spelling its kernel must contain."""
    import numpy as np
    out = []
    for kind in graph_ir.COMPARE:
        g = graph_ir.Graph(kind)
        g.output(g.compare(kind, g.input("x", (4, 64)), g.input("y", (4, 64))))
        out.append((kind, g, _pieces(program.IR_BINARY[OPS[kind].ir], "i32")[1]))
    for kind in graph_ir.LOGICAL:
        g = graph_ir.Graph(kind)
        g.output(g.binary(kind, g.input("x", (4, 64), "bool"), g.input("y", (4, 64), "bool")))
        out.append((kind, g, _pieces(program.IR_BINARY[OPS[kind].ir], "i32")[1]))
    g = graph_ir.Graph("not")
    g.output(g.logical_not(g.input("x", (4, 64), "bool")))
    out.append(("not", g, "!"))
    g = graph_ir.Graph("select")
    g.output(g.select(g.input("c", (4, 64), "bool"), g.input("x", (4, 64)), g.input("y", (64,))))
    out.append(("select", g, " ? "))
    g = graph_ir.Graph("cast")
    g.output(g.cast(g.cast(g.input("x", (4, 64)), "i32"), "f32"))
    out.append(("cast", g, "(int)"))
    g = graph_ir.Graph("slice")
    g.output(g.relu(g.slice(g.input("x", (4, 64)), (1, 0), (1, 2), (3, 32))))
    out.append(("slice", g, "x["))
    g = graph_ir.Graph("gather")
    g.output(g.gather(g.constant(np.ones((10, 64), np.float32)), g.input("i", (4,), "i32")))
    out.append(("gather", g, "ld_i"))
    g = graph_ir.Graph("pad")
    g.output(g.pad(g.input("x", (4, 60)), ((0, 0), (2, 2)), -1.0))
    out.append(("pad", g, " ? "))
    g = graph_ir.Graph("concat")
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
