"""ONNX's int8/uint8 quantization ops as primitive ops (issue 28, item 2).

QuantizeLinear, DequantizeLinear (per tensor and per axis), DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv become the graph's own
elementwise ops, reductions and an *integer* matmul or conv2d, so fusion sees primitives
(a DequantizeLinear before a matmul is its operand's producer, the requantisation after
it the matmul's epilogue) and every formula is written in the order onnx's reference
(``onnx.reference.ops``) computes it:

* QuantizeLinear: ``clip(round_half_even(x / scale) + zero_point, qmin, qmax)``; the
  zero point is added in the float dtype, exact since both are whole numbers below 2^24
  wherever the clip does not decide the result anyway.
* DequantizeLinear: ``(float32(x) - float32(zero_point)) * scale``.
* MatMulInteger / ConvInteger: ``(A - a_zero_point) @ (B - b_zero_point)`` in i32: the
  products and the K-sum are exact integer arithmetic (wrapping at 32 bits as the
  hardware's i32 accumulator does), in the reference and in the simulated kernel.
* QLinearMatMul / QLinearConv: that int32 result (plus QLinearConv's int32 bias) times
  ``a_scale * b_scale / y_scale``, plus ``y_zero_point``, rounded half to even, clipped.
  SIMPLIFICATION: onnx's reference multiplies in float64 (numpy promotes int32 times
  float32); here it is float32, as a GPU kernel computes it. The two can land on the two
  sides of a rounding tie: one unit apart, which ``verify`` allows through the error
  bound's step rule (``compiler.ir.errorbound._step``).

Quantized tensors are i32 graph values whose ONNX type (uint8 or int8, and so its
range) the importer keeps in ``qtypes``. A quantized weight is a constant: its
DequantizeLinear folds at import (onnx's own evaluator), so a QDQ model's matmuls see
float weights and only the activations' Q/DQ pairs remain as graph ops.
Not supported, each refused in one line: blocked quantization (``block_size``), float8,
int4 and 16-bit quantized types, a computed zero point or scale of QLinear ops' filter.
"""
from __future__ import annotations

import numpy as np

from compiler.ir.graph import ShapeError, UnsupportedError

#: quantized numpy dtype -> (lowest, highest)
QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
#: ONNX TensorProto element type -> numpy dtype, for ``output_dtype`` attributes
_ONNX_QTYPES = {2: np.dtype(np.uint8), 3: np.dtype(np.int8)}


def _qtype(im, name: str | None, node, default=np.dtype(np.uint8)) -> np.dtype:
    """The uint8/int8 type of an ONNX tensor (a static's own dtype, or what the importer
    recorded for a graph value); ``default`` when ``name`` is None."""
    if name is None:
        return default
    v = im.env.get(name)
    arr = getattr(v, "array", None)
    if arr is not None:
        if arr.dtype in QRANGE:
            return arr.dtype
        if arr.dtype.kind in "iu" and node.op_type in ("DequantizeLinear",):
            return arr.dtype  # an int32 bias dequantized: no range to keep
        raise UnsupportedError(f"{im.where(node)}: {name!r} has dtype {arr.dtype}; the "
                               f"quantized types supported are uint8 and int8 (float8, "
                               f"int4, 16-bit: not yet)")
    if name in im.qtypes:
        return np.dtype(im.qtypes[name][0])
    return default


def _record(im, node, out: int, dtype: np.dtype) -> None:
    lo, hi = QRANGE[np.dtype(dtype)]
    im.qtypes[node.output[out]] = (np.dtype(dtype).type, lo, hi)


def _along(im, node, name: str, like, axis: int, dtype: str):
    """A per-tensor (scalar) or per-axis (1-D) scale or zero point as a graph value that
    broadcasts against ``like`` along ``axis``."""
    g = im.g
    v = im.value(name, node, dtype=dtype)
    shape = im.shape_of(name, node)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1 and like.type.rank == 0):
        return v
    if len(shape) != 1:
        raise UnsupportedError(f"{im.where(node)}: {name!r} has shape {tuple(shape)}; "
                               f"blocked quantization is not supported (per-tensor or "
                               f"per-axis only)")
    rank = like.type.rank
    axis = axis % rank
    if shape[0] != like.shape[axis]:
        if shape[0] == 1:
            return v
        raise ShapeError(f"{im.where(node)}: {name!r} has {shape[0]} entries for axis {axis} "
                         f"of size {like.shape[axis]}")
    target = [1] * rank
    target[axis] = shape[0]
    return g.reshape(v, tuple(target))


