"""ONNX import: a static-shape ``.onnx`` model (opset 13 to the newest the installed onnx
defines) as a graph of primitive ops.

Each ONNX node becomes one or more primitives; Softmax, LayerNormalization, Gemm, pools,
BatchNormalization, the activation functions and Einsum are decomposed (through
:mod:`compiler.ir.builders` where one exists) so that fusion sees the same primitives it sees
in the built-in models. Integer and bool tensors (embedding indices, masks, comparison
results) are graph values like floats; ONNX's int64 becomes ``i32`` (see
:mod:`compiler.ir.graph`).

Constant folding: a node whose inputs are all known at import time (initializers, Constant
nodes, earlier folded results), and Shape/Size of any tensor (shapes are static), is
evaluated at import by onnx's own ``ReferenceEvaluator`` and never becomes a graph op. So
the shape arithmetic, position ids, causal masks and rotary tables that exporters emit fold
away, whatever ops they use; only the ops left on computed values must be in
``CONVERTERS``, and an unsupported-op error lists exactly those.

Symbolic dimensions are pinned with ``dims`` (``--dim NAME=VALUE`` on the command line);
an unpinned one is an error naming it and the option. Graph inputs can be pinned to values
with ``values`` (Python API): an input a rule needs as a constant (axes, a target shape)
then folds like an initializer. A graph input with a zero-size dimension needs no pinning:
it can only hold the empty array, and is that constant.

Op versions: a rule reads the attributes or inputs of the op version the model's opset
selects. ``OP_VERSIONS`` lists every version of a supported op after opset 13 with its
semantic change (axes as inputs from 13/18, Split's ``num_outputs``, Pad's ``axes``,
Shape's ``start``/``end``, Reshape's ``allowzero``, AveragePool's ``dilations``, bool
ReduceMax/Min from 20, ...) and how the rule handles it; the rest (``TYPES_ONLY``) only add
element types (bfloat16, float8, int4, ...) that are refused as dtypes, not as versions.

Graph inputs keep their ONNX names (sanitised to identifiers); computed values are renamed
after the ONNX tensor they produce. ``graph.meta`` maps ONNX input/output names to graph
node names, which is how ``wavefuse verify`` feeds onnx's ReferenceEvaluator the same data.
"""
from __future__ import annotations

import itertools
import math
import os
import re

import numpy as np

# onnx itself is imported inside the functions that use it: every wavefuse command loads
# this module (through compiler.ir.models) and `import onnx` takes ~0.7 s, onnx.reference
# ~0.5 s more, so only a command that reads, folds or writes ONNX pays for them.
from compiler.ir import builders
from compiler.ir.graph import (FLOAT_DTYPES, Graph, GraphError, ModelError, ShapeError,
                               UnsupportedError, Value)
from compiler.ir.ranges import byte_range
from compiler.frontends.onnx_quant import QUANT_CONVERTERS

MIN_OPSET = 13


def _max_opset() -> int:
    import onnx.defs  # lazy: start-up time (see the imports)
    return int(onnx.defs.onnx_opset_version())


# ONNX TensorProto element types we accept for graph values (int64 is narrowed to i32).
_VALUE_TYPES = {1: "f32", 10: "f16", 16: "bf16", 6: "i32", 7: "i32", 9: "bool"}
#: quantized element types (UINT8, INT8): held widened in i32 graph values, their range
#: recorded (``_Importer.qtypes``; random inputs stay inside it). In memory each takes one
#: byte (``Graph.set_byte_storage``: i8/u8 kernel buffers); registers and arithmetic stay i32.
QUANT_TYPES = {2: (np.uint8, 0, 255), 3: (np.int8, -128, 127)}
_NP = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "i32": np.int32,
       "bool": np.bool_}  # bf16: float32 holding bf16 values (compiler.ir.graph)
_I32 = np.iinfo(np.int32)


#: ops still refused, with the model family that needs them: the refusal names it, so a
#: user sees what the model waits on (and the coverage work of issue 28 what to add next)
NEEDED_BY = {
    "LSTM": "recurrent speech and sequence models", "GRU": "recurrent speech models",
    "RNN": "recurrent sequence models",
    "NonMaxSuppression": "detection post-processing (YOLO, SSD, Faster R-CNN)",
    "RoiAlign": "two-stage detectors (Faster/Mask R-CNN)",
    "TopK": "detection post-processing and sampling decoders",
    "ScatterND": "decoders that write a KV cache in place",
    "ScatterElements": "decoders that write a KV cache in place",
    "GridSample": "deformable attention and spatial-transformer vision models",
    "STFT": "speech front ends that compute their spectrogram", "DFT": "speech front ends",
}
#: element types still refused, with the models that produce them
DTYPE_NEEDED_BY = {"DOUBLE": "float64 exports",
                   "FLOAT8E4M3FN": "float8 LLM exports", "FLOAT8E5M2": "float8 LLM exports"}


def _needed_by(what: str, table: dict) -> str:
    fam = table.get(what)
    return f" (needed by {fam})" if fam else ""


class _Static:
    """A tensor known at import time (initializer, Constant, folded result): its value."""

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array)


def _sanitise(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"t_{s}"


def _type_name(elem_type: int) -> str:
    import onnx  # lazy: start-up time (see the imports)
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def _dtype_of_array(arr: np.ndarray) -> str | None:
    if arr.dtype == np.float32:
        return "f32"
    if arr.dtype == np.float16:
        return "f16"
    if arr.dtype.name == "bfloat16":  # onnx reads BFLOAT16 as ml_dtypes' bfloat16
        return "bf16"
    if arr.dtype == np.bool_:
        return "bool"
    if arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8:
        return "i32"
    return None


def _as_dtype(arr: np.ndarray, dtype: str, where: str) -> np.ndarray:
    if dtype == "i32" and arr.dtype.kind in "iu" and arr.size and (
            arr.min() < _I32.min or arr.max() > _I32.max):
        raise UnsupportedError(f"{where}: integer values outside the 32-bit range; wavefuse "
                               f"narrows int64 to i32")
    with np.errstate(all="ignore"):
        # no copy when the tensor already has the dtype (BERT-base's 435 MB of f32
        # weights: a copy was a third of a warm tune); the array may then be onnx's
        # read-only view of the model's bytes, which no consumer writes into
        return np.ascontiguousarray(arr, dtype=_NP[dtype])


class _Importer:
    def __init__(self, model, source: str, dims: dict | None = None,
                 values: dict | None = None):
        self.model = model
        self.source = source
        self.dims = dict(dims or {})
        self.values = dict(values or {})
        self.opset = _default_opset(model, source)
        self.g = Graph(_sanitise(model.graph.name or os.path.basename(source)) or "onnx")
        self.env: dict[str, Value | _Static] = {}
        self.used_names: set[str] = set()
        self.index_bounds: dict[str, int] = {}
        #: ONNX tensors held widened in i32 that are UINT8/INT8 in the model: name ->
        #: (numpy dtype, lowest, highest) (``QUANT_TYPES``)
        self.qtypes: dict[str, tuple] = {}
        #: graph constants made from statics, by (ONNX name, dtype): the static itself
        #: stays in ``env``, so that later rules (and folds) still see a known value
        self.constants: dict[tuple[str, str], Value] = {}

    # ---------------------------------------------------------------- values
    def where(self, node) -> str:
        return f"{self.source}: node {node.name or node.output[0]!r} ({node.op_type})"

    def value(self, name: str, node=None, like: Value | None = None,
              dtype: str | None = None) -> Value:
        """A graph value for an ONNX tensor; statics become constants on first use, in
        ``like``'s dtype (or ``dtype``) when given (an ONNX scalar next to a tensor)."""
        if name not in self.env:
            raise ModelError(f"{self.source}: tensor {name!r} is used before it is defined")
        v = self.env[name]
        if isinstance(v, Value):
            return v
        arr = v.array
        want = dtype or (like.dtype if like is not None else None)
        own = _dtype_of_array(arr)
        at = self.where(node) if node is not None else self.source
        if own is None and want is None:
            raise UnsupportedError(
                f"{at}: {'operand' if node is not None else 'tensor'} {name!r} has dtype "
                f"{arr.dtype}; wavefuse computes in float32/float16, int32 and bool")
        if arr.size == 0:
            raise ShapeError(f"{at}: tensor {name!r} is empty (shape {arr.shape}); wavefuse "
                             f"needs every dimension of a computed tensor to be at least 1")
        target = want or own
        if (name, target) in self.constants:
            return self.constants[(name, target)]
        arr = _as_dtype(arr, target, at)
        # The IR has no rank-0 tensors: a scalar becomes shape (1,), which broadcasts alike.
        const = self.g.constant(arr, name=self.fresh(name), dtype=target)
        if target == "i32" and v.array.dtype in (np.int8, np.uint8):  # an int8 weight: bytes
            self.g.set_byte_storage(const.name, "i8" if v.array.dtype == np.int8 else "u8")
        self.constants[(name, target)] = const
        return const

    def static(self, name: str, node, what: str) -> np.ndarray:
        v = self.env.get(name)
        if not isinstance(v, _Static):
            raise UnsupportedError(f"{self.where(node)}: {what} must be a constant "
                                   f"(initializer or Constant node), {name!r} is computed")
        return v.array

    def is_static(self, name: str) -> bool:
        return isinstance(self.env.get(name), _Static)

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
        from onnx import numpy_helper  # lazy: start-up time (see the imports)

        graph = self.model.graph
        for init in graph.initializer:
            try:
                arr = numpy_helper.to_array(init)
            except Exception as exc:  # inconsistent dims/data: onnx raises several types
                raise ModelError(f"{self.source}: initializer {init.name!r} is malformed "
                                 f"({type(exc).__name__})") from None
            if arr.dtype.kind == "f" and arr.dtype not in (np.float32, np.float16):
                name = _type_name(init.data_type)
                raise UnsupportedError(f"{self.source}: initializer {init.name!r} has dtype "
                                       f"{name}{_needed_by(name, DTYPE_NEEDED_BY)}; wavefuse "
                                       f"supports FLOAT and FLOAT16 floats")
            # an empty initializer is legal (e.g. an empty `axes`); it is refused only if
            # it would have to become a graph value (see ``value``)
            self.env[init.name] = _Static(arr)
        inputs = {}
        for vi in graph.input:
            if vi.name in self.env:  # an initializer with a default: a constant
                continue
            empty = _empty_input(vi, self.dims)
            if empty is not None:  # no values to feed: the one array it can hold
                self.env[vi.name] = _Static(empty)
                continue
            if vi.name in self.values:  # pinned by the caller: a constant
                self.env[vi.name] = _Static(_pinned_value(vi, self.values[vi.name],
                                                          self.source))
                continue
            dtype, shape = _value_info_type(vi, self.source, "input", self.dims)
            v = self.g.input(self.fresh(vi.name), shape, dtype)
            self.env[vi.name] = v
            inputs[vi.name] = v.name
            if vi.type.tensor_type.elem_type in QUANT_TYPES:
                self.qtypes[vi.name] = QUANT_TYPES[vi.type.tensor_type.elem_type]
        for node in graph.node:
            before = set(self.g.g.nodes)
            results = self.fold(node)
            if results is None:
                self.check_quantized_operands(node)
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
        bounds = {inputs[k]: b for k, b in self.index_bounds.items() if k in inputs}
        ranges = {inputs[k]: (lo, hi) for k, (_, lo, hi) in self.qtypes.items()
                  if k in inputs}
        self.g.meta.update(onnx_model=self.model, onnx_source=self.source,
                           onnx_opset=self.opset, onnx_inputs=inputs, onnx_outputs=outputs,
                           index_bounds=bounds, int_ranges=ranges)
        for k, (t, _, _) in self.qtypes.items():  # every int8/uint8 graph value: bytes
            v = self.env.get(k)
            if isinstance(v, Value) and v.dtype == "i32":
                self.g.set_byte_storage(v.name, "i8" if np.dtype(t) == np.int8 else "u8")
        if self.qtypes:  # and what is computed from them inside a byte (a zero point
            # less), but not a graph output (its declared ONNX type is what a caller reads)
            memo: dict = {}
            for op in self.g.ops:
                if op.kind not in ("input", "constant") and op.name not in \
                        self.g.byte_tensors and op.name not in self.g.outputs and \
                        (b := byte_range(self.g, op.name, memo)):
                    self.g.set_byte_storage(op.name, b)
        self.g.validate()
        return self.g

    def check_quantized_operands(self, node) -> None:
        """A uint8/int8 graph value (held widened in i32) feeds only the quantization ops
        and ops that move or widen its values exactly (``_QUANT_SAFE``); they pass its
        type on. Arithmetic on it would have to wrap at 8 bits, which i32 does not: refused
        in one line."""
        q = [i for i in node.input if i in self.qtypes and not self.is_static(i)]
        if not q or node.op_type in QUANT_CONVERTERS:
            return
        if node.op_type not in _QUANT_SAFE and node.op_type not in _QUANT_EXACT:
            name = np.dtype(self.qtypes[q[0]][0]).name.upper()
            raise UnsupportedError(f"{self.where(node)}: {node.op_type} on the {name} "
                                   f"tensor {q[0]!r}: wavefuse computes on 8-bit tensors only "
                                   f"through the quantization ops (DequantizeLinear, "
                                   f"MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv), "
                                   f"casts and data movement")
        if node.op_type in ("Min", "Max", "Clip", "Where") or node.op_type in _QUANT_SAFE and \
                node.op_type not in ("Cast", "CastLike"):  # the same 8-bit values
            for out in node.output:
                if out:
                    self.qtypes[out] = self.qtypes[q[0]]

    def fold(self, node):
        """The node's results as statics when it can be evaluated now, else None."""
        if node.op_type in ("Shape", "Size") and node.input[0] in self.env:
            shape = self.shape_of(node.input[0], node)
            if node.op_type == "Size":
                return [_Static(np.array(math.prod(shape), np.int64))]
            start, end = int(self.attr(node, "start", 0)), self.attr(node, "end", None)
            return [_Static(np.array(shape[start:None if end is None else int(end)],
                                     np.int64))]
        ins = [i for i in node.input if i]
        if node.op_type in _NEVER_FOLD or not all(self.is_static(i) for i in ins):
            return None
        if node.op_type == "Constant":
            return None  # its own rule reads the attribute
        return [_Static(a) for a in _evaluate_node(node, self, [
            self.env[i].array if i else None for i in node.input])]

    def shape_of(self, name: str, node) -> tuple:
        v = self.env[name]
        if isinstance(v, _Static):
            return tuple(v.array.shape)
        shape = v.shape
        # a rank-0 ONNX tensor is (1,) in the IR; its declared rank decides Shape's answer
        rank = self.ranks.get(name) if hasattr(self, "ranks") else None
        return () if rank == 0 else shape

    # ---------------------------------------------------------------- helpers for rules
    def attr(self, node, name, default=None):
        from onnx import helper  # lazy: start-up time (see the imports)
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    # the shared rules the quantization converters (onnx_quant, which cannot import this
    # module back) build on
    def matmul_values(self, a: Value, b: Value) -> Value:
        return _matmul_values(self.g, a, b)

    def conv_values(self, node, x: Value, w_name: str, b_name, filter_value=None) -> Value:
        return conv_values(self, node, x, w_name, b_name, filter_value)

    def optional_input(self, node, i):
        return node.input[i] if len(node.input) > i and node.input[i] else None


#: ops that may take a uint8/int8 graph value (``_Importer.check_quantized_operands``):
#: they move its elements or widen them exactly (a Cast to a wider type)
_QUANT_SAFE = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                         "Identity", "Concat", "Slice", "Gather", "Expand", "Split", "Tile",
                         "Cast", "CastLike", "GatherElements"})

