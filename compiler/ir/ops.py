"""The graph's primitive ops, one table entry each: adding an op starts here.

An entry gives the op's *category*, which selects its shape and dtype rule in
``graph.infer_type`` and its evaluation path in ``reference``; its operand count; its
numpy function (elementwise, compare, logical and reduce ops: ``reference`` evaluates
through it); and the kernel-IR operator it lowers to when that is one ``UnOp``/``BinOp``
(``lower.emitter`` derives ``UNARY_IR``/``BINARY_IR`` from it; the operator itself is an
entry of ``gpusim.program.IR_OPS``). Ops with a rule of their own (views, injective ops,
``cast``, ``select``, contractions) have no numpy function here: ``note`` says where
their evaluation and lowering live. The per-category tuples of ``graph`` (``UNARY``,
``BINARY`` ...) and the function dicts of ``reference`` (``UNARY_FUNCS`` ...) are views
of this table.

An elementwise op's formula is written once per form it must take: the numpy function
here (whole arrays, the reference), the simulator's scalar branch in ``gpusim/engine.py``
(numba compiles the engine: a jitted function can call neither a table of Python
callables nor, by the layering, anything in ``compiler``, so it keys its own branches by
opcode), and the HIP spelling of its IR operator (C text, ``gpusim.program.IR_OPS``).
``tests/test_reference.py`` compares the first two for every op; the error bound's
derivative of each unary op is in ``errorbound`` (``RULES`` names every op's rule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

#: categories, each with one shape/dtype rule in ``graph.infer_type``
CATEGORIES = ("unary", "binary", "compare", "logical", "elementwise", "reduce", "view",
              "injective", "contraction")

def erf(x: np.ndarray) -> np.ndarray:
    """Error function; numpy has none, and scipy is not a dependency. ``math.erf`` (libm's
    double erf) element by element, compiled by numba (a dependency already): through
    ``np.vectorize`` it took a third of the reference's time on ViT-B/16's GELUs."""
    from compiler.ir._erf import erf64  # lazy: numba compiles it on the first call
    return erf64(np.asarray(x, np.float64)).astype(np.float32)


@dataclass(frozen=True)
class OpSpec:
    """One primitive op. ``arity`` None means variadic (at least one operand)."""
    category: str
    arity: Optional[int]
    numpy: Optional[Callable] = None
    #: the kernel-IR operator (``gpusim.program.IR_OPS``) it lowers to one-to-one
    ir: Optional[str] = None
    #: unary only: also defined on i32 operands (the rest need a float operand)
    ints: bool = False
    #: where an op without a numpy function is evaluated and lowered
    note: str = ""


_VIEW = ("reference.VIEW_FUNCS (slice: reference._eval_injective); lowered as an index "
         "rewrite in lower.emitter.view_index and offset_table")
_INJ = ("reference._eval_injective; lowered by lower.emitter's _injective, operand maps "
        "in fusion/indexing.py")

OPS = {
    # unary: float -> float (``ints``: i32 too); same shape
    "neg": OpSpec("unary", 1, np.negative, "neg", ints=True),
    "abs": OpSpec("unary", 1, np.abs, "abs", ints=True),
    "exp": OpSpec("unary", 1, np.exp, "exp"),
    "log": OpSpec("unary", 1, np.log, "log"),
    "sqrt": OpSpec("unary", 1, np.sqrt, "sqrt"),
    "rsqrt": OpSpec("unary", 1, lambda x: 1.0 / np.sqrt(x), "rsqrt"),
    "tanh": OpSpec("unary", 1, np.tanh, "tanh"),
    "erf": OpSpec("unary", 1, erf, "erf"),
    "relu": OpSpec("unary", 1, lambda x: np.maximum(x, 0), "relu", ints=True),
    "sigmoid": OpSpec("unary", 1, lambda x: 1.0 / (1.0 + np.exp(-x)), "sigmoid"),
    "reciprocal": OpSpec("unary", 1, lambda x: 1.0 / x, "recip"),
    # round half to even (ONNX Round; QuantizeLinear's rounding)
    "round": OpSpec("unary", 1, np.rint, "rint"),
    # radians (ONNX Sin, Cos): sinusoidal timestep / position embeddings, rotary cos/sin
    "sin": OpSpec("unary", 1, np.sin, "sin"),
    "cos": OpSpec("unary", 1, np.cos, "cos"),
    # round toward -inf / +inf (ONNX Floor, Ceil)
    "floor": OpSpec("unary", 1, np.floor, "floor"),
    "ceil": OpSpec("unary", 1, np.ceil, "ceil"),
    # binary: same-dtype numeric operands, broadcast; result keeps the dtype (integer
    # division truncates: reference._int_div)
    "add": OpSpec("binary", 2, np.add, "add"),
    "sub": OpSpec("binary", 2, np.subtract, "sub"),
    "mul": OpSpec("binary", 2, np.multiply, "mul"),
    "div": OpSpec("binary", 2, np.divide, "div"),
    "max": OpSpec("binary", 2, np.maximum, "max"),
    "min": OpSpec("binary", 2, np.minimum, "min"),
    "pow": OpSpec("binary", 2, np.power, "pow"),
    # C's fmod, float operands only (ONNX Mod fmod=1 on floats; integer Mod is composed
    # of div/mul/sub by the importer): exact, the sign of the dividend
    "fmod": OpSpec("binary", 2, np.fmod, "fmod"),
    # compare: same-dtype operands -> bool
    "eq": OpSpec("compare", 2, np.equal, "eq"),
    "lt": OpSpec("compare", 2, np.less, "lt"),
    "gt": OpSpec("compare", 2, np.greater, "gt"),
    "le": OpSpec("compare", 2, np.less_equal, "le"),
    "ge": OpSpec("compare", 2, np.greater_equal, "ge"),
    # logical: bool operands -> bool (bool registers are i32 0/1, so the bitwise IR ops)
    "and": OpSpec("logical", 2, np.logical_and, "and"),
    "or": OpSpec("logical", 2, np.logical_or, "or"),
    "xor": OpSpec("logical", 2, np.logical_xor, "xor"),
    # elementwise ops with a rule of their own in infer_type and the reference
    "not": OpSpec("elementwise", 1, np.logical_not, "not"),
    "cast": OpSpec("elementwise", 1, note="reference.eval_op/_eval_exact (truncation "
                   "toward zero); lowered by lower.emitter's _cast"),
    "select": OpSpec("elementwise", 3, note="np.where in reference._eval_exact; lowered "
                     "to the IR's Select"),
    # reduce: over ``axes``, ``keepdims``; f32/f16 and i32 (integer accumulate, wrapping
    # at 32 bits; an i32 mean truncates toward zero, as numpy's cast of the mean does)
    "reduce_sum": OpSpec("reduce", 1, np.sum),
    "reduce_max": OpSpec("reduce", 1, np.max),
    "reduce_mean": OpSpec("reduce", 1, np.mean),
    "reduce_min": OpSpec("reduce", 1, np.min),
    "reduce_prod": OpSpec("reduce", 1, np.prod),
    # views: no arithmetic, only an index rewrite
    "transpose": OpSpec("view", 1, note=_VIEW),
    "reshape": OpSpec("view", 1, note=_VIEW),
    "broadcast": OpSpec("view", 1, note=_VIEW),
    "slice": OpSpec("view", 1, note=_VIEW),
    # injective: each output element reads one input element chosen by its index
    "gather": OpSpec("injective", 2, note=_INJ),
    "pad": OpSpec("injective", 1, note=_INJ),
    "concat": OpSpec("injective", None, note=_INJ),
    # contractions: their own dispatch kinds and lowerings
    "matmul": OpSpec("contraction", 2, note="np.matmul in reference.eval_op; lowered by "
                     "lower/contraction.py"),
    "conv2d": OpSpec("contraction", 2, note="reference.conv2d; lowered by "
                     "lower/contraction.py"),
}


def of(category: str) -> tuple:
    """The op names of one category, in table order."""
    return tuple(k for k, s in OPS.items() if s.category == category)


def funcs(category: str) -> dict:
    """name -> numpy function for one category."""
    return {k: OPS[k].numpy for k in of(category)}


def ir_of(category: str) -> dict:
    """graph op -> its one-to-one kernel-IR operator, for one category."""
    return {k: OPS[k].ir for k in of(category) if OPS[k].ir is not None}
