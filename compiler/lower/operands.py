"""GEMM operands as formulas over "numbers or IR": the one place an operand's offset is
written, shared by the contraction lowering (``compiler.lower.contraction``) and the
convolution addressing it uses (``compiler.lower.conv``).

The same Python code builds a load's offset expression (given IR values) and fills numpy
tables of every offset of A and B (given index arrays), so a vector width's legality
(contiguous, aligned, never half out of the image) is decided from memory, not guessed
from shapes (``Operand.analyse``). ``_affine_strides`` reads an operand that is a graph
input, or a view chain over one, through its strides.
"""
from __future__ import annotations

import numpy as np

from gpusim import program

from compiler.lower import affine
from compiler.lower.common import LoweringError
from compiler.lower.emitter import iadd, idiv, imod, imul, offset_table


# ------------------------------------------------------------- numbers-or-IR arithmetic
def _ir(*xs):
    return any(isinstance(x, program.Expr) for x in xs)


def _add(a, b):
    return iadd(a, b) if _ir(a, b) else a + b


def _mul(a, b):
    return imul(a, b) if _ir(a, b) else a * b


def _div(a, n):
    return idiv(a, n) if _ir(a) else a // n


def _mod(a, n):
    return imod(a, n) if _ir(a) else a % n


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return program.land(a, b) if _ir(a, b) else (a & b)


def _in_range(x, lo, hi):
    """lo <= x < hi (a bound given as None is known to hold)."""
    return _and(x >= lo if lo is not None else None, x < hi if hi is not None else None)