#: ops exact on uint8/int8 values held in i32: comparisons, and selections whose result
#: is one of their 8-bit operands (no sum or product that would wrap at 8 bits); Sign
#: (-1, 0, 1) and Mod (|a mod b| < |b|, and each step of _mod's composition stays within
#: |a| + |b|, far inside an i32) fit the operands' byte type too
_QUANT_EXACT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                          "Min", "Max", "Clip", "Where", "Sign", "Mod"})

#: ops never evaluated at import even on constant inputs (random, or with no inputs of
#: their own that would make them constant)
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "Dropout"}


def _gather_elements(node, im, arrays):
    data, idx = arrays
    axis = int(im.attr(node, "axis", 0)) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take_along_axis(data, idx, axis=axis)]


#: ops whose onnx.reference implementation fails on inputs exporters give it (onnx 1.23's
#: GatherElements cannot gather a (1, 128) window of a (1, 512) position-id buffer, as
#: BERT-base's export asks): numpy instead
_FOLD_WITH_NUMPY = {"GatherElements": _gather_elements}


def _evaluate_node(node, im: _Importer, arrays: list) -> list:
    """One node on constant inputs, by onnx's ReferenceEvaluator (exact ONNX semantics)."""
    from onnx import helper  # lazy: start-up time (see the imports)

    if node.op_type in _FOLD_WITH_NUMPY:
        return _FOLD_WITH_NUMPY[node.op_type](node, im, arrays)
    from onnx.reference import ReferenceEvaluator  # lazy: start-up time (see the imports)

    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    feeds = {nm: a for nm, a in zip(names, arrays) if nm}
    inputs = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            a.shape) for nm, a in feeds.items()]
    outs = [f"out{i}" for i, o in enumerate(node.output)]
    n = helper.make_node(node.op_type, names, outs, domain=node.domain)
    n.attribute.extend(node.attribute)
    g = helper.make_graph([n], "fold", inputs,
                          [helper.make_empty_tensor_value_info(o) for o in outs])
    m = helper.make_model(g, opset_imports=list(im.model.opset_import))
    try:
        with np.errstate(all="ignore"):
            res = ReferenceEvaluator(m).run(None, feeds)
    except Exception as exc:  # onnx.reference raises many types for bad constant input
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        raise ShapeError(f"{im.where(node)}: cannot evaluate it on its constant inputs: "
                         f"{first}") from None
    return [np.asarray(r) for r in res]


def _default_opset(model, source) -> int:
    version = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            version = imp.version
    if version is None:
        raise ModelError(f"{source}: the model imports no default-domain (ai.onnx) opset")
    top = _max_opset()
    if not MIN_OPSET <= version <= top:
        raise UnsupportedError(f"{source}: opset {version} is not supported; wavefuse reads "
                               f"opset {MIN_OPSET}-{top} (convert with "
                               f"onnx.version_converter)")
    return version


def _value_info_type(vi, source, what, dims=None) -> tuple[str, tuple]:
    t = vi.type
    dims = dims or {}
    if not t.HasField("tensor_type"):
        raise UnsupportedError(f"{source}: {what} {vi.name!r} is not a tensor")
    tt = t.tensor_type
    if tt.elem_type not in _VALUE_TYPES and tt.elem_type not in QUANT_TYPES:
        name = _type_name(tt.elem_type)
        raise UnsupportedError(f"{source}: {what} {vi.name!r} has dtype "
                               f"{name}{_needed_by(name, DTYPE_NEEDED_BY)}; wavefuse supports "
                               f"FLOAT, FLOAT16, BFLOAT16, INT32, INT64, UINT8, INT8 and BOOL")
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
        elif d.dim_param and d.dim_param in dims:
            shape.append(int(dims[d.dim_param]))
        else:
            label = d.dim_param or "?"
            fix = (f"pin it with --dim {d.dim_param}=VALUE" if d.dim_param else
                   "give it a size with onnx.tools.update_model_dims")
            raise ShapeError(f"{source}: {what} {vi.name!r} has a symbolic dimension {i} "
                             f"({label!r}); wavefuse needs static shapes ({fix})")
    return _VALUE_TYPES.get(tt.elem_type, "i32"), tuple(shape) or (1,)


def _empty_input(vi, dims) -> np.ndarray | None:
    """A graph input with a zero-size dimension (and every other dimension known) holds
    no values: it can only be the empty array of its dtype and shape, so it is imported
    as that constant (an empty ``axes``, CastLike's dtype-only ``like``). Computing with
    it folds at import; only a computed result that is itself empty is refused."""
    from onnx import helper  # lazy: start-up time (see the imports)
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    shape = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.dim_param in dims:
            shape.append(int(dims[d.dim_param]))
        else:
            return None
    if 0 not in shape:
        return None
    try:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    except (KeyError, ValueError):
        return None
    return np.zeros(shape, dtype)


def _pinned_value(vi, value, source) -> np.ndarray:
    """A caller-pinned input's array, checked against the input's declared dtype and
    shape."""
    from onnx import helper  # lazy: start-up time (see the imports)
    arr = np.asarray(value)
    tt = vi.type.tensor_type
    try:
        want = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except (KeyError, ValueError):
        want = arr.dtype
    if arr.dtype != want:
        raise ModelError(f"{source}: the value pinned for input {vi.name!r} has dtype "
                         f"{arr.dtype}, the input is declared {want}")
    declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if tt.HasField("shape") and (len(declared) != arr.ndim or any(
            d is not None and d != s for d, s in zip(declared, arr.shape))):
        raise ModelError(f"{source}: the value pinned for input {vi.name!r} has shape "
                         f"{arr.shape}, the input is declared {tuple(declared)}")
    return arr


def _check_output_type(vi, v: Value, source) -> None:
    """Our inferred output shape must equal the one the model declares (when static)."""
    tt = vi.type.tensor_type
    declared = _VALUE_TYPES.get(tt.elem_type, "i32" if tt.elem_type in QUANT_TYPES else None)
    if tt.elem_type and declared and declared != v.dtype:
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
          "Tanh": "tanh", "Erf": "erf", "Relu": "relu", "Sigmoid": "sigmoid", "Neg": "neg",
          "Abs": "abs", "Round": "round", "Sin": "sin", "Cos": "cos", "Floor": "floor",
          "Ceil": "ceil"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le",
            "GreaterOrEqual": "ge"}
_LOGICAL = {"And": "and", "Or": "or", "Xor": "xor"}
_VARIADIC = {"Max": "max", "Min": "min", "Sum": "add"}
_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}


def _unary(kind):
    def rule(im: _Importer, node):
        return im.g.unary(kind, im.value(node.input[0], node))
    return rule


def _binary_operands(im: _Importer, node, a_name, b_name):
    if im.is_static(a_name) and not im.is_static(b_name):
        b = im.value(b_name, node)
        return im.value(a_name, node, like=b), b
    a = im.value(a_name, node)
    return a, im.value(b_name, node, like=a)


def _binary(kind):
    def rule(im: _Importer, node):
        if kind == "pow" and not im.is_static(node.input[0]):
            a = im.value(node.input[0], node)
            b = im.value(node.input[1], node)
            if b.dtype != a.dtype:  # ONNX Pow allows a differently typed exponent
                b = im.g.cast(b, a.dtype)
            return im.g.pow(a, b)
        a, b = _binary_operands(im, node, node.input[0], node.input[1])
        return im.g.binary(kind, a, b)
    return rule


def _compare(kind):
    def rule(im: _Importer, node):
        a, b = _binary_operands(im, node, node.input[0], node.input[1])
        return im.g.compare(kind, a, b)
    return rule


def _logical(kind):
    def rule(im: _Importer, node):
        a, b = _binary_operands(im, node, node.input[0], node.input[1])
        return im.g.binary(kind, a, b)
    return rule


def _not(im: _Importer, node):
    return im.g.logical_not(im.value(node.input[0], node))


# Sign, IsNaN, IsInf, Mod and GatherElements are composed here from graph ops that exist
# (compares, selects, integer div/mul/sub, gather), not added as engine opcodes: each
# composition is exact (a compare or a select moves or tests a value without rounding; the
# integer arithmetic cannot overflow: |trunc(a/b)*b| <= |a|), so fusion, the simulator and
# the HIP printer already handle every piece, and no new error rule is needed.
def _scalar(im: _Importer, x: Value, v) -> Value:
    """A (1,) constant of ``x``'s dtype (broadcasts against ``x``)."""
    return im.g.constant(np.array([v], _NP[x.dtype]), dtype=x.dtype)


def _sign(im: _Importer, node):
    """x > 0 ? 1 : (x < 0 ? -1 : x - x): what is left is a zero or NaN, and x - x is +0
    for either zero (np.sign(-0.0) is +0.0) and NaN for NaN, exactly."""
    g = im.g
    x = im.value(node.input[0], node)
    if x.dtype == "bool":
        raise UnsupportedError(f"{im.where(node)}: Sign of a bool tensor")
    inner = g.select(g.compare("lt", x, _scalar(im, x, 0)), _scalar(im, x, -1), g.sub(x, x))
    return g.select(g.compare("gt", x, _scalar(im, x, 0)), _scalar(im, x, 1), inner)


def _float_operand(im: _Importer, node) -> Value:
    x = im.value(node.input[0], node)
    if x.dtype not in FLOAT_DTYPES:
        raise UnsupportedError(f"{im.where(node)}: {node.op_type} takes a float tensor, "
                               f"not {x.dtype}")
    return x


def _is_nan(im: _Importer, node):
    """NaN is the one value not equal to itself: not(x == x)."""
    x = _float_operand(im, node)
    return im.g.logical_not(im.g.compare("eq", x, x))


def _is_inf(im: _Importer, node):
    """x == +inf or x == -inf, as detect_positive / detect_negative ask; with both off,
    x < -inf, which nothing (NaN included) satisfies: an all-false tensor of x's shape."""
    g = im.g
    x = _float_operand(im, node)
    pos = bool(im.attr(node, "detect_positive", 1))
    neg = bool(im.attr(node, "detect_negative", 1))
    tests = ([g.compare("eq", x, _scalar(im, x, np.inf))] if pos else []) + \
        ([g.compare("eq", x, _scalar(im, x, -np.inf))] if neg else [])
    if not tests:
        return g.compare("lt", x, _scalar(im, x, -np.inf))
    return tests[0] if len(tests) == 1 else g.binary("or", *tests)


