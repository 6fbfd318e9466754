"""How far two honest f32 evaluations of one graph may be apart: a per-element rounding-
error scale computed alongside the numpy reference.

Two evaluations of the same graph differ in summation order (BLAS blocking, numpy's
pairwise sums, a fused kernel's lanes, onnx's ReferenceEvaluator) and in the last bits
of elementwise results. A fixed relative tolerance cannot tell that from a bug once the
contractions are long and deep: ResNet-50's 53 convolutions (K up to 4608) leave 3e-4 at
the logits between our reference and onnx's, above any constant that still catches a
small wrong weight in a short graph. So each comparison gets a tolerance computed from
the graph and the data.

The model (N. J. Higham and T. Mary, "A new approach to probabilistic rounding error
analysis", SIAM J. Sci. Comput. 41(5), 2019): each floating-point operation returns the
exact result times (1 + d), the d independent, mean zero, |d| <= u (u = 2^-24 in f32,
2^-11 in f16). A zero-mean variable bounded by c is sub-Gaussian with scale c (Hoeffding's
lemma), and scales of independent sums add in squares, so

* a K-term dot product: each of its K additions errs by at most u*|partial sum| <=
  u*sum|a_i b_i| (whatever the order), each product by u*|a_i b_i|: scale
  sqrt(K + 1) * u * sum|a_i b_i|;
* an operand's own error propagates to first order through the op's derivative, the
  errors of different elements independent: scale^2 = sum (d out / d x_i)^2 scale_i^2,
  plus the op's own rounding (u*|result|, 2u for a libm function; at least half the
  smallest subnormal for a zero or subnormal result, where rounding errs absolutely:
  ``UNDERFLOW``).

An error with scale s exceeds lam*s with probability at most 2*exp(-lam^2/2) (Hoeffding);
``lam`` makes that at most 1e-9 over all compared elements together. Two evaluations
each carrying such an error differ by scale sqrt(2)*s.

Why not the worst case: gamma_K = K*u/(1 - K*u) per contraction, propagated with |W|, is
rigorous but grows like the product of the layers' row sums of |W|: about 27 per 3x3
convolution, 27^53 for ResNet-50, which would accept anything. The probabilistic scale
grows as the errors do.

Simplifications, each conservative or stated: the first-order model drops products of
two errors; a unary op's derivative is taken as its largest value at x and x +- lam*s
(so relu's kink and a steep exp are covered); reduce_max and reduce_min take the largest
scale along the axis; a comparison (a bool result) and every bool tensor count as
exact (a comparison whose operands lie within their errors of each other could flip:
not modelled).

Steps (``round``, ``floor``, ``ceil``, a cast of a float to i32): the result is a whole
number, exact unless the input lies within lam*s of a jump (a half-integer for
round-half-to-even, an integer for floor, ceil and truncation), where either neighbour is
honest: there the scale is max(s, 1/lam), so the allowance (lam*sqrt(2)*scale) covers one
unit. This is what lets a quantized model
(QuantizeLinear after a float matmul, issue 28) compare with onnx's reference: the two
evaluations sum in different orders and may land on the two sides of a tie. An i32
tensor computed from such a step carries its scale on (add, min/max, matmul and the rest
propagate it as for floats, with no rounding of their own: integer arithmetic is exact);
an i32 tensor with exact operands stays exact.
"""
from __future__ import annotations

import math

import numpy as np

from compiler.ir.graph import Graph, Op, slice_windows
from compiler.ir.reference import VIEW_FUNCS, conv2d, eval_op, evaluate

#: unit roundoff per float dtype (IEEE 754 binary32 / binary16, bfloat16's 8-bit
#: significand: half an ulp of 1.0)
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}

#: below the smallest normal number rounding errs absolutely, by up to half the smallest
#: subnormal (the gradual-underflow bound; IEEE 754 binary32 / binary16, bfloat16 shares
#: binary32's exponent range): a product that underflows to +-0 in the f16 reference but
#: not in a kernel that keeps f32 intermediates differs by that much, and a floor or ceil
#: after it by one
UNDERFLOW = {"f32": (2.0 ** -126, 2.0 ** -150), "f16": (2.0 ** -14, 2.0 ** -25),
             "bf16": (2.0 ** -126, 2.0 ** -134)}

