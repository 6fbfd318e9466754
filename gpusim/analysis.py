"""Static facts about a kernel that the validator, the register estimate and the
compiler share: which values are wave-uniform, which multiples an index is known to be,
what range of values an integer expression can take.

Uniformity. A value is *uniform* (the same in every lane of a wave, so the compiler can
keep it in an SGPR and compute it with SALU instructions) when it depends only on
constants, scalar parameters, ``block_id``, ``wave_size``, ``wave_id`` and uniform
registers. A register is uniform when every assignment to it is uniform and none happens
under divergent control flow (an ``If`` or ``For`` whose condition is not uniform).
Loads, shuffles and reductions make their destination per-lane (a ``WaveReduce`` result
is the same in every lane, but it lives in a VGPR, so it counts as per-lane too), except
a ``broadcast`` LdsLoad at a uniform index outside divergent code: every lane read one
element, so branches on it are uniform (SIMPLIFICATION: hipcc keeps the value in a VGPR
and may spend a v_readfirstlane to branch on it; the model counts its uses as SALU).

Divisibility. ``multiple_of(e)`` is a number every value of ``e`` is a multiple of
(0 means "always zero"); it is exact for sums, products and shifts of constants and ids,
and falls back to 1.

Intervals. ``interval(e)`` bounds an integer expression from the launch shape (ids),
loop bounds, scalar values when given, and ``If`` guards of the form ``e < bound`` that
enclose the access. Unknown means (-inf, +inf); a proof of an out-of-bounds access needs
a finite interval.
"""
from __future__ import annotations

import math

from gpusim.program import (
    AtomicAdd, Assign, BinOp, Cast, Const, Fma, For, If, LdsLoad, LdsStore, Load, ScalarRef,
    Mfma, Select, Shuffle, Special, Store, UnOp, Var, WaveReduce,
)

INF = float("inf")
UNIFORM_SPECIALS = ("block_id", "wave_size", "wave_id")


def expr_children(e):
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, UnOp) or isinstance(e, Cast):
        return (e.a,)
    if isinstance(e, Fma):
        return (e.a, e.b, e.c)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()


def expr_vars(e, out=None):
    """Names of the registers an expression reads."""
    out = set() if out is None else out
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.add(x.name)
        stack.extend(expr_children(x))
    return out


