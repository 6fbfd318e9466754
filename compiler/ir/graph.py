"""The tensor dataflow graph: primitive ops on a networkx.DiGraph.

Nodes are ops; an edge ``producer -> consumer`` carries the producer's tensor. Every op
has exactly one result. Each node stores an :class:`Op` under the ``"op"`` attribute;
``Op.inputs`` keeps the operand order (``x * x`` has one edge but two operands).

Tensors have a logical shape, a dtype (``f32``, ``f16``, ``i32`` or ``bool``) and a *layout*: the order of
the dimensions in memory, outermost first. ``(0, 1, 2, 3)`` is row-major; a logical NHWC
tensor stored as NCHW has layout ``(0, 3, 1, 2)``. Layouts decide coalescing later, so
graph inputs and constants may declare any layout. Simplification: every computed tensor
is produced row-major in its logical shape; a different memory order is written only by
a graph input, a constant, or the compiler's own schedules.

Integer and bool tensors are first-class values (embedding indices, attention masks,
comparison results); ONNX's int64 is narrowed to ``i32`` at import (simplification: index
values are assumed to fit 32 bits, which every tensor the hardware can address does).
Besides elementwise math, reductions, contractions and views there are the *injective*
ops ``gather``, ``pad`` and ``concat``: each output element reads one element chosen by
its index (or a constant), so they fuse like elementwise ops but are not pointwise.

Shapes, dtypes and layouts are inferred when a node is added; a bad operation raises a
:class:`GraphError` naming the node and the reason, before the graph changes.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from compiler.ir.ops import OPS, of

#: bf16 has no numpy dtype: its values are held in float32 arrays, each rounded to the
#: nearest bfloat16 (ties to even) wherever a value of a bf16 tensor is made (``to_dtype``:
#: a constant, a graph input, every op result of the reference), 2 bytes in memory
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i32": np.int32,
          "bool": np.bool_}
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "bool": 1}
FLOAT_DTYPES = ("f32", "f16", "bf16")


def round_bf16(a) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even, NaN kept, overflow to
    inf), still float32: the upper 16 bits of each after adding 0x7FFF plus the lowest
    kept bit. The simulator's scalar form of the same rule is ``gpusim.engine.round_bf16``
    and the HIP kernels' is ``wf_float_to_bf16`` (codegen_hip.emit)."""
    a = np.ascontiguousarray(a, np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    kept = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return np.where(np.isnan(a), a, kept.view(np.float32))


def to_dtype(arr, dtype: str) -> np.ndarray:
    """``arr`` as the array that holds a ``dtype`` tensor (bf16: float32, rounded)."""
    with np.errstate(all="ignore"):
        out = np.asarray(arr).astype(DTYPES[dtype], copy=False)
    return round_bf16(out) if dtype == "bf16" else out

#: per-category views of the op table (compiler/ir/ops.py: one entry per primitive op)
UNARY = of("unary")
#: unary ops defined on integers as well as floats (the rest need a float operand)
INT_UNARY = tuple(k for k in UNARY if OPS[k].ints)
BINARY = of("binary")
COMPARE = of("compare")   # same-dtype operands -> bool
LOGICAL = of("logical")   # bool operands -> bool
ELEMENTWISE = UNARY + BINARY + COMPARE + LOGICAL + of("elementwise")
REDUCE = of("reduce")
VIEWS = of("view")
INJECTIVE = of("injective")


class GraphError(Exception):
    """Any problem with a graph or its construction: the message names the node."""


class ModelError(GraphError):
    """Unknown model, bad parameter or unreadable model file."""


class ShapeError(GraphError):
    """Operand shapes that do not fit the op."""


class UnsupportedError(GraphError):
    """An op, dtype or attribute this compiler does not handle."""


@dataclass(frozen=True)
class TensorType:
    shape: tuple
    dtype: str = "f32"
    layout: tuple | None = None  # None means row-major

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.dtype not in DTYPES:
            raise UnsupportedError(f"dtype {self.dtype!r} is not supported; use "
                                   f"{', '.join(DTYPES)}")
        if any(s <= 0 for s in self.shape):
            raise ShapeError(f"shape {self.shape} has a non-positive dimension")
        if self.layout is not None:
            lay = tuple(int(d) for d in self.layout)
            if sorted(lay) != list(range(len(self.shape))):
                raise ShapeError(f"layout {lay} is not a permutation of the {len(self.shape)} "
                                 f"dimensions of shape {self.shape}")
            object.__setattr__(self, "layout", None if lay == tuple(range(len(lay))) else lay)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def order(self) -> tuple:
        """Dimension order in memory, outermost first."""
        return self.layout if self.layout is not None else tuple(range(self.rank))

    @property
    def strides(self) -> tuple:
        """Element strides of each logical dimension for this layout."""
        strides = [0] * self.rank
        step = 1
        for d in reversed(self.order):
            strides[d] = step
            step *= self.shape[d]
        return tuple(strides)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]

    @property
    def is_row_major(self) -> bool:
        return self.layout is None

    def __str__(self):
        lay = "" if self.layout is None else f" layout={list(self.layout)}"
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]{lay}"