def _clip(g, x, lo: float, hi: float):
    c = lambda v: g.constant(np.array([v], np.float32 if x.dtype == "f32" else np.float16),
                             dtype=x.dtype)
    return g.binary("min", g.binary("max", x, c(lo)), c(hi))


def _requantise(im, node, y, zp_name, qt):
    """clip(round_half_even(y + zero_point), qmin, qmax) as i32 (y a float value)."""
    g = im.g
    if zp_name is not None:
        y = g.add(y, g.cast(im.value(zp_name, node, dtype="i32"), y.dtype)
                  if not im.is_static(zp_name) else im.value(zp_name, node, like=y))
    lo, hi = QRANGE[qt]
    return g.cast(_clip(g, g.unary("round", y), lo, hi), "i32")


def _check_block(im, node):
    if int(im.attr(node, "block_size", 0) or 0):
        raise UnsupportedError(f"{im.where(node)}: blocked quantization (block_size) is "
                               f"not supported; per-tensor or per-axis only")
    if im.attr(node, "precision", None):
        raise UnsupportedError(f"{im.where(node)}: the precision attribute is not "
                               f"supported")


def _quantize_linear(im, node):
    _check_block(im, node)
    g = im.g
    x = im.value(node.input[0], node)
    if x.dtype not in ("f32", "f16"):
        raise UnsupportedError(f"{im.where(node)}: QuantizeLinear of {x.dtype}; float "
                               f"inputs only")
    zp = im.optional_input(node, 2)
    out_t = im.attr(node, "output_dtype", 0)
    default = _ONNX_QTYPES.get(int(out_t), None) if out_t else np.dtype(np.uint8)
    if default is None:
        raise UnsupportedError(f"{im.where(node)}: output_dtype {out_t}: uint8 and int8 "
                               f"only")
    qt = _qtype(im, zp, node, default)
    axis = int(im.attr(node, "axis", 1))
    scale = _along(im, node, node.input[1], x, axis, x.dtype)
    y = g.div(x, scale)
    if zp is not None:
        zpv = _along(im, node, zp, x, axis, "i32")
        y = g.add(g.unary("round", y), g.cast(zpv, x.dtype))
        lo, hi = QRANGE[qt]
        q = g.cast(_clip(g, y, lo, hi), "i32")
    else:
        q = _requantise(im, node, y, None, qt)
    _record(im, node, 0, qt)
    return q


def _dequantize_linear(im, node):
    _check_block(im, node)
    g = im.g
    x = im.value(node.input[0], node, dtype="i32")
    axis = int(im.attr(node, "axis", 1))
    scale_arr = getattr(im.env.get(node.input[1]), "array", None)
    out = "f16" if scale_arr is not None and scale_arr.dtype == np.float16 else "f32"
    out_t = int(im.attr(node, "output_dtype", 0) or 0)
    if out_t:
        if out_t not in (1, 10):
            raise UnsupportedError(f"{im.where(node)}: output_dtype {out_t}: float32 and "
                                   f"float16 only")
        out = "f32" if out_t == 1 else "f16"
    dx = g.cast(x, "f32")
    zp = im.optional_input(node, 2)
    if zp is not None:
        _qtype(im, zp, node)
        dx = g.sub(dx, g.cast(_along(im, node, zp, x, axis, "i32"), "f32"))
    y = g.mul(dx, g.cast(_along(im, node, node.input[1], x, axis, out), "f32")
              if out == "f16" else _along(im, node, node.input[1], x, axis, "f32"))
    return g.cast(y, "f16") if out == "f16" else y


def _dynamic_quantize_linear(im, node):
    """uint8 with a scale and zero point from the tensor's own range (onnx's formula)."""
    g = im.g
    x = im.value(node.input[0], node)
    if x.dtype != "f32":
        raise UnsupportedError(f"{im.where(node)}: DynamicQuantizeLinear of {x.dtype}; "
                               f"float32 only")
    axes = tuple(range(x.type.rank))
    f = lambda v: g.constant(np.array([v], np.float32))
    maxx = g.binary("max", g.reshape(g.reduce("reduce_max", x, axes, keepdims=False), (1,)),
                    f(0.0))
    minx = g.binary("min", g.reshape(g.reduce("reduce_min", x, axes, keepdims=False), (1,)),
                    f(0.0))
    span = g.select(g.compare("eq", maxx, minx), f(1.0), g.sub(maxx, minx))
    scale = g.div(span, f(255.0))
    zp = g.unary("round", _clip(g, g.sub(f(0.0), g.div(minx, scale)), 0.0, 255.0))
    y = g.cast(_clip(g, g.add(g.unary("round", g.div(x, scale)), zp), 0.0, 255.0), "i32")
    _record(im, node, 0, np.dtype(np.uint8))
    _record(im, node, 2, np.dtype(np.uint8))
    return [y, scale, g.cast(zp, "i32")]


