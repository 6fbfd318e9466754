"""ONNX import: a static-shape ``.onnx`` model (opset 13-21) as a graph of primitive ops.

Each ONNX node becomes one or more primitives; Softmax, LayerNormalization and Gemm are
decomposed (through :mod:`compiler.builders`) so that fusion sees the same primitives it
sees in the built-in models. Integer tensors are only allowed where ONNX uses them as
static parameters (Reshape's shape, Unsqueeze/Squeeze/Reduce axes): they are read from
initializers or Constant nodes at import time and never become graph values.

Graph inputs keep their ONNX names (sanitised to identifiers); computed values are renamed
after the ONNX tensor they produce. ``graph.meta`` maps ONNX input/output names to graph
node names, which is how ``wavefuse verify`` feeds onnx's ReferenceEvaluator the same data.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

from .. import builders as B
from ..graph import Graph, GraphError, ModelError, ShapeError, UnsupportedError, Value

MIN_OPSET, MAX_OPSET = 13, 21

# ONNX TensorProto element types we accept for graph values.
_FLOAT_TYPES = {1: "f32", 10: "f16"}


class _Static:
    """A tensor known at import time (initializer or Constant): its numpy value."""

    def __init__(self, array: np.ndarray):
        self.array = array


def _sanitise(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"t_{s}"


def _type_name(elem_type: int) -> str:
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


class _Importer:
    def __init__(self, model, source: str):
        self.model = model
        self.source = source
        self.opset = _default_opset(model, source)
        self.g = Graph(_sanitise(model.graph.name or os.path.basename(source)) or "onnx")
        self.env: dict[str, Value | _Static] = {}
        self.used_names: set[str] = set()

    # ---------------------------------------------------------------- values
    def where(self, node) -> str:
        return f"{self.source}: node {node.name or node.output[0]!r} ({node.op_type})"

    def value(self, name: str, node=None, like: Value | None = None) -> Value:
        """A graph value for an ONNX tensor; float statics become constants on first use."""
        if name not in self.env:
            raise ModelError(f"{self.source}: tensor {name!r} is used before it is defined")
        v = self.env[name]
        if isinstance(v, Value):
            return v
        arr = v.array
        if arr.dtype not in (np.float32, np.float16):
            if like is None:
                raise UnsupportedError(
                    f"{self.where(node)}: operand {name!r} has dtype {arr.dtype}; wavefuse "
                    f"computes in float32/float16 only")
            arr = arr.astype(np.float16 if like.dtype == "f16" else np.float32)
        dtype = "f16" if arr.dtype == np.float16 else "f32"
        # The IR has no rank-0 tensors: a scalar becomes shape (1,), which broadcasts alike.
        const = self.g.constant(arr, name=self.fresh(name), dtype=dtype)
        if like is None or like.dtype == dtype:
            self.env[name] = const
        return const

    def static(self, name: str, node, what: str) -> np.ndarray:
        v = self.env.get(name)
        if not isinstance(v, _Static):
            raise UnsupportedError(f"{self.where(node)}: {what} must be a constant "
                                   f"(initializer or Constant node), {name!r} is computed")
        return v.array

    def fresh(self, onnx_name: str) -> str:
        base = _sanitise(onnx_name)
        name, i = base, 1
        while name in self.g or name in self.used_names:
            name, i = f"{base}_{i}", i + 1
        self.used_names.add(name)
        return name

    def bind(self, onnx_name: str, result, before: set) -> None:
        """Records a node's result and names its graph node after the ONNX tensor."""
        if isinstance(result, Value) and result.name not in before:
            new = self.fresh(onnx_name)
            self.g.rename(result.name, new)
            result = Value(self.g, new)
        self.env[onnx_name] = result

    # ---------------------------------------------------------------- import
    def run(self) -> Graph:
        from onnx import numpy_helper

        graph = self.model.graph
        for init in graph.initializer:
            arr = numpy_helper.to_array(init)
            if arr.dtype.kind == "f" and arr.dtype not in (np.float32, np.float16):
                raise UnsupportedError(f"{self.source}: initializer {init.name!r} has dtype "
                                       f"{_type_name(init.data_type)}; wavefuse supports "
                                       f"FLOAT and FLOAT16")
            if any(d == 0 for d in arr.shape):
                raise ShapeError(f"{self.source}: initializer {init.name!r} is empty "
                                 f"(shape {arr.shape})")
            self.env[init.name] = _Static(arr)
        inputs = {}
        for vi in graph.input:
            if vi.name in self.env:  # an initializer with a default: a constant
                continue
            dtype, shape = _value_info_type(vi, self.source, "input")
            v = self.g.input(self.fresh(vi.name), shape, dtype)
            self.env[vi.name] = v
            inputs[vi.name] = v.name
        for node in graph.node:
            before = set(self.g.g.nodes)
            results = CONVERTERS[node.op_type](self, node)
            if not isinstance(results, (list, tuple)):
                results = [results]
            used = [o for o in node.output if o]
            if len(used) > len(results):
                extra = [o for o in node.output[len(results):] if o]
                raise UnsupportedError(f"{self.where(node)}: optional output(s) "
                                       f"{', '.join(map(repr, extra))} are not supported")
            for out, res in zip(node.output, results):
                if out:
                    self.bind(out, res, before)
        outputs = {}
        for vi in graph.output:
            v = self.value(vi.name)
            self.g.output(v)
            outputs[vi.name] = v.name
            _check_output_type(vi, v, self.source)
        self.g.meta.update(onnx_model=self.model, onnx_source=self.source,
                           onnx_opset=self.opset, onnx_inputs=inputs, onnx_outputs=outputs)
        self.g.validate()
        return self.g

    # ---------------------------------------------------------------- helpers for rules
    def attr(self, node, name, default=None):
        from onnx import helper
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def optional_input(self, node, i):
        return node.input[i] if len(node.input) > i and node.input[i] else None