#: probability that any compared element exceeds lam * scale (see ``lam``)
FAILURE_PROBABILITY = 1e-9

#: a unary op's own rounding in units of u: exact ops 0, correctly rounded 1, libm 2
#: (glibc's and numpy's exp/log/tanh are within 1-2 ulp), composites add their steps.
#: sin/cos: 2, one libm rounding like exp (the simulator's double sin rounded to f32 is
#: within 1 u; numpy's float32 sin/cos and hipcc's sinf within 1-2 ulp)
_UNARY_ROUNDING = {"neg": 0, "abs": 0, "relu": 0, "sqrt": 1, "reciprocal": 1, "rsqrt": 2, "exp": 2,
                   "log": 2, "tanh": 2, "erf": 2, "sigmoid": 4, "sin": 2, "cos": 2}

#: the step ops (rule "step", ``_step``): whether each jumps at half-integers (round half
#: to even) or at the integers (floor, ceil); all three are exact on an exact input
_STEP_AT_HALF = {"round": True, "floor": False, "ceil": False}


def lam(n_elements: int) -> float:
    """Hoeffding multiplier: n * 2 exp(-lam^2 / 2) <= FAILURE_PROBABILITY."""
    return math.sqrt(2.0 * math.log(2.0 * max(1, n_elements) / FAILURE_PROBABILITY))


def _derivative(kind: str, x: np.ndarray) -> np.ndarray:
    """|f'(x)| of a unary op, in float64 (inf where f' is unbounded)."""
    with np.errstate(all="ignore"):
        if kind in ("neg", "abs"):
            return np.ones_like(x)
        if kind in ("sin", "cos"):  # |cos|, |sin| <= 1, everywhere: no interval to search
            return np.ones_like(x)
        if kind == "relu":
            return (x > 0).astype(np.float64)
        if kind == "exp":
            return np.exp(x)
        if kind == "log":
            return np.where(x > 0, 1.0 / x, np.inf)
        if kind == "sqrt":
            return np.where(x > 0, 0.5 / np.sqrt(np.maximum(x, 0)), np.inf)
        if kind == "rsqrt":
            return np.where(x > 0, 0.5 * np.abs(x) ** -1.5, np.inf)
        if kind == "reciprocal":
            return np.where(x != 0, 1.0 / (x * x), np.inf)
        if kind == "tanh":
            return 1.0 - np.tanh(x) ** 2
        if kind == "erf":
            return 2.0 / math.sqrt(math.pi) * np.exp(-x * x)
        if kind == "sigmoid":
            s = 1.0 / (1.0 + np.exp(-x))
            return s * (1.0 - s)
    raise KeyError(kind)


def _unary(kind: str, x: np.ndarray, s: np.ndarray, k: float) -> np.ndarray:
    """The propagated scale of a unary op: the derivative's largest value at x, x +- k*s."""
    x = x.astype(np.float64)
    reach = k * s
    slope = np.maximum.reduce([_derivative(kind, x - reach), _derivative(kind, x),
                               _derivative(kind, x + reach)])
    with np.errstate(invalid="ignore"):
        return np.where(s > 0, slope * s, 0.0)


def _binary(kind: str, a, b, sa, sb, r) -> np.ndarray:
    """sqrt((d r/d a)^2 sa^2 + (d r/d b)^2 sb^2) of a broadcasting binary op."""
    a, b, r = (np.asarray(v, np.float64) for v in (a, b, r))
    with np.errstate(all="ignore"):
        if kind in ("add", "sub"):
            da, db = 1.0, 1.0
        elif kind == "mul":
            da, db = np.abs(b), np.abs(a)
        elif kind == "div":
            da, db = 1.0 / np.abs(b), np.abs(r / b)
        elif kind == "fmod":  # a - trunc(a/b) b, between the jumps (``_fmod_jumps``)
            da, db = 1.0, np.abs(np.trunc(a / b))
        elif kind == "pow":
            da = np.abs(b * a ** (b - 1.0))
            db = np.abs(np.log(np.abs(a)) * r)
        elif kind in ("max", "min"):  # the chosen operand's error; near a tie, either's
            pick_a = (a >= b) if kind == "max" else (a <= b)
            tie = np.abs(a - b) <= 8.0 * (sa + sb)
            both = np.maximum(sa, sb)
            return np.where(tie, both, np.where(pick_a, sa, sb))
        else:
            raise KeyError(kind)
        ta = np.where(sa > 0, (da * sa) ** 2, 0.0)
        tb = np.where(sb > 0, (db * sb) ** 2, 0.0)
        return np.sqrt(ta + tb)