def _less_zero_point(im, node, name: str, zp_name: str | None, axis: int | None):
    """An integer operand less its zero point, in i32 (folded at import when both are
    constants; skipped when the zero point is a constant 0). ``axis``: the operand axis a
    1-D zero point runs along (MatMulInteger's per-row A, per-column B; a filter's
    output channels)."""
    g = im.g
    _qtype(im, name, node)
    if zp_name is not None:
        _qtype(im, zp_name, node)
    zp_static = zp_name is not None and im.is_static(zp_name)
    if zp_name is None or (zp_static and not np.any(im.static(zp_name, node, "zp"))):
        return im.value(name, node, dtype="i32")
    if im.is_static(name) and zp_static:
        a = im.static(name, node, "operand").astype(np.int32)
        z = im.static(zp_name, node, "zero point").astype(np.int32)
        if z.ndim == 1 and z.size > 1:
            shape = [1] * a.ndim
            shape[axis % a.ndim] = z.size
            z = z.reshape(shape)
        return g.constant(a - z, name=im.fresh(name + "_less_zp"), dtype="i32")
    v = im.value(name, node, dtype="i32")
    return g.sub(v, _along(im, node, zp_name, v, axis if axis is not None else -1, "i32"))


def _integer_matmul(im, node, a, a_zp, b, b_zp):
    A = _less_zero_point(im, node, a, a_zp, -2)
    B = _less_zero_point(im, node, b, b_zp, -1)
    return im.matmul_values(A, B)


def _matmul_integer(im, node):
    opt = im.optional_input
    return _integer_matmul(im, node, node.input[0], opt(node, 2), node.input[1], opt(node, 3))


def _multiplier(im, node, names, like, axis=None):
    """a_scale * b_scale / y_scale in float32, in onnx's order (at import when constant)."""
    g = im.g
    if all(im.is_static(n) for n in names):
        a, b, y = (np.asarray(im.static(n, node, "scale")) for n in names)
        # in the scales' own dtype, as onnx computes it (float16 scales: float16 math)
        m = np.asarray(a * b / y).astype(np.float32).reshape(-1)
        v = g.constant(m, name=im.fresh(node.output[0] + "_multiplier"), dtype="f32")
        if m.size > 1 and axis is not None:
            shape = [1] * like.type.rank
            shape[axis % like.type.rank] = m.size
            v = g.reshape(v, tuple(shape))
        return v
    a, b, y = (_along(im, node, n, like, axis if axis is not None else -1, "f32")
               for n in names)
    a, b, y = (v if v.dtype == "f32" else g.cast(v, "f32") for v in (a, b, y))
    return g.div(g.mul(a, b), y)


def _qlinear_matmul(im, node):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (list(node.input) + [""] * 8)[:8]
    c = _integer_matmul(im, node, a, a_zp or None, b, b_zp or None)
    qt = _qtype(im, y_zp or None, node, _qtype(im, a, node))
    y = im.g.mul(im.g.cast(c, "f32"), _multiplier(im, node, (a_s, b_s, y_s), c, -1))
    _record(im, node, 0, qt)
    return _requantise(im, node, y, y_zp or None, qt)


def _integer_conv(im, node, x, x_zp, w, w_zp, bias=None):
    X = _less_zero_point(im, node, x, x_zp, None)
    if x_zp is not None and im.shape_of(x_zp, node) not in ((), (1,)):
        raise UnsupportedError(f"{im.where(node)}: a per-channel input zero point is not "
                               f"supported (onnx allows a scalar only)")
    W = _less_zero_point(im, node, w, w_zp, 0)
    return im.conv_values(node, X, w, bias, filter_value=W)


def _conv_integer(im, node):
    opt = im.optional_input
    return _integer_conv(im, node, node.input[0], opt(node, 2), node.input[1], opt(node, 3))


def _qlinear_conv(im, node):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = (list(node.input) + [""] * 9)[:9]
    c = _integer_conv(im, node, x, x_zp or None, w, w_zp or None, bias or None)
    qt = _qtype(im, y_zp or None, node, _qtype(im, x, node))
    y = im.g.mul(im.g.cast(c, "f32"), _multiplier(im, node, (x_s, w_s, y_s), c, 1))
    _record(im, node, 0, qt)
    return _requantise(im, node, y, y_zp or None, qt)


QUANT_CONVERTERS = {
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear, "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer, "QLinearMatMul": _qlinear_matmul,
    "QLinearConv": _qlinear_conv,
}