# ------------------------------------------------------------------ operands
class Operand:
    """One GEMM operand (A: rows m, cols k; B: rows k, cols n) as a formula."""

    def __init__(self, tensor, buffer, rows, cols, offset_fn, via_emitter=False):
        self.tensor = tensor          # the graph tensor feeding the contraction
        self.buffer = buffer          # kernel buffer read (None when via the emitter)
        self.rows, self.cols = rows, cols
        self.offset_fn = offset_fn    # (b, r, c) -> (offset, valid or None)
        self.via_emitter = via_emitter
        self.index_fn = None          # (b, r, c) -> (logical index, valid) for the emitter
        self.max_vec = {"r": 1, "c": 1}
        self.inner = "c"
        self.separable = False        # offset_fn is f(b) + g(r) + h(c), never invalid
        self.simplify_affine = False  # see _simplify_affine (conv filters set it)
        self.affine = None            # (base, sb, sr, sc) once _simplify_affine applied
        #: (rows(b, r) -> {name: value}, cols(parts, c) -> (offset, valid)) or None: the
        #: offset split into a part of the row alone and one of the column, the same
        #: numbers as ``offset_fn`` (a conv's activation: ``compiler.lower.conv``), so a
        #: K loop keeps the row part in registers (``_Builder.stage``)
        self.im2col = None
        #: (fixed(b, x, kl) -> {name: value}, tile(parts, k0, let) -> (offset, valid)) or
        #: None: a conv operand in ``k_order=tap`` (``compiler.lower.conv``): the part of
        #: its non-K index x and in-tile K index kl, kept in registers across the K loop,
        #: and the K tile's wave-uniform part (``_Builder.stage_taps``)
        self.taps = None
        #: ``im2col``'s variant with the padding test as one bit of a per-thread tap mask
        #: (the schedule knob ``tap_mask``), or None
        self.im2col_mask = None
        #: (T, fixed(parts, c, let) -> (offset, valid), tile(k0, let) -> offset) or None:
        #: the layout order's K is (ci, ky, kx) with T = kH*kW taps (an NCHW conv), so a
        #: K tile whose depth BK is a multiple of T starts on a tap boundary and every
        #: staged element keeps its tap across the K loop: its offset (past ``im2col_mask``'s
        #: row part) and padding test are registers set before the loop, the tile adds the
        #: wave-uniform ``(k0 / T) * channel stride`` (``_Builder.stage``)
        self.im2col_period = None

    def analyse(self, batch: int):
        """Largest legal vector width along rows and cols, from the exact offset table."""
        if self.via_emitter:
            return
        if self.separable:
            return self._analyse_separable(batch)
        b = np.arange(batch).reshape(-1, 1, 1)
        r = np.arange(self.rows).reshape(1, -1, 1)
        c = np.arange(self.cols).reshape(1, 1, -1)
        off, valid = self.offset_fn(b, r, c)
        off = np.broadcast_to(off, (batch, self.rows, self.cols))
        if valid is None and self.simplify_affine:
            self._simplify_affine(off)
        valid = np.broadcast_to(True if valid is None else valid, off.shape)
        for dim, (o, v) in {"c": (off, valid),
                            "r": (off.transpose(0, 2, 1), valid.transpose(0, 2, 1))}.items():
            best = 1
            for w in (2, 4):
                if o.shape[-1] % w:
                    break
                g = o.reshape(-1, w)
                gv = v.reshape(-1, w)
                uniform = np.all(gv == gv[:, :1])
                ok = gv[:, 0]
                consecutive = np.all((g[ok] - g[ok][:, :1]) == np.arange(w))
                aligned = np.all(g[ok][:, 0] % w == 0)
                if uniform and consecutive and aligned:
                    best = w
                else:
                    break
            self.max_vec[dim] = best
        # stride-1 dimension innermost, even for scalar loads (coalescing across lanes)
        self._pick_inner(off)

    def _simplify_affine(self, off):
        """An unpredicated operand whose offsets are ``base + b*sb + r*sr + c*sc`` gets
        that formula as its IR: a conv filter's K index (c, kh, kw) split by div/mod and
        recombined is just ``k * stride``, which the validator can prove aligned for
        vector loads (it cannot see through the div/mod) and which costs fewer VALU ops.
        Only conv filters ask for it: an activation's (m, k) offsets keep their per-
        dimension form, whose address arithmetic the timing model was calibrated on."""
        base = int(off[0, 0, 0])
        steps = [int(off[1, 0, 0] - base) if off.shape[0] > 1 else 0,
                 int(off[0, 1, 0] - base) if off.shape[1] > 1 else 0,
                 int(off[0, 0, 1] - base) if off.shape[2] > 1 else 0]
        axes = [np.arange(n, dtype=np.int64).reshape([-1 if d == i else 1 for d in range(3)])
                for i, n in enumerate(off.shape)]
        if not np.array_equal(base + sum(a * st for a, st in zip(axes, steps)), off):
            return
        sb, sr, sc = steps
        self.affine = (base, sb, sr, sc)

        def affine(b, r, c):
            return _add(_add(_add(base, _mul(b, sb)), _mul(r, sr)), _mul(c, sc)), None

        self.offset_fn = affine

    def _pick_inner(self, off):
        o2 = off[0]
        dc = abs(int(o2[0, 1] - o2[0, 0])) if self.cols > 1 else 1 << 30
        dr = abs(int(o2[1, 0] - o2[0, 0])) if self.rows > 1 else 1 << 30
        if self.max_vec["r"] > self.max_vec["c"] or (self.max_vec["r"] == self.max_vec["c"]
                                                    and dr < dc):
            self.inner = "r"
        else:
            self.inner = "c"


    def _analyse_separable(self, batch: int):
        """``analyse`` for offset = f(b) + g(r) + h(c), from the three 1-D parts: the
        same answers in O(batch + rows + cols) instead of O(batch * rows * cols)."""
        def part(b, r, c):
            return np.asarray(self.offset_fn(b, r, c)[0], np.int64).reshape(-1)

        zero = int(part(0, 0, 0)[0])
        f = part(np.arange(batch), 0, 0)
        parts = {"r": part(0, np.arange(self.rows), 0) - zero,
                 "c": part(0, 0, np.arange(self.cols)) - zero}
        for dim, other in (("c", "r"), ("r", "c")):
            h, g = parts[dim], parts[other]
            best = 1
            for w in (2, 4):
                if h.size % w:
                    break
                groups = h.reshape(-1, w)
                firsts = groups[:, 0]
                consecutive = np.all(groups - firsts[:, None] == np.arange(w))
                # every f(b) + g(x) + h(first) is a multiple of w <=> each part is constant
                # mod w and their sum at 0 is a multiple of w
                aligned = (np.all(f % w == f[0] % w) and np.all(g % w == g[0] % w)
                           and np.all(firsts % w == firsts[0] % w)
                           and (f[0] + g[0] + firsts[0]) % w == 0)
                if consecutive and aligned:
                    best = w
                else:
                    break
            self.max_vec[dim] = best
        dc = abs(int(parts["c"][1] - parts["c"][0])) if self.cols > 1 else 1 << 30
        dr = abs(int(parts["r"][1] - parts["r"][0])) if self.rows > 1 else 1 << 30
        if self.max_vec["r"] > self.max_vec["c"] or (self.max_vec["r"] == self.max_vec["c"]
                                                    and dr < dc):
            self.inner = "r"
        else:
            self.inner = "c"