def _step(x, s, k: float, half: bool) -> np.ndarray:
    """A round-half-to-even (``half``) or truncating step of an input with scale ``s``:
    max(s, 1/k) within k*s of a jump, 0 elsewhere (see the module's "Steps")."""
    x = np.asarray(x, np.float64)
    s = np.broadcast_to(np.asarray(s, np.float64), x.shape)
    with np.errstate(invalid="ignore"):
        jump = np.floor(x) + 0.5 if half else np.round(x)
        near = (s > 0) & ~(np.abs(x - jump) > k * s)  # NaN distance counts as near
    return np.where(near, np.maximum(s, 1.0 / k), 0.0)


def _fmod_jumps(a, b, sa, sb, s, k: float) -> np.ndarray:
    """C's fmod r = a - trunc(a/b) b jumps by |b| at each multiple of b: within k*(error)
    of one, where either side is honest, the scale ``s`` (``_binary``'s slopes) is raised
    to |b|/k, so the allowance covers the jump, as a step's covers one unit (``_step``)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    sa, sb = np.asarray(sa, np.float64), np.asarray(sb, np.float64)
    with np.errstate(all="ignore"):
        t = a / b
        reach = k * (sa + np.abs(t) * sb)
        near = (reach > 0) & ~(np.abs(t - np.round(t)) * np.abs(b) > reach)
        return np.where(near, np.maximum(s, np.abs(b) / k), s)


def _contraction(op: Op, a, b, sa, sb, u: float) -> np.ndarray:
    """Propagated operand errors plus the contraction's own rounding (see the module)."""
    a32, b32 = np.abs(np.asarray(a, np.float32)), np.abs(np.asarray(b, np.float32))
    if op.kind == "matmul":
        k = a32.shape[-1]

        def contract(x, y):
            return np.matmul(np.asarray(x, np.float32), np.asarray(y, np.float32))
    else:
        w_shape = np.asarray(b).shape
        k = int(np.prod(w_shape)) // w_shape[0]  # C/groups * kh * kw, either layout

        def contract(x, y):
            return conv2d(np.asarray(x, np.float32), np.asarray(y, np.float32), op.attrs)
    var = (k + 1) * (u * contract(a32, b32).astype(np.float64)) ** 2
    if np.any(sa > 0):
        var = var + contract(np.square(sa), np.square(b32))
    if np.any(sb > 0):
        var = var + contract(np.square(a32), np.square(sb))
    return np.sqrt(var)


def _reduce(op: Op, x, s, r, u: float) -> np.ndarray:
    axes, keep = op.attrs["axes"], op.attrs["keepdims"]
    x = np.asarray(x, np.float64)
    if op.kind in ("reduce_max", "reduce_min"):  # the chosen element, exactly: its error
        return np.max(s, axis=axes, keepdims=keep)
    if op.kind == "reduce_prod":
        return _product(x, s, r, axes, u)
    n = int(np.prod([x.shape[i] for i in axes])) if axes else x.size
    var = np.sum(np.square(s), axis=axes, keepdims=keep) \
        + (n + 1) * (u * np.sum(np.abs(x), axis=axes, keepdims=keep)) ** 2
    if op.kind == "reduce_mean":
        var = var / (n * n) + (u * np.asarray(r, np.float64)) ** 2
    return np.sqrt(var)


