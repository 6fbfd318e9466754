"""The kernel IR: one kernel launch, as the machine runs it and as HIP prints it.

This is the single program representation shared by the simulator (``gpusim.simulate``)
and the HIP backend (``codegen_hip``): what the simulator executes is exactly what the
backend prints. It follows HIP semantics:

- A launch has ``grid`` workgroups of ``block`` threads (both one-dimensional; kernels
  that need 2-D tiles decompose ``block_id()`` with ``//`` and ``%``, as HIP code often
  does with a linearised grid).
- Every thread owns private scalar registers: ``Var`` values, typed ``f32`` or ``i32``.
  f16 buffers are widened to f32 on load and narrowed on store, so f16 math accumulates
  in f32 (what a HIP programmer writes with ``__half2float``); i8/u8 buffers (one byte
  per element) are widened to i32 registers on load and keep the low byte on store.
- Global buffers and LDS arrays are indexed by a flat element offset; their ``shape`` and
  ``strides`` are metadata for harnesses, views and layout reasoning. A vector access of
  width 1, 2 or 4 moves that many consecutive elements into (or out of) that many
  registers, like ``float2``/``float4`` in HIP; the offset must be a multiple of the width.
  A global *load* of three 4-byte elements (``global_load_dwordx3``) needs only the
  element's alignment: the ISA asks dword alignment of every global access, and hipcc's
  load-store vectorizer forms exactly these from three neighbouring scalar reads.
- ``lane()``, ``wave_id()``, ``thread_id()`` and ``block_id()`` are the hardware ids; the
  wavefront size (64 on CDNA, 32 on RDNA) comes from the architecture at simulation time
  and from ``warpSize`` in HIP.

Expressions are immutable trees. Python operators build them (``i * 4 + lane()``);
comparisons use ``<``, ``<=``, ``>``, ``>=`` and the methods ``eq``/``ne`` (``==`` stays
identity so nodes can live in sets and dicts).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from gpusim import engine as sim_engine

#: memory dtypes. bf16: like f16, widened on load, rounded on store. i8/u8: one byte per
#: element (int8/uint8 tensors, issue 28), sign/zero-extended into an i32 register on load
#: and keeping the low byte on store (``engine.store_elem``), as global_load_sbyte /
#: global_load_ubyte / global_store_byte do. SIMPLIFICATION: a 2- or 4-wide byte load is
#: one instruction filling 2 or 4 registers; hipcc loads one dword and unpacks it with
#: v_bfe_i32/u32 (one VALU op per byte after the first), which is not counted (folded
#: away where the bytes feed an int8 MFMA pack)
DTYPES = ("f32", "f16", "bf16", "i32", "i8", "u8")
REG_DTYPES = ("f32", "i32")

# ----------------------------------------------------------------------------- expressions

@dataclass(frozen=True)
class IROp:
    """One IR operator. ``kind`` is its type rule: a binary op is "arith" (same-type
    operands, keeps the type), "float" (f32 operands), "int" (i32 operands) or "cmp"
    (any operands, yields i32 0/1); a unary op is "float" (f32 -> f32), "any" (keeps the
    type) or "truth" (yields i32 0/1). ``engine`` is its opcode in the simulator's
    engine (an ``E.B_*``, ``E.C_*`` or ``E.U_*`` constant); its evaluation is that
    opcode's branch of ``fbin``/``ibin``/``fcmp``/``fun``/``iun`` in gpusim/engine.py,
    which must stay there (one source for the jitted and the pure-Python engine).
    ``hip`` is its HIP spelling, a format of the printed operands ``{a}`` and ``{b}``;
    ``hip_int`` the spelling on i32 operands where it differs. ``transcendental``: issued
    at the transcendental rate (``Arch.transcendental_rate_divisor``) on f32."""
    kind: str
    engine: int
    hip: str
    hip_int: str | None = None
    transcendental: bool = False

    def spell(self, dtype: str, a: str, b: str = "") -> str:
        """The HIP text of this operator on printed operands of register ``dtype``."""
        t = self.hip_int if dtype == "i32" and self.hip_int is not None else self.hip
        return t.format(a=a, b=b)


#: the IR's binary operators; adding one is an entry here and its engine branch.
IR_BINARY = {
    "add": IROp("arith", sim_engine.B_ADD, "({a} + {b})"),
    "sub": IROp("arith", sim_engine.B_SUB, "({a} - {b})"),
    "mul": IROp("arith", sim_engine.B_MUL, "({a} * {b})"),
    "div": IROp("arith", sim_engine.B_DIV, "({a} / {b})", transcendental=True),
    "floordiv": IROp("int", sim_engine.B_DIV, "({a} / {b})"),  # operands are non-negative here
    "mod": IROp("int", sim_engine.B_MOD, "({a} % {b})"),
    "min": IROp("arith", sim_engine.B_MIN, "fminf({a}, {b})", hip_int="min({a}, {b})"),
    "max": IROp("arith", sim_engine.B_MAX, "fmaxf({a}, {b})", hip_int="max({a}, {b})"),
    "pow": IROp("float", sim_engine.B_POW, "powf({a}, {b})", transcendental=True),
    # C's fmod (ONNX Mod with fmod=1 on floats): exact, the sign of the dividend.
    # SIMPLIFICATION: issued as one quarter-rate transcendental op; ROCm's ocml fmodf is a
    # longer VALU sequence (a reduction loop whose trip count grows with the exponent
    # difference of a and b), so an fmod-bound kernel is predicted faster than it runs
    "fmod": IROp("float", sim_engine.B_FMOD, "fmodf({a}, {b})", transcendental=True),
    "shl": IROp("int", sim_engine.B_SHL, "({a} << {b})"),
    "shr": IROp("int", sim_engine.B_SHR, "({a} >> {b})"),
    "and": IROp("int", sim_engine.B_AND, "({a} & {b})"),
    "or": IROp("int", sim_engine.B_OR, "({a} | {b})"),
    "xor": IROp("int", sim_engine.B_XOR, "({a} ^ {b})"),
    "lt": IROp("cmp", sim_engine.C_LT, "(int)({a} < {b})"),
    "le": IROp("cmp", sim_engine.C_LE, "(int)({a} <= {b})"),
    "gt": IROp("cmp", sim_engine.C_GT, "(int)({a} > {b})"),
    "ge": IROp("cmp", sim_engine.C_GE, "(int)({a} >= {b})"),
    "eq": IROp("cmp", sim_engine.C_EQ, "(int)({a} == {b})"),
    "ne": IROp("cmp", sim_engine.C_NE, "(int)({a} != {b})"),
    "land": IROp("cmp", sim_engine.C_LAND, "(int)({a} && {b})"),
    "lor": IROp("cmp", sim_engine.C_LOR, "(int)({a} || {b})"),
}
#: the IR's unary operators; adding one is an entry here and its engine branch.
IR_UNARY = {
    "neg": IROp("any", sim_engine.U_NEG, "(-{a})"),
    "exp": IROp("float", sim_engine.U_EXP, "expf({a})", transcendental=True),
    "log": IROp("float", sim_engine.U_LOG, "logf({a})", transcendental=True),
    "sqrt": IROp("float", sim_engine.U_SQRT, "sqrtf({a})", transcendental=True),
    "rsqrt": IROp("float", sim_engine.U_RSQRT, "rsqrtf({a})", transcendental=True),
    "tanh": IROp("float", sim_engine.U_TANH, "tanhf({a})", transcendental=True),
    "erf": IROp("float", sim_engine.U_ERF, "erff({a})", transcendental=True),
    "abs": IROp("any", sim_engine.U_ABS, "fabsf({a})", hip_int="abs({a})"),
    "recip": IROp("float", sim_engine.U_RECIP, "(1.0f / {a})", transcendental=True),
    "sigmoid": IROp("float", sim_engine.U_SIGMOID, "(1.0f / (1.0f + expf(-{a})))",
                    transcendental=True),
    "relu": IROp("any", sim_engine.U_RELU, "fmaxf({a}, 0.0f)", hip_int="max({a}, 0)"),
    "not": IROp("truth", sim_engine.U_NOT, "(int)(!{a})"),
    # round half to even: rintf in the default rounding mode (v_rndne_f32), what ONNX's
    # QuantizeLinear and Round specify
    "rint": IROp("float", sim_engine.U_RINT, "rintf({a})"),
    # sine and cosine in radians. SIMPLIFICATION: issued as one quarter-rate transcendental
    # op, as exp is. hipcc's sinf/cosf (ROCm's ocml, clang 15 here; `hipcc -S` for gfx90a
    # and gfx940) uses no v_sin_f32/v_cos_f32 at all: a Cody-Waite reduction by pi/2
    # (about 8 VALU ops, one v_rndne_f32) when |x| < 2^17, a Payne-Hanek reduction (about
    # 100 integer VALU ops, taken by the whole wave when any lane needs it) otherwise, then
    # both minimax polynomials and a select (about 25 VALU ops): ~35 full-rate VALU ops on
    # small arguments against the one quarter-rate op modelled, so a sin/cos-bound kernel is
    # predicted several times faster than it runs (a timestep embedding's sin/cos are a
    # few thousand elements, far from bound)
    "sin": IROp("float", sim_engine.U_SIN, "sinf({a})", transcendental=True),
    "cos": IROp("float", sim_engine.U_COS, "cosf({a})", transcendental=True),
    # round toward -inf / +inf: one full-rate VALU op each, the v_floor_f32 / v_ceil_f32
    # hipcc emits for floorf/ceilf (`hipcc -S` for gfx90a and gfx940)
    "floor": IROp("float", sim_engine.U_FLOOR, "floorf({a})"),
    "ceil": IROp("float", sim_engine.U_CEIL, "ceilf({a})"),
    # an f32 register rounded to bfloat16 and back: what a bf16 op's result holds. The
    # lowering applies it to every bf16 value a kernel computes (compiler.lower.emitter),
    # so a fused kernel rounds where the reference rounds. SIMPLIFICATION: issued as one
    # VALU op; gfx90a/gfx942 have no f32->bf16 convert, hipcc spends ~4 integer ops
    "rbf16": IROp("float", sim_engine.U_RBF16, "wf_bf16_to_float(wf_float_to_bf16({a}))"),
}
#: derived views of the two tables
BINARY_OPS = tuple(IR_BINARY)
COMPARISONS = tuple(k for k, o in IR_BINARY.items() if o.kind == "cmp")
INT_ONLY = tuple(k for k, o in IR_BINARY.items() if o.kind == "int")
UNARY_OPS = tuple(IR_UNARY)
#: special ids every thread can read.
SPECIALS = ("thread_id", "lane", "wave_id", "block_id", "wave_size")


class Expr:
    """Base of expression nodes; gives Python operators that build IR."""

    dtype: str

    def _bin(self, op, other, swap=False):
        other = as_expr(other, self.dtype)
        a, b = (other, self) if swap else (self, other)
        return BinOp(op, a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o)
    def __rfloordiv__(self, o): return self._bin("floordiv", o, True)
    def __mod__(self, o): return self._bin("mod", o)
    def __rmod__(self, o): return self._bin("mod", o, True)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rshift__(self, o): return self._bin("shr", o)
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def __xor__(self, o): return self._bin("xor", o)
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __neg__(self): return UnOp("neg", self)
    def eq(self, o): return self._bin("eq", o)
    def ne(self, o): return self._bin("ne", o)
    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Union[int, float]
    dtype: str = "i32"

    def __post_init__(self):
        if self.dtype not in REG_DTYPES:
            raise TypeError(f"constant dtype must be one of {REG_DTYPES}, got {self.dtype!r}")


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A per-thread register (or loop counter). Identity is the name within a kernel."""
    name: str
    dtype: str = "f32"

    def __post_init__(self):
        if self.dtype not in REG_DTYPES:
            raise TypeError(f"register {self.name!r}: dtype must be f32 or i32, got {self.dtype!r}")