def _view_chain(graph, dispatch, tensor):
    """(boundary tensor, views from it outwards) if ``tensor`` is a pure view chain."""
    ops = set(dispatch.ops)
    path = []
    t = tensor
    while t in ops and t not in dispatch.inputs:
        op = graph.op(t)
        if not op.is_view:
            return None
        path.append(op)
        t = op.inputs[0]
    return t, list(reversed(path))


def _affine_strides(graph, dispatch, tensor):
    """(buffer, strides, base) when ``tensor`` reads memory affinely through views."""
    chain = _view_chain(graph, dispatch, tensor)
    if chain is None:
        return None
    src, path = chain
    if src not in dispatch.inputs:
        raise LoweringError(f"operand {tensor!r} reads {src!r}, which is neither inside "
                            f"the dispatch nor one of its inputs")
    shape = graph.op(tensor).type.shape
    form = affine.of_path(graph, src, path)
    if form is not None:  # exact by construction, no table of every element
        return src, tuple(s if n > 1 else 0 for s, n in zip(form.strides, shape)), form.base
    table = offset_table(graph, src, None, path)
    base = int(table.reshape(-1)[0])
    strides = []
    for d, s in enumerate(shape):
        if s == 1:
            strides.append(0)
            continue
        ix = [0] * len(shape)
        ix[d] = 1
        strides.append(int(table[tuple(ix)]) - base)
    grid = np.indices(shape).reshape(len(shape), -1)
    pred = base + sum(grid[d] * strides[d] for d in range(len(shape)))
    if not np.array_equal(pred, table.reshape(-1)):
        return None
    return src, tuple(strides), base


def _digit_strides(graph, dispatch, tensor):
    """(buffer, digits, base) when ``tensor`` reads memory through views whose table is
    affine in the digits of each index (``affine.Digits``: a reshape merging dims that are
    not adjacent in memory, e.g. attention's heads and head dim), else None."""
    chain = _view_chain(graph, dispatch, tensor)
    if chain is None:
        return None
    src, path = chain
    if src not in dispatch.inputs:
        return None
    form = affine.digits_of_path(graph, src, path)
    if form is None:
        return None
    return src, tuple(ds if n > 1 else ((1, 0),) for ds, n in zip(form.digits, form.shape)), \
        form.base


def digit_offset(i, digits):
    """The offset part of index ``i`` (a number or IR) of one dim: each digit times its
    stride, the outermost without a mod and the innermost without a div."""
    if len(digits) == 1:
        return _mul(i, digits[0][1])
    off, inner = 0, 1
    for size, stride in reversed(digits):
        d = _div(i, inner) if inner > 1 else i
        if inner * size < np.prod([n for n, _ in digits]):
            d = _mod(d, size)
        off = _add(off, _mul(d, stride))
        inner *= size
    return off