@dataclass(frozen=True)
class Op:
    """One primitive op: its kind, operand node names, attributes and result type."""
    name: str
    kind: str
    inputs: tuple
    attrs: dict = field(default_factory=dict, hash=False, compare=False)
    type: TensorType = None

    @property
    def is_elementwise(self) -> bool:
        return self.kind in ELEMENTWISE

    @property
    def is_reduction(self) -> bool:
        return self.kind in REDUCE

    @property
    def is_contraction(self) -> bool:
        return self.kind in ("matmul", "conv2d")

    @property
    def is_view(self) -> bool:
        return self.kind in VIEWS

    @property
    def is_injective(self) -> bool:
        """gather/pad/concat: each element copies one chosen element (or the pad value)."""
        return self.kind in INJECTIVE


class Value:
    """A handle on a node's result, so graphs read like numpy (``g.exp(x - m)``)."""

    def __init__(self, graph: "Graph", name: str):
        self.graph = graph
        self.name = name

    @property
    def type(self) -> TensorType:
        return self.graph.op(self.name).type

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __add__(self, o): return self.graph.add(self, o)
    def __radd__(self, o): return self.graph.add(o, self)
    def __sub__(self, o): return self.graph.sub(self, o)
    def __rsub__(self, o): return self.graph.sub(o, self)
    def __mul__(self, o): return self.graph.mul(self, o)
    def __rmul__(self, o): return self.graph.mul(o, self)
    def __truediv__(self, o): return self.graph.div(self, o)
    def __rtruediv__(self, o): return self.graph.div(o, self)
    def __neg__(self): return self.graph.neg(self)
    def __matmul__(self, o): return self.graph.matmul(self, o)

    def __repr__(self):
        return f"Value({self.name}: {self.type})"


def is_compute(op: "Op") -> bool:
    """An op that a dispatch computes: not a graph input or constant, not a view."""
    return op.kind not in ("input", "constant") and not op.is_view


def shared_iteration(out_shapes, root_shape: tuple):
    """The iteration space of an elementwise walk that writes outputs of ``out_shapes``
    from a root of ``root_shape``, or why there is none: the largest output's shape
    (the root's when that output is a view of the root with as many elements), which
    every other output matches, broadcasts against, or holds as many elements as (a
    view). The elementwise lowering walks it; fusion and both baselines write a view
    output in its producer's dispatch only when it exists."""
    shape = tuple(max(out_shapes, key=math.prod))
    if math.prod(root_shape) == math.prod(shape):
        shape = tuple(root_shape)
    for t in out_shapes:
        fits = len(t) <= len(shape) and all(
            s in (1, f) for s, f in zip(t, shape[len(shape) - len(t):]))
        if not fits and math.prod(t) != math.prod(shape):
            return f"outputs of shapes {tuple(t)} and {shape} share no iteration space"
    return shape


def writes_view_in_place(g: "Graph", src: str, out: str) -> bool:
    """Can the elementwise dispatch of ``src`` also write the graph output ``out``, a
    view of ``src``? Not when no walk covers both (a slice, or a broadcast that
    repeats ``src`` along a dim it does not have): then a copy dispatch writes it."""
    shape = g.op(src).type.shape
    return isinstance(shared_iteration([shape, g.op(out).type.shape], shape), tuple)