@dataclass(frozen=True, eq=False)
class Special(Expr):
    """A hardware id: thread_id, lane, wave_id, block_id or wave_size (all i32)."""
    name: str
    dtype: str = "i32"

    def __post_init__(self):
        if self.name not in SPECIALS:
            raise ValueError(f"unknown special id {self.name!r}; expected one of {SPECIALS}")


@dataclass(frozen=True, eq=False)
class ScalarRef(Expr):
    """Reads a scalar kernel parameter."""
    name: str
    dtype: str = "i32"


@dataclass(frozen=True, eq=False)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = field(init=False)

    def __post_init__(self):
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary op {self.op!r}")
        if self.op in COMPARISONS:
            dt = "i32"
        elif self.op in INT_ONLY:
            if self.a.dtype != "i32" or self.b.dtype != "i32":
                raise TypeError(f"{self.op} needs i32 operands, got {self.a.dtype}, {self.b.dtype}")
            dt = "i32"
        else:
            if self.a.dtype != self.b.dtype:
                raise TypeError(f"{self.op}: operand dtypes differ ({self.a.dtype} vs "
                                f"{self.b.dtype}); insert a cast()")
            if IR_BINARY[self.op].kind == "float" and self.a.dtype != "f32":
                raise TypeError(f"{self.op} needs f32 operands")
            dt = self.a.dtype
        object.__setattr__(self, "dtype", dt)


