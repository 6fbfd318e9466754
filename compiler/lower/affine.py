"""Offset tables as formulas: ``offset = base + sum(index[d] * strides[d])``.

The lowerings decide vector widths, the staged input of a permute and the stride-1 dim of
a GEMM operand from the memory offsets of a tensor over an iteration space
(``emitter.offset_table``). Materialised, that table has one entry per element of the
iteration space: at attention's sequence 4096 a score-sized table is 134 M entries (1 GiB),
and ``np.unique`` over it took minutes. Transposes, broadcasts and most reshapes keep the
table affine, so it is carried as (shape, strides, base) instead and every question the
lowerings ask has an exact closed-form answer in O(rank). A reshape that cannot be
expressed on strides (merging dims that are not adjacent in memory) gives ``None``, and
the caller falls back to the materialised table: same answers, old cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.ir.graph import slice_windows


@dataclass(frozen=True)
class Affine:
    shape: tuple
    strides: tuple
    base: int = 0

    def key(self) -> tuple:
        """Equal keys <=> equal tables (a size-1 dim's stride never matters)."""
        return (self.shape, tuple(s if n > 1 else 0 for s, n in zip(self.strides, self.shape)),
                self.base)

    def transpose(self, perm) -> "Affine":
        return Affine(tuple(self.shape[p] for p in perm), tuple(self.strides[p] for p in perm),
                      self.base)

    def broadcast(self, shape) -> "Affine":
        """numpy broadcasting to ``shape``: new leading dims and size-1 dims get stride 0."""
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            strides.append(0 if n == 1 and shape[lead + d] != 1 else s)
        return Affine(tuple(shape), tuple(strides), self.base)

    def slice(self, windows) -> "Affine":
        """``table[windows]`` (one Python slice per dim): start moves the base, step scales
        the stride."""
        shape, strides, base = [], [], self.base
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            r = range(n)[windows[d]] if d < len(windows) else range(n)
            if len(r):
                base += r.start * s
            shape.append(len(r))
            strides.append(s * r.step)
        return Affine(tuple(shape), tuple(strides), base)

    def reshape(self, shape) -> "Affine | None":
        """A row-major reshape on strides (numpy's no-copy rule), or None when the table
        it would give is not affine in the new index."""
        old = [(n, s) for n, s in zip(self.shape, self.strides) if n != 1]
        if math.prod(shape) != math.prod(self.shape):
            return None
        new_strides = [0] * len(shape)
        new = [(d, n) for d, n in enumerate(shape) if n != 1]
        i = j = 0
        while i < len(old) and j < len(new):
            # smallest groups of old and new dims with the same element count
            oi, nj = i + 1, j + 1
            po, pn = old[i][0], new[j][1]
            while po != pn:
                if po < pn:
                    po *= old[oi][0]
                    oi += 1
                else:
                    pn *= new[nj][1]
                    nj += 1
            for k in range(i, oi - 1):  # the old group must be one stride run
                if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                    return None
            stride = old[oi - 1][1]
            for k in range(nj - 1, j - 1, -1):
                new_strides[new[k][0]] = stride
                stride *= new[k][1]
            i, j = oi, nj
        return Affine(tuple(shape), tuple(new_strides), self.base)

    # ------------------------------------------------------------------ questions
    def injective(self) -> bool | None:
        """Every index reads its own element? None when only the table can tell."""
        dims = sorted((abs(s), n) for s, n in zip(self.strides, self.shape) if n > 1)
        if any(s == 0 for s, _ in dims):
            return False
        reach = 1
        for s, n in dims:
            if s < reach:
                return None   # overlapping runs: may or may not collide
            reach = s * n
        return True

    def contiguous_dim(self):
        """The last dim along which consecutive indices are adjacent in memory."""
        for d in reversed(range(len(self.shape))):
            if self.shape[d] > 1 and self.strides[d] == 1:
                return d
        return None

    def vector_access(self, width: int) -> str:
        """``emitter.vector_access`` of the table, in closed form."""
        if width == 1 or not self.shape or self.shape[-1] % width:
            return "scalar" if width > 1 else "vector"
        last = self.strides[-1] if self.shape[-1] > 1 else 0
        if last == 0:
            return "broadcast"
        aligned = self.base % width == 0 and all(
            s % width == 0 for s, n in zip(self.strides[:-1], self.shape[:-1]) if n > 1)
        if last == 1 and aligned:
            return "vector"
        return "scalar"

    def table(self) -> np.ndarray:
        """The materialised table (small shapes and tests only)."""
        t = np.full(self.shape, self.base, np.int64)
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            sh = [1] * len(self.shape)
            sh[d] = n
            t = t + (np.arange(n, dtype=np.int64) * s).reshape(sh)
        return t


def of_path(graph, tensor: str, path: list) -> Affine | None:
    """``emitter.offset_table(graph, tensor, None, path)`` as an ``Affine``, or None
    (every op kind ``offset_table`` knows must be mirrored here)."""
    t = graph.op(tensor).type
    a = Affine(tuple(t.shape), tuple(t.strides), 0)
    for op in path:
        if op.kind == "transpose":
            a = a.transpose(op.attrs["perm"])
        elif op.kind == "reshape":
            a = a.reshape(tuple(op.type.shape))
            if a is None:
                return None
        elif op.kind == "slice":
            a = a.slice(slice_windows(op.attrs))
        else:
            a = a.broadcast(tuple(op.type.shape))
    return a


# ----------------------------------------------------------------- mixed-radix digits
@dataclass(frozen=True)
class Digits:
    """An offset table that is affine in the *digits* of each index, not in the index:
    dim d of ``shape`` is a mixed-radix number whose digits (outermost first) are
    ``(size, stride)`` pairs, ``offset = base + sum(digit * stride)``. A reshape that
    merges dims not adjacent in memory has this form where ``Affine`` has none:
    attention's output (heads, seq, dim) transposed to (seq, heads, dim) and merged to
    (seq, heads * dim), the A operand of every transformer's output projection, reads
    column k at ``(k // dim) * seq * dim + k % dim``. A dim of one digit is ``Affine``'s
    stride; a digit split costs a div and a mod (constants) in the address."""
    shape: tuple
    digits: tuple   # per dim: ((size, stride), ...) outermost first
    base: int = 0

    @staticmethod
    def of(a: Affine) -> "Digits":
        return Digits(a.shape, tuple(((n, s),) for n, s in zip(a.shape, a.strides)), a.base)

    def transpose(self, perm) -> "Digits":
        return Digits(tuple(self.shape[p] for p in perm), tuple(self.digits[p] for p in perm),
                      self.base)

    def broadcast(self, shape) -> "Digits":
        lead = len(shape) - len(self.shape)
        digits = [((n, 0),) for n in shape[:lead]]
        for d, n in enumerate(self.shape):
            digits.append(((shape[lead + d], 0),) if n == 1 and shape[lead + d] != 1
                          else self.digits[d])
        return Digits(tuple(shape), tuple(digits), self.base)

    def slice(self, windows) -> "Digits | None":
        """A slice of single-digit dims (``Affine.slice``); None when it cuts a split dim."""
        if any(len(self.digits[d]) > 1 and range(n)[windows[d]] != range(n)
               for d, n in enumerate(self.shape) if d < len(windows)):
            return None
        single = Affine(self.shape, tuple(ds[0][1] if len(ds) == 1 else 0
                                          for ds in self.digits), self.base).slice(windows)
        digits = tuple(((n, s),) if len(ds) == 1 else ds
                       for n, s, ds in zip(single.shape, single.strides, self.digits))
        return Digits(single.shape, digits, single.base)

    def reshape(self, shape) -> "Digits | None":
        """The row-major reshape: the flat list of digits regrouped into the new dims from
        the innermost, a digit split where a new dim boundary falls inside it; None when a
        boundary does not divide a digit."""
        if math.prod(shape) != math.prod(self.shape):
            return None
        flat = list(_merged([dg for ds in self.digits for dg in ds if dg[0] != 1]))
        out = []
        for n in reversed(shape):
            mine = []
            while n > 1:
                size, stride = flat.pop()
                if n % size == 0:
                    mine.insert(0, (size, stride))
                    n //= size
                elif size % n == 0:
                    mine.insert(0, (n, stride))
                    flat.append((size // n, stride * n))
                    n = 1
                else:
                    return None
            out.insert(0, _merged(mine) or ((1, 0),))
        return Digits(tuple(shape), tuple(out), self.base)

    def table(self) -> np.ndarray:
        """The materialised table (small shapes and tests only)."""
        t = np.full(self.shape, self.base, np.int64)
        for d, (n, ds) in enumerate(zip(self.shape, self.digits)):
            i, part, inner = np.arange(n, dtype=np.int64), 0, n
            for size, stride in ds:
                inner //= size
                part = part + ((i // inner) % size) * stride
            sh = [1] * len(self.shape)
            sh[d] = n
            t = t + np.asarray(part, np.int64).reshape(sh) if n else t
        return t

    def affine(self) -> "Affine | None":
        """The same table as an ``Affine`` when every dim is one digit."""
        if any(len(ds) != 1 for ds in self.digits):
            return None
        return Affine(self.shape, tuple(ds[0][1] for ds in self.digits), self.base)


def _merged(digits: list) -> tuple:
    """Adjacent digits that form one stride run merged into one (outermost first)."""
    out = []
    for size, stride in digits:
        if out and out[-1][1] == stride * size:
            osize, _ = out.pop()
            size = osize * size
        out.append((size, stride))
    return tuple(out)


def digits_of_path(graph, tensor: str, path: list) -> Digits | None:
    """``of_path`` in the digit form: the views' table when it is affine in the digits."""
    t = graph.op(tensor).type
    a = Digits.of(Affine(tuple(t.shape), tuple(t.strides), 0))
    for op in path:
        if op.kind == "transpose":
            a = a.transpose(op.attrs["perm"])
        elif op.kind == "reshape":
            a = a.reshape(tuple(op.type.shape))
        elif op.kind == "slice":
            a = a.slice(slice_windows(op.attrs))
        else:
            a = a.broadcast(tuple(op.type.shape))
        if a is None:
            return None
    return a