def _mod(im: _Importer, node):
    """Integer Mod: r = a - trunc(a / b) * b (the IR's integer div truncates), the C
    remainder (fmod=1, np.fmod); fmod=0 (np.mod, Python's %) moves a nonzero r whose sign
    differs from b's by adding b. A zero divisor gives 0, as np.mod and np.fmod give it on
    integers (onnx's reference evaluator): b = 0 and b = -1 are replaced by 1 before the
    division, for which r = a - a * 1 = 0 is right for both, so no kernel divides by zero
    (the simulator traps on it, the GPU gives garbage) and INT_MIN / -1 cannot overflow.
    Float Mod with fmod=1 is the IR's fmod (C's fmodf, exact). Float Mod with fmod=0
    (defined from opset 28; onnx's evaluator computes np.mod at any opset) is numpy's
    npy_divmod: r = fmod(a, b), plus b where r is nonzero and its sign differs from b's
    (one rounding, the one numpy makes), and a zero r takes b's sign (-0.0 where b < 0)."""
    g = im.g
    fmod = int(im.attr(node, "fmod", 0))
    if fmod not in (0, 1):
        raise ModelError(f"{im.where(node)}: fmod is {fmod}; ONNX allows 0 or 1")
    a, b = _binary_operands(im, node, node.input[0], node.input[1])
    zero = _scalar(im, a, 0)
    if a.dtype in FLOAT_DTYPES:
        r = g.fmod(a, b)
        if fmod == 1:
            return r
        b_neg = g.compare("lt", b, zero)
        differ = g.binary("xor", g.compare("lt", r, zero), b_neg)
        moved = g.binary("and", differ, g.logical_not(g.compare("eq", r, zero)))
        r = g.select(moved, g.add(r, b), r)
        # (a -0.0 constant here is what found gpusim's compiler giving -0.0 the register
        # of a +0.0 constant in the same kernel, fixed there)
        signed_zero = g.select(b_neg, _scalar(im, a, -0.0), zero)
        return g.select(g.compare("eq", r, zero), signed_zero, r)
    if a.dtype != "i32" or b.dtype != "i32":
        raise UnsupportedError(f"{im.where(node)}: Mod of {a.dtype} and {b.dtype} tensors")
    trivial = g.binary("or", g.compare("eq", b, zero), g.compare("eq", b, _scalar(im, b, -1)))
    b = g.select(trivial, _scalar(im, b, 1), b)
    r = g.sub(a, g.mul(g.div(a, b), b))
    if fmod == 0:
        differ = g.binary("xor", g.compare("lt", r, zero), g.compare("lt", b, zero))
        moved = g.binary("and", differ, g.logical_not(g.compare("eq", r, zero)))
        r = g.select(moved, g.add(r, b), r)
    return r


def _variadic(kind):
    def rule(im: _Importer, node):
        names = list(node.input)
        first = next((n for n in names if not im.is_static(n)), names[0])
        acc = im.value(first, node)
        rest = list(names)
        rest.remove(first)
        for name in rest:
            acc = im.g.binary(kind, acc, im.value(name, node, like=acc))
        return acc
    return rule


def _mean(im: _Importer, node):
    total = _variadic("add")(im, node)
    return im.g.div(total, float(len(node.input))) if len(node.input) > 1 else total


def _where(im: _Importer, node):
    cond = im.value(node.input[0], node, dtype="bool")
    a_name, b_name = node.input[1], node.input[2]
    a, b = _binary_operands(im, node, a_name, b_name)
    return im.g.select(cond, a, b)


def _cumsum(im: _Importer, node):
    """CumSum along one axis (position ids from an attention mask, as RoBERTa and OPT
    compute them): y[j] = sum of x[i] over the i a constant (L, L) triangle keeps (i <= j;
    i < j exclusive; i >= j reverse). Each x[i] is selected into row i of an (.., L, L, ..)
    broadcast, not multiplied by a 0/1 mask (inf * 0 would be NaN), and the rows summed:
    L^2 work instead of a scan's L, a reduction fusion already knows; no scan is built."""
    g = im.g
    x = im.value(node.input[0], node)
    rank = x.type.rank
    axis = im.static(node.input[1], node, "the axis").reshape(-1)
    if axis.size != 1 or not -rank <= int(axis[0]) < rank:
        raise ShapeError(f"{im.where(node)}: axis {axis.tolist()} is not one axis of {x.shape}")
    a = int(axis[0]) % rank
    n = x.shape[a]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    exclusive, reverse = bool(im.attr(node, "exclusive", 0)), bool(im.attr(node, "reverse", 0))
    keep = (i >= j if reverse else i <= j) & (i != j if exclusive else True)
    tri = g.constant(keep.reshape((n, n) + (1,) * (rank - a - 1)), dtype="bool",
                     name=im.fresh(f"{node.output[0]}_triangle"))
    rows = g.reshape(x, x.shape[:a + 1] + (1,) + x.shape[a + 1:])
    zero = g.constant(np.zeros(1, _NP[x.dtype]), dtype=x.dtype)
    return g.reduce_sum(g.select(tri, rows, zero), axes=a, keepdims=False)


def _axes(im: _Importer, node, input_index: int, attr_until: int | None) -> list | None:
    """Axes from the attribute (opsets before ``attr_until``) or from an optional input."""
    if attr_until is not None and im.opset < attr_until:
        axes = im.attr(node, "axes")
        return None if axes is None else [int(a) for a in axes]
    name = im.optional_input(node, input_index)
    if name is None:
        return None
    return [int(a) for a in im.static(name, node, "axes").reshape(-1)]


def _reduce_common(im: _Importer, node, kind, attr_until):
    """(the reduced tensor, (axes, keepdims) or None for a no-op). The axes are read
    first: a computed axes input is the error to report, even when the data is an empty
    constant (a reduction over an empty set then folds, once its axes are known)."""
    axes = _axes(im, node, 1, attr_until)
    keepdims = bool(im.attr(node, "keepdims", 1))
    x = im.value(node.input[0], node)
    if not axes:
        if im.attr(node, "noop_with_empty_axes", 0):
            return x, None
        axes = None
    return x, (axes, keepdims)


def _reduce(kind):
    """A reduction; integer inputs reduce in i32. ReduceMax/ReduceMin of a bool tensor
    (opset 20) is any/all: reduced as 0/1 integers and compared back."""
    attr_until = 13 if kind == "reduce_sum" else 18

    def rule(im: _Importer, node):
        x, spec = _reduce_common(im, node, kind, attr_until)
        if spec is None:
            return x
        if x.dtype == "bool":
            if kind not in ("reduce_max", "reduce_min"):
                raise UnsupportedError(f"{im.where(node)}: {node.op_type} of a bool tensor; "
                                       f"Cast it to INT32 or FLOAT first")
            r = im.g.reduce(kind, im.g.cast(x, "i32"), *spec)
            return im.g.compare("gt", r, im.g.constant(np.zeros(1, np.int32), dtype="i32"))
        return im.g.reduce(kind, x, *spec)
    return rule


def _arg_reduce(kind):
    """ArgMax / ArgMin as primitives: the max (min) along the axis, then the smallest
    (with ``select_last_index``, largest) position holding it -- a reduce_min (max) of
    the positions where the value equals the extreme, others masked to n (-1). Both are
    row reductions, so they fuse into one dispatch. Simplification: a NaN in the row is
    never an extreme here (numpy's argmax would return the first NaN's position)."""
    def rule(im: _Importer, node):
        g = im.g
        x = im.value(node.input[0], node)
        if x.dtype == "bool":
            x = g.cast(x, "i32")
        rank = x.type.rank
        axis = int(im.attr(node, "axis", 0))
        if not -rank <= axis < rank:
            raise ShapeError(f"{im.where(node)}: axis {axis} is out of range for rank {rank}")
        axis %= rank
        keepdims = bool(im.attr(node, "keepdims", 1))
        last = bool(im.attr(node, "select_last_index", 0))
        n = x.shape[axis]
        extreme = g.reduce(kind, x, [axis], True)
        hit = g.compare("eq", x, extreme)
        pos = np.arange(n, dtype=np.int32).reshape((n,) + (1,) * (rank - axis - 1))
        pos_c = g.constant(pos, dtype="i32", name=im.fresh(node.output[0] + "_positions"))
        miss = g.constant(np.array([-1 if last else n], np.int32), dtype="i32")
        cand = g.select(hit, pos_c, miss)
        return g.reduce("reduce_max" if last else "reduce_min", cand, [axis], keepdims)
    return rule


def _reduce_squares(root: bool):
    """ReduceSumSquare, and ReduceL2 (its square root)."""
    def rule(im: _Importer, node):
        x, spec = _reduce_common(im, node, "reduce_sum", 18)
        sq = im.g.mul(x, x)
        if spec is None:  # noop_with_empty_axes: the elementwise part still applies
            return im.g.sqrt(sq) if root else sq
        s = im.g.reduce("reduce_sum", sq, *spec)
        return im.g.sqrt(s) if root else s
    return rule


def _softmax(im: _Importer, node):
    x = im.value(node.input[0], node)
    return builders.softmax(im.g, x, int(im.attr(node, "axis", -1)))


def _layer_norm(im: _Importer, node):
    g = im.g
    x = im.value(node.input[0], node)
    axis = int(im.attr(node, "axis", -1))
    if not -x.type.rank <= axis < x.type.rank:
        raise ShapeError(f"{im.where(node)}: axis {axis} is out of range for rank "
                         f"{x.type.rank}")
    axis %= x.type.rank
    axes = tuple(range(axis, x.type.rank))
    scale = im.value(node.input[1], node, like=x)
    bias_name = im.optional_input(node, 2)
    bias = im.value(bias_name, node, like=x) if bias_name else None
    eps = float(im.attr(node, "epsilon", 1e-5))
    if len([o for o in node.output if o]) == 1 and len(node.output) == 1:
        return builders.layer_norm(g, x, scale, bias, eps=eps, axis=axes)
    # Mean and InvStdDev requested: the same primitives as builders.layer_norm, named
    mean = g.reduce_mean(x, axes, keepdims=True)
    d = g.sub(x, mean)
    inv = g.rsqrt(g.add(g.reduce_mean(g.mul(d, d), axes, keepdims=True), eps))
    y = g.mul(g.mul(d, inv), scale)
    if bias is not None:
        y = g.add(y, bias)
    return [y, mean, inv]



def _channel_param(im: _Importer, node, i: int, x: Value, channels: int, what: str) -> Value:
    """A per-channel (C,) scale or bias as a (C, 1, ..., 1) value that broadcasts over the
    spatial dimensions of an (N, C, ...) tensor."""
    v = im.value(node.input[i], node, like=x)
    if v.shape not in ((channels,), (1,)):
        raise ShapeError(f"{im.where(node)}: {what} has shape {v.shape}; expected "
                         f"({channels},) for {channels} channels")
    return im.g.reshape(v, (v.shape[0],) + (1,) * (x.type.rank - 2))


def _instance_norm(im: _Importer, node):
    """InstanceNormalization: each (sample, channel) plane normalised over its spatial
    dimensions, then the per-channel scale and bias: builders.layer_norm over axes 2.."""
    x = im.value(node.input[0], node)
    if x.type.rank < 3:
        raise ShapeError(f"{im.where(node)}: input has shape {x.shape}; InstanceNormalization "
                         f"needs (N, C, D1, ...)")
    c = x.shape[1]
    scale = _channel_param(im, node, 1, x, c, "scale")
    bias = _channel_param(im, node, 2, x, c, "B")
    eps = float(im.attr(node, "epsilon", 1e-5))
    return builders.layer_norm(im.g, x, scale, bias, eps=eps, axis=tuple(range(2, x.type.rank)))