@dataclass(frozen=True, eq=False)
class UnOp(Expr):
    op: str
    a: Expr
    dtype: str = field(init=False)

    def __post_init__(self):
        if self.op not in UNARY_OPS:
            raise ValueError(f"unknown unary op {self.op!r}")
        kind = IR_UNARY[self.op].kind
        if kind == "float" and self.a.dtype != "f32":
            raise TypeError(f"{self.op} needs an f32 operand, got {self.a.dtype}")
        object.__setattr__(self, "dtype", "i32" if kind == "truth" else self.a.dtype)


@dataclass(frozen=True, eq=False)
class Fma(Expr):
    """a * b + c in one VALU instruction (v_fma_f32)."""
    a: Expr
    b: Expr
    c: Expr
    dtype: str = "f32"


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """cond ? a : b (v_cndmask); cond is an i32 truth value."""
    cond: Expr
    a: Expr
    b: Expr
    dtype: str = field(init=False)

    def __post_init__(self):
        if self.a.dtype != self.b.dtype:
            raise TypeError(f"select arms differ in dtype ({self.a.dtype} vs {self.b.dtype})")
        object.__setattr__(self, "dtype", self.a.dtype)


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    a: Expr
    dtype: str = "f32"


def as_expr(x, like: str = "i32") -> Expr:
    """Wraps Python numbers; ints follow the other operand's dtype, floats are f32."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(int(x), "i32")
    if isinstance(x, int):
        return Const(float(x), "f32") if like == "f32" else Const(x, "i32")
    if isinstance(x, float):
        return Const(x, "f32")
    raise TypeError(f"cannot use {type(x).__name__} in a kernel expression")


# convenience constructors -----------------------------------------------------------------
def thread_id() -> Special: return Special("thread_id")
def lane() -> Special: return Special("lane")
def wave_id() -> Special: return Special("wave_id")
def block_id() -> Special: return Special("block_id")
def wave_size() -> Special: return Special("wave_size")
def f32(x: float) -> Const: return Const(float(x), "f32")
def i32(x: int) -> Const: return Const(int(x), "i32")
def cast(x, dtype: str) -> Cast: return Cast(as_expr(x), dtype)
def select(c, a, b) -> Select:
    a = as_expr(a); b = as_expr(b, a.dtype)
    return Select(as_expr(c), a, b)
def fma(a, b, c) -> Fma: return Fma(as_expr(a, "f32"), as_expr(b, "f32"), as_expr(c, "f32"))
def maximum(a, b) -> BinOp: a = as_expr(a); return BinOp("max", a, as_expr(b, a.dtype))
def minimum(a, b) -> BinOp: a = as_expr(a); return BinOp("min", a, as_expr(b, a.dtype))
def power(a, b) -> BinOp: return BinOp("pow", as_expr(a, "f32"), as_expr(b, "f32"))
def land(a, b) -> BinOp: return BinOp("land", as_expr(a), as_expr(b))
def lor(a, b) -> BinOp: return BinOp("lor", as_expr(a), as_expr(b))


def _unary(name):
    def f(x):
        return UnOp(name, as_expr(x, "f32"))
    f.__name__ = name
    return f


neg, exp, log, sqrt, rsqrt, tanh, erf, fabs, recip, sigmoid, relu, sin, cos, floor, ceil = (
    _unary(n) for n in ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "abs", "recip",
                        "sigmoid", "relu", "sin", "cos", "floor", "ceil"))


# ------------------------------------------------------------------------------ statements
class Stmt:
    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Assign(Stmt):
    """dst = value; the register's dtype must equal the value's."""
    dst: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """for (var = start; var < stop; var += step) body. ``unroll`` is a hint for hipcc
    (unroll fully; the simulator then charges no loop control). ``rolled`` asks hipcc to
    keep the loop a loop (``#pragma unroll 1``), as the simulator runs it: fully unrolled,
    hipcc may issue every trip's loads up front and run out of registers. ``trips_hint``:
    the mean trip count of a loop whose bounds vary per workgroup (stream-K's K loop),
    read only by analytic estimates (the simulator and HIP run the real bounds)."""
    var: Var
    start: Expr
    stop: Expr
    step: int
    body: tuple
    unroll: bool = False
    rolled: bool = False
    trips_hint: float | None = None


@dataclass(frozen=True, eq=False)
class If(Stmt):
    """if (cond) then else orelse. ``then_share``: the mean share of its executions that
    take ``then``, for a condition whose value varies over workgroups or loop trips in a
    way no one workgroup's values show (stream-K's fix-up runs in the last of a tile's
    arrivals, a segment exists in some workgroups only); read only by analytic estimates,
    which otherwise evaluate workgroup 0's condition or walk both arms."""
    cond: Expr
    then: tuple
    orelse: tuple = ()
    then_share: float | None = None


@dataclass(frozen=True, eq=False)
class Load(Stmt):
    """Global load of ``len(dsts)`` consecutive elements (1, 2 or 4) at flat ``index``."""
    dsts: tuple
    buffer: str
    index: Expr


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    """Global store of ``len(values)`` consecutive elements at flat ``index``."""
    buffer: str
    index: Expr
    values: tuple


@dataclass(frozen=True, eq=False)
class LdsLoad(Stmt):
    """LDS load of ``len(dsts)`` consecutive elements at flat ``index``. ``broadcast``:
    every lane reads the same element (the validator requires a wave-uniform index), so
    the value is wave-uniform (``analysis.Uniformity``): how a workgroup learns a flag
    one thread wrote (split-K's last-arrival test) and branches on it around barriers."""
    dsts: tuple
    array: str
    index: Expr
    broadcast: bool = False


@dataclass(frozen=True, eq=False)
class LdsStore(Stmt):
    array: str
    index: Expr
    values: tuple


@dataclass(frozen=True, eq=False)
class Barrier(Stmt):
    """__syncthreads(): every wave of the workgroup waits here."""


@dataclass(frozen=True, eq=False)
class AtomicAdd(Stmt):
    """``dst = atomicAdd(&buffer[index], value)`` on an i32 global buffer: each active
    lane adds its ``value`` to its element at the L2 and gets the element's old value
    (lanes of one instruction in lane order). What split-K's one-kernel reduction counts
    arrivals with (CUDA's threadFenceReduction sample, CUTLASS's serial split-K): the
    workgroup that reads ``splits - 1`` arrived last.

    Order between workgroups is the machine's: gpusim's functional run executes the
    workgroups CU by CU (``gpusim.sim``: the timed CU last when a kernel has atomics), so
    "who arrives last" is well defined there and the kernel must not let any value
    depend on it other than through who does the (fixed-order) tail."""
    dst: Var
    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True, eq=False)