def _product(x, s, r, axes, u: float) -> np.ndarray:
    """A product of n terms: each of its n - 1 multiplications scales the running product,
    and so (first order) the result, by its own (1 + d), |d| <= u, in any order: the
    result carries r * sum d, scale sqrt(n - 1) * u * |r|; an operand's error reaches
    the result through d r / d x_i = the product of the other terms (exclusive prefix
    times suffix products, so a zero term is handled without dividing by it)."""
    axes = tuple(axes) if axes else tuple(range(x.ndim))
    kept = [i for i in range(x.ndim) if i not in axes]
    flat = np.abs(np.transpose(x, kept + list(axes))).reshape(
        [x.shape[i] for i in kept] + [-1])
    sf = np.transpose(np.broadcast_to(s, x.shape), kept + list(axes)).reshape(flat.shape)
    ones = np.ones(flat.shape[:-1] + (1,))
    before = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
    after = np.flip(np.cumprod(np.flip(np.concatenate([flat[..., 1:], ones], -1), -1), -1), -1)
    n = flat.shape[-1]
    with np.errstate(all="ignore"):
        var = np.sum(np.square(before * after * sf), -1) \
            + (n - 1) * np.square(u * np.abs(np.asarray(r, np.float64)).reshape(flat.shape[:-1]))
    return np.sqrt(var).reshape(np.shape(r))


#: how each graph op's result scale is obtained (``_propagate``): one entry per op of
#: ``compiler.ir.ops.OPS`` (tests/test_op_tables.py checks it), so a new op without one
#: fails there instead of crashing ``verify``. ``exact``: a bool result (a comparison or
#: a logical op: not modelled as erring, see the module's simplifications).
RULES = {
    **{k: "unary" for k in _UNARY_ROUNDING},
    **{k: "binary" for k in ("add", "sub", "mul", "div", "pow", "max", "min")},
    **{k: "exact" for k in ("eq", "lt", "gt", "le", "ge", "and", "or", "xor", "not")},
    "cast": "cast", "select": "select", **{k: "step" for k in _STEP_AT_HALF},
    "fmod": "binary",
    **{k: "reduce" for k in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                             "reduce_prod")},
    **{k: "view" for k in VIEW_FUNCS},
    "slice": "slice", "gather": "gather", "pad": "pad", "concat": "concat",
    "matmul": "contraction", "conv2d": "contraction",
}


def _propagate(op: Op, args: list, scales: list, result, k: float) -> np.ndarray:
    """The scale of one op's result from its operands' values and scales."""
    dtype = op.type.dtype
    shape = op.type.shape
    kind = op.kind
    if kind not in RULES:
        raise KeyError(f"no error propagation rule for {kind!r}")
    rule = RULES[kind]
    if rule == "exact" or dtype == "bool" or (dtype not in UNIT_ROUNDOFF and not any(
            np.any(np.asarray(sc) > 0) for sc in scales)):
        return np.zeros(shape)
    if rule == "step":
        return _step(args[0], scales[0], k, half=_STEP_AT_HALF[kind])
    if rule == "cast" and dtype not in UNIT_ROUNDOFF and np.asarray(args[0]).dtype.kind == "f":
        return _step(args[0], scales[0], k, half=False)
    u = UNIT_ROUNDOFF.get(dtype, 0.0)  # integer arithmetic rounds nothing
    mag = np.abs(np.asarray(result, np.float64))
    own = u * mag  # rounding the result to its dtype
    if dtype in UNDERFLOW:  # a zero or subnormal result: the absolute underflow bound
        tiny, eta = UNDERFLOW[dtype]
        own = np.where(mag < tiny, np.maximum(own, eta), own)
    if rule == "unary":
        s = _unary(kind, args[0], scales[0], k)
        own = _UNARY_ROUNDING[kind] * own
    elif rule == "binary":
        s = _binary(kind, args[0], args[1], scales[0], scales[1], result)
        if kind in ("max", "min"):
            own = np.zeros_like(own)
        if kind == "fmod":  # exact itself; its jumps at the multiples of b
            own = np.zeros_like(own)
            s = _fmod_jumps(args[0], args[1], scales[0], scales[1], s, k)
    elif rule == "contraction":
        return _contraction(op, args[0], args[1], scales[0], scales[1], u)
    elif rule == "reduce":
        return _reduce(op, args[0], scales[0], result, u)
    elif rule == "cast":
        s = scales[0] if np.asarray(args[0]).dtype.kind == "f" else 0.0
    elif rule == "select":
        s = np.where(np.asarray(args[0], bool), scales[1], scales[2])
        own = np.zeros_like(own)
    elif rule == "view":
        return np.ascontiguousarray(VIEW_FUNCS[kind](scales[0], op.attrs).reshape(shape))
    elif rule == "pad":
        return np.pad(scales[0], op.attrs["pads"], constant_values=0.0)
    elif rule == "slice":
        return np.ascontiguousarray(scales[0][slice_windows(op.attrs)])
    elif rule == "concat":
        return np.concatenate(scales, axis=op.attrs["axis"])
    else:  # gather
        idx, n = np.asarray(args[1]), np.shape(args[0])[op.attrs["axis"]]
        return np.take(scales[0], np.where(idx < 0, idx + n, idx), axis=op.attrs["axis"])
    s = np.broadcast_to(np.asarray(s, np.float64), shape)
    return np.sqrt(np.square(s) + np.square(np.broadcast_to(own, shape)))


