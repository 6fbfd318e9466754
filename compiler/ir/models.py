"""The built-in model zoo: named, parameterised graphs every stage of wavefuse uses.

A model is named on the command line as ``NAME`` or ``NAME:key=value,key=value``
(``layernorm:rows=8192,cols=4096``); anywhere a model is taken, a path to an ``.onnx``
file works too. Defaults are small enough for tests, except where a model reproduces a
published case (``conv_add_relu`` is rocMLIR's 1x1 convolution at its measured size).
"""
from __future__ import annotations

import contextvars
import inspect
import math
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from compiler.ir import builders
from compiler.frontends.onnx import load_onnx
from compiler.ir.graph import Graph, ModelError
from compiler.ir.limits import check_allocation, tensor_bytes


#: the memory limit while a model is built: weights are checked against it before drawing.
_WEIGHT_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("weight_limit",
                                                                           default=None)


def _weights(shape, seed, scale=None):
    limit = _WEIGHT_LIMIT.get()
    if limit is not None:
        check_allocation(tensor_bytes(shape, "f32"), limit,
                         f"a weight of shape {'x'.join(map(str, shape))}")
    rng = np.random.default_rng(seed)
    scale = scale if scale is not None else 1.0 / math.sqrt(shape[0] if len(shape) else 1)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def softmax(rows: int = 64, cols: int = 256, dtype: str = "f32") -> Graph:
    """Row softmax, max-subtracted, as 5 primitive ops."""
    g = Graph("softmax")
    x = g.input("x", (rows, cols), dtype)
    g.output(builders.softmax(g, x))
    return g


def layernorm(rows: int = 64, cols: int = 256, dtype: str = "f32") -> Graph:
    """Layer norm over the last axis with affine gamma and beta."""
    g = Graph("layernorm")
    x = g.input("x", (rows, cols), dtype)
    gamma = g.input("gamma", (cols,), dtype)
    beta = g.input("beta", (cols,), dtype)
    g.output(builders.layer_norm(g, x, gamma, beta))
    return g


def rmsnorm(rows: int = 64, cols: int = 256, dtype: str = "f32") -> Graph:
    """RMS norm over the last axis with a gain."""
    g = Graph("rmsnorm")
    x = g.input("x", (rows, cols), dtype)
    gamma = g.input("gamma", (cols,), dtype)
    g.output(builders.rms_norm(g, x, gamma))
    return g


def _conv_add_relu(name, n, h, w, c, k, residual_layout):
    g = Graph(name)
    x = g.input("x", (n, h, w, c), "f32")
    f = g.input("filter", (k, 1, 1, c), "f32")
    r = g.input("residual", (n, h, w, k), "f32", layout=residual_layout)
    y = g.conv2d(x, f, data_format="NHWC")
    g.output(g.relu(g.add(y, r)))
    return g


def conv_add_relu(n: int = 1, h: int = 7, w: int = 7, c: int = 2048, k: int = 512) -> Graph:
    """rocMLIR's output-swizzle case: 1x1 conv NHWC + residual add + relu, f32; the
    residual is stored in the output's layout (NHWC)."""
    return _conv_add_relu("conv_add_relu", n, h, w, c, k, None)


def conv_add_relu_mismatch(n: int = 1, h: int = 7, w: int = 7, c: int = 2048,
                           k: int = 512) -> Graph:
    """The same, with the residual stored channel-major (NCHW memory order), so it does
    not share the output's layout."""
    return _conv_add_relu("conv_add_relu_mismatch", n, h, w, c, k, (0, 3, 1, 2))


def mlp(tokens: int = 128, hidden: int = 64, ffn: int = 256) -> Graph:
    """matmul + bias + GELU (erf) + matmul."""
    g = Graph("mlp")
    x = g.input("x", (tokens, hidden))
    w1 = g.constant(_weights((hidden, ffn), 1), "w1")
    b1 = g.constant(_weights((ffn,), 2, 0.1), "b1")
    w2 = g.constant(_weights((ffn, hidden), 3), "w2")
    hid = builders.gelu(g, builders.bias_add(g, g.matmul(x, w1), b1))
    g.output(g.matmul(hid, w2))
    return g


def attention(heads: int = 2, seq: int = 64, dim: int = 32, mask: str = "none") -> Graph:
    """softmax(Q K^T * scale [+ mask]) V per head; mask: none, padding (BERT: an additive
    key mask input) or causal (GPT-2: an additive constant, -1e4 above the diagonal)."""
    if mask not in ("none", "padding", "causal"):
        raise ModelError(f"attention: mask={mask!r} is not one of none, padding, causal; "
                         f"write e.g. attention:mask=causal")
    g = Graph("attention")
    q = g.input("q", (heads, seq, dim))
    k = g.input("k", (heads, seq, dim))
    v = g.input("v", (heads, seq, dim))
    s = g.mul(g.matmul(q, g.transpose(k, (0, 2, 1))), 1.0 / math.sqrt(dim))
    if mask == "padding":
        s = g.add(s, g.input("mask", (seq,)))
    elif mask == "causal":
        tri = np.where(np.arange(seq)[None, :] > np.arange(seq)[:, None], -1e4, 0.0)
        s = g.add(s, g.constant(tri.astype(np.float32), "causal"))
    g.output(g.matmul(builders.softmax(g, s), v))
    return g