def _default_opset(model, source) -> int:
    version = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            version = imp.version
    if version is None:
        raise ModelError(f"{source}: the model imports no default-domain (ai.onnx) opset")
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise UnsupportedError(f"{source}: opset {version} is not supported; wavefuse reads "
                               f"opset {MIN_OPSET}-{MAX_OPSET} (convert with "
                               f"onnx.version_converter)")
    return version


def _value_info_type(vi, source, what) -> tuple[str, tuple]:
    t = vi.type
    if not t.HasField("tensor_type"):
        raise UnsupportedError(f"{source}: {what} {vi.name!r} is not a tensor")
    tt = t.tensor_type
    if tt.elem_type not in _FLOAT_TYPES:
        raise UnsupportedError(f"{source}: {what} {vi.name!r} has dtype "
                               f"{_type_name(tt.elem_type)}; wavefuse supports FLOAT and "
                               f"FLOAT16")
    if not tt.HasField("shape"):
        raise ShapeError(f"{source}: {what} {vi.name!r} has an unknown shape; wavefuse needs "
                         f"static shapes")
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(d.dim_value)
        elif d.HasField("dim_value"):
            raise ShapeError(f"{source}: {what} {vi.name!r} has size {d.dim_value} in dimension "
                             f"{i}; wavefuse needs every dimension to be at least 1")
        else:
            label = d.dim_param or "?"
            raise ShapeError(f"{source}: {what} {vi.name!r} has a dynamic dimension {i} "
                             f"({label!r}); wavefuse needs static shapes (fix them with "
                             f"onnx.tools.update_model_dims)")
    return _FLOAT_TYPES[tt.elem_type], tuple(shape) or (1,)


def _check_output_type(vi, v: Value, source) -> None:
    """Our inferred output shape must equal the one the model declares (when static)."""
    tt = vi.type.tensor_type
    if tt.elem_type and tt.elem_type in _FLOAT_TYPES and _FLOAT_TYPES[tt.elem_type] != v.dtype:
        raise ShapeError(f"{source}: output {vi.name!r} is declared "
                         f"{_type_name(tt.elem_type)} but computes {v.dtype}")
    if not tt.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if None in dims:
        return
    declared = tuple(dims)
    if declared != v.shape and not (math.prod(declared) == 1 and v.shape == (1,)):
        raise ShapeError(f"{source}: output {vi.name!r} is declared with shape {declared} but "
                         f"computes {v.shape}")


# --------------------------------------------------------------------------- op rules
_UNARY = {"Sqrt": "sqrt", "Reciprocal": "reciprocal", "Exp": "exp", "Log": "log",
          "Tanh": "tanh", "Erf": "erf", "Relu": "relu", "Sigmoid": "sigmoid", "Neg": "neg"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
_VARIADIC = {"Max": "max", "Min": "min"}
_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}


def _unary(kind):
    def rule(im: _Importer, node):
        return im.g.unary(kind, im.value(node.input[0], node))
    return rule