def _infinities_exact(s, result):
    """An infinite result carries no rounding error (IEEE arithmetic gives -inf + x = -inf
    exactly, and a comparison demands that infinities coincide), so its scale is 0.
    Without this an attention mask's -inf gave its own rounding u*|inf| = inf, exp(-inf)'s
    derivative at -inf +- inf made NaN, and the softmax's row sum carried an infinite
    scale into every later tensor: CLIP's f16 block was verified with an allowance of inf
    (issue 28). Overflow to inf in one evaluation only is still caught: the other's finite
    value does not coincide."""
    r = np.asarray(result)
    if r.dtype.kind != "f" or not np.isinf(r).any():
        return s
    return np.where(np.isinf(r), 0.0, np.broadcast_to(s, r.shape))


def _leaf(graph: Graph, name: str) -> Graph:
    """A graph of the one input, so ``reference.evaluate`` checks and converts its value."""
    t = graph.op(name).type
    sub = Graph(graph.name)
    sub.input(name, t.shape, t.dtype, t.layout)
    sub.output(name)
    return sub


def evaluate_with_scales(graph: Graph, inputs: dict, keep=None):
    """(outputs, scales): the reference's outputs (exactly ``reference.evaluate``'s) and
    each float output's rounding-error scale (zeros for i32/bool outputs). ``keep``: more
    tensors to return both of. Values are freed after their last use, as evaluate does."""
    env, scale = {}, {}
    order = graph.topo_order()
    keep = set(keep or ()) | set(graph.outputs)
    last_use = {}
    for i, name in enumerate(order):
        for x in graph.op(name).inputs:
            last_use[x] = i
    total = sum(int(np.prod(graph.op(o).type.shape)) for o in graph.outputs)
    k = lam(total)
    for step, name in enumerate(order):
        op = graph.op(name)
        if op.kind in ("input", "constant"):  # given exactly; checked as evaluate does
            env[name] = evaluate(_leaf(graph, name), inputs)[name] \
                if op.kind == "input" else op.attrs["value"]
            scale[name] = np.zeros(np.shape(env[name]))
            continue
        args = [env[i] for i in op.inputs]
        env[name] = eval_op(op, args)
        scale[name] = _infinities_exact(
            _propagate(op, args, [scale[i] for i in op.inputs], env[name], k), env[name])
        for x in set(op.inputs):
            if last_use.get(x) == step and x not in keep:
                del env[x], scale[x]
    return ({n: env[n] for n in keep if n in env}, {n: scale[n] for n in keep if n in scale})


def tolerance(theirs, scale, base: float, n_elements: int) -> np.ndarray:
    """Per-element allowance for |ours - theirs| between two evaluations of one graph:
    the dtype's constant floor (``numerics.TOLERANCE``, for elementwise formulas that
    differ between evaluators) plus lam * sqrt(2) * scale (the rounding of both)."""
    b = np.abs(np.asarray(theirs, np.float64))
    # a NaN scale (an infinite derivative met a zero, near an inf or NaN value) bounds
    # nothing: that element gets no claim rather than a spurious failure
    s = np.nan_to_num(np.asarray(scale, np.float64), nan=np.inf)
    return base * (1.0 + b) + lam(n_elements) * math.sqrt(2.0) * s
