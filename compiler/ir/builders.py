"""Composite layers written as primitive ops (there is no fused "softmax" node).

Fusion must rediscover these patterns from primitives, as IREE's dispatch creation does;
these builders only save typing.
"""
from __future__ import annotations

import math

from compiler.ir.graph import Graph, Value


def softmax(g: Graph, x: Value, axis: int = -1) -> Value:
    """max-subtracted softmax: exp(x - max) / sum(exp(x - max))."""
    m = g.reduce_max(x, axis, keepdims=True)
    e = g.exp(g.sub(x, m))
    s = g.reduce_sum(e, axis, keepdims=True)
    return g.div(e, s)


def layer_norm(g: Graph, x: Value, gamma: Value | None = None, beta: Value | None = None,
               eps: float = 1e-5, axis: int = -1, residual: Value | None = None) -> Value:
    """(x - mean) / sqrt(var + eps) * gamma + beta; ``residual`` is added to x first."""
    if residual is not None:
        x = g.add(x, residual)
    mean = g.reduce_mean(x, axis, keepdims=True)
    d = g.sub(x, mean)
    var = g.reduce_mean(g.mul(d, d), axis, keepdims=True)
    y = g.mul(d, g.rsqrt(g.add(var, eps)))
    if gamma is not None:
        y = g.mul(y, gamma)
    if beta is not None:
        y = g.add(y, beta)
    return y


def rms_norm(g: Graph, x: Value, gamma: Value | None = None, eps: float = 1e-6,
             axis: int = -1) -> Value:
    """x / sqrt(mean(x^2) + eps) * gamma."""
    ms = g.reduce_mean(g.mul(x, x), axis, keepdims=True)
    y = g.mul(x, g.rsqrt(g.add(ms, eps)))
    return g.mul(y, gamma) if gamma is not None else y


def gelu(g: Graph, x: Value, approximate: str = "none") -> Value:
    """GELU: exact 0.5*x*(1+erf(x/sqrt(2))) or the tanh approximation."""
    if approximate == "none":
        return g.mul(g.mul(x, 0.5), g.add(g.erf(g.mul(x, 1.0 / math.sqrt(2.0))), 1.0))
    if approximate == "tanh":
        inner = g.mul(g.add(x, g.mul(g.mul(g.mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return g.mul(g.mul(x, 0.5), g.add(g.tanh(inner), 1.0))
    raise ValueError(f"gelu approximate={approximate!r}; use 'none' or 'tanh'")


def bias_add(g: Graph, x: Value, bias: Value) -> Value:
    """x + bias, broadcasting the bias over the leading dimensions."""
    return g.add(x, bias)