def _binary_operands(im: _Importer, node, a_name, b_name):
    a_static = isinstance(im.env.get(a_name), _Static)
    if a_static and not isinstance(im.env.get(b_name), _Static):
        b = im.value(b_name, node)
        return im.value(a_name, node, like=b), b
    a = im.value(a_name, node)
    return a, im.value(b_name, node, like=a)


def _binary(kind):
    def rule(im: _Importer, node):
        a, b = _binary_operands(im, node, node.input[0], node.input[1])
        if kind == "pow" and b.dtype != a.dtype:  # ONNX Pow allows a differently typed exponent
            b = im.g.cast(b, a.dtype)
        return im.g.binary(kind, a, b)
    return rule


def _variadic(kind):
    def rule(im: _Importer, node):
        acc = im.value(node.input[0], node)
        for name in node.input[1:]:
            acc = im.g.binary(kind, acc, im.value(name, node, like=acc))
        return acc
    return rule


def _axes(im: _Importer, node, input_index: int, attr_until: int | None) -> list | None:
    """Axes from the attribute (opsets before ``attr_until``) or from an optional input."""
    if attr_until is not None and im.opset < attr_until:
        axes = im.attr(node, "axes")
        return None if axes is None else [int(a) for a in axes]
    name = im.optional_input(node, input_index)
    if name is None:
        return None
    return [int(a) for a in im.static(name, node, "axes").reshape(-1)]


def _reduce(kind):
    attr_until = 13 if kind == "reduce_sum" else 18

    def rule(im: _Importer, node):
        x = im.value(node.input[0], node)
        axes = _axes(im, node, 1, attr_until)
        keepdims = bool(im.attr(node, "keepdims", 1))
        if not axes:
            if im.attr(node, "noop_with_empty_axes", 0):
                return x
            axes = None
        return im.g.reduce(kind, x, axes, keepdims)
    return rule


def _softmax(im: _Importer, node):
    x = im.value(node.input[0], node)
    return B.softmax(im.g, x, int(im.attr(node, "axis", -1)))


def _layer_norm(im: _Importer, node):
    x = im.value(node.input[0], node)
    axis = int(im.attr(node, "axis", -1))
    if not -x.type.rank <= axis < x.type.rank:
        raise ShapeError(f"{im.where(node)}: axis {axis} is out of range for rank "
                         f"{x.type.rank}")
    axis %= x.type.rank
    scale = im.value(node.input[1], node, like=x)
    bias_name = im.optional_input(node, 2)
    bias = im.value(bias_name, node, like=x) if bias_name else None
    return B.layer_norm(im.g, x, scale, bias, eps=float(im.attr(node, "epsilon", 1e-5)),
                        axis=tuple(range(axis, x.type.rank)))


def _matmul(im: _Importer, node):
    a, b = _binary_operands(im, node, node.input[0], node.input[1])
    g = im.g
    a1, b1 = a.type.rank == 1, b.type.rank == 1  # numpy matmul rules for vectors
    if a1:
        a = g.reshape(a, (1,) + a.shape)
    if b1:
        b = g.reshape(b, b.shape + (1,))
    y = g.matmul(a, b)
    if a1 or b1:
        shape = y.shape[:-2] + (() if a1 else y.shape[-2:-1]) + (() if b1 else y.shape[-1:])
        y = g.reshape(y, shape or (1,))
    return y


def _gemm(im: _Importer, node):
    g = im.g
    a, b = _binary_operands(im, node, node.input[0], node.input[1])
    if a.type.rank != 2 or b.type.rank != 2:
        raise ShapeError(f"{im.where(node)}: Gemm needs 2-D A and B, got {a.shape} and "
                         f"{b.shape}")
    if im.attr(node, "transA", 0):
        a = g.transpose(a, (1, 0))
    if im.attr(node, "transB", 0):
        b = g.transpose(b, (1, 0))
    y = g.matmul(a, b)
    alpha = float(im.attr(node, "alpha", 1.0))
    if alpha != 1.0:
        y = g.mul(y, alpha)
    c_name = im.optional_input(node, 2)
    if c_name:
        c = im.value(c_name, node, like=y)
        beta = float(im.attr(node, "beta", 1.0))
        if beta != 1.0:
            c = g.mul(c, beta)
        y = g.add(y, c)
    return y


