"""The numpy reference interpreter: what every fused plan and simulated kernel must equal.

Float values are computed in float32 (f16 tensors are computed in f32 and rounded to f16
at each op's result, the rounding a fused kernel would do only at its stores — so f16
comparisons use f16 tolerances). i32 and bool tensors are computed exactly in their own
dtype (integer division truncates toward zero, as C and ONNX do). Layouts do not change
values: arrays are logical.
"""
from __future__ import annotations

import numpy as np

from compiler.ir.graph import DTYPES, FLOAT_DTYPES, Graph, GraphError, Op, slice_windows, to_dtype
from compiler.ir.ops import OPS, erf, funcs  # noqa: F401  (erf: re-exported)

#: numpy functions per category: views of the op table (compiler/ir/ops.py)
UNARY_FUNCS = funcs("unary")
BINARY_FUNCS = funcs("binary")
REDUCE_FUNCS = funcs("reduce")
COMPARE_FUNCS = funcs("compare")
LOGICAL_FUNCS = funcs("logical")


#: the layout views: the same numpy call on the exact (int/bool) and the f32 paths
VIEW_FUNCS = {
    "transpose": lambda x, attrs: np.transpose(x, attrs["perm"]),
    "reshape": lambda x, attrs: x.reshape(attrs["shape"]),
    "broadcast": lambda x, attrs: np.broadcast_to(x, attrs["shape"]),
}


def _int_div(a, b):
    """C-style integer division (toward zero); a zero divisor gives 0 instead of trapping."""
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe) * np.sign(a) * np.sign(safe)
    return np.where(b == 0, 0, q)


def _eval_injective(op: Op, a: list) -> np.ndarray:
    k = op.kind
    if k == "gather":
        data, idx = a
        axis = op.attrs["axis"]
        n = data.shape[axis]
        if np.any((idx < -n) | (idx >= n)):
            raise GraphError(f"node {op.name!r}: an index is outside [-{n}, {n}) along axis "
                             f"{axis}")
        return np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)
    if k == "pad":
        return np.pad(a[0], op.attrs["pads"], constant_values=op.attrs["value"])
    if k == "concat":
        return np.concatenate(a, axis=op.attrs["axis"])
    if k == "slice":
        return a[0][slice_windows(op.attrs)]
    raise GraphError(f"node {op.name!r}: the reference interpreter has no rule for {k!r}")


def _eval_exact(op: Op, args: list) -> np.ndarray:
    """An op whose operands or result are i32/bool: computed in the operands' own dtypes."""
    a = [np.asarray(x) for x in args]
    k = op.kind
    if k in UNARY_FUNCS:
        r = UNARY_FUNCS[k](a[0])
    elif k == "not":
        r = OPS["not"].numpy(a[0])
    elif k == "cast":
        r = a[0]
        if op.type.dtype == "i32" and r.dtype.kind == "f":
            r = np.trunc(np.nan_to_num(r.astype(np.float64)))
    elif k == "div" and a[0].dtype.kind in "iu":
        r = _int_div(a[0].astype(np.int64), a[1].astype(np.int64))
    elif k in BINARY_FUNCS:
        r = BINARY_FUNCS[k](a[0], a[1])
    elif k in COMPARE_FUNCS:
        r = COMPARE_FUNCS[k](a[0], a[1])
    elif k in LOGICAL_FUNCS:
        r = LOGICAL_FUNCS[k](a[0], a[1])
    elif k == "select":
        r = np.where(a[0], a[1], a[2])
    elif k in REDUCE_FUNCS:
        r = REDUCE_FUNCS[k](a[0], axis=op.attrs["axes"], keepdims=op.attrs["keepdims"])
    elif k in VIEW_FUNCS:
        r = VIEW_FUNCS[k](a[0], op.attrs)
    elif k == "matmul":  # integer GEMM: exact in int64, then wrapped to 32 bits as i32 is
        r = np.matmul(a[0].astype(np.int64), a[1].astype(np.int64))
    elif k == "conv2d":
        r = conv2d(a[0].astype(np.int64), a[1].astype(np.int64), op.attrs)
    else:
        r = _eval_injective(op, a)
    with np.errstate(all="ignore"):
        r = to_dtype(r, op.type.dtype)
    return np.ascontiguousarray(r.reshape(op.type.shape))