def affine_form(e, opaque=None) -> tuple[dict, int]:
    """``e`` as sum(coefficient x atom) + constant over i32 adds, subtractions and
    multiplications by constants; any other node (a division, a modulo, a register, an
    id) is an atom, keyed by ``expr_key``. ``opaque(x)`` true keeps a multiplied ``x`` an
    atom (the register estimate models LLVM not distributing over some adds); the load
    merging needs the plain algebra."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return {}, e.value
    if isinstance(e, BinOp) and e.op in ("add", "sub"):
        (ta, ca), (tb, cb) = affine_form(e.a, opaque), affine_form(e.b, opaque)
        sign = 1 if e.op == "add" else -1
        terms = dict(ta)
        for k, c in tb.items():
            terms[k] = terms.get(k, 0) + sign * c
        return {k: c for k, c in terms.items() if c}, ca + sign * cb
    if isinstance(e, BinOp) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, Const) and isinstance(y.value, int) and not (opaque and opaque(x)):
                t, c = affine_form(x, opaque)
                return {k: v * y.value for k, v in t.items() if v * y.value}, c * y.value
    return {expr_key(e): 1}, 0


def expr_key(e):
    """A structural key: two expressions with equal keys compute the same value."""
    if isinstance(e, Const):
        return ("c", e.dtype, e.value)
    if isinstance(e, Var):
        return ("v", e.name)
    if isinstance(e, Special):
        return ("s", e.name)
    if isinstance(e, ScalarRef):
        return ("p", e.name)
    if isinstance(e, BinOp):
        return ("b", e.op, expr_key(e.a), expr_key(e.b))
    if isinstance(e, UnOp):
        return ("u", e.op, expr_key(e.a))
    if isinstance(e, Cast):
        return ("cast", e.dtype, expr_key(e.a))
    if isinstance(e, Fma):
        return ("fma", expr_key(e.a), expr_key(e.b), expr_key(e.c))
    if isinstance(e, Select):
        return ("sel", expr_key(e.cond), expr_key(e.a), expr_key(e.b))
    return ("?", id(e))


def stmt_exprs(s):
    """The expressions a statement reads (not its destinations)."""
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, For):
        return (s.start, s.stop)
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, (Load, LdsLoad)):
        return (s.index,)
    if isinstance(s, (Store, LdsStore)):
        return (s.index,) + tuple(s.values)
    if isinstance(s, (Shuffle, WaveReduce)):
        return (s.value,)
    if isinstance(s, Mfma):  # the accumulators are read (C) and written (D)
        return s.a_items + s.b_items + tuple(s.acc)
    if isinstance(s, AtomicAdd):
        return (s.index, s.value)
    return ()


def stmt_defs(s):
    """Registers a statement writes."""
    if isinstance(s, Assign):
        return (s.dst,)
    if isinstance(s, For):
        return (s.var,)
    if isinstance(s, (Load, LdsLoad)):
        return tuple(s.dsts)
    if isinstance(s, (Shuffle, WaveReduce)):
        return (s.dst,)
    if isinstance(s, Mfma):
        return tuple(s.acc)
    if isinstance(s, AtomicAdd):
        return (s.dst,)
    return ()


# ------------------------------------------------------------------------------ uniformity
def register_writes(body):
    """Every write of a register in ``body`` (nested blocks included), in program order:
    (register, "expr", value) for an Assign, (counter, "loop", For) for a loop, and
    (register, "unknown", None) for anything else that defines one (loads, shuffles...).
    The dataflow analyses below solve their facts over these."""
    for s in body:
        if isinstance(s, Assign):
            yield s.dst, "expr", s.value
        elif isinstance(s, For):
            yield s.var, "loop", s
            yield from register_writes(s.body)
        elif isinstance(s, If):
            yield from register_writes(s.then)
            yield from register_writes(s.orelse)
        else:
            for v in stmt_defs(s):
                yield v, "unknown", None


class Uniformity:
    """Which registers are wave-uniform, by a fixed point over the statement tree."""

    def __init__(self, body):
        self.per_lane: set = set()
        changed = True
        while changed:
            before = len(self.per_lane)
            self._visit(body, divergent=False)
            changed = len(self.per_lane) != before

    def is_uniform(self, e) -> bool:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Special) and x.name not in UNIFORM_SPECIALS:
                return False
            if isinstance(x, Var) and x.name in self.per_lane:
                return False
            stack.extend(expr_children(x))
        return True

    def _visit(self, body, divergent):
        for s in body:
            if isinstance(s, Assign):
                if divergent or not self.is_uniform(s.value):
                    self.per_lane.add(s.dst.name)
            elif isinstance(s, LdsLoad) and s.broadcast and not divergent \
                    and self.is_uniform(s.index):
                pass  # every lane read the same element in one instruction
            elif isinstance(s, (Load, LdsLoad)):
                self.per_lane.update(v.name for v in s.dsts)
            elif isinstance(s, (Shuffle, WaveReduce, AtomicAdd)):
                self.per_lane.add(s.dst.name)
            elif isinstance(s, Mfma):
                self.per_lane.update(v.name for v in s.acc)
            elif isinstance(s, For):
                d = divergent or not (self.is_uniform(s.start) and self.is_uniform(s.stop))
                if d:
                    self.per_lane.add(s.var.name)
                self._visit(s.body, d)
            elif isinstance(s, If):
                d = divergent or not self.is_uniform(s.cond)
                self._visit(s.then, d)
                self._visit(s.orelse, d)


# ---------------------------------------------------------------------------- divisibility
class Divisibility:
    """Known multiples of integer expressions (gcd lattice, fixed point over registers)."""

    def __init__(self, body, wave_size: int):
        self.wave_size = wave_size
        self.var_mult: dict = {}
        self._assigns: dict = {}
        self._collect(body)
        for _ in range(8):
            changed = False
            for name, exprs in self._assigns.items():
                m = 0
                for e in exprs:
                    m = math.gcd(m, self.multiple_of(e))
                if self.var_mult.get(name) != m:
                    self.var_mult[name] = m
                    changed = True
            if not changed:
                break
        else:
            for name in self._assigns:
                self.var_mult[name] = 1

    def _collect(self, body):
        for reg, kind, what in register_writes(body):
            # a loop counter is a multiple of whatever divides its start and its step
            vals = [what.start, Const(what.step)] if kind == "loop" else [what]
            self._assigns.setdefault(reg.name, []).extend(vals)

    def multiple_of(self, e) -> int:
        """m >= 0 such that e is always a multiple of m (0: e is always 0)."""
        if e is None:
            return 1
        if isinstance(e, Const):
            return abs(int(e.value)) if e.dtype == "i32" else 1
        if isinstance(e, Special):
            return 32 if e.name == "wave_size" else 1
        if isinstance(e, Var):
            return self.var_mult.get(e.name, 0)
        if isinstance(e, BinOp):
            a, b = self.multiple_of(e.a), self.multiple_of(e.b)
            if e.op in ("add", "sub", "min", "max"):
                return math.gcd(a, b)
            if e.op == "mul":
                return a * b
            if e.op == "shl" and isinstance(e.b, Const):
                return a << int(e.b.value)
            if e.op == "mod" and isinstance(e.b, Const):
                return math.gcd(a, b)
            if e.op == "and" and isinstance(e.b, Const) and e.b.value > 0:
                c = int(e.b.value)
                low = (c & -c)  # lowest set bit of the mask
                return max(a, low) if a % low == 0 or low % max(a, 1) == 0 else 1
            return 1
        if isinstance(e, Select):
            return math.gcd(self.multiple_of(e.a), self.multiple_of(e.b))
        return 1


# ------------------------------------------------------------------------------- intervals
def _mul_iv(a, b):
    prods = []
    for x in a:
        for y in b:
            if (x == 0 and abs(y) == INF) or (y == 0 and abs(x) == INF):
                prods.append(0)
            else:
                prods.append(x * y)
    return (min(prods), max(prods))


class Intervals:
    """Integer value ranges from ids, loops, scalars and enclosing guards; ``block``
    pins ``block_id`` to one workgroup's id."""

    def __init__(self, kernel, wave_size: int, scalars: dict | None = None,
                 block: int | None = None):
        self.k = kernel
        self.wave_size = wave_size
        self.scalars = scalars or {}
        waves = -(-kernel.block // wave_size)
        self.special = {
            "thread_id": (0, kernel.block - 1),
            "lane": (0, min(wave_size, kernel.block) - 1),
            "wave_id": (0, waves - 1),
            "block_id": (0, kernel.grid - 1) if block is None else (block, block),
            "wave_size": (wave_size, wave_size),
        }
        self.var_iv: dict = {}
        self.empty = False
        self._assigns: dict = {}
        self._collect(kernel.body)
        self._solve()

    def _collect(self, body):
        for reg, kind, what in register_writes(body):
            if kind == "loop" or reg.dtype == "i32":
                self._assigns.setdefault(reg.name, []).append((kind, what))

    def _solve(self):
        names = list(self._assigns)
        for n in names:
            self.var_iv[n] = None  # bottom
        for it in range(12):
            changed = False
            for n in names:
                lo, hi = INF, -INF
                for kind, x in self._assigns[n]:
                    if kind == "expr":
                        iv = self.interval(x, {})
                    elif kind == "loop":
                        if self.never_runs(x):
                            continue  # the counter takes no value: no bound from it
                        s0 = self.interval(x.start, {})
                        s1 = self.interval(x.stop, {})
                        hi = s1[1] - 1
                        if s0[0] == s0[1] and hi != INF and x.step > 1:
                            hi = s0[0] + ((hi - s0[0]) // x.step) * x.step  # last value taken
                        iv = (s0[0], max(s0[0], hi))
                    else:
                        iv = (-INF, INF)
                    lo, hi = min(lo, iv[0]), max(hi, iv[1])
                new = (lo, hi)
                if self.var_iv[n] != new:
                    if it >= 8:  # widen: give up on registers that keep growing
                        old = self.var_iv[n] or new
                        new = (old[0] if old[0] <= lo else -INF, old[1] if old[1] >= hi else INF)
                    self.var_iv[n] = new
                    changed = True
            if not changed:
                break

    def never_runs(self, loop) -> bool:
        """The loop provably runs no trip: its start's least value is at least its
        stop's greatest (the step is positive). Its counter then takes no value, and its
        body is dead code (a split K loop whose every segment has one K tile)."""
        return self.interval(loop.start, {})[0] >= self.interval(loop.stop, {})[1]

    def interval(self, e, guards: dict):
        key = expr_key(e)
        iv = self._interval(e, guards)
        g = guards.get(key)
        if g is not None:
            iv = (max(iv[0], g[0]), min(iv[1], g[1]))
            if iv[0] > iv[1]:
                self.empty = True  # the guards contradict: code under them never runs
        return iv

    def _interval(self, e, guards):
        if isinstance(e, Const):
            v = e.value
            return (v, v)
        if isinstance(e, Special):
            return self.special[e.name]
        if isinstance(e, ScalarRef):
            if e.name in self.scalars:
                v = self.scalars[e.name]
                return (v, v)
            return (-INF, INF)
        if isinstance(e, Var):
            iv = self.var_iv.get(e.name)
            return (-INF, INF) if iv is None or e.dtype != "i32" else iv
        if isinstance(e, Cast):
            return (-INF, INF)
        if isinstance(e, Select):
            a, b = self.interval(e.a, guards), self.interval(e.b, guards)
            return (min(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, UnOp):
            a = self.interval(e.a, guards)
            if e.op == "neg":
                return (-a[1], -a[0])
            if e.op == "relu":
                return (max(0, a[0]), max(0, a[1]))
            if e.op == "not":
                return (0, 1)
            return (-INF, INF)
        if isinstance(e, BinOp):
            if e.op in ("lt", "le", "gt", "ge", "eq", "ne", "land", "lor"):
                return (0, 1)
            a, b = self.interval(e.a, guards), self.interval(e.b, guards)
            if e.op == "add":
                return (a[0] + b[0], a[1] + b[1])
            if e.op == "sub":
                return (a[0] - b[1], a[1] - b[0])
            if e.op == "mul":
                return _mul_iv(a, b)
            if e.op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if e.op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
            if e.op in ("floordiv", "div") and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
                c = b[0]
                return (a[0] // c, a[1] // c if a[1] != INF else INF)
            if e.op == "mod" and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
                c = b[0]
                if a[1] != INF and a[1] // c == a[0] // c:
                    return (a[0] % c, a[1] % c)
                return (0, c - 1)
            if e.op == "shl" and b[0] == b[1] and 0 <= b[0] < 31:
                return _mul_iv(a, (2 ** b[0], 2 ** b[0]))
            if e.op == "shr" and b[0] == b[1] and 0 <= b[0] < 31 and a[0] >= 0:
                c = 2 ** b[0]
                return (a[0] // c, a[1] // c if a[1] != INF else INF)
            if e.op == "and" and (a[0] >= 0 or b[0] >= 0):
                return (0, min(x[1] for x in (a, b) if x[0] >= 0))
        return (-INF, INF)

    def guards_of(self, cond, guards: dict) -> tuple[dict, bool]:
        """Guards implied when ``cond`` holds; the flag says whether cond was understood."""
        new = dict(guards)
        understood = True
        conjuncts = [cond]
        while conjuncts:
            c = conjuncts.pop()
            if isinstance(c, BinOp) and c.op == "land":
                conjuncts += [c.a, c.b]
                continue
            if not (isinstance(c, BinOp) and c.op in ("lt", "le", "gt", "ge")
                    and c.a.dtype == "i32" and c.b.dtype == "i32"):
                understood = False
                continue
            a, b = c.a, c.b
            op = c.op
            if op in ("gt", "ge"):  # b < a  /  b <= a
                a, b, op = b, a, {"gt": "lt", "ge": "le"}[op]
            ia, ib = self.interval(a, new), self.interval(b, new)
            if ib[1] == INF or ia[0] == -INF:
                understood = False  # bounded by something unknown (e.g. a scalar without value)
            hi_a = ib[1] - 1 if op == "lt" else ib[1]
            lo_b = ia[0] + 1 if op == "lt" else ia[0]
            ka, kb = expr_key(a), expr_key(b)
            old_a = new.get(ka, (-INF, INF))
            new[ka] = (old_a[0], min(old_a[1], hi_a))
            old_b = new.get(kb, (-INF, INF))
            new[kb] = (max(old_b[0], lo_b), old_b[1])
        return new, understood

    def exact_leaves(self, e, out: list) -> bool:
        """Whether ``e`` is affine in ids / constant-bound loop counters (each reaching its
        interval's ends); appends the independent variables it uses to ``out``."""
        if isinstance(e, Const):
            return True
        if isinstance(e, Special):
            out.append(e.name)
            return True
        if isinstance(e, Var):
            defs = self._assigns.get(e.name, [])
            if len(defs) != 1:
                return False
            kind, x = defs[0]
            if kind == "loop":
                if not (isinstance(x.start, Const) and isinstance(x.stop, Const)):
                    return False
                out.append(("loop", e.name))
                return True
            return kind == "expr" and self.exact_leaves(x, out)
        if isinstance(e, BinOp):
            if e.op in ("add", "sub"):
                return self.exact_leaves(e.a, out) and self.exact_leaves(e.b, out)
            if e.op in ("mul", "shl") and isinstance(e.b, Const):
                return self.exact_leaves(e.a, out)
            if e.op == "mul" and isinstance(e.a, Const):
                return self.exact_leaves(e.b, out)
        return False

    def is_exact(self, e) -> bool:
        """True when the interval of ``e`` is attained: affine, each variable once, no
        two dependent ids (thread_id with lane or wave_id)."""
        leaves: list = []
        if not self.exact_leaves(e, leaves):
            return False
        if len(set(leaves)) != len(leaves):
            return False
        names = set(x for x in leaves if isinstance(x, str))
        return not ("thread_id" in names and names & {"lane", "wave_id"})



def store_ranges(kernel, wave_size: int, block: int, scalars: dict | None = None) -> dict:
    """{buffer: (first, last)}: the elements workgroup ``block`` can store to, from the
    intervals of its store indices (guards ignored, so a superset); None for a buffer
    with a store whose index is unbounded (read from memory, an unknown scalar). Buffers
    it never stores to are absent."""
    iv = Intervals(kernel, wave_size, scalars, block=block)
    out: dict = {}
    unbounded = set()

    def live(body):  # a loop that runs no trip stores nothing
        for s in body:
            yield s
            if isinstance(s, For) and not iv.never_runs(s):
                yield from live(s.body)
            elif isinstance(s, If):
                yield from live(s.then)
                yield from live(s.orelse)

    for s in live(kernel.body):
        if isinstance(s, Store):
            lo, hi = iv.interval(s.index, {})
            if lo == -INF or hi == INF:
                unbounded.add(s.buffer)
                continue
            first, last = out.get(s.buffer, (INF, -INF))
            out[s.buffer] = (min(first, lo), max(last, hi + len(s.values) - 1))
    ranges: dict = {b: None for b in unbounded}
    ranges.update({b: (int(lo), int(hi)) for b, (lo, hi) in out.items() if b not in unbounded})
    return ranges