def _same_pads(size, k, stride, dil, upper: bool) -> tuple[int, int]:
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (k - 1) * dil + 1 - size)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def _conv(im: _Importer, node):
    g = im.g
    x = im.value(node.input[0], node)
    w = im.value(node.input[1], node, like=x)
    if x.type.rank != 4 or w.type.rank != 4:
        raise UnsupportedError(f"{im.where(node)}: only 2-D convolutions (NCHW input, OIHW "
                               f"filter) are supported, got input {x.shape} and filter "
                               f"{w.shape}")
    kh, kw = w.shape[2:]
    kernel = im.attr(node, "kernel_shape")
    if kernel is not None and tuple(kernel) != (kh, kw):
        raise ShapeError(f"{im.where(node)}: kernel_shape {tuple(kernel)} disagrees with "
                         f"the filter {w.shape}")
    strides = tuple(im.attr(node, "strides", (1, 1)))
    dil = tuple(im.attr(node, "dilations", (1, 1)))
    auto_pad = im.attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "NOTSET":
        pads = tuple(im.attr(node, "pads", (0, 0, 0, 0)))
        padding = (pads[0], pads[1], pads[2], pads[3])
    elif auto_pad == "VALID":
        padding = (0, 0, 0, 0)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        upper = auto_pad == "SAME_UPPER"
        t, b_ = _same_pads(x.shape[2], kh, strides[0], dil[0], upper)
        l_, r = _same_pads(x.shape[3], kw, strides[1], dil[1], upper)
        padding = (t, l_, b_, r)
    else:
        raise UnsupportedError(f"{im.where(node)}: auto_pad {auto_pad!r}")
    y = g.conv2d(x, w, data_format="NCHW", stride=strides, padding=padding, dilation=dil,
                 groups=int(im.attr(node, "group", 1)))
    b_name = im.optional_input(node, 2)
    if b_name:
        bias = im.value(b_name, node, like=y)
        y = g.add(y, g.reshape(bias, (1, bias.shape[0], 1, 1)))
    return y


def _transpose(im: _Importer, node):
    x = im.value(node.input[0], node)
    perm = im.attr(node, "perm")
    perm = tuple(reversed(range(x.type.rank))) if perm is None else tuple(perm)
    return im.g.transpose(x, perm)


def _reshape(im: _Importer, node):
    x = im.value(node.input[0], node)
    shape = [int(s) for s in im.static(node.input[1], node, "the target shape")]
    if im.attr(node, "allowzero", 0) and 0 in shape:
        raise ShapeError(f"{im.where(node)}: allowzero with a 0 in {shape} makes an empty "
                         f"tensor")
    for i, s in enumerate(shape):
        if s == 0:
            if i >= x.type.rank:
                raise ShapeError(f"{im.where(node)}: 0 at position {i} copies a dimension "
                                 f"{x.shape} does not have")
            shape[i] = x.shape[i]
    return im.g.reshape(x, shape)


def _unsqueeze(im: _Importer, node):
    x = im.value(node.input[0], node)
    axes = _axes(im, node, 1, 13) or []
    rank = x.type.rank + len(axes)
    norm = sorted(a % rank if -rank <= a < rank else rank + 99 for a in axes)
    if not axes or norm[-1] >= rank or len(set(norm)) != len(norm):
        raise ShapeError(f"{im.where(node)}: bad axes {axes} for rank {x.type.rank}")
    shape, it = [], iter(x.shape)
    for i in range(rank):
        shape.append(1 if i in norm else next(it))
    return im.g.reshape(x, shape)


def _squeeze(im: _Importer, node):
    x = im.value(node.input[0], node)
    axes = _axes(im, node, 1, 13)
    rank = x.type.rank
    if axes is None:
        drop = {i for i, s in enumerate(x.shape) if s == 1}
    else:
        if any(not -rank <= a < rank for a in axes):
            raise ShapeError(f"{im.where(node)}: axes {axes} out of range for rank {rank}")
        drop = {a % rank for a in axes}
        if any(x.shape[a] != 1 for a in drop):
            raise ShapeError(f"{im.where(node)}: cannot squeeze axes {axes} of shape "
                             f"{x.shape}")
    shape = [s for i, s in enumerate(x.shape) if i not in drop]
    return im.g.reshape(x, shape or (1,))