def conv2d(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """Direct convolution via an im2col gather, in NCHW; NHWC is transposed around it."""
    fmt = attrs.get("data_format", "NCHW")
    if fmt == "NHWC":
        x = x.transpose(0, 3, 1, 2)
        w = w.transpose(0, 3, 1, 2)
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    g = attrs.get("groups", 1)
    sh, sw = attrs.get("stride", (1, 1))
    pt, pl, pb, pr = attrs.get("padding", (0, 0, 0, 0))
    dh, dw = attrs.get("dilation", (1, 1))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    acc = np.int64 if x.dtype.kind in "iu" else np.float32  # integers: exact sums
    out = np.zeros((n, o, oh, ow), acc)
    og = o // g
    for gi in range(g):
        xs = xp[:, gi * ci:(gi + 1) * ci]
        ws = w[gi * og:(gi + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                           j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, gi * og:(gi + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, ws[:, :, i, j], dtype=acc)
    if fmt == "NHWC":
        out = out.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(out)


def eval_op(op: Op, args: list) -> np.ndarray:
    """One op on numpy operands, in f32, rounded to the op's dtype (i32/bool exactly)."""
    if op.type.dtype not in FLOAT_DTYPES or any(
            np.asarray(x).dtype.kind in "biu" for x in args):
        with np.errstate(all="ignore"):
            return _eval_exact(op, args)
    a = [np.asarray(x, dtype=np.float32) for x in args]
    k = op.kind
    with np.errstate(all="ignore"):
        if k in UNARY_FUNCS:
            r = UNARY_FUNCS[k](a[0])
        elif k in BINARY_FUNCS:
            r = BINARY_FUNCS[k](a[0], a[1])
        elif k in COMPARE_FUNCS:  # pragma: no cover (bool results take the exact path)
            r = COMPARE_FUNCS[k](a[0], a[1])
        elif k == "cast":
            r = a[0]
        elif k in REDUCE_FUNCS:
            r = REDUCE_FUNCS[k](a[0], axis=op.attrs["axes"], keepdims=op.attrs["keepdims"])
        elif k == "matmul":
            r = np.matmul(a[0], a[1])
        elif k == "conv2d":
            r = conv2d(a[0], a[1], op.attrs)
        elif k in VIEW_FUNCS:
            r = VIEW_FUNCS[k](a[0], op.attrs)
        elif op.is_view or op.is_injective:
            r = _eval_injective(op, a)
        else:
            raise GraphError(f"node {op.name!r}: the reference interpreter has no rule for "
                             f"{k!r}")
    r = np.asarray(r, dtype=np.float32).reshape(op.type.shape)
    return np.ascontiguousarray(to_dtype(r, op.type.dtype))  # bf16: rounded here


def evaluate(graph: Graph, inputs: dict, *, keep_all: bool = False, keep=None) -> dict:
    """Runs the graph; returns its outputs (or every node's value with ``keep_all``, or
    the outputs and the ``keep`` tensors, freeing every other value after its last use:
    at attention's sequence 4096 each score-sized intermediate is 512 MB)."""
    env = {}
    order = graph.topo_order()
    last_use = {}
    if keep is not None and not keep_all:
        for i, name in enumerate(order):
            for x in graph.op(name).inputs:
                last_use[x] = i
        keep = set(keep) | set(graph.outputs)
    for step, name in enumerate(order):
        op = graph.op(name)
        if op.kind == "input":
            if name not in inputs:
                raise GraphError(f"missing value for graph input {name!r} "
                                 f"(expected {op.type})")
            v = np.asarray(inputs[name])
            if v.shape != op.type.shape:
                raise GraphError(f"input {name!r}: got shape {v.shape}, expected "
                                 f"{op.type.shape}")
            env[name] = to_dtype(v, op.type.dtype)
        elif op.kind == "constant":
            env[name] = op.attrs["value"]
        else:
            env[name] = eval_op(op, [env[i] for i in op.inputs])
            if last_use:
                for x in set(op.inputs):
                    if last_use.get(x) == step and x not in keep:
                        del env[x]
    if keep is not None and not keep_all:
        return {n: env[n] for n in keep if n in env}
    if keep_all:
        return env
    return {o: env[o] for o in graph.outputs}


def random_inputs(graph: Graph, seed: int = 0) -> dict:
    """Seeded inputs, so every run of a command sees the same data: floats in [-1, 1),
    bools fair coins, i32 in [0, high) where ``high`` is the bound a frontend recorded in
    ``graph.meta["index_bounds"]`` (e.g. the rows of an embedding table), in [lo, hi] for a
    quantized input (``graph.meta["int_ranges"]``: uint8 [0, 255], int8 [-128, 127]), else
    [0, 2)."""
    rng = np.random.default_rng(seed)
    bounds = graph.meta.get("index_bounds", {})
    ranges = graph.meta.get("int_ranges", {})  # quantized (uint8/int8) inputs: their range
    out = {}
    for name in graph.inputs:
        t = graph.op(name).type
        if t.dtype == "bool":
            out[name] = rng.integers(0, 2, t.shape).astype(np.bool_)
        elif t.dtype == "i32" and name in ranges:
            lo, hi = ranges[name]
            out[name] = rng.integers(lo, hi + 1, t.shape).astype(np.int32)
        elif t.dtype == "i32":
            out[name] = rng.integers(0, max(1, bounds.get(name, 2)), t.shape).astype(np.int32)
        else:
            out[name] = to_dtype(rng.uniform(-1.0, 1.0, t.shape), t.dtype)
    return out