def is_identity_view(op: "Op", g: "Graph") -> bool:
    """A view that moves no element (same shape, identity permutation)."""
    if op.kind == "transpose":
        return tuple(op.attrs["perm"]) == tuple(range(len(op.attrs["perm"])))
    if op.kind == "slice":  # the same shape read reversed is not the identity
        return (op.type.shape == g.op(op.inputs[0]).type.shape
                and not any(op.attrs["starts"]) and all(s == 1 for s in op.attrs["steps"]))
    return op.type.shape == g.op(op.inputs[0]).type.shape


def live_ops(graph: "Graph") -> set:
    """Ops some graph output depends on; the rest is dead code and gets no dispatch."""
    live = set(graph.outputs)
    for o in graph.outputs:
        live |= nx.ancestors(graph.g, o)
    return live


def broadcast_shapes(a: tuple, b: tuple, where: str) -> tuple:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"{where}: shapes {a} and {b} do not broadcast") from None


class Graph:
    """A tensor dataflow graph of primitive ops, with ordered outputs."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.g = nx.DiGraph()
        self.outputs: list[str] = []
        self._counter = itertools.count()
        self._order: dict[str, int] = {}
        # Provenance that is not part of the computation (a frontend records the source
        # file and its tensor names here so results can be checked against the original).
        self.meta: dict = {}
        # i32 tensors stored one byte per element: name -> "i8" | "u8" (``set_byte_storage``)
        self.byte_tensors: dict[str, str] = {}

    # --------------------------------------------------------------------- structure
    def op(self, name: str) -> Op:
        return self.g.nodes[name]["op"]

    @property
    def ops(self) -> list[Op]:
        return [self.op(n) for n in self.topo_order()]

    def __len__(self):
        return self.g.number_of_nodes()

    def __getstate__(self):
        """Pickled (for a worker or a cluster) without the lowering's per-dispatch
        analyses (``compiler.lower.contraction.analysed_gemm``): a cache, rebuilt there."""
        state = dict(self.__dict__)
        state.pop("_analysed_gemms", None)
        return state

    def __contains__(self, name):
        return name in self.g

    # ---------------------------------------------------------------- byte storage
    def set_byte_storage(self, name: str, storage: str) -> None:
        """Stores the i32 tensor ``name`` one byte per element in memory, ``storage`` "i8"
        (int8: [-128, 127]) or "u8" (uint8: [0, 255]). The caller vouches that every
        element lies in that range (an exporter's int8/uint8 tensor: a graph input of that
        type, a QuantizeLinear result, an int8 weight); registers stay i32, a kernel
        widens on load and keeps the low byte on store (gpusim ``store_elem``)."""
        if storage not in ("i8", "u8"):
            raise GraphError(f"byte storage {storage!r} of {name!r}: use i8 or u8")
        if self.op(name).type.dtype != "i32":
            raise GraphError(f"byte storage of {name!r}: only i32 tensors hold 8-bit values, "
                             f"it is {self.op(name).type.dtype}")
        self.byte_tensors[name] = storage

    def byte_storage(self, name: str) -> str | None:
        """"i8"/"u8" when tensor ``name`` is stored one byte per element (a view of such a
        tensor too: the same elements), else None."""
        bt = getattr(self, "byte_tensors", None)
        if not bt:
            return None
        while True:
            if name in bt:
                return bt[name]
            op = self.op(name)
            if not (op.is_view and op.inputs) or op.type.dtype != "i32":
                return None
            name = op.inputs[0]

    def tensor_bytes(self, name: str) -> int:
        """The bytes tensor ``name`` takes in memory (one per element when byte-stored)."""
        t = self.op(name).type
        return t.size if self.byte_storage(name) else t.nbytes

    @property
    def inputs(self) -> list[str]:
        return [n for n in self.topo_order() if self.op(n).kind == "input"]

    def view_chain(self, name: str) -> tuple[str, list[str]]:
        """(the tensor a view chain starts from, the views from ``name`` inwards): what a
        graph output that is only a view of another tensor needs written."""
        chain, n = [], name
        while self.op(n).is_view:
            chain.append(n)
            n = self.op(n).inputs[0]
        return n, chain

    def users(self, name: str) -> list[str]:
        return sorted(self.g.successors(name), key=self._order.__getitem__)

    def topo_order(self) -> list[str]:
        """Deterministic topological order (insertion order breaks ties)."""
        try:
            return list(nx.lexicographical_topological_sort(self.g, key=self._order.__getitem__))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(self.g)
            raise GraphError(f"graph {self.name!r} has a cycle through "
                             f"{' -> '.join(u for u, _ in cycle)}; dataflow graphs must be "
                             f"acyclic") from None

    def _fresh(self, base: str) -> str:
        while True:
            name = f"{base}_{next(self._counter)}"
            if name not in self.g:
                return name

    def _name(self, v) -> str:
        if isinstance(v, Value):
            if v.graph is not self:
                raise GraphError(f"value {v.name!r} belongs to another graph")
            return v.name
        if isinstance(v, str):
            if v not in self.g:
                raise GraphError(f"graph {self.name!r} has no node {v!r}")
            return v
        raise GraphError(f"expected a graph value, got {type(v).__name__}")

    def add_op(self, kind: str, inputs, attrs=None, type: TensorType = None,
               name: str | None = None) -> Value:
        """Adds a node after inferring its type; nothing changes when inference fails."""
        attrs = dict(attrs or {})
        ins = tuple(self._name(i) for i in inputs)
        name = name or self._fresh(kind)
        if name in self.g:
            raise GraphError(f"node name {name!r} is already used in graph {self.name!r}")
        in_types = [self.op(i).type for i in ins]
        if type is None:
            type = infer_type(kind, in_types, attrs, name)
        op = Op(name, kind, ins, attrs, type)
        self.g.add_node(name, op=op)
        self._order[name] = len(self._order)
        for i in ins:
            self.g.add_edge(i, name, tensor=self.op(i).type)
        return Value(self, name)

    def rename(self, old: str, new: str) -> None:
        """Gives node ``old`` the name ``new`` (frontends keep their tensor names)."""
        if new == old:
            return
        if new in self.g:
            raise GraphError(f"node name {new!r} is already used in graph {self.name!r}")
        self._name(old)
        nx.relabel_nodes(self.g, {old: new}, copy=False)
        op = self.op(new)
        self.g.nodes[new]["op"] = Op(new, op.kind, op.inputs, op.attrs, op.type)
        for u in self.g.successors(new):
            uop = self.op(u)
            self.g.nodes[u]["op"] = Op(uop.name, uop.kind,
                                       tuple(new if i == old else i for i in uop.inputs),
                                       uop.attrs, uop.type)
        self._order[new] = self._order.pop(old)
        self.outputs = [new if o == old else o for o in self.outputs]
        if old in self.byte_tensors:
            self.byte_tensors[new] = self.byte_tensors.pop(old)

    # ------------------------------------------------------------------- leaves
    def input(self, name: str, shape, dtype: str = "f32", layout=None) -> Value:
        t = TensorType(shape, dtype, layout)
        return self.add_op("input", (), {}, t, name=name)

    def constant(self, value, name: str | None = None, dtype: str | None = None,
                 layout=None) -> Value:
        arr = np.asarray(value)
        if dtype is None:
            dtype = {np.dtype(np.float16): "f16", np.dtype(np.bool_): "bool"}.get(
                arr.dtype, "i32" if arr.dtype.kind in "iu" else "f32")
        arr = np.ascontiguousarray(to_dtype(arr, dtype))
        t = TensorType(arr.shape if arr.ndim else (1,), dtype, layout)
        arr = arr.reshape(t.shape)
        return self.add_op("constant", (), {"value": arr}, t, name=name or self._fresh("const"))

    def output(self, *values) -> None:
        for v in values:
            n = self._name(v)
            if n not in self.outputs:
                self.outputs.append(n)

    def _scalar_or_value(self, x, like: Value) -> Value:
        if isinstance(x, (int, float)):
            return self.constant(np.array([x], dtype=DTYPES[like.dtype]), dtype=like.dtype)
        return x

    # ---------------------------------------------------------------- elementwise
    def unary(self, kind, x, name=None) -> Value:
        return self.add_op(kind, (x,), name=name)

    def binary(self, kind, a, b, name=None) -> Value:
        if not isinstance(a, Value) and isinstance(b, Value):
            a = self._scalar_or_value(a, b)
        elif isinstance(a, Value):
            b = self._scalar_or_value(b, a)
        return self.add_op(kind, (a, b), name=name)

    def neg(self, x, name=None): return self.unary("neg", x, name)
    def exp(self, x, name=None): return self.unary("exp", x, name)
    def log(self, x, name=None): return self.unary("log", x, name)
    def sqrt(self, x, name=None): return self.unary("sqrt", x, name)
    def rsqrt(self, x, name=None): return self.unary("rsqrt", x, name)
    def tanh(self, x, name=None): return self.unary("tanh", x, name)
    def erf(self, x, name=None): return self.unary("erf", x, name)
    def relu(self, x, name=None): return self.unary("relu", x, name)
    def sigmoid(self, x, name=None): return self.unary("sigmoid", x, name)
    def reciprocal(self, x, name=None): return self.unary("reciprocal", x, name)
    def round(self, x, name=None): return self.unary("round", x, name)  # half to even
    def sin(self, x, name=None): return self.unary("sin", x, name)
    def cos(self, x, name=None): return self.unary("cos", x, name)
    def floor(self, x, name=None): return self.unary("floor", x, name)
    def ceil(self, x, name=None): return self.unary("ceil", x, name)
    def add(self, a, b, name=None): return self.binary("add", a, b, name)
    def sub(self, a, b, name=None): return self.binary("sub", a, b, name)
    def mul(self, a, b, name=None): return self.binary("mul", a, b, name)
    def div(self, a, b, name=None): return self.binary("div", a, b, name)
    def max(self, a, b, name=None): return self.binary("max", a, b, name)
    def min(self, a, b, name=None): return self.binary("min", a, b, name)
    def pow(self, a, b, name=None): return self.binary("pow", a, b, name)
    def fmod(self, a, b, name=None): return self.binary("fmod", a, b, name)  # floats

    def cast(self, x, dtype: str, name=None) -> Value:
        return self.add_op("cast", (x,), {"dtype": dtype}, name=name)

    def compare(self, kind, a, b, name=None) -> Value:
        """eq/lt/gt/le/ge of two same-dtype tensors: a bool tensor."""
        return self.binary(kind, a, b, name)

    def logical_not(self, x, name=None) -> Value:
        return self.add_op("not", (x,), name=name)

    def select(self, cond, a, b, name=None) -> Value:
        """``cond ? a : b`` elementwise (ONNX Where), all three broadcast together."""
        return self.add_op("select", (cond, a, b), name=name)

    # ---------------------------------------------------------------- injective ops
    def gather(self, data, indices, axis: int = 0, name=None) -> Value:
        """``np.take(data, indices, axis)`` with ONNX's negative-index wrap."""
        return self.add_op("gather", (data, indices), {"axis": int(axis)}, name=name)

    def pad(self, x, pads, value: float = 0.0, name=None) -> Value:
        """Constant padding: ``pads`` is ((before, after), ...) per dimension, >= 0."""
        pads = tuple((int(a), int(b)) for a, b in pads)
        return self.add_op("pad", (x,), {"pads": pads, "value": float(value)}, name=name)

    def concat(self, xs, axis: int, name=None) -> Value:
        return self.add_op("concat", tuple(xs), {"axis": int(axis)}, name=name)
    # ---------------------------------------------------------------- reductions
    def reduce(self, kind, x, axes, keepdims=True, name=None) -> Value:
        return self.add_op(kind, (x,), {"axes": axes, "keepdims": bool(keepdims)}, name=name)

    def reduce_sum(self, x, axes=-1, keepdims=True, name=None):
        return self.reduce("reduce_sum", x, axes, keepdims, name)

    def reduce_max(self, x, axes=-1, keepdims=True, name=None):
        return self.reduce("reduce_max", x, axes, keepdims, name)

    def reduce_mean(self, x, axes=-1, keepdims=True, name=None):
        return self.reduce("reduce_mean", x, axes, keepdims, name)

    # ---------------------------------------------------------------- contractions
    def matmul(self, a, b, name=None) -> Value:
        return self.add_op("matmul", (a, b), name=name)

    def conv2d(self, x, w, *, data_format="NCHW", stride=(1, 1), padding=(0, 0, 0, 0),
               dilation=(1, 1), groups=1, name=None) -> Value:
        """2-D convolution. NCHW: x (N,C,H,W), w (O,C/g,kH,kW). NHWC: x (N,H,W,C),
        w (O,kH,kW,C/g) (KYXC, the filter layout of NHWC convolutions). padding is
        (top, left, bottom, right)."""
        attrs = {"data_format": data_format, "stride": tuple(stride), "padding": tuple(padding),
                 "dilation": tuple(dilation), "groups": int(groups)}
        return self.add_op("conv2d", (x, w), attrs, name=name)

    # ---------------------------------------------------------------- views and copies
    def transpose(self, x, perm, name=None) -> Value:
        return self.add_op("transpose", (x,), {"perm": tuple(int(p) for p in perm)}, name=name)

    def reshape(self, x, shape, name=None) -> Value:
        return self.add_op("reshape", (x,), {"shape": tuple(int(s) for s in shape)}, name=name)

    def broadcast(self, x, shape, name=None) -> Value:
        return self.add_op("broadcast", (x,), {"shape": tuple(int(s) for s in shape)}, name=name)

    def slice(self, x, starts, steps, shape, name=None) -> Value:
        """A strided window (a view): result[i] = x[starts + i * steps] per dimension, of
        the given result ``shape``; steps may be negative (a reversal)."""
        return self.add_op("slice", (x,), {"starts": tuple(int(s) for s in starts),
                                           "steps": tuple(int(s) for s in steps),
                                           "shape": tuple(int(s) for s in shape)}, name=name)

    # ---------------------------------------------------------------- checks
    def validate(self) -> None:
        """Raises GraphError for cycles, missing outputs or stale types."""
        order = self.topo_order()
        if not self.outputs:
            raise GraphError(f"graph {self.name!r} has no outputs; call graph.output(...)")
        for n in order:
            op = self.op(n)
            if op.kind in ("input", "constant"):
                continue
            expect = infer_type(op.kind, [self.op(i).type for i in op.inputs], op.attrs, n)
            if expect.shape != op.type.shape or expect.dtype != op.type.dtype:
                raise ShapeError(f"node {n!r}: stored type {op.type} disagrees with inferred "
                                 f"{expect}")

    def __repr__(self):
        return f"Graph({self.name!r}, {len(self)} ops, outputs={self.outputs})"


