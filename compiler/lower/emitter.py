"""From tensor ops to per-thread kernel IR: the value of a fused tensor at an index.

Every lowering (elementwise, row reduction, contraction epilogue) asks the same question:
"what is tensor T at logical index (i0, i1, ...)?", where T is any op inside the dispatch.
:class:`ValueEmitter` answers it by walking T's producers inside the dispatch:

- a boundary tensor (graph input, constant, another dispatch's output) is a global
  ``Load`` at the flat offset its layout gives (``sum(i_d * stride_d)``), so a tensor
  stored in another layout is read through its own strides — which is what decides
  coalescing;
- an elementwise op becomes IR arithmetic on its operands' values, each operand's index
  aligned by numpy broadcasting (size-1 dimensions read index 0);
- a view (transpose, reshape, broadcast, slice) only rewrites the index: it never moves
  data;
- an injective op picks the element to read: ``pad`` reads a clamped index and selects
  the pad value outside the input, ``concat`` evaluates every part at its clamped index
  and selects by position, ``gather`` reads its index tensor and then the data at the
  index it holds (a data-dependent address). Their boundary reads are scalar loads
  (simplification: no vector analysis through them);
- i32 and bool tensors live in i32 registers (bool as 0/1); comparisons, logic and
  ``select`` map to the kernel IR's cmp/int ops and Select;
- a reduction or contraction inside the dispatch is answered by the lowering that owns
  it (``bind``), e.g. the register holding the current row's sum.

Vector requests (``values``) fetch ``width`` consecutive elements along the innermost
dimension at once; a boundary load becomes one ``width``-wide vector ``Load`` when the
memory offsets of those elements are consecutive and aligned, one scalar load when they
are all equal (a broadcast), and ``width`` scalar loads otherwise. The decision is made
exactly, by pushing each input's table of memory offsets through the same views with
numpy (:func:`offset_table`), not by guessing from shapes.

Results are cached per (tensor, index) in a scope, so a multi-use producer is computed
once per element; ``scope()`` starts a fresh cache, e.g. for each pass over a row.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from contextlib import contextmanager

import numpy as np

from gpusim import program
from gpusim.analysis import Divisibility, expr_key, expr_vars

from compiler.ir.graph import COMPARE, LOGICAL, Graph, GraphError, slice_windows
from compiler.ir.ops import OPS, ir_of
from compiler.lower import affine

# ------------------------------------------------------------------ index arithmetic
# Small constant-folding constructors keep the emitted index expressions readable (and the
# simulator's work small): x*1 -> x, x+0 -> x, 0*x -> 0.


def _c(e):
    return e.value if isinstance(e, program.Const) else None


def iadd(a, b):
    a, b = program.as_expr(a), program.as_expr(b)
    ca, cb = _c(a), _c(b)
    if ca is not None and cb is not None:
        return program.i32(ca + cb)
    if ca == 0:
        return b
    if cb == 0:
        return a
    return a + b


def imul(a, b):
    a, b = program.as_expr(a), program.as_expr(b)
    ca, cb = _c(a), _c(b)
    if ca is not None and cb is not None:
        return program.i32(ca * cb)
    if ca == 0 or cb == 0:
        return program.i32(0)
    if ca == 1:
        return b
    if cb == 1:
        return a
    return a * b


def idiv(a, n):
    a = program.as_expr(a)
    if n == 1:
        return a
    ca = _c(a)
    return program.i32(ca // n) if ca is not None else a // n


def imod(a, n):
    a = program.as_expr(a)
    if n == 1:
        return program.i32(0)
    ca = _c(a)
    return program.i32(ca % n) if ca is not None else a % n


def key(e):
    """A structural key for memoising values by index expression (gpusim's own)."""
    return expr_key(e)


class Unraveled(tuple):
    """A multi-index made by :func:`unravel`, remembering the linear number it came from:
    the offset of a row-major tensor of that shape is then the linear number itself, not
    a sum of divisions and remainders (cheaper, and provably aligned for vectors)."""

    def __new__(cls, idx, linear, shape):
        obj = tuple.__new__(cls, idx)
        obj.linear = linear
        obj.shape = tuple(shape)
        return obj


def unravel(linear, shape):
    """Row-major multi-index of a linear element number, as IR expressions."""
    idx = []
    rest = linear
    for d in reversed(range(len(shape))):
        # the outermost index needs no modulo: callers keep ``linear`` in range
        idx.append(imod(rest, shape[d]) if d else rest)
        rest = idiv(rest, shape[d])
    return Unraveled(reversed(idx), linear, shape)


def align_index(idx, in_shape, out_shape):
    """Numpy broadcasting, backwards: the operand index for an output index."""
    if tuple(in_shape) == tuple(out_shape):
        return idx  # unchanged (keeps an Unraveled index's linear number)
    lead = len(out_shape) - len(in_shape)
    return tuple(program.i32(0) if s == 1 and out_shape[lead + d] != 1 else idx[lead + d]
                 for d, s in enumerate(in_shape))


def view_index(op, idx, in_shape):
    """The operand index that a view's output index reads."""
    if op.kind == "transpose":
        perm = op.attrs["perm"]
        if tuple(perm) == tuple(range(len(perm))):
            return idx
        inv = [0] * len(perm)
        for o, p in enumerate(perm):
            inv[p] = o
        return tuple(idx[inv[d]] for d in range(len(perm)))
    if op.kind == "broadcast":
        return align_index(idx, in_shape, op.type.shape)
    if op.kind == "slice":
        return tuple(iadd(imul(i, sp), st) for i, st, sp in
                     zip(idx, op.attrs["starts"], op.attrs["steps"]))
    if op.kind == "reshape":
        out_shape = op.type.shape
        # Fast path: the shapes agree after dropping 1s, so only unit dims change.
        if [s for s in out_shape if s != 1] == [s for s in in_shape if s != 1]:
            src = iter([i for i, s in zip(idx, out_shape) if s != 1])
            return tuple(program.i32(0) if s == 1 else next(src) for s in in_shape)
        linear = program.i32(0)
        for i, s in zip(idx, out_shape):
            linear = iadd(imul(linear, s), i)
        return unravel(linear, in_shape)
    raise GraphError(f"node {op.name!r}: {op.kind} is not a view")


# ------------------------------------------------------------------ offset tables
def offset_table(graph: Graph, tensor: str, consumer_chain_shape: tuple, path: list) -> np.ndarray:
    """Memory offsets (in elements) of ``tensor`` for every element of the shape reached
    by applying the views/broadcasts in ``path`` (a list of (op, operand position))."""
    t = graph.op(tensor).type
    table = np.zeros(t.shape, np.int64)
    for d, s in enumerate(t.strides):
        shape = [1] * t.rank
        shape[d] = t.shape[d]
        table = table + (np.arange(t.shape[d], dtype=np.int64) * s).reshape(shape)
    for op in path:
        if op.kind == "transpose":
            table = np.transpose(table, op.attrs["perm"])
        elif op.kind == "reshape":
            table = np.ascontiguousarray(table).reshape(op.type.shape)
        elif op.kind == "slice":
            table = table[slice_windows(op.attrs)]
        else:  # broadcast, or an elementwise op broadcasting its operand
            table = np.broadcast_to(table, op.type.shape)
    return table


def vector_access(table: np.ndarray, width: int) -> str:
    """How a ``width``-group along the innermost dim reads memory: 'vector' (consecutive,
    aligned offsets), 'broadcast' (all equal) or 'scalar' (anything else)."""
    if width == 1 or table.ndim == 0 or table.shape[-1] % width:
        return "scalar" if width > 1 else "vector"
    groups = table.reshape(-1, width)
    first = groups[:, :1]
    if np.all(groups == first):
        return "broadcast"
    if np.all(groups - first == np.arange(width)) and np.all(first % width == 0):
        return "vector"
    return "scalar"


@functools.lru_cache(maxsize=1024)
def _access_kind(graph: Graph, tensor: str, path: tuple, width: int) -> str:
    """Cached :func:`vector_access` of a tensor through a chain of ops: every candidate
    schedule of a dispatch asks the same question, and the tables can be large."""
    ops = [graph.op(n) for n in path]
    a = affine.of_path(graph, tensor, ops)
    if a is not None:  # closed form: no table of the whole iteration space
        return a.vector_access(width)
    return vector_access(offset_table(graph, tensor, None, ops), width)


#: graph op -> its kernel-IR operator: views of the op table (compiler/ir/ops.py)
UNARY_IR = ir_of("unary")
BINARY_IR = ir_of("binary")
#: register dtype of each tensor dtype (f16 is computed in f32; bool is i32 0/1)
REG_DTYPE = {"f32": "f32", "f16": "f32", "bf16": "f32", "i32": "i32", "bool": "i32"}


def _const(value, dtype: str) -> program.Expr:
    return program.f32(float(value)) if REG_DTYPE[dtype] == "f32" else program.i32(int(value))


def buffer_name(tensor: str) -> str:
    return tensor


class ValueEmitter:
    """Emits the IR that computes tensors of one dispatch, element by element."""

    def __init__(self, graph: Graph, ops: list, boundary: list, regs: "RegisterNamer",
                 cse: bool = False):
        self.graph = graph
        self.ops = set(ops)
        self.boundary = set(boundary)
        self.regs = regs
        self.bound: dict = {}          # tensor -> callable(idx) -> Expr
        self._frames = [_Frame([], {})]
        self._access: dict = {}        # (tensor, root shape, width) -> access kind
        self._vector_loads: set = set()  # ids of the vector Loads this emitter made
        self.loads: list = []          # (tensor, access kind, width) per emitted load
        # With ``cse``, arithmetic on equal operands is emitted once and placed in the
        # outermost scope where its operands exist (e.g. rsqrt(var + eps) of a row is
        # computed once per row, not per element): what hipcc's CSE and LICM would do, so
        # the simulator does not count instructions the compiler would never emit. Only
        # for lowerings whose nested scopes are placed where they were opened.
        self.cse = cse

    @property
    def stmts(self) -> list:
        return self._frames[-1].stmts

    @stmts.setter
    def stmts(self, value: list):
        self._frames[-1].stmts = value

    @property
    def _cache(self) -> dict:
        return self._frames[-1].cache

    def define(self, *regs) -> None:
        """Records registers defined in the current scope (e.g. a loop counter)."""
        self._frames[-1].defs.update(r.name for r in regs)

    # ---------------------------------------------------------------- scopes
    @contextmanager
    def scope(self, stmts: list | None = None, keep_cache: bool = False):
        """Emit into ``stmts`` with a fresh value cache (restored afterwards)."""
        top = self._frames[-1]
        frame = _Frame(stmts if stmts is not None else [], top.cache if keep_cache else {})
        self._frames.append(frame)
        try:
            yield frame.stmts
        finally:
            self._frames.pop()

    def assign(self, value, hint="v", dtype=None, cse: bool = False) -> program.Var:
        """A fresh register holding ``value``; with ``cse`` (pure arithmetic only, never a
        register that is later updated) an equal earlier value is reused or hoisted."""
        target = len(self._frames) - 1
        if cse and self.cse:
            k = key(value)
            for f in reversed(self._frames):
                if k in f.cse:
                    return f.cse[k]
            target = self._home(value)
        v = program.Var(self.regs.new(hint), dtype or value.dtype)
        frame = self._frames[target]
        frame.stmts.append(program.Assign(v, value))
        frame.defs.add(v.name)
        if cse and self.cse:
            frame.cse[k] = v
        return v

    def provably_aligned(self, body: tuple, wave_size: int) -> tuple:
        """``body`` with each vector load this emitter made given an index the validator
        can prove aligned. The offset tables proved the element offset a multiple of the
        width; when the index expression hides that (div/mod of a reshape, say), it is
        rewritten as ``(i // w) * w`` — the same value, visibly aligned."""
        if not self._vector_loads:
            return body
        div = Divisibility(body, wave_size)

        def fix(stmts):
            out = []
            for s in stmts:
                if isinstance(s, program.For):
                    s = dataclasses.replace(s, body=fix(s.body))
                elif isinstance(s, program.If):
                    s = dataclasses.replace(s, then=fix(s.then), orelse=fix(s.orelse))
                elif isinstance(s, program.Load) and id(s) in self._vector_loads:
                    w = len(s.dsts)
                    if div.multiple_of(s.index) % w:
                        s = program.Load(s.dsts, s.buffer, imul(idiv(s.index, w), w))
                out.append(s)
            return tuple(out)

        return fix(tuple(body))

    def _home(self, value) -> int:
        """The outermost scope in which every register ``value`` reads is defined; a
        register this emitter did not define pins it to the current scope."""
        home = 0
        for name in expr_vars(value):
            for i in range(len(self._frames) - 1, -1, -1):
                if name in self._frames[i].defs:
                    home = max(home, i)
                    break
            else:
                return len(self._frames) - 1
        return home

    # ---------------------------------------------------------------- values
    def value(self, tensor: str, idx: tuple) -> program.Expr:
        return self.values(tensor, [tuple(idx)], 1)[0]

    def values(self, tensor: str, idxs: list, width: int) -> list:
        """Values of ``tensor`` at ``idxs`` (``width`` consecutive innermost indices; a
        single-element list when ``width == 1``)."""
        ck = (tensor, tuple(tuple(key(i) for i in ix) for ix in idxs))
        if ck in self._cache:
            return self._cache[ck]
        out = self._compute(tensor, idxs, width)
        op = self.graph.op(tensor)
        if op.type.dtype == "bf16" and (tensor in self.bound or (
                tensor in self.ops and tensor not in self.boundary and not op.is_view
                and not op.is_injective and op.kind != "select")):
            # a bf16 op's result is a bf16 value: rounded where it is computed, as the
            # reference rounds it (registers are f32; memory rounds again, exactly)
            out = [self.assign(program.UnOp("rbf16", x), "bf16", cse=True) for x in out]
        self._cache[ck] = out
        return out

    def _compute(self, tensor, idxs, width):
        op = self.graph.op(tensor)
        if tensor in self.bound:
            return [self.bound[tensor](ix) for ix in idxs]
        if tensor in self.boundary or tensor not in self.ops:
            if op.kind == "constant" and op.type.size == 1:
                return [_const(op.attrs["value"].reshape(-1)[0], op.type.dtype)] * len(idxs)
            return self._load(tensor, idxs, width)
        if op.is_injective:
            return [self._injective(op, ix) for ix in idxs]
        if op.is_view:
            in_shape = self.graph.op(op.inputs[0]).type.shape
            return self.values(op.inputs[0], [view_index(op, ix, in_shape) for ix in idxs],
                               width)
        if op.kind == "cast":
            src = self.graph.op(op.inputs[0]).type.dtype
            vals = self.values(op.inputs[0], idxs, width)
            return [self._cast(x, src, op.type.dtype) for x in vals]
        if op.kind in COMPARE + LOGICAL + ("select", "not"):
            args = [self.values(i, [align_index(ix, self._shape(i), op.type.shape)
                                    for ix in idxs], width) for i in op.inputs]
            if op.kind == "select":
                return [self.assign(program.Select(c, a, b), "sel", cse=True) for c, a, b in zip(*args)]
            if op.kind == "not":
                return [self.assign(program.UnOp(OPS["not"].ir, x), "not", cse=True) for x in args[0]]
            return [self.assign(program.BinOp(OPS[op.kind].ir, x, y), op.kind, cse=True)
                    for x, y in zip(*args)]
        if op.kind in UNARY_IR:
            a = self.values(op.inputs[0], [align_index(ix, self._shape(op.inputs[0]),
                                                       op.type.shape) for ix in idxs], width)
            return [self.assign(program.UnOp(UNARY_IR[op.kind], x), op.kind, cse=True) for x in a]
        if op.kind in BINARY_IR:
            args = [self.values(i, [align_index(ix, self._shape(i), op.type.shape)
                                    for ix in idxs], width) for i in op.inputs]
            return [self.assign(program.BinOp(BINARY_IR[op.kind], x, y), op.kind, cse=True)
                    for x, y in zip(*args)]
        raise GraphError(f"node {tensor!r}: a {op.kind} inside this dispatch has no "
                         f"register binding; the lowering must bind it")

    def _shape(self, tensor):
        return self.graph.op(tensor).type.shape

    def _cast(self, x, src: str, dst: str):
        """Register conversion between dtypes (f32<->f16 only rounds at the store)."""
        rs, rd = REG_DTYPE[src], REG_DTYPE[dst]
        if dst == "bool" and src != "bool":  # nonzero is true (NaN included)
            return self.assign(program.BinOp("ne", x, _const(0, src)), "tobool", cse=True)
        if rs == rd:
            return x
        return self.assign(program.Cast(x, rd), "cvt", cse=True)

    def _clamp(self, i, n: int):
        return program.maximum(program.minimum(program.as_expr(i), program.i32(n - 1)), program.i32(0))

    def _injective(self, op, ix):
        """One element of a gather / pad / concat (see the module docstring)."""
        if op.kind == "pad":
            src = op.inputs[0]
            shape = self._shape(src)
            cond, six = None, []
            for d, ((before, after), n) in enumerate(zip(op.attrs["pads"], shape)):
                if not before and not after:
                    six.append(ix[d])
                    continue
                j = iadd(ix[d], -before)
                inside = program.land(program.BinOp("ge", program.as_expr(j), program.i32(0)),
                                program.BinOp("lt", program.as_expr(j), program.i32(n)))
                cond = inside if cond is None else program.land(cond, inside)
                six.append(self._clamp(j, n))
            v = self.values(src, [tuple(six)], 1)[0]
            if cond is None:  # nothing padded: a copy
                return v
            return self.assign(program.Select(cond, v, _const(op.attrs["value"], op.type.dtype)),
                               "pad", cse=True)
        if op.kind == "concat":
            axis = op.attrs["axis"]
            parts, lo = [], 0
            for t in op.inputs:
                n = self._shape(t)[axis]
                j = list(ix)
                j[axis] = self._clamp(iadd(ix[axis], -lo), n) if lo or n < op.type.shape[axis] \
                    else ix[axis]
                parts.append((lo, self.values(t, [tuple(j)], 1)[0]))
                lo += n
            out = parts[-1][1]
            for (_, v), (nxt, _) in reversed(list(zip(parts, parts[1:]))):
                out = program.Select(program.BinOp("lt", program.as_expr(ix[axis]), program.i32(nxt)), v, out)
            return self.assign(out, "cat", cse=True)
        # gather
        data, idx_t = op.inputs
        axis = op.attrs["axis"]
        r = len(self._shape(idx_t))
        n = self._shape(data)[axis]
        k = self.values(idx_t, [tuple(ix[axis:axis + r])], 1)[0]
        k = self.assign(program.Select(program.BinOp("lt", k, program.i32(0)), k + n, k), "idx", cse=True)
        dix = tuple(ix[:axis]) + (k,) + tuple(ix[axis + r:])
        return self.values(data, [dix], 1)[0]

    def _load(self, tensor, idxs, width):
        t = self.graph.op(tensor).type
        access = self._access.get(tensor, "scalar") if width > 1 else "vector"
        rd = REG_DTYPE[t.dtype]
        if len(idxs) > 1 and access == "vector":
            regs = tuple(program.Var(self.regs.new(f"ld_{tensor}"), rd) for _ in idxs)
            load = program.Load(regs, buffer_name(tensor), self.offset(t, idxs[0]))
            self._vector_loads.add(id(load))
            self.stmts.append(load)
            self.define(*regs)
            self.loads.append((tensor, "vector", len(idxs)))
            return list(regs)
        if len(idxs) > 1 and access == "broadcast":
            r = program.Var(self.regs.new(f"ld_{tensor}"), rd)
            self.stmts.append(program.Load((r,), buffer_name(tensor), self.offset(t, idxs[0])))
            self.define(r)
            self.loads.append((tensor, "broadcast", 1))
            return [r] * len(idxs)
        out = []
        for ix in idxs:
            r = program.Var(self.regs.new(f"ld_{tensor}"), rd)
            self.stmts.append(program.Load((r,), buffer_name(tensor), self.offset(t, ix)))
            self.define(r)
            self.loads.append((tensor, "scalar", 1))
            out.append(r)
        return out

    @staticmethod
    def offset(t, ix) -> program.Expr:
        if isinstance(ix, Unraveled) and ix.shape == t.shape and t.is_row_major:
            return program.as_expr(ix.linear)
        off = program.i32(0)
        for i, s, n in zip(ix, t.strides, t.shape):
            if n > 1:  # a size-1 dimension's index is always 0
                off = iadd(off, imul(i, s))
        return off

    # ---------------------------------------------------------------- vector analysis
    def analyse_access(self, root: str, width: int, stop_at=()) -> dict:
        """For every boundary tensor read on the way to ``root``, how a ``width``-group
        of ``root``'s innermost dim reads it (see :func:`vector_access`)."""
        result = {}

        def walk(tensor, path):
            op = self.graph.op(tensor)
            if tensor in self.bound or tensor in stop_at:
                return
            if tensor in self.boundary or tensor not in self.ops:
                if op.kind == "constant" and op.type.size == 1:
                    return
                if any(o.is_injective for o in path):  # element chosen per lane: scalar
                    kind = "scalar"
                else:
                    kind = _access_kind(self.graph, tensor,
                                        tuple(o.name for o in reversed(path)), width)
                prev = result.get(tensor, self._access.get(tensor))
                result[tensor] = kind if prev in (None, kind) else "scalar"
                return
            for i in op.inputs:
                walk(i, path + [op])

        walk(root, [])
        self._access.update(result)
        return result


class _Frame:
    """One emission scope: its statements, value cache, registers and CSE table."""

    def __init__(self, stmts: list, cache: dict):
        self.stmts = stmts
        self.cache = cache
        self.defs: set = set()
        self.cse: dict = {}


class RegisterNamer:
    """Unique, readable register names (``exp_3``, ``ld_x_0``)."""

    def __init__(self):
        self._n = itertools.count()

    def new(self, hint: str) -> str:
        safe = _SAFE_HINTS.get(hint)
        if safe is None:  # a lowering asks for a few hints millions of times
            if len(_SAFE_HINTS) > 4096:
                _SAFE_HINTS.clear()
            safe = _SAFE_HINTS[hint] = "".join(c if c.isalnum() else "_" for c in hint)
        return f"{safe}_{next(self._n)}"


_SAFE_HINTS: dict = {}