class Fence(Stmt):
    """``__threadfence()``: a device-scope memory fence. The wave's earlier global stores
    are complete (visible to every CU) before anything after it, and its later loads see
    what other workgroups made visible before their own fence (acquire: the L1 is not
    trusted). gpusim: the wave waits for its outstanding global accesses."""


@dataclass(frozen=True, eq=False)
class Shuffle(Stmt):
    """dst = value from another lane of the wave: ``xor`` (lane ^ offset) or ``down``
    (lane + offset; lanes past the end read their own value, as __shfl_down)."""
    dst: Var
    value: Expr
    mode: str
    offset: int


@dataclass(frozen=True, eq=False)
class WaveReduce(Stmt):
    """dst = op over all active lanes of the wave, broadcast to every lane (sum/max/min)."""
    dst: Var
    value: Expr
    op: str


#: MFMA shapes (single-block variants, CDNA wave64): name -> (M, N, K, accumulator
#: registers per lane, the instruction hipcc issues). The f32 shapes take one element of
#: A and of B per lane; the packed ones (``MFMA_PACK``) take ``kpack`` consecutive K
#: elements per lane (4 int8 in a 32-bit register, 8 in a 64-bit pair, 4 bf16 in a pair).
MFMA_SHAPES = {
    "32x32x2f32": (32, 32, 2, 16, "v_mfma_f32_32x32x2f32"),
    "16x16x4f32": (16, 16, 4, 4, "v_mfma_f32_16x16x4f32"),
    # int8 x int8 -> i32 (exact, wraps at 32 bits). CDNA2 (gfx90a) has the 4-byte forms,
    # CDNA3 (gfx940-class) replaced them by the 8-byte ones (LLVM: v_mfma_i32_32x32x8i8 is
    # "NotGFX940"; v_mfma_i32_32x32x16_i8 is gfx940's; hipcc 5.2 refuses each on the other).
    "32x32x8i8": (32, 32, 8, 16, "v_mfma_i32_32x32x8i8"),
    "16x16x16i8": (16, 16, 16, 4, "v_mfma_i32_16x16x16i8"),
    "32x32x16i8": (32, 32, 16, 16, "v_mfma_i32_32x32x16_i8"),
    "16x16x32i8": (16, 16, 32, 4, "v_mfma_i32_16x16x32_i8"),
    # bf16 x bf16 -> f32: the "_1k" forms (4 bf16 per lane) on gfx90a, spelled
    # v_mfma_f32_32x32x8_bf16 on gfx940-class; one builtin for both in hipcc 5.2
    "32x32x8bf16": (32, 32, 8, 16, "v_mfma_f32_32x32x8bf16_1k"),
    "16x16x16bf16": (16, 16, 16, 4, "v_mfma_f32_16x16x16bf16_1k"),
}
#: shape -> (elements of A and of B per lane (kpack), operand kind, accumulator dtype).
#: Operand kind "f32": f32 registers; "bf16": f32 registers holding bf16 values (rounded
#: to nearest even when packed, as ``wf_float_to_bf16``); "i8": i32 registers whose low
#: byte is the int8 operand (the hardware reads only that byte: a value outside
#: [-128, 127] wraps, so the lowering may use i8 shapes only on operands known in range).
MFMA_PACK = {
    "32x32x2f32": (1, "f32", "f32"), "16x16x4f32": (1, "f32", "f32"),
    "32x32x8i8": (4, "i8", "i32"), "16x16x16i8": (4, "i8", "i32"),
    "32x32x16i8": (8, "i8", "i32"), "16x16x32i8": (8, "i8", "i32"),
    "32x32x8bf16": (4, "bf16", "f32"), "16x16x16bf16": (4, "bf16", "f32"),
}
MFMA_WAVE = 64  # MFMA is a wave64 instruction (CDNA only)