def transpose_add(rows: int = 2048, cols: int = 2048) -> Graph:
    """out = x.T + y: a permute fused with an add; x is read across its rows, so one
    order of the two tensors must be strided unless a tile goes through LDS."""
    g = Graph("transpose_add")
    x = g.input("x", (rows, cols))
    y = g.input("y", (cols, rows))
    g.output(g.add(g.transpose(x, (1, 0)), y))
    return g


def encoder_layer(seq: int = 128, hidden: int = 384, heads: int = 12,
                  ffn: int = 1536) -> Graph:
    """A MiniLM-like post-norm transformer encoder layer: self-attention with output
    projection, residual + layer norm, GELU MLP, residual + layer norm."""
    if hidden % heads:
        raise ModelError(f"encoder_layer: hidden={hidden} must be a multiple of heads={heads}")
    dh = hidden // heads
    g = Graph("encoder_layer")
    x = g.input("x", (seq, hidden))

    def dense(inp, n_in, n_out, seed, name):
        w = g.constant(_weights((n_in, n_out), seed), f"{name}_w")
        b = g.constant(_weights((n_out,), seed + 100, 0.1), f"{name}_b")
        return builders.bias_add(g, g.matmul(inp, w), b)

    def heads_first(t):  # (seq, hidden) -> (heads, seq, dh)
        return g.transpose(g.reshape(t, (seq, heads, dh)), (1, 0, 2))

    q = heads_first(dense(x, hidden, hidden, 10, "q"))
    k = heads_first(dense(x, hidden, hidden, 20, "k"))
    v = heads_first(dense(x, hidden, hidden, 30, "v"))
    s = g.mul(g.matmul(q, g.transpose(k, (0, 2, 1))), 1.0 / math.sqrt(dh))
    ctx = g.matmul(builders.softmax(g, s), v)
    ctx = g.reshape(g.transpose(ctx, (1, 0, 2)), (seq, hidden))
    attn = dense(ctx, hidden, hidden, 40, "o")
    ln1_g = g.constant(np.ones(hidden, np.float32), "ln1_gamma")
    ln1_b = g.constant(np.zeros(hidden, np.float32), "ln1_beta")
    h1 = builders.layer_norm(g, attn, ln1_g, ln1_b, eps=1e-12, residual=x)
    f = dense(builders.gelu(g, dense(h1, hidden, ffn, 50, "ffn1")), ffn, hidden, 60, "ffn2")
    ln2_g = g.constant(np.ones(hidden, np.float32), "ln2_gamma")
    ln2_b = g.constant(np.zeros(hidden, np.float32), "ln2_beta")
    g.output(builders.layer_norm(g, f, ln2_g, ln2_b, eps=1e-12, residual=h1))
    return g


@dataclass(frozen=True)
class ModelInfo:
    name: str
    build: Callable
    doc: str

    @property
    def params(self) -> dict:
        return {p.name: p.default for p in inspect.signature(self.build).parameters.values()}


MODELS = {f.__name__: ModelInfo(f.__name__, f, (f.__doc__ or "").strip().split("\n")[0])
          for f in (softmax, layernorm, rmsnorm, conv_add_relu, conv_add_relu_mismatch, mlp,
                    attention, transpose_add, encoder_layer)}


def parse_spec(spec: str) -> tuple[str, dict]:
    """``NAME:key=value,...`` -> (NAME, {key: value}) with values typed like the defaults."""
    name, _, rest = spec.partition(":")
    name = name.strip()
    if name not in MODELS:
        raise ModelError(f"unknown model {name!r}; built-in models: {', '.join(MODELS)} "
                         f"(or give a path to an .onnx file)")
    info = MODELS[name]
    params = info.params
    listing = ", ".join(f"{k}={v}" for k, v in params.items())
    kwargs = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in params:
            raise ModelError(f"model {name!r} has no parameter {key!r}; its parameters are: "
                             f"{listing}")
        if not eq or not value:
            raise ModelError(f"model {name!r}: parameter {key!r} has no value; write "
                             f"{key}={params[key]} (its parameters are: {listing})")
        if key in kwargs:
            raise ModelError(f"model {name!r}: parameter {key!r} is given twice; give each "
                             f"parameter once")
        default = params[key]
        try:
            if isinstance(default, int):
                if not value.isascii() or not value.isdigit():
                    raise ValueError
                v = int(value)
                if v <= 0:
                    raise ValueError
            else:
                v = type(default)(value)
        except ValueError:
            raise ModelError(f"model {name!r}: {key}={value!r} is not a valid "
                             f"{'positive integer' if isinstance(default, int) else type(default).__name__}; "
                             f"its parameters are: {listing}") from None
        kwargs[key] = v
    return name, kwargs


def load_model(spec: str, max_memory: int | None = None, dims: dict | None = None) -> Graph:
    """A built-in model spec or a path to an ONNX file (``dims`` pins its symbolic
    dimensions by name; built-in models take parameters instead).

    ``max_memory``: bytes a built-in model's constant weights may take; each is checked
    before it is drawn (ONNX initializers are already in memory, bounded by the file).
    """
    if spec.endswith(".onnx") or os.sep in spec:
        return load_onnx(spec, dims)
    if dims:
        raise ModelError(f"--dim {next(iter(dims))}: --dim pins symbolic dimensions of .onnx "
                         f"models; built-in models take parameters (NAME:key=value)")
    name, kwargs = parse_spec(spec)
    token = _WEIGHT_LIMIT.set(max_memory)
    try:
        g = MODELS[name].build(**kwargs)
    finally:
        _WEIGHT_LIMIT.reset(token)
    g.validate()
    return g