def slice_windows(attrs: dict) -> tuple:
    """The Python slices a ``slice`` view's attributes select (one per dimension)."""
    out = []
    for start, step, n in zip(attrs["starts"], attrs["steps"], attrs["shape"]):
        stop = start + (n - 1) * step + (1 if step > 0 else -1)
        out.append(slice(start, stop if stop >= 0 else None, step))
    return tuple(out)


# ----------------------------------------------------------------------- type inference
def _norm_axes(axes, rank, where):
    if axes is None:
        axes = tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ShapeError(f"{where}: axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"{where}: repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def _conv_out(size, k, stride, pad0, pad1, dil, where):
    out = (size + pad0 + pad1 - dil * (k - 1) - 1) // stride + 1
    if out <= 0:
        raise ShapeError(f"{where}: kernel {k} (dilation {dil}) does not fit input {size} "
                         f"with padding {pad0}+{pad1}")
    return out


def infer_type(kind: str, ins: list, attrs: dict, where: str) -> TensorType:
    """Result type of an op; raises GraphError naming ``where`` when operands do not fit."""
    where = f"node {where!r} ({kind})"
    if kind not in OPS:
        raise UnsupportedError(f"{where}: unknown op kind {kind!r}")
    arity = OPS[kind].arity
    if arity is None:
        if not ins:
            raise GraphError(f"{where}: expects at least one operand")
    elif len(ins) != arity:
        raise GraphError(f"{where}: expects {arity} operand(s), got {len(ins)}")
    x = ins[0]
    if kind in UNARY:
        if x.dtype not in FLOAT_DTYPES and kind not in INT_UNARY or x.dtype == "bool":
            raise UnsupportedError(f"{where}: needs a float operand, got {x.dtype}")
        return TensorType(x.shape, x.dtype)
    if kind == "not":
        if x.dtype != "bool":
            raise ShapeError(f"{where}: needs a bool operand, got {x.dtype}")
        return TensorType(x.shape, "bool")
    if kind == "cast":
        return TensorType(x.shape, attrs["dtype"])
    if kind in BINARY + COMPARE + LOGICAL:
        y = ins[1]
        if x.dtype != y.dtype:
            raise ShapeError(f"{where}: operand dtypes differ ({x.dtype} vs {y.dtype}); "
                             f"insert a cast")
        if kind in LOGICAL and x.dtype != "bool":
            raise ShapeError(f"{where}: needs bool operands, got {x.dtype}")
        if kind in BINARY and x.dtype == "bool":
            raise ShapeError(f"{where}: arithmetic on bool operands; cast them first")
        shape = broadcast_shapes(x.shape, y.shape, where)
        return TensorType(shape, x.dtype if kind in BINARY else "bool")
    if kind == "select":
        c, a, b = ins
        if c.dtype != "bool":
            raise ShapeError(f"{where}: the condition must be bool, got {c.dtype}")
        if a.dtype != b.dtype:
            raise ShapeError(f"{where}: the two arms differ in dtype ({a.dtype} vs "
                             f"{b.dtype})")
        shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape, where), b.shape, where)
        return TensorType(shape, a.dtype)
    if kind in ("matmul", "conv2d") and any(t.dtype not in FLOAT_DTYPES + ("i32",)
                                            for t in ins):
        raise UnsupportedError(f"{where}: contractions are computed in f32/f16 or i32 only, "
                               f"got {', '.join(t.dtype for t in ins)}")
    if kind in REDUCE and x.dtype == "bool":
        raise ShapeError(f"{where}: cannot reduce a bool tensor; cast it first")
    if kind == "slice":
        starts, steps, shape = attrs["starts"], attrs["steps"], tuple(attrs["shape"])
        if not len(starts) == len(steps) == len(shape) == x.rank:
            raise ShapeError(f"{where}: starts/steps/shape need one entry per dimension of "
                             f"{x.shape}")
        for d, (start, step, n) in enumerate(zip(starts, steps, shape)):
            last = start + (n - 1) * step
            if step == 0 or n < 1 or not (0 <= start < x.shape[d] and 0 <= last < x.shape[d]):
                raise ShapeError(f"{where}: window start {start}, step {step}, {n} element(s) "
                                 f"leaves dimension {d} of {x.shape}")
        return TensorType(shape, x.dtype)
    if kind == "gather":
        data, idx = ins
        if idx.dtype != "i32":
            raise ShapeError(f"{where}: indices must be i32, got {idx.dtype}")
        axis = attrs["axis"]
        if not -data.rank <= axis < data.rank:
            raise ShapeError(f"{where}: axis {axis} is out of range for rank {data.rank}")
        axis %= data.rank
        attrs["axis"] = axis
        shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
        return TensorType(shape, data.dtype)
    if kind == "pad":
        pads = attrs["pads"]
        if len(pads) != x.rank or any(a < 0 or b < 0 for a, b in pads):
            raise ShapeError(f"{where}: pads {pads} need one non-negative (before, after) "
                             f"pair per dimension of {x.shape}")
        return TensorType(tuple(s + a + b for s, (a, b) in zip(x.shape, pads)), x.dtype)
    if kind == "concat":
        axis = attrs["axis"]
        if not -x.rank <= axis < x.rank:
            raise ShapeError(f"{where}: axis {axis} is out of range for rank {x.rank}")
        axis %= x.rank
        attrs["axis"] = axis
        for t in ins[1:]:
            if t.dtype != x.dtype or t.rank != x.rank or any(
                    a != b for d, (a, b) in enumerate(zip(t.shape, x.shape)) if d != axis):
                raise ShapeError(f"{where}: operands {x} and {t} differ outside axis {axis}")
        shape = list(x.shape)
        shape[axis] = sum(t.shape[axis] for t in ins)
        return TensorType(tuple(shape), x.dtype)
    if kind in REDUCE:
        axes = _norm_axes(attrs.get("axes"), x.rank, where)
        attrs["axes"] = axes
        if attrs.get("keepdims", True):
            shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        else:
            shape = tuple(s for i, s in enumerate(x.shape) if i not in axes) or (1,)
        return TensorType(shape, x.dtype)
    if kind == "matmul":
        a, b = ins
        if a.dtype != b.dtype:
            raise ShapeError(f"{where}: operand dtypes differ ({a.dtype} vs {b.dtype})")
        if a.rank < 2 or b.rank < 2:
            raise ShapeError(f"{where}: matmul needs rank >= 2 operands, got {a.shape} and "
                             f"{b.shape}")
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"{where}: contraction sizes differ: {a.shape} @ {b.shape} "
                             f"({a.shape[-1]} != {b.shape[-2]})")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], where)
        return TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)
    if kind == "conv2d":
        xt, w = ins
        fmt = attrs.get("data_format", "NCHW")
        if fmt not in ("NCHW", "NHWC"):
            raise UnsupportedError(f"{where}: data_format {fmt!r}; use NCHW or NHWC")
        if xt.rank != 4 or w.rank != 4:
            raise ShapeError(f"{where}: conv2d needs rank-4 input and filter, got {xt.shape} "
                             f"and {w.shape}")
        if xt.dtype != w.dtype:
            raise ShapeError(f"{where}: operand dtypes differ ({xt.dtype} vs {w.dtype})")
        g = attrs.get("groups", 1)
        if fmt == "NCHW":
            n, c, h, wd = xt.shape
            o, ci, kh, kw = w.shape
        else:
            n, h, wd, c = xt.shape
            o, kh, kw, ci = w.shape
        if g < 1 or c % g or o % g:
            raise ShapeError(f"{where}: groups={g} must divide channels {c} and filters {o}")
        if ci * g != c:
            raise ShapeError(f"{where}: filter has {ci} input channels per group, input has "
                             f"{c} channels in {g} group(s)")
        sh, sw = attrs.get("stride", (1, 1))
        pt, pl, pb, pr = attrs.get("padding", (0, 0, 0, 0))
        dh, dw = attrs.get("dilation", (1, 1))
        if min(sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
            raise ShapeError(f"{where}: strides and dilations must be >= 1, padding >= 0")
        oh = _conv_out(h, kh, sh, pt, pb, dh, where)
        ow = _conv_out(wd, kw, sw, pl, pr, dw, where)
        shape = (n, o, oh, ow) if fmt == "NCHW" else (n, oh, ow, o)
        return TensorType(shape, xt.dtype)
    if kind == "transpose":
        perm = attrs["perm"]
        if sorted(perm) != list(range(x.rank)):
            raise ShapeError(f"{where}: perm {perm} is not a permutation of {x.rank} dims")
        return TensorType(tuple(x.shape[p] for p in perm), x.dtype)
    if kind == "reshape":
        shape = list(attrs["shape"])
        if shape.count(-1) > 1:
            raise ShapeError(f"{where}: at most one -1 in reshape {tuple(shape)}")
        if -1 in shape:
            rest = math.prod(s for s in shape if s != -1)
            if rest == 0 or x.size % rest:
                raise ShapeError(f"{where}: cannot reshape {x.shape} to {tuple(shape)}")
            shape[shape.index(-1)] = x.size // rest
            attrs["shape"] = tuple(shape)
        if math.prod(shape) != x.size:
            raise ShapeError(f"{where}: cannot reshape {x.shape} ({x.size} elements) to "
                             f"{tuple(shape)}")
        return TensorType(tuple(shape), x.dtype)
    if kind == "broadcast":
        shape = tuple(attrs["shape"])
        if broadcast_shapes(x.shape, shape, where) != shape:
            raise ShapeError(f"{where}: cannot broadcast {x.shape} to {shape}")
        return TensorType(shape, x.dtype)
    raise UnsupportedError(f"{where}: unknown op kind {kind!r}")  # pragma: no cover