def mfma_a_elem(shape: str, lane: int, item: int = 0) -> tuple:
    """(i, k): the element of A (M x K) that ``lane`` supplies as item ``item`` of ``a``."""
    m, kpack = MFMA_SHAPES[shape][0], MFMA_PACK[shape][0]
    return lane % m, kpack * (lane // m) + item


def mfma_b_elem(shape: str, lane: int, item: int = 0) -> tuple:
    """(k, j): the element of B (K x N) that ``lane`` supplies as item ``item`` of ``b``."""
    n, kpack = MFMA_SHAPES[shape][1], MFMA_PACK[shape][0]
    return kpack * (lane // n) + item, lane % n


def mfma_acc_elem(shape: str, lane: int, r: int) -> tuple:
    """(i, j): the element of C/D (M x N) held by accumulator register ``r`` of ``lane``."""
    m, n, _, _, _ = MFMA_SHAPES[shape]
    if m == 32:
        return 8 * (r // 4) + 4 * (lane // 32) + r % 4, lane % 32
    return 4 * (lane // 16) + r, lane % 16


def mfma_items(x) -> tuple:
    """An Mfma operand as the tuple of its per-lane items (one Expr for the f32 shapes)."""
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@dataclass(frozen=True, eq=False)
class Mfma(Stmt):
    """acc += A @ B on the wave's matrix core: one ``v_mfma_*`` (CDNA only).

    A whole-wave (64-lane) instruction: each lane supplies ``kpack`` consecutive K elements
    of A (``a``) and of B (``b``) (``MFMA_PACK``: one f32 for the f32 shapes, a tuple of 4
    or 8 expressions for the bf16 and int8 ones), and holds ``len(acc)`` elements of the
    M x N accumulator (f32, or i32 for int8), which is read (C) and written
    (D = C + A @ B). Lane mappings, for lane ``l``, item ``e`` and accumulator register
    ``r`` (the layout of the CDNA ISA guides and AMD's matrix instruction calculator;
    ``mfma_a_elem``/``mfma_b_elem``/``mfma_acc_elem`` compute them):

    - 32 x 32 shapes (16 accumulators): ``a[e]`` = A[l % 32][kpack * (l // 32) + e],
      ``b[e]`` = B[kpack * (l // 32) + e][l % 32];
      ``acc[r]`` = C[8 * (r // 4) + 4 * (l // 32) + r % 4][l % 32]: column = lane % 32,
      rows in groups of 4 registers, lanes 32-63 hold the 4 rows after lanes 0-31's.
    - 16 x 16 shapes (4 accumulators): ``a[e]`` = A[l % 16][kpack * (l // 16) + e],
      ``b[e]`` = B[kpack * (l // 16) + e][l % 16]; ``acc[r]`` = C[4 * (l // 16) + r][l % 16].

    Only the single-block variants (no CBSZ/ABID/BLGP broadcast modifiers). Every lane of
    the wave takes part: the validator requires a block that is a whole number of waves
    and wave-uniform control flow around the statement. Float shapes: products are exact
    in f64, the K products and C are summed in f64 and rounded once to f32 (the
    hardware's internal order is not specified; results agree to f32 rounding); a bf16
    operand is rounded to bf16 first (what the packing does). int8 shapes: each operand
    is its register's low byte, sign-extended, the sum exact and wrapped to 32 bits.
    """
    acc: tuple
    a: object   # Expr, or a tuple of kpack Exprs (packed shapes)
    b: object
    shape: str = "32x32x2f32"

    @property
    def a_items(self) -> tuple:
        return mfma_items(self.a)

    @property
    def b_items(self) -> tuple:
        return mfma_items(self.b)


# --------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Buffer:
    """A global-memory kernel argument. ``intent`` is "in", "out" or "inout"."""
    name: str
    dtype: str
    shape: tuple
    intent: str = "in"
    strides: tuple | None = None  # element strides; None = row-major contiguous
    #: scratch the launcher allocates zero-filled and the kernel leaves zero (split-K's
    #: arrival counters): gpusim never fills it with random values
    zeroed: bool = False

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n


@dataclass(frozen=True)
class Scalar:
    """A scalar kernel argument, given a value at launch."""
    name: str
    dtype: str = "i32"


@dataclass(frozen=True)
class LdsArray:
    """A ``__shared__`` array. ``shape`` includes any padding (e.g. (32, 33) for a 32x32
    tile with +1 padding); ``padding`` records how many of the last dim are padding."""
    name: str
    dtype: str
    shape: tuple
    padding: int = 0

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]


DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i8": 1, "u8": 1}


@dataclass(frozen=True)
class Kernel:
    """One kernel launch: ``grid`` workgroups of ``block`` threads.

    ``meta`` carries free-form facts for humans (schedule knobs, the dispatch it came
    from); neither the simulator nor the validator reads it.
    """
    name: str
    params: tuple  # Buffer | Scalar, in argument order
    grid: int
    block: int
    body: tuple
    lds: tuple = ()
    meta: dict = field(default_factory=dict, hash=False, compare=False)

    def buffer(self, name: str) -> Buffer:
        for p in self.params:
            if isinstance(p, Buffer) and p.name == name:
                return p
        raise KeyError(f"kernel {self.name!r} has no buffer {name!r}")

    def lds_array(self, name: str) -> LdsArray:
        for a in self.lds:
            if a.name == name:
                return a
        raise KeyError(f"kernel {self.name!r} has no LDS array {name!r}")

    @property
    def buffers(self) -> tuple:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    @property
    def scalars(self) -> tuple:
        return tuple(p for p in self.params if isinstance(p, Scalar))

    @property
    def lds_bytes(self) -> int:
        return sum(a.nbytes for a in self.lds)


def walk(stmts):
    """Yields every statement of a body, depth first, in program order."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)


@dataclass(frozen=True)
class KernelSequence:
    """One dispatch as a short sequence of kernel launches on one stream, in order (or
    one kernel with scratch memory: split-K reduced by its last-arriving workgroup).

    A kernel of the sequence may write a ``workspace`` buffer that a later one reads
    (split-K partial sums, then the kernel that reduces them and applies the epilogue
    once; flash-decoding's per-split maxima, sums and outputs, then the combine). The
    workspaces are scratch memory of the dispatch: not graph tensors, allocated by the
    harness, never read back. Launch order is the only synchronisation (stream order):
    the IR has atomics (``AtomicAdd``) but no grid-wide barrier.

    ``buffers`` are the dispatch's own arguments (every kernel's buffers but the
    workspaces, first appearance order), what a caller binds and checks, as for one
    ``Kernel``; ``grid`` is the last kernel's (the one that writes the outputs).
    """
    name: str
    kernels: tuple        # Kernel, in launch order
    workspaces: tuple     # Buffer declarations (row-major scratch: f32 partials, i32
                          # arrival counters); allocated zero-filled (the harness's
                          # hipMemset, gpusim's zeros), and a kernel that counts in one
                          # leaves it zero again for the next launch
    meta: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if len(self.kernels) < 2 and not self.workspaces:
            raise ValueError(f"sequence {self.name!r}: a one-kernel dispatch without "
                             f"workspaces is a Kernel")
        ws = {w.name for w in self.workspaces}
        written = set()
        for k in self.kernels:
            for b in k.buffers:
                if b.name in ws and b.intent == "in" and b.name not in written:
                    raise ValueError(f"sequence {self.name!r}: kernel {k.name!r} reads "
                                     f"workspace {b.name!r} before any kernel writes it")
                if b.intent != "in":
                    written.add(b.name)

    @property
    def buffers(self) -> tuple:
        ws = {w.name for w in self.workspaces}
        seen, out = {}, []
        for k in self.kernels:
            for b in k.buffers:
                if b.name in ws:
                    continue
                if b.name in seen:
                    if b.intent != "in" and seen[b.name].intent == "in":
                        out[out.index(seen[b.name])] = b
                        seen[b.name] = b
                    continue
                seen[b.name] = b
                out.append(b)
        return tuple(out)

    @property
    def grid(self) -> int:
        return self.kernels[-1].grid

    @property
    def lds_bytes(self) -> int:
        return max(k.lds_bytes for k in self.kernels)

    @property
    def workspace_bytes(self) -> int:
        return sum(w.size * DTYPE_BYTES[w.dtype] for w in self.workspaces)


def kernels_of(lowered) -> tuple:
    """The kernels a lowered dispatch launches, in order (one ``Kernel`` or a sequence)."""
    return lowered.kernels if isinstance(lowered, KernelSequence) else (lowered,)