def _group_norm(im: _Importer, node):
    """GroupNormalization: the channels split into ``num_groups`` groups, each (sample,
    group) normalised over its channels and spatial dimensions (a reshape to (N, G, -1),
    builders.layer_norm over the last axis, the reshape back), then the scale and bias:
    per group from opset 18's (G,) scale and bias, per channel from opset 21's (C,).
    opset 21's ``stash_type`` (the precision of the statistics, float32 by default) casts
    a float16 input to f32 for the normalisation and back."""
    g = im.g
    x = im.value(node.input[0], node)
    if x.type.rank < 3:
        raise ShapeError(f"{im.where(node)}: input has shape {x.shape}; GroupNormalization "
                         f"needs (N, C, D1, ...)")
    groups = int(im.attr(node, "num_groups", 0))
    n, c = x.shape[0], x.shape[1]
    if groups < 1 or c % groups:
        raise ShapeError(f"{im.where(node)}: num_groups {groups} does not divide the "
                         f"{c} channels")
    eps = float(im.attr(node, "epsilon", 1e-5))
    stash = int(im.attr(node, "stash_type", 1))
    work = g.cast(x, "f32") if (x.dtype == "f16" and stash == 1 and im.opset >= 21) else x
    flat = g.reshape(work, (n, groups, math.prod(x.shape[1:]) // groups))
    y = g.reshape(builders.layer_norm(g, flat, eps=eps, axis=-1), x.shape)
    if work is not x:
        y = g.cast(y, x.dtype)
    per = groups if im.opset < 21 else c
    scale = im.value(node.input[1], node, like=x)
    bias = im.value(node.input[2], node, like=x)
    for v, what in ((scale, "scale"), (bias, "bias")):
        if v.shape not in ((per,), (1,)):
            raise ShapeError(f"{im.where(node)}: {what} has shape {v.shape}; opset "
                             f"{im.opset} expects ({per},)")
    if per == groups and groups != c and scale.shape != (1,):
        # a group's parameter applies to each of its channels: repeat it c/groups times
        rep = lambda v: g.reshape(g.broadcast(g.reshape(v, (groups, 1)),
                                              (groups, c // groups)), (c,))
        scale, bias = rep(scale), rep(bias)
    tail = (1,) * (x.type.rank - 2)
    return g.add(g.mul(y, g.reshape(scale, (scale.shape[0],) + tail)),
                 g.reshape(bias, (bias.shape[0],) + tail))


def _resize_axis_weights(im: _Importer, node, n_in: int, scale, size) -> np.ndarray:
    """The (n_out, n_in) interpolation matrix of one axis, computed by onnx's own
    ReferenceEvaluator: the node's attributes on an (n_in, n_in) identity resized along
    its first axis only. Every mode ONNX defines (nearest with each rounding, linear,
    cubic, antialias) interpolates one axis after another, so the axes' matrices give
    the whole resize, and its coordinate rules are onnx's, not a copy of them."""
    from onnx import helper, TensorProto  # lazy: start-up time (see the imports)
    from onnx.reference import ReferenceEvaluator  # lazy: start-up time (see the imports)

    attrs = [a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")]
    if scale is not None:
        ins, extra = ["x", "", "scales"], [helper.make_tensor(
            "scales", TensorProto.FLOAT, [2], [float(scale), 1.0])]
    else:
        ins, extra = ["x", "", "", "sizes"], [helper.make_tensor(
            "sizes", TensorProto.INT64, [2], [int(size), n_in])]
    n = helper.make_node("Resize", ins, ["y"])
    n.attribute.extend(attrs)
    gr = helper.make_graph([n], "axis", [helper.make_tensor_value_info(
        "x", TensorProto.DOUBLE, [n_in, n_in])], [helper.make_empty_tensor_value_info("y")],
        initializer=extra)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", max(im.opset, 18))])
    with np.errstate(all="ignore"):
        return np.asarray(ReferenceEvaluator(m).run(None, {"x": np.eye(n_in)})[0])


def _resize(im: _Importer, node):
    """Resize as, per resized axis, ``taps`` gathers of that axis (constant indices) each
    scaled by a constant weight column and summed: nearest is one gather, linear two taps,
    cubic four. The weights are the axis's interpolation matrix (``_resize_axis_weights``),
    so the values are onnx's own. ``tf_crop_and_resize`` (extrapolated values outside the
    region) and ``keep_aspect_ratio_policy`` other than ``stretch`` are refused: no
    exporter in the families of issue 28 emits them. A padding tap (a row with fewer
    non-zero weights than the axis's widest) reads the row's first tap with weight 0, so
    an infinite input there gives NaN where onnx gives the infinity."""
    g = im.g
    x = im.value(node.input[0], node)
    rank = x.type.rank
    mode = im.attr(node, "mode", b"nearest")
    ctm = im.attr(node, "coordinate_transformation_mode", b"half_pixel")
    mode, ctm = [v.decode() if isinstance(v, bytes) else v for v in (mode, ctm)]
    if ctm == "tf_crop_and_resize":
        raise UnsupportedError(f"{im.where(node)}: coordinate_transformation_mode "
                               f"'tf_crop_and_resize' is not supported (no exporter of the "
                               f"supported families emits it)")
    policy = im.attr(node, "keep_aspect_ratio_policy", b"stretch")
    policy = policy.decode() if isinstance(policy, bytes) else policy
    scales_name, sizes_name = im.optional_input(node, 2), im.optional_input(node, 3)
    scales = (im.static(scales_name, node, "scales").astype(np.float64)
              if scales_name else None)
    sizes = im.static(sizes_name, node, "sizes").astype(np.int64) if sizes_name else None
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ModelError(f"{im.where(node)}: give exactly one of scales and sizes")
    if sizes is not None and policy != "stretch":
        raise UnsupportedError(f"{im.where(node)}: keep_aspect_ratio_policy {policy!r} is not "
                               f"supported (only 'stretch')")
    axes = im.attr(node, "axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ShapeError(f"{im.where(node)}: {len(given)} {'scales' if scales is not None else 'sizes'} "
                         f"for {len(axes)} axes of shape {x.shape}")
    y = x
    for a, v in zip(axes, given):
        n_in = x.shape[a]
        if scales is not None:
            if v <= 0:
                raise ShapeError(f"{im.where(node)}: scale {v} on axis {a} is not positive")
            n_out = int(math.floor(n_in * v))
        else:
            n_out = int(v)
        if n_out < 1:
            raise ShapeError(f"{im.where(node)}: axis {a} of {x.shape} resizes to {n_out}; "
                             f"wavefuse needs every dimension to be at least 1")
        if n_out == n_in and (scales is None or v == 1.0):
            continue
        w = _resize_axis_weights(im, node, n_in, v if scales is not None else None,
                                 None if scales is not None else v)
        taps = max(1, int((w != 0).sum(axis=1).max()))
        idx = np.zeros((n_out, taps), np.int32)
        wt = np.zeros((n_out, taps), np.float64)
        for r in range(n_out):
            nz = np.flatnonzero(w[r])
            idx[r, :] = nz[0] if nz.size else 0
            idx[r, :nz.size], wt[r, :nz.size] = nz, w[r, nz]
        if taps == 1 and np.all(wt[:, 0] == 1.0):  # a selection: nearest, or scale 1 rows
            y = g.gather(y, g.constant(idx[:, 0], dtype="i32"), a)
            continue
        acc = None
        col = (n_out,) + (1,) * (rank - a - 1)
        for t in range(taps):
            term = g.mul(g.gather(y, g.constant(idx[:, t], dtype="i32"), a),
                         g.constant(wt[:, t].reshape(col).astype(_NP[y.dtype]), dtype=y.dtype))
            acc = term if acc is None else g.add(acc, term)
        y = acc
    return y if y is not x else im.g.reshape(x, x.shape)


def _matmul(im: _Importer, node):
    a, b = _binary_operands(im, node, node.input[0], node.input[1])
    return _matmul_values(im.g, a, b)


def _matmul_values(g, a, b):
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


def _auto_pads(im, node, spatial, kernel, strides, dil) -> list:
    """Per spatial dim (begin, end) padding from ``pads`` or ``auto_pad``."""
    n = len(spatial)
    auto_pad = im.attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "NOTSET":
        pads = tuple(im.attr(node, "pads", (0,) * (2 * n)))
        return [(int(pads[i]), int(pads[i + n])) for i in range(n)]
    if auto_pad == "VALID":
        return [(0, 0)] * n
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return [_same_pads(spatial[i], kernel[i], strides[i], dil[i], auto_pad == "SAME_UPPER")
                for i in range(n)]
    raise UnsupportedError(f"{im.where(node)}: auto_pad {auto_pad!r}")


def _conv(im: _Importer, node):
    """Conv with one or two spatial dims. A 1-D convolution is the 2-D one over a unit
    height: input (N, C, L) viewed as (N, C, 1, L), filter (O, C/g, K) as (O, C/g, 1, K),
    stride/dilation/padding 1/1/0 on the unit dim; the result viewed back as (N, O, L')."""
    return conv_values(im, node, im.value(node.input[0], node), node.input[1],
                       im.optional_input(node, 2))


def conv_values(im: _Importer, node, x: Value, w_name: str, b_name: str | None,
                filter_value=None):
    """Conv of graph value ``x`` by the filter ONNX tensor ``w_name`` (or, given,
    ``filter_value``: a graph value already computed, e.g. an integer filter less its zero
    point) with the node's attributes; ``b_name`` an optional bias added per channel."""
    g = im.g
    rank = x.type.rank
    if rank not in (3, 4) or len(im.shape_of(w_name, node)) != rank:
        raise UnsupportedError(f"{im.where(node)}: only 1-D and 2-D convolutions (NCL / NCHW "
                               f"input, OIL / OIHW filter) are supported, got input "
                               f"{x.shape} and filter {im.shape_of(w_name, node)}; "
                               f"express it as 2-D convolutions before export")
    one_d = rank == 3
    if filter_value is not None:
        w = filter_value
        if one_d:
            w = g.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
    elif one_d and im.is_static(w_name):  # a constant filter: reshaped at import
        arr = im.static(w_name, node, "the filter")
        w = g.constant(_as_dtype(arr[:, :, None, :], x.dtype, im.where(node)), dtype=x.dtype,
                       name=im.fresh(w_name))
    else:
        w = im.value(w_name, node, like=x)
        if one_d:
            w = g.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
    nsp = rank - 2
    kernel = im.attr(node, "kernel_shape")
    if kernel is not None and tuple(kernel) != w.shape[4 - nsp:]:
        raise ShapeError(f"{im.where(node)}: kernel_shape {tuple(kernel)} disagrees with "
                         f"the filter {im.shape_of(w_name, node)}")
    strides = tuple(im.attr(node, "strides", (1,) * nsp))
    dil = tuple(im.attr(node, "dilations", (1,) * nsp))
    pads = _auto_pads(im, node, x.shape[2:], w.shape[4 - nsp:], strides, dil)
    if one_d:
        x = g.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        strides, dil, pads = (1,) + strides, (1,) + dil, [(0, 0)] + pads
    (t, b_), (l_, r) = pads
    y = g.conv2d(x, w, data_format="NCHW", stride=strides, padding=(t, l_, b_, r),
                 dilation=dil, groups=int(im.attr(node, "group", 1)))
    if b_name:
        bias = im.value(b_name, node, like=y)
        y = g.add(y, g.reshape(bias, (1, bias.shape[0], 1, 1)))
    if one_d:
        y = g.reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return y


def _conv_transpose_pads(im, node, spatial, kernel, strides, dil, out_pad) -> list:
    """Per spatial dim (begin, end) of ConvTranspose: ``pads``, or from ``output_shape`` /
    ``auto_pad`` as the ONNX spec splits the total (SAME_UPPER puts the odd one at the
    end, NOTSET and SAME_LOWER at the start; onnx's evaluator puts NOTSET's all at the end
    when the total is positive, the spec and onnxruntime do not)."""
    n = len(spatial)
    auto_pad = im.attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedError(f"{im.where(node)}: auto_pad {auto_pad!r}")
    out_shape = im.attr(node, "output_shape")
    if out_shape is not None:
        out_shape = [int(v) for v in out_shape][-n:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [spatial[i] * strides[i] for i in range(n)]
    if out_shape is None:
        if auto_pad == "VALID":
            return [(0, 0)] * n
        pads = tuple(im.attr(node, "pads", (0,) * (2 * n)))
        return [(int(pads[i]), int(pads[i + n])) for i in range(n)]
    pads = []
    for i in range(n):
        total = (strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1
                 - out_shape[i])
        small = total // 2
        pads.append((small, total - small) if auto_pad == "SAME_UPPER"
                    else (total - small, small))
    return pads


def _conv_transpose(im: _Importer, node):
    """ConvTranspose (1-D or 2-D) as the convolution whose gradient it is: the input with
    stride-1 zeros between neighbours (a unit axis after each spatial axis, padded to the
    stride, folded back: pure data movement, so an infinity stays an infinity), padded by
    dilation * (kernel - 1) less the pads (a negative amount crops), convolved at stride 1
    by the filter flipped in space and transposed per group, (C_in, C_out/g, k) to
    (C_out, C_in/g, k). Simplification: the convolution multiplies the inserted zeros too,
    stride^2 times the MACs a transposed-convolution kernel that skips them would do; no
    such kernel is built, so the dispatch is priced as the convolution it lowers to.
    Grouped cases are checked against numpy, not onnx's evaluator, whose grouped path
    mixes up the groups' channels (onnx 1.23)."""
    g = im.g
    x = im.value(node.input[0], node)
    rank = x.type.rank
    wshape = tuple(im.shape_of(node.input[1], node))
    if rank not in (3, 4) or len(wshape) != rank:
        raise UnsupportedError(f"{im.where(node)}: only 1-D and 2-D transposed convolutions "
                               f"(NCL / NCHW input, IOL / IOHW filter) are supported, got input "
                               f"{x.shape} and filter {wshape}")
    nsp = rank - 2
    groups = int(im.attr(node, "group", 1))
    cin = x.shape[1]
    if wshape[0] != cin or groups < 1 or cin % groups:
        raise ShapeError(f"{im.where(node)}: filter {wshape} does not fit input {x.shape} "
                         f"with group={groups} (the filter is (C_in, C_out/group, ...))")
    cin_g, cout = cin // groups, wshape[1] * groups
    kernel = wshape[2:]
    ks = im.attr(node, "kernel_shape")
    if ks is not None and tuple(ks) != kernel:
        raise ShapeError(f"{im.where(node)}: kernel_shape {tuple(ks)} disagrees with the "
                         f"filter {wshape}")
    strides = tuple(int(v) for v in im.attr(node, "strides", (1,) * nsp))
    dil = tuple(int(v) for v in im.attr(node, "dilations", (1,) * nsp))
    out_pad = tuple(int(v) for v in im.attr(node, "output_padding", (0,) * nsp))
    if min(strides + dil) < 1 or min(out_pad) < 0:
        raise ShapeError(f"{im.where(node)}: strides {strides}, dilations {dil} and "
                         f"output_padding {out_pad} must be positive (padding non-negative)")
    pads = _conv_transpose_pads(im, node, x.shape[2:], kernel, strides, dil, out_pad)
    # the filter: (g, C_in/g, C_out/g, k) -> (g, C_out/g, C_in/g, k), flipped in space
    if im.is_static(node.input[1]):
        arr = im.static(node.input[1], node, "the filter")
        arr = arr.reshape((groups, cin_g, wshape[1]) + kernel).swapaxes(1, 2)
        arr = arr.reshape((cout, cin_g) + kernel)[(...,) + (slice(None, None, -1),) * nsp]
        if nsp == 1:
            arr = arr[:, :, None, :]
        w = g.constant(_as_dtype(np.ascontiguousarray(arr), x.dtype, im.where(node)),
                       dtype=x.dtype, name=im.fresh(node.input[1]))
    else:
        w = im.value(node.input[1], node, like=x)
        w = g.reshape(w, (groups, cin_g, wshape[1]) + kernel)
        w = g.transpose(w, (0, 2, 1) + tuple(range(3, 3 + nsp)))
        w = g.reshape(w, (cout, cin_g) + kernel)
        w = g.slice(w, (0, 0) + tuple(k - 1 for k in kernel), (1, 1) + (-1,) * nsp,
                    (cout, cin_g) + kernel)
        if nsp == 1:
            w = g.reshape(w, (cout, cin_g, 1) + kernel)
    if nsp == 1:  # a unit height, as _conv does
        x = g.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        kernel, strides, dil, out_pad = (1,) + kernel, (1,) + strides, (1,) + dil, (0,) + out_pad
        pads = [(0, 0)] + pads
    n, c, h, wd = x.shape
    sh, sw = strides
    if sh > 1 or sw > 1:  # stride - 1 zeros after every element (and after the last)
        x = g.reshape(x, (n, c, h, 1, wd, 1))
        x = g.pad(x, ((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)))
        x = g.reshape(x, (n, c, h * sh, wd * sw))
    before = [dil[i] * (kernel[i] - 1) - pads[i][0] for i in range(2)]
    after = [dil[i] * (kernel[i] - 1) - pads[i][1] + out_pad[i] - (strides[i] - 1)
             for i in range(2)]
    if min(before + after) < 0:  # pads larger than the filter's reach: crop first
        first = [max(0, -b) for b in before]
        length = [x.shape[2 + i] - first[i] - max(0, -after[i]) for i in range(2)]
        if min(length) < 1:
            raise ShapeError(f"{im.where(node)}: pads {pads[-nsp:]} leave no output of "
                             f"input {im.shape_of(node.input[0], node)}")
        x = g.slice(x, (0, 0) + tuple(first), (1,) * 4, (n, c) + tuple(length))
        before, after = [max(0, b) for b in before], [max(0, a) for a in after]
    y = g.conv2d(x, w, data_format="NCHW", stride=(1, 1),
                 padding=(before[0], before[1], after[0], after[1]), dilation=dil,
                 groups=groups)
    b_name = im.optional_input(node, 2)
    if b_name:
        bias = im.value(b_name, node, like=y)
        y = g.add(y, g.reshape(bias, (1, bias.shape[0], 1, 1)))
    if nsp == 1:
        y = g.reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return y


def _batch_norm(im: _Importer, node):
    """Inference BatchNormalization as y = x * s + t with s = scale / sqrt(var + eps) and
    t = bias - mean * s folded at import (statistics are initializers); a preceding conv
    takes the multiply-add as its epilogue."""
    g = im.g
    if im.attr(node, "training_mode", 0) or len([o for o in node.output if o]) > 1:
        raise UnsupportedError(f"{im.where(node)}: training-mode BatchNormalization (running "
                               f"statistics outputs); export the model in eval mode")
    x = im.value(node.input[0], node)
    eps = float(im.attr(node, "epsilon", 1e-5))
    if all(im.is_static(n) for n in node.input[1:5]):
        scale, bias, mean, var = (im.static(n, node, "").astype(np.float64)
                                  for n in node.input[1:5])
        s = scale / np.sqrt(var + eps)
        t = bias - mean * s
        shape = (1, x.shape[1]) + (1,) * (x.type.rank - 2)
        s_c = g.constant(s.reshape(shape).astype(_NP[x.dtype]), dtype=x.dtype,
                         name=im.fresh(node.input[1] + "_folded"))
        t_c = g.constant(t.reshape(shape).astype(_NP[x.dtype]), dtype=x.dtype,
                         name=im.fresh(node.input[2] + "_folded"))
        return g.add(g.mul(x, s_c), t_c)
    shape = (1, x.shape[1]) + (1,) * (x.type.rank - 2)
    scale, bias, mean, var = (g.reshape(im.value(n, node, like=x), shape)
                              for n in node.input[1:5])
    return g.add(g.mul(g.sub(x, mean), g.mul(g.rsqrt(g.add(var, eps)), scale)), bias)


def _pool(kind):
    """MaxPool / AveragePool as the max / mean of kernel-many strided slices of the padded
    input: the window loop unrolled into views, so it fuses like any elementwise chain.

    MaxPool's optional Indices output (ONNX: the flattened index of each maximum in the
    unpadded input, ``((n * C + c) * H + h) * W + w``, or with ``storage_order=1`` the
    column-major ``(n * C + c) * H * W + h + w * H``; the first maximum in window order
    wins) is read off the same unrolled window: each tap's input index is a constant,
    and the first tap (in window order) equal to the maximum gives its index, as nested
    ``select``s. Simplifications: a window whose real values are all -inf may report a
    padding tap; with a NaN in the window no tap equals the maximum and the last tap is
    reported."""
    def rule(im: _Importer, node):
        g = im.g
        want_idx = len(node.output) > 1 and bool(node.output[1])
        x = im.value(node.input[0], node)
        nsp = x.type.rank - 2
        if nsp < 1:
            raise ShapeError(f"{im.where(node)}: pooling needs rank >= 3, got {x.shape}")
        storage = int(im.attr(node, "storage_order", 0)) if kind == "max" else 0
        kernel = tuple(int(k) for k in im.attr(node, "kernel_shape"))
        strides = tuple(int(s) for s in im.attr(node, "strides", (1,) * nsp))
        dil = tuple(int(d) for d in im.attr(node, "dilations", (1,) * nsp))
        spatial = x.shape[2:]
        pads = _auto_pads(im, node, spatial, kernel, strides, dil)
        ceil = bool(im.attr(node, "ceil_mode", 0))
        outs, extra = [], []
        for i in range(nsp):
            span = spatial[i] + pads[i][0] + pads[i][1] - dil[i] * (kernel[i] - 1) - 1
            o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
            if ceil and (o - 1) * strides[i] >= spatial[i] + pads[i][0]:
                o -= 1  # the last window must start inside the input or left padding
            if o < 1:
                raise ShapeError(f"{im.where(node)}: the window does not fit dimension "
                                 f"{i + 2} of {x.shape}")
            need = (o - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1
            extra.append(max(0, need - (spatial[i] + pads[i][0] + pads[i][1])))
            outs.append(o)
        fill = -np.inf if kind == "max" else 0.0
        full = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
        xp = g.pad(x, full, fill) if any(a or b for a, b in full) else x
        acc, wins = None, []
        taps = list(itertools.product(*(range(k) for k in kernel)))
        for offs in taps:
            starts = (0, 0) + tuple(o * d for o, d in zip(offs, dil))
            steps = (1, 1) + strides
            win = g.slice(xp, starts, steps, x.shape[:2] + tuple(outs))
            wins.append(win)
            acc = win if acc is None else (g.max(acc, win) if kind == "max" else
                                           g.add(acc, win))
        if kind == "max":
            if not want_idx:
                return acc
            # the first tap equal to the maximum: selects nested from the last tap back
            idx = None
            for offs, win in reversed(list(zip(taps, wins))):
                tap = g.constant(_tap_indices(spatial, outs, offs, strides, dil, pads,
                                              storage), dtype="i32",
                                 name=im.fresh(node.output[1] + "_tap"))
                idx = tap if idx is None else g.select(g.compare("eq", win, acc), tap, idx)
            base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64)
                    * math.prod(spatial)).reshape(x.shape[:2] + (1,) * nsp)
            base_c = g.constant(_as_dtype(base, "i32", im.where(node)), dtype="i32",
                                name=im.fresh(node.output[1] + "_channel"))
            return [acc, g.add(idx, base_c)]
        count_pad = int(im.attr(node, "count_include_pad", 0))
        # Divisor per output position: the window's elements inside the input (plus the
        # explicit padding with count_include_pad); never the ceil_mode overhang.
        counts = np.ones((1,) * 2 + tuple(outs), np.float64)
        for i in range(nsp):
            lo = -pads[i][0] if count_pad else 0
            hi = spatial[i] + (pads[i][1] if count_pad else 0)
            starts = np.arange(outs[i]) * strides[i] - pads[i][0]
            taps = starts[:, None] + np.arange(kernel[i])[None, :] * dil[i]
            c = ((taps >= lo) & (taps < hi)).sum(axis=1).astype(np.float64)
            shape = [1] * (2 + nsp)
            shape[2 + i] = outs[i]
            counts = counts * c.reshape(shape)
        div = g.constant((1.0 / counts).astype(_NP[x.dtype]), dtype=x.dtype,
                         name=im.fresh((node.name or node.output[0]) + "_inv_count"))
        return g.mul(acc, div)
    return rule


def _tap_indices(spatial, outs, offs, strides, dil, pads, storage) -> np.ndarray:
    """The input index (within one channel, row-major or with ``storage`` column-major)
    that window tap ``offs`` reads at each output position, shape (1, 1, *outs)."""
    nsp = len(spatial)
    order = range(nsp) if storage else reversed(range(nsp))
    stride_of, step = [0] * nsp, 1
    for i in order:  # the innermost dim (row-major: the last) has stride 1
        stride_of[i] = step
        step *= spatial[i]
    flat = np.zeros((1, 1) + tuple(outs), np.int64)
    for i in range(nsp):
        pos = np.arange(outs[i]) * strides[i] + offs[i] * dil[i] - pads[i][0]
        shape = [1] * (2 + nsp)
        shape[2 + i] = outs[i]
        flat = flat + (pos * stride_of[i]).reshape(shape)
    return flat.astype(np.int32)


def _global_pool(kind):
    def rule(im: _Importer, node):
        x = im.value(node.input[0], node)
        return im.g.reduce(kind, x, tuple(range(2, x.type.rank)), True)
    return rule


def _transpose(im: _Importer, node):
    x = im.value(node.input[0], node)
    perm = im.attr(node, "perm")
    perm = tuple(reversed(range(x.type.rank))) if perm is None else tuple(perm)
    return im.g.transpose(x, perm)


def _block_rearrange(im: _Importer, node, to_depth: bool):
    """DepthToSpace (pixel shuffle) and SpaceToDepth (a YOLO stem's focus) are a reshape, a
    transpose and a reshape: data movement alone, which the transpose lowering copies."""
    g = im.g
    x = im.value(node.input[0], node)
    if x.type.rank != 4:
        raise UnsupportedError(f"{im.where(node)}: {node.op_type} takes an NCHW tensor, got "
                               f"{x.shape}")
    b = int(im.attr(node, "blocksize", 0))
    n, c, h, w = x.shape
    mode = im.attr(node, "mode", b"DCR")  # SpaceToDepth has it from opset 28
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("DCR", "CRD"):
        raise UnsupportedError(f"{im.where(node)}: {node.op_type} mode {mode!r}; ONNX "
                               f"defines 'DCR' and 'CRD'")
    if to_depth:  # the inverse permutations of DepthToSpace's
        if b < 1 or h % b or w % b:
            raise ShapeError(f"{im.where(node)}: blocksize {b} does not divide the height "
                             f"and width of {x.shape}")
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
        t = g.transpose(g.reshape(x, (n, c, h // b, b, w // b, b)), perm)
        return g.reshape(t, (n, c * b * b, h // b, w // b))
    if b < 1 or c % (b * b):
        raise ShapeError(f"{im.where(node)}: blocksize {b} squared does not divide the "
                         f"{c} channels of {x.shape}")
    if mode == "DCR":
        t = g.transpose(g.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        t = g.transpose(g.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    return g.reshape(t, (n, c // (b * b), h * b, w * b))


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
    return im.g.reshape(x, shape or (1,))


def _flatten(im: _Importer, node):
    x = im.value(node.input[0], node)
    rank = len(im.shape_of(node.input[0], node))
    axis = int(im.attr(node, "axis", 1))
    if not -rank <= axis <= rank:
        raise ShapeError(f"{im.where(node)}: axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = x.shape if rank else ()
    return im.g.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _unsqueeze(im: _Importer, node):
    x = im.value(node.input[0], node)
    axes = _axes(im, node, 1, 13) or []
    in_shape = im.shape_of(node.input[0], node)
    rank = len(in_shape) + len(axes)
    norm = sorted(a % rank if -rank <= a < rank else rank + 99 for a in axes)
    if not axes or norm[-1] >= rank or len(set(norm)) != len(norm):
        raise ShapeError(f"{im.where(node)}: bad axes {axes} for rank {len(in_shape)}")
    shape, it = [], iter(in_shape)
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


def _cast_target(im: _Importer, node, to: int) -> str:
    if to not in _VALUE_TYPES:
        name = _type_name(to)
        how = (" (a quantized type: only QuantizeLinear produces it here)"
               if to in QUANT_TYPES else _needed_by(name, DTYPE_NEEDED_BY))
        raise UnsupportedError(f"{im.where(node)}: Cast to {name}{how}; wavefuse supports "
                               f"FLOAT, FLOAT16, INT32, INT64 and BOOL")
    return _VALUE_TYPES[to]


def _cast(im: _Importer, node):
    dtype = _cast_target(im, node, int(im.attr(node, "to")))
    x = im.value(node.input[0], node)
    return x if x.dtype == dtype else im.g.cast(x, dtype)


def _cast_like(im: _Importer, node):
    target = im.env.get(node.input[1])
    dtype = target.dtype if isinstance(target, Value) else _dtype_of_array(target.array)
    if dtype is None:
        raise UnsupportedError(f"{im.where(node)}: CastLike to {target.array.dtype}")
    quantized = node.input[1] in im.qtypes if isinstance(target, Value) else \
        target.array.dtype in (np.uint8, np.int8)
    if quantized:  # an 8-bit result must wrap or saturate: i32 does neither
        raise UnsupportedError(f"{im.where(node)}: CastLike to an 8-bit integer type (a "
                               f"quantized type: only QuantizeLinear produces it here)")
    if im.is_static(node.input[0]):  # only the target's dtype is needed: fold
        return _Static(_as_dtype(im.static(node.input[0], node, ""), dtype, im.where(node)))
    x = im.value(node.input[0], node)
    return x if x.dtype == dtype else im.g.cast(x, dtype)


def _identity(im: _Importer, node):
    src = im.env.get(node.input[0])
    return src if isinstance(src, _Static) else im.value(node.input[0], node)


def _constant(im: _Importer, node):
    from onnx import numpy_helper  # lazy: start-up time (see the imports)
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


def _slice_window(n: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """(first index, step, count) of ONNX/Python slicing of a dimension of size n."""
    r = range(n)[slice(start, end, step)]
    return (r.start if len(r) else 0), step, len(r)


def _slice(im: _Importer, node):
    x = im.value(node.input[0], node)
    rank = x.type.rank
    starts = [int(v) for v in im.static(node.input[1], node, "starts").reshape(-1)]
    ends = [int(v) for v in im.static(node.input[2], node, "ends").reshape(-1)]
    axes_name, steps_name = im.optional_input(node, 3), im.optional_input(node, 4)
    axes = ([int(v) for v in im.static(axes_name, node, "axes").reshape(-1)]
            if axes_name else list(range(len(starts))))
    steps = ([int(v) for v in im.static(steps_name, node, "steps").reshape(-1)]
             if steps_name else [1] * len(starts))
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"{im.where(node)}: starts, ends, axes and steps differ in length")
    first, step, shape = [0] * rank, [1] * rank, list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -rank <= a < rank or st == 0:
            raise ShapeError(f"{im.where(node)}: axis {a} / step {st} invalid for rank {rank}")
        a %= rank
        first[a], step[a], shape[a] = _slice_window(x.shape[a], s, e, st)
    if 0 in shape:  # an empty tensor has no values to compute: a constant
        return _Static(np.zeros(shape, _NP[x.dtype]))
    if shape == list(x.shape) and step == [1] * rank:
        return x
    return im.g.slice(x, first, step, shape)


def _split(im: _Importer, node):
    x = im.value(node.input[0], node)
    axis = int(im.attr(node, "axis", 0))
    if not -x.type.rank <= axis < x.type.rank:
        raise ShapeError(f"{im.where(node)}: axis {axis} out of range for {x.shape}")
    axis %= x.type.rank
    n = x.shape[axis]
    split_name = im.optional_input(node, 1)
    count = len(node.output)
    if split_name:
        sizes = [int(v) for v in im.static(split_name, node, "split").reshape(-1)]
    elif im.attr(node, "num_outputs") is not None:
        k = int(im.attr(node, "num_outputs"))
        chunk = -(-n // k)  # the last chunk is smaller (possibly empty)
        sizes = [max(0, min(chunk, n - i * chunk)) for i in range(k)]
    else:
        if n % count:
            raise ShapeError(f"{im.where(node)}: {n} does not split into {count} equal parts")
        sizes = [n // count] * count
    if sum(sizes) != n or len(sizes) != count or min(sizes) < 0:
        raise ShapeError(f"{im.where(node)}: split sizes {sizes} do not cover dimension "
                         f"{axis} ({n}) in {count} outputs")
    outs, at = [], 0
    for size in sizes:
        if size == 0:  # an empty part has no values to compute: a constant
            shape = list(x.shape)
            shape[axis] = 0
            outs.append(_Static(np.zeros(shape, _NP[x.dtype])))
            continue
        first = [0] * x.type.rank
        first[axis] = at
        shape = list(x.shape)
        shape[axis] = size
        outs.append(x if size == n else im.g.slice(x, first, [1] * x.type.rank, shape))
        at += size
    return outs


def _concat(im: _Importer, node):
    axis = int(im.attr(node, "axis"))
    names = [n for n in node.input if not (im.is_static(n) and im.env[n].array.size == 0)]
    like = next((im.env[n] for n in names if not im.is_static(n)), None)
    vals = [im.value(n, node, like=like) for n in names]
    if len(vals) == 1:
        return vals[0]
    return im.g.concat(vals, axis)


def _gather(im: _Importer, node):
    g = im.g
    axis = int(im.attr(node, "axis", 0))
    data = im.value(node.input[0], node)
    if not -data.type.rank <= axis < data.type.rank:
        raise ShapeError(f"{im.where(node)}: axis {axis} out of range for {data.shape}")
    axis %= data.type.rank
    n = data.shape[axis]
    idx_rank = len(im.shape_of(node.input[1], node))
    if im.is_static(node.input[1]):
        idx = im.static(node.input[1], node, "indices")
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise ShapeError(f"{im.where(node)}: an index is outside [-{n}, {n})")
        if idx.ndim == 0:  # one index: a window of the axis, then the axis is dropped
            first = [0] * data.type.rank
            first[axis] = int(idx) % n
            shape = list(data.shape)
            shape[axis] = 1
            win = g.slice(data, first, [1] * data.type.rank, shape) if n > 1 else data
            out = data.shape[:axis] + data.shape[axis + 1:]
            return g.reshape(win, out or (1,))
    indices = im.value(node.input[1], node, dtype="i32")
    if im.env[node.input[1]] is indices and indices.name in g.inputs:
        for onnx_name, v in im.env.items():
            if v is indices or (isinstance(v, Value) and v.name == indices.name):
                prev = im.index_bounds.get(onnx_name, n)
                im.index_bounds[onnx_name] = min(prev, n)
    y = g.gather(data, indices, axis)
    if idx_rank == 0:  # an IR (1,) index stands for a rank-0 one: drop its axis
        out = data.shape[:axis] + data.shape[axis + 1:]
        y = g.reshape(y, out or (1,))
    return y


def _gather_elements_rule(im: _Importer, node):
    """GatherElements (np.take_along_axis) through the IR's one data-dependent gather:
    the data flattened to 1-D and gathered at idx * stride[axis] + offset, where offset
    (a constant of the indices' shape) holds every other coordinate times its stride.
    The flat index is exact i32 arithmetic, so nothing new reaches fusion, the engine or
    the printer. A negative index wraps by a select first (an index below -n or from n
    up would land in a neighbouring row: static indices are checked here, an input's
    are bounded like Gather's, ``index_bounds``)."""
    g = im.g
    data = im.value(node.input[0], node)
    rank = data.type.rank
    ishape = tuple(im.shape_of(node.input[1], node))
    axis = int(im.attr(node, "axis", 0))
    if len(ishape) != len(im.shape_of(node.input[0], node)) or not -rank <= axis < rank:
        raise ShapeError(f"{im.where(node)}: indices {ishape} and data {data.shape} must "
                         f"have one rank and axis {axis} must lie in it")
    axis %= rank
    dshape = data.shape
    if any(i > d for k, (i, d) in enumerate(zip(ishape, dshape)) if k != axis):
        raise ShapeError(f"{im.where(node)}: indices {ishape} reach past data {dshape} "
                         f"off axis {axis}")
    n = dshape[axis]
    strides = [int(np.prod(dshape[k + 1:], dtype=np.int64)) for k in range(rank)]
    grid = np.indices(ishape, dtype=np.int64)
    offset = sum(grid[k] * strides[k] for k in range(rank) if k != axis) + np.zeros(ishape, np.int64)
    flat_data = g.reshape(data, (int(np.prod(dshape)),))
    if im.is_static(node.input[1]):
        idx = im.static(node.input[1], node, "indices").astype(np.int64)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise ShapeError(f"{im.where(node)}: an index is outside [-{n}, {n})")
        flat = (np.where(idx < 0, idx + n, idx) * strides[axis] + offset).astype(np.int32)
        return g.gather(flat_data, g.constant(flat, dtype="i32",
                                              name=im.fresh(node.output[0] + "_flat")), 0)
    idx = im.value(node.input[1], node, dtype="i32")
    if idx.name in g.inputs:
        for onnx_name, v in im.env.items():
            if isinstance(v, Value) and v.name == idx.name:
                im.index_bounds[onnx_name] = min(im.index_bounds.get(onnx_name, n), n)
    zero = g.constant(np.zeros(1, np.int32), dtype="i32")
    idx = g.select(g.compare("lt", idx, zero), g.add(idx, n), idx)
    flat = g.add(g.mul(idx, strides[axis]), g.constant(offset.astype(np.int32), dtype="i32",
                                                       name=im.fresh(node.output[0] + "_offset")))
    return g.gather(flat_data, flat, 0)


def _expand(im: _Importer, node):
    x = im.value(node.input[0], node)
    target = tuple(int(s) for s in im.static(node.input[1], node, "the shape").reshape(-1))
    shape = np.broadcast_shapes(im.shape_of(node.input[0], node), target) or (1,)
    if tuple(shape) == x.shape:
        return x
    return im.g.broadcast(x, shape)


def _tile(im: _Importer, node):
    """Tile as a broadcast of a new axis before each tiled one, merged back by a reshape."""
    g = im.g
    x = im.value(node.input[0], node)
    reps = [int(r) for r in im.static(node.input[1], node, "repeats").reshape(-1)]
    if len(reps) != x.type.rank or min(reps) < 1:
        raise ShapeError(f"{im.where(node)}: repeats {reps} must be >= 1, one per dimension "
                         f"of {x.shape}")
    if all(r == 1 for r in reps):
        return x
    split = []
    for r, s in zip(reps, x.shape):
        split += [1, s]
    big = []
    for r, s in zip(reps, x.shape):
        big += [r, s]
    y = g.broadcast(g.reshape(x, split), big)
    return g.reshape(y, [r * s for r, s in zip(reps, x.shape)])


def _pad(im: _Importer, node):
    """Pad. ``constant`` is the injective pad op; ``edge``, ``reflect`` and ``wrap`` read
    each output element from one input element too, chosen by its index alone: a gather
    per padded axis with constant indices (numpy's own pad of ``arange(n)`` in that mode,
    which is what onnx's evaluator computes)."""
    g = im.g
    mode = im.attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise UnsupportedError(f"{im.where(node)}: Pad mode {mode!r}; wavefuse supports "
                               f"'constant', 'edge', 'reflect' and 'wrap'")
    x = im.value(node.input[0], node)
    rank = x.type.rank
    pads = [int(p) for p in im.static(node.input[1], node, "pads").reshape(-1)]
    value_name = im.optional_input(node, 2)
    value = 0.0
    if value_name:
        v = im.static(value_name, node, "constant_value").reshape(-1)
        value = v[0].item() if v.size else 0.0
    axes_name = im.optional_input(node, 3)
    axes = ([int(a) % rank for a in im.static(axes_name, node, "axes").reshape(-1)]
            if axes_name else list(range(rank)))
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"{im.where(node)}: {len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    if mode != "constant" and any(p < 0 for p in before + after):
        raise UnsupportedError(f"{im.where(node)}: negative pads with mode {mode!r} (onnx's "
                               f"evaluator refuses them too); crop with Slice first")
    if any(p < 0 for p in before + after):  # negative pads crop: a window first
        first = [max(0, -b) for b in before]
        shape = [s + min(0, b) + min(0, e) for s, b, e in zip(x.shape, before, after)]
        if min(shape) < 1:
            raise ShapeError(f"{im.where(node)}: negative pads leave nothing of {x.shape}")
        x = g.slice(x, first, [1] * rank, shape)
        before, after = [max(0, b) for b in before], [max(0, e) for e in after]
    if not any(before + after):
        return x
    if mode == "constant":
        return g.pad(x, list(zip(before, after)), value)
    for a in range(rank):
        if before[a] or after[a]:
            n = x.shape[a]
            if mode == "reflect" and n < 2:
                raise ShapeError(f"{im.where(node)}: reflect padding needs at least 2 "
                                 f"elements along axis {a}, {x.shape} has {n}")
            idx = np.pad(np.arange(n, dtype=np.int32), (before[a], after[a]), mode=mode)
            x = g.gather(x, g.constant(idx, dtype="i32",
                                       name=im.fresh(f"{node.output[0]}_{mode}{a}")), a)
    return x


def _clip(im: _Importer, node):
    g = im.g
    x = im.value(node.input[0], node)
    lo, hi = im.optional_input(node, 1), im.optional_input(node, 2)
    if lo:
        x = g.max(x, im.value(lo, node, like=x))
    if hi:
        x = g.min(x, im.value(hi, node, like=x))
    return x


def _leaky_relu(im: _Importer, node):
    """relu(x) + alpha * min(x, 0): x where x >= 0, alpha * x below."""
    g = im.g
    x = im.value(node.input[0], node)
    alpha = float(im.attr(node, "alpha", 0.01))
    return g.add(g.relu(x), g.mul(g.min(x, 0.0), alpha))


def _hard_sigmoid_of(g, x, alpha, beta):
    return g.max(g.min(g.add(g.mul(x, alpha), beta), 1.0), 0.0)


def _hard_sigmoid(im: _Importer, node):
    x = im.value(node.input[0], node)
    return _hard_sigmoid_of(im.g, x, float(im.attr(node, "alpha", 0.2)),
                            float(im.attr(node, "beta", 0.5)))


def _hard_swish(im: _Importer, node):
    x = im.value(node.input[0], node)
    return im.g.mul(x, _hard_sigmoid_of(im.g, x, 1.0 / 6.0, 0.5))


def _gelu(im: _Importer, node):
    approx = im.attr(node, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx not in ("none", "tanh"):
        raise UnsupportedError(f"{im.where(node)}: approximate={approx!r}")
    return builders.gelu(im.g, im.value(node.input[0], node), approx)


def _softplus(im: _Importer, node):
    g = im.g
    x = im.value(node.input[0], node)
    return g.log(g.add(g.exp(x), 1.0))


def _trilu(im: _Importer, node):
    """Keeps the triangle through a constant bool mask (select, so inf/NaN stay exact)."""
    g = im.g
    x = im.value(node.input[0], node)
    if x.type.rank < 2:
        raise ShapeError(f"{im.where(node)}: Trilu needs rank >= 2, got {x.shape}")
    k_name = im.optional_input(node, 1)
    k = int(im.static(k_name, node, "k").reshape(-1)[0]) if k_name else 0
    rows, cols = x.shape[-2:]
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    mask = (c - r >= k) if im.attr(node, "upper", 1) else (c - r <= k)
    zero = np.zeros(1, _NP[x.dtype])
    return g.select(g.constant(mask, dtype="bool", name=im.fresh(node.output[0] + "_mask")),
                    x, g.constant(zero, dtype=x.dtype))


def _einsum(im: _Importer, node):
    """Einsum with one or two operands and no repeated letter within an operand: sums
    over letters used once, then a batched matmul (batch, free-A, free-B, contracted)
    built from transposes and reshapes, then the output's order."""
    g = im.g
    eq = im.attr(node, "equation")
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    if "..." in eq or "->" not in eq:
        raise UnsupportedError(f"{im.where(node)}: equation {eq!r}; wavefuse handles "
                               f"explicit equations ('ij,jk->ik') without ellipses")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(node.input) or len(terms) > 2 or any(
            len(set(t)) != len(t) for t in terms + [out]):
        raise UnsupportedError(f"{im.where(node)}: equation {eq!r}; wavefuse handles one or "
                               f"two operands without repeated letters")
    if len(terms) == 2:
        a, b = _binary_operands(im, node, node.input[0], node.input[1])
        vals = [a, b]
    else:
        vals = [im.value(node.input[0], node)]
    for t, v in zip(terms, vals):
        if len(t) != v.type.rank:
            raise ShapeError(f"{im.where(node)}: term {t!r} for operand of shape {v.shape}")
    size = {}
    for t, v in zip(terms, vals):
        for ch, s in zip(t, v.shape):
            if size.setdefault(ch, s) != s and 1 not in (size[ch], s):
                raise ShapeError(f"{im.where(node)}: letter {ch!r} has sizes {size[ch]} "
                                 f"and {s}")
            size[ch] = max(size[ch], s)

    def sum_out(t, v, keep):
        drop = [i for i, ch in enumerate(t) if ch not in keep]
        if not drop:
            return t, v
        v = g.reduce("reduce_sum", v, drop, False)
        t = "".join(ch for ch in t if ch in keep)
        return t, (v if t else v)

    if len(terms) == 1:
        t, v = sum_out(terms[0], vals[0], set(out))
        if not t:
            return v
        return g.transpose(v, [t.index(ch) for ch in out]) if t != out else v
    ta, tb = terms
    ta, a = sum_out(ta, vals[0], set(tb) | set(out))
    tb, b = sum_out(tb, vals[1], set(ta) | set(out))
    batch = [ch for ch in ta if ch in tb and ch in out]
    contr = [ch for ch in ta if ch in tb and ch not in out]
    fa = [ch for ch in ta if ch not in tb]
    fb = [ch for ch in tb if ch not in ta]

    def arrange(t, v, order):
        if list(t) != order:
            v = g.transpose(v, [t.index(ch) for ch in order])
        return v

    a = arrange(ta, a, batch + fa + contr)
    b = arrange(tb, b, batch + contr + fb)
    bs = [size[ch] for ch in batch]
    m, n, k = (math.prod(size[ch] for ch in fa), math.prod(size[ch] for ch in fb),
               math.prod(size[ch] for ch in contr))
    a3 = g.reshape(a, bs + [m, k]) if a.shape != tuple(bs + [m, k]) else a
    b3 = g.reshape(b, bs + [k, n]) if b.shape != tuple(bs + [k, n]) else b
    y = g.matmul(a3, b3)
    full = batch + fa + fb
    y = g.reshape(y, [size[ch] for ch in full] or [1])
    return arrange("".join(full), y, list(out)) if full else y


CONVERTERS = {
    **{op: _unary(k) for op, k in _UNARY.items()},
    **{op: _binary(k) for op, k in _BINARY.items()},
    **{op: _compare(k) for op, k in _COMPARE.items()},
    **{op: _logical(k) for op, k in _LOGICAL.items()},
    **{op: _variadic(k) for op, k in _VARIADIC.items()},
    **{op: _reduce(k) for op, k in _REDUCE.items()},
    "ReduceSumSquare": _reduce_squares(False), "ReduceL2": _reduce_squares(True),
    "ArgMax": _arg_reduce("reduce_max"), "ArgMin": _arg_reduce("reduce_min"),
    "Not": _not, "Where": _where, "Sign": _sign, "IsNaN": _is_nan, "IsInf": _is_inf,
    "Mod": _mod, "Mean": _mean, "CumSum": _cumsum,
    "Softmax": _softmax, "LayerNormalization": _layer_norm, "MatMul": _matmul,
    "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
    "BatchNormalization": _batch_norm,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("reduce_mean"),
    "GlobalMaxPool": _global_pool("reduce_max"),
    "Transpose": _transpose, "Reshape": _reshape,
    "DepthToSpace": lambda im, node: _block_rearrange(im, node, False),
    "SpaceToDepth": lambda im, node: _block_rearrange(im, node, True), "Flatten": _flatten,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Cast": _cast, "CastLike": _cast_like,
    "Identity": _identity, "Constant": _constant, "Slice": _slice, "Split": _split,
    "Concat": _concat, "Gather": _gather,
    "GatherElements": _gather_elements_rule, "Expand": _expand, "Tile": _tile, "Pad": _pad,
    "Clip": _clip, "LeakyRelu": _leaky_relu, "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish, "Gelu": _gelu, "Softplus": _softplus, "Trilu": _trilu,
    "Einsum": _einsum, "InstanceNormalization": _instance_norm,
    "GroupNormalization": _group_norm, "Resize": _resize,
    **QUANT_CONVERTERS,
}
#: every version of a supported op newer than opset 13 (as the installed onnx defines
#: them), with its semantic change and how the rule handles it; a version that only adds
#: element types (bfloat16, float8, int4, string, ...) is TYPES_ONLY: those types are
#: refused as dtypes. tests/test_onnx_gaps.py fails when onnx defines a version that
#: is in neither, so each new one gets checked.
OP_VERSIONS = {
    ("AveragePool", 19): "dilations attribute: read (_pool)",
    ("BatchNormalization", 14): "training mode: refused (_batch_norm)",
    ("Cast", 19): "saturate attribute: only for float8 targets, which are refused",
    ("Cast", 24): "round_mode: float8e8m0 targets only, refused",
    ("CastLike", 15): "new op (_cast_like)",
    ("CastLike", 19): "saturate attribute: only for float8 targets, which are refused",
    ("CastLike", 24): "round_mode: float8e8m0 targets only, refused",
    ("Gelu", 20): "new op (_gelu)",
    ("Mod", 28): "fmod=0 defined on floats: numpy's np.mod composed of fmod, compares "
                 "and selects (_mod), as onnx's evaluator computes it at every opset",
    ("GroupNormalization", 18): "new op (_group_norm): scale and bias per group "
                                "(deprecated: onnx's checker refuses a model using it)",
    ("GroupNormalization", 21): "scale and bias per channel, stash_type: read (_group_norm)",
    ("HardSwish", 14): "new op (_hard_swish)",
    ("LayerNormalization", 17): "new op (_layer_norm, optional Mean/InvStdDev outputs)",
    ("Pad", 18): "axes input: read (_pad)",
    ("Pad", 19): "mode 'wrap': refused like every non-constant mode (_pad)",
    ("Range", 27): "stash_type: folded by onnx's own evaluator, exact",
    ("ReduceL2", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("ReduceMax", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("ReduceMax", 20): "bool inputs: reduced as 0/1 (_reduce)",
    ("ReduceMean", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("ReduceMin", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("ReduceMin", 20): "bool inputs: reduced as 0/1 (_reduce)",
    ("ReduceProd", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("ReduceSumSquare", 18): "axes as an input, noop_with_empty_axes: read (_axes)",
    ("Reshape", 14): "allowzero attribute: read (_reshape)",
    ("Resize", 18): "antialias, axes, keep_aspect_ratio_policy: read (_resize; policies "
                    "other than stretch refused)",
    ("Resize", 19): "half_pixel_symmetric mode: computed by onnx's evaluator (_resize)",
    ("Shape", 15): "start/end attributes: read (fold)",
    ("SpaceToDepth", 28): "mode attribute (DCR / CRD): read (_block_rearrange)",
    ("Split", 18): "num_outputs attribute: read (_split)",
    ("Trilu", 14): "new op (_trilu)",
    ("QuantizeLinear", 19): "float8 types and saturate (float8 only): refused as dtypes",
    ("QuantizeLinear", 21): "block_size: refused; output_dtype: read (uint8/int8, "
                            "onnx_quant); int4/int16 refused as dtypes",
    ("QuantizeLinear", 23): "precision attribute: refused (onnx_quant._check_block)",
    ("QuantizeLinear", 24): "float8e8m0 types: refused as dtypes",
    ("QuantizeLinear", 25): "int2/uint2 and float types: refused as dtypes",
    ("QuantizeLinear", 28): "more narrow types: refused as dtypes",
    ("DequantizeLinear", 19): "float8 inputs and float16 scales: float16 read, float8 "
                              "refused",
    ("DequantizeLinear", 21): "block_size: refused (onnx_quant._check_block)",
    ("DequantizeLinear", 23): "output_dtype: read (float32/float16; onnx_quant)",
    ("DequantizeLinear", 24): "float8e8m0 types: refused as dtypes",
    ("DequantizeLinear", 25): "int2/uint2 types: refused as dtypes",
    ("DequantizeLinear", 28): "more narrow types: refused as dtypes",
    ("QLinearMatMul", 21): "float8 inputs (refused as dtypes) and float16/bfloat16 scales "
                           "(float16 computed in float32, onnx_quant)",
}
TYPES_ONLY = frozenset({
    ("Add", 14), ("AveragePool", 22), ("BatchNormalization", 15), ("Cast", 21),
    ("Cast", 23), ("Cast", 25), ("Cast", 28), ("CastLike", 21), ("CastLike", 23),
    ("CastLike", 25), ("Constant", 19), ("Constant", 21), ("Constant", 23),
    ("Constant", 24), ("Constant", 25), ("ConstantOfShape", 20), ("ConstantOfShape", 21),
    ("ConstantOfShape", 23), ("ConstantOfShape", 24), ("ConstantOfShape", 25), ("Conv", 22),
    ("ConvTranspose", 22), ("Cos", 22), ("CumSum", 14), ("DepthToSpace", 28),
    ("Div", 14), ("Einsum", 28), ("Equal", 19), ("Flatten", 21), ("Flatten", 23),
    ("Flatten", 24), ("Flatten", 25), ("GlobalAveragePool", 22), ("GlobalMaxPool", 22),
    ("GreaterOrEqual", 16), ("HardSigmoid", 22), ("InstanceNormalization", 22), ("HardSwish", 22), ("Identity", 14),
    ("IsInf", 20), ("IsNaN", 20),
    ("Identity", 16), ("Identity", 19), ("Identity", 21), ("Identity", 23),
    ("Identity", 24), ("Identity", 25), ("LeakyRelu", 16), ("LessOrEqual", 16),
    ("MaxPool", 22), ("Mul", 14), ("Pad", 21), ("Pad", 23), ("Pad", 24), ("Pad", 25),
    ("Pow", 15), ("Relu", 14), ("Round", 22), ("Reshape", 19), ("Reshape", 21), ("Reshape", 23),
    ("Reshape", 24), ("Reshape", 25), ("Shape", 19), ("Shape", 21), ("Shape", 23),
    ("Shape", 24), ("Shape", 25), ("Sin", 22), ("Size", 19), ("Size", 21), ("Size", 23),
    ("Size", 24), ("Size", 25), ("Softplus", 22), ("Squeeze", 21), ("Squeeze", 23), ("Squeeze", 24),
    ("Squeeze", 25), ("Sub", 14), ("Transpose", 21), ("Transpose", 23), ("Transpose", 24),
    ("Transpose", 25), ("Unsqueeze", 21), ("Unsqueeze", 23), ("Unsqueeze", 24),
    ("Unsqueeze", 25), ("Where", 16),
})

#: versions in OP_VERSIONS whose change keeps an older node's meaning (a new attribute or
#: input whose default is the old behaviour, a new mode): a function body written for an
#: older opset imports unchanged across them (``_function_body``). ReduceX 18 (axes from
#: an attribute to an input) is the kind of change that is not here.
ADDITIVE_VERSIONS = frozenset({
    ("AveragePool", 19), ("BatchNormalization", 14), ("Cast", 19), ("Cast", 24),
    ("CastLike", 19), ("CastLike", 24), ("Pad", 18), ("Pad", 19), ("ReduceMax", 20),
    ("ReduceMin", 20), ("Reshape", 14), ("Resize", 18), ("Resize", 19), ("Shape", 15),
    ("Split", 18),
})
#: ops that only ever need constant inputs here: they fold at import (see ``fold``)
FOLDED_OPS = ("Shape", "Size", "ConstantOfShape", "Range")
SUPPORTED_OPS = tuple(sorted(set(CONVERTERS) | set(FOLDED_OPS)))


def _unsupported_ops(model, pinned=()) -> list[str]:
    """Ops left on computed values that no rule converts (folded nodes are fine)."""
    known = {i.name for i in model.graph.initializer} | set(pinned)
    bad = set()
    for node in model.graph.node:
        ins = [i for i in node.input if i]
        foldable = (node.op_type == "Constant" or node.op_type in ("Shape", "Size")
                    or (ins and all(i in known for i in ins)
                        and node.op_type not in _NEVER_FOLD))
        if node.domain not in ("", "ai.onnx"):
            bad.add(f"{node.domain}.{node.op_type}")
        elif not foldable and node.op_type in FOLDED_OPS:
            bad.add(f"{node.op_type} (on a computed input; wavefuse folds it only when its "
                    f"inputs are constants)")
        elif not foldable and node.op_type not in CONVERTERS:
            bad.add(node.op_type)
        if foldable and node.domain in ("", "ai.onnx"):
            known.update(o for o in node.output if o)
    return sorted(bad)


#: the domain the schema function bodies being inlined live in for a moment
_EXPANDED = "wavefuse.expanded"


def _function_body(schema, node, opset: int, types: dict):
    """The ONNX definition of ``node`` as a FunctionProto, or None when its schema has none
    at ``opset`` or the body's ops would mean something else at the model's opset."""
    from onnx import FunctionProto, TypeProto, defs  # lazy: start-up time (see the imports)

    fn = None
    # the newest body written for this opset or before; else the oldest one, which the
    # check below accepts only when each of its ops means the same at the model's opset
    # (Selu's body is written against opset 18, the op itself is as old as opset 6)
    static = ([v for v in schema.function_opset_versions if v <= opset]
              or sorted(schema.function_opset_versions)[:1])
    dependent = ([v for v in schema.context_dependent_function_opset_versions if v <= opset]
                 or sorted(schema.context_dependent_function_opset_versions)[:1])
    if static:
        fn = FunctionProto()
        fn.ParseFromString(schema.get_function_with_opset_version(max(static)))
    elif dependent:
        if any(i and i not in types for i in node.input):
            return None
        tps = [(types[i] if i else TypeProto()).SerializeToString() for i in node.input]
        raw = schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), tps)
        if not raw:
            return None
        fn = FunctionProto()
        fn.ParseFromString(raw)
    if fn is None:
        return None
    body_opset = max((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")),
                     default=opset)
    for inner in fn.node:  # imported at the model's opset: does each op mean the same?
        if inner.domain not in ("", "ai.onnx"):
            return None
        try:  # only versions that add element types (TYPES_ONLY) in between
            written = defs.get_schema(inner.op_type, body_opset).since_version
            v = defs.get_schema(inner.op_type, opset).since_version
            while v > written:
                if (inner.op_type, v) not in TYPES_ONLY | ADDITIVE_VERSIONS:
                    return None
                v = defs.get_schema(inner.op_type, v - 1).since_version
        except Exception:  # onnx raises SchemaError for an op it does not define
            return None
    return fn


def _expand_functions(model, source: str, pinned=()):
    """Ops with no rule here whose ONNX schema defines them as a function of other ops
    (opset 23's RMSNormalization, RotaryEmbedding and Attention, PRelu, Elu, Selu, Mish,
    LogSoftmax, ...) are replaced by that body, inlined by onnx's own inliner, round after
    round until each op left has a rule or no body; model-local functions are inlined too.
    The body is ONNX's definition, so no op's formula is copied here; the rules then see
    only ops they know, and fusion regroups what the body spelled out."""
    from onnx import defs, helper, inliner  # lazy: start-up time (see the imports)
    from onnx import shape_inference  # lazy: start-up time (see the imports)

    if model.functions:
        model = inliner.inline_local_functions(model)
    opset = _default_opset(model, source)
    known = set(CONVERTERS) | set(FOLDED_OPS)
    for _ in range(8):  # bodies may use ops that are functions themselves
        todo = [n for n in model.graph.node
                if n.domain in ("", "ai.onnx") and n.op_type not in known]
        if not todo:
            return model
        try:
            inferred = shape_inference.infer_shapes(_without_large_initializers(model))
        except Exception:  # onnx raises several C++ errors here; the import reports them
            inferred = model
        types = {vi.name: vi.type for vi in list(inferred.graph.value_info)
                 + list(inferred.graph.input) + list(inferred.graph.output)}
        for t in model.graph.initializer:
            types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
        copy = type(model)()  # the caller's model stays as it was
        copy.CopyFrom(model)
        model, expanded = copy, 0
        for k, node in enumerate(n for n in model.graph.node
                                 if n.domain in ("", "ai.onnx") and n.op_type not in known):
            try:
                schema = defs.get_schema(node.op_type, opset)
            except Exception:  # onnx raises SchemaError for an op it does not define
                continue
            have = {a.name for a in node.attribute}
            for name, a in schema.attributes.items():  # a static body reads the defaults
                if name not in have and a.default_value.name:
                    node.attribute.append(a.default_value)
            fn = _function_body(schema, node, opset, types)
            if fn is None:
                continue
            for o in fn.opset_import:  # checked above to mean the same at the model's
                if o.domain in ("", "ai.onnx"):
                    o.version = opset
            fn.domain, fn.name = _EXPANDED, f"{node.op_type}_{k}"
            node.domain, node.op_type = _EXPANDED, fn.name
            model.functions.append(fn)
            expanded += 1
        if not expanded:
            return model
        if not any(o.domain == _EXPANDED for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid(_EXPANDED, 1))
        imports = [o for o in model.opset_import if o.domain != _EXPANDED]
        model = inliner.inline_local_functions(model)
        del model.opset_import[:]
        model.opset_import.extend(imports)
    return model


def _onnx_ranks(model) -> dict:
    """ONNX rank of every tensor shape inference knows (the IR widens rank 0 to (1,))."""
    ranks = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            ranks[vi.name] = len(tt.shape.dim)
    for init in model.graph.initializer:
        ranks[init.name] = len(init.dims)
    return ranks


def from_model(model, source: str = "<onnx model>", dims: dict | None = None,
               values: dict | None = None) -> Graph:
    """Imports an in-memory ``onnx.ModelProto`` (checked like a file); ``dims`` pins
    symbolic dimensions by name; ``values`` pins graph inputs to arrays (name -> array),
    so that inputs a static-shape import needs as constants (axes, target shapes, pads
    fed at run time, as onnx's backend tests do) fold like initializers."""
    import onnx  # lazy: start-up time (see the imports)

    light = _without_large_initializers(model)
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "invalid")
        raise ModelError(f"{source}: not a valid ONNX model: {first}") from None
    declared = {vi.name for vi in model.graph.input}
    unknown = sorted(set(values or {}) - declared)
    if unknown:
        raise ModelError(f"{source}: cannot pin {unknown[0]!r}: the model has no graph input "
                         f"of that name (it has: {', '.join(sorted(declared)) or 'none'})")
    if _unsupported_ops(model, values or {}) or model.functions:
        model = _expand_functions(model, source, values or {})
        light = _without_large_initializers(model)
    bad = _unsupported_ops(model, values or {})
    if bad:
        named = [b + _needed_by(b, NEEDED_BY) for b in bad]
        raise UnsupportedError(f"{source}: unsupported ONNX op(s): {', '.join(named)} "
                               f"(supported: {', '.join(SUPPORTED_OPS)})")
    _default_opset(model, source)
    if dims:
        model = _pin_dims(model, dims, source)
        light = _without_large_initializers(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
    except Exception as exc:  # onnx raises InferenceError and several C++ errors here
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "failed")
        raise ShapeError(f"{source}: ONNX shape inference fails: {first}") from None
    try:
        im = _Importer(model, source, dims, values)
        im.ranks = _onnx_ranks(inferred)
        return im.run()
    except GraphError as exc:
        msg = str(exc)
        if not msg.startswith(source):
            raise type(exc)(f"{source}: {msg}") from None
        raise


#: initializers larger than this are shown to onnx's checker and shape inference as typed
#: graph inputs instead: both serialise the whole model, which for BERT-base (435 MB) took
#: 16 of its 18 import seconds. Their data is read (and checked) by numpy_helper at import.
LARGE_INITIALIZER_BYTES = 1 << 20


def _without_large_initializers(model):
    """The model with its large initializers declared as inputs (type and shape only)."""
    from onnx import helper  # lazy: start-up time (see the imports)
    # sized by their dims, not ``len(t.raw_data)``: reading the field copies the bytes
    # (0.2 s of a warm BERT-base tune); 8 bytes an element errs towards "large"
    big = [t for t in model.graph.initializer
           if math.prod(t.dims) * 8 > LARGE_INITIALIZER_BYTES]
    if not big:
        return model
    big_names = {t.name for t in big}
    declared = {vi.name for vi in model.graph.input}
    g = model.graph
    inputs = list(g.input) + [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                              for t in big if t.name not in declared]
    light_graph = helper.make_graph(
        list(g.node), g.name, inputs, list(g.output),
        initializer=[t for t in g.initializer if t.name not in big_names],
        value_info=list(g.value_info), sparse_initializer=list(g.sparse_initializer))
    light = helper.make_model(light_graph, opset_imports=list(model.opset_import),
                              ir_version=model.ir_version)
    light.functions.extend(model.functions)
    return light


def _pin_dims(model, dims: dict, source: str):
    """A copy of the model whose symbolic input dimensions named in ``dims`` are fixed."""
    import onnx  # lazy: start-up time (see the imports)
    named = {d.dim_param for vi in model.graph.input
             for d in vi.type.tensor_type.shape.dim if d.dim_param}
    unknown = sorted(set(dims) - named)
    if unknown:
        raise ModelError(f"{source}: --dim {unknown[0]}: the model has no symbolic input "
                         f"dimension of that name (it has: {', '.join(sorted(named)) or 'none'})")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])
    return m


def load_onnx(path, dims: dict | None = None) -> Graph:
    """Reads, checks and imports an ``.onnx`` file."""
    import onnx  # lazy: start-up time (see the imports)

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
    return from_model(model, path, dims)


def _load_external_data(model, path: str) -> None:
    """Reads initializers kept in external files, naming the file when one is missing or
    lies outside the model's folder (onnx's own error names neither the model nor why)."""
    import onnx  # lazy: start-up time (see the imports)
    from onnx.external_data_helper import uses_external_data  # lazy: start-up time

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