def _cast(im: _Importer, node):
    to = int(im.attr(node, "to"))
    src = im.env.get(node.input[0])
    if to not in _FLOAT_TYPES:
        raise UnsupportedError(f"{im.where(node)}: Cast to {_type_name(to)}; wavefuse "
                               f"supports FLOAT and FLOAT16")
    dtype = _FLOAT_TYPES[to]
    if isinstance(src, _Static):
        return _Static(src.array.astype(np.float16 if dtype == "f16" else np.float32))
    x = im.value(node.input[0], node)
    return x if x.dtype == dtype else im.g.cast(x, dtype)


def _identity(im: _Importer, node):
    src = im.env.get(node.input[0])
    return src if isinstance(src, _Static) else im.value(node.input[0], node)


def _constant(im: _Importer, node):
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            return _Static(numpy_helper.to_array(a.t))
        if a.name == "value_float":
            return _Static(np.array(a.f, np.float32))
        if a.name == "value_floats":
            return _Static(np.array(list(a.floats), np.float32))
        if a.name == "value_int":
            return _Static(np.array(a.i, np.int64))
        if a.name == "value_ints":
            return _Static(np.array(list(a.ints), np.int64))
    names = ", ".join(a.name for a in node.attribute) or "none"
    raise UnsupportedError(f"{im.where(node)}: Constant with attribute {names}")


CONVERTERS = {
    **{op: _unary(k) for op, k in _UNARY.items()},
    **{op: _binary(k) for op, k in _BINARY.items()},
    **{op: _variadic(k) for op, k in _VARIADIC.items()},
    **{op: _reduce(k) for op, k in _REDUCE.items()},
    "Softmax": _softmax, "LayerNormalization": _layer_norm, "MatMul": _matmul,
    "Gemm": _gemm, "Conv": _conv, "Transpose": _transpose, "Reshape": _reshape,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Cast": _cast, "Identity": _identity,
    "Constant": _constant,
}
SUPPORTED_OPS = tuple(sorted(CONVERTERS))


def _unsupported_ops(model) -> list[str]:
    bad = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            bad.add(f"{node.domain}.{node.op_type}")
        elif node.op_type not in CONVERTERS:
            bad.add(node.op_type)
    return sorted(bad)


def from_model(model, source: str = "<onnx model>") -> Graph:
    """Imports an in-memory ``onnx.ModelProto`` (checked like a file)."""
    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "invalid")
        raise ModelError(f"{source}: not a valid ONNX model: {first}") from None
    bad = _unsupported_ops(model)
    if bad:
        raise UnsupportedError(f"{source}: unsupported ONNX op(s): {', '.join(bad)} "
                               f"(supported: {', '.join(SUPPORTED_OPS)})")
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:  # onnx raises InferenceError and several C++ errors here
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "failed")
        raise ShapeError(f"{source}: ONNX shape inference fails: {first}") from None
    try:
        return _Importer(model, source).run()
    except GraphError as exc:
        msg = str(exc)
        if not msg.startswith(source):
            raise type(exc)(f"{source}: {msg}") from None
        raise


def load_onnx(path) -> Graph:
    """Reads, checks and imports an ``.onnx`` file."""
    import onnx

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"{path}: no such file (expected a built-in model name or an "
                         f".onnx file)")
    if os.path.isdir(path):
        raise ModelError(f"{path}: is a directory, not an .onnx file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, RuntimeError, ... depending on content
        raise ModelError(f"{path}: not a readable ONNX model ({type(exc).__name__})") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{path}: not an ONNX model (no graph found)")
    _load_external_data(model, path)
    return from_model(model, path)


def _load_external_data(model, path: str) -> None:
    """Reads initializers kept in external files, naming the file when one is missing or
    lies outside the model's folder (onnx's own error names neither the model nor why)."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    base = os.path.dirname(os.path.realpath(path))
    external = [t for t in model.graph.initializer if uses_external_data(t)]
    for t in external:
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        full = os.path.realpath(os.path.join(base, loc))
        if not loc or os.path.isabs(loc) or os.path.commonpath([base, full]) != base:
            raise ModelError(f"{path}: initializer {t.name!r} keeps its data in {loc!r}, "
                             f"outside the model's folder {base}; refusing to read it")
        if not os.path.isfile(full):
            raise ModelError(f"{path}: initializer {t.name!r} keeps its data in {loc!r}, "
                             f"but {full} is missing; keep the data file next to the model")
    if not external:
        return
    try:
        onnx.load_external_data_for_model(model, base)
    except Exception as exc:  # ValidationError, OSError, ... from onnx's reader
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        raise ModelError(f"{path}: cannot read its external data: {first}") from None
