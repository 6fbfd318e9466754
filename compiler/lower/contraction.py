"""Matmul and convolution dispatches as an FMA-tiled GEMM with a fused epilogue.

The GEMM view. A batched matmul is ``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``. A 2-D
convolution is the same GEMM, implicitly (no im2col buffer): M = N*OH*OW output positions,
N = filters, K = C*kH*kW. For NHWC the K order is (kh, kw, c) so channels are innermost
and an A row reads contiguous memory; for NCHW it is (c, kh, kw). Padding becomes a
guard on the A load (out-of-image reads are zero); groups are the GEMM's batch
(``compiler.lower.conv`` holds the addressing).

Operand access is one formula, written once over "numbers or IR": the same Python code
that builds a load's offset expression also fills numpy tables of every offset of A and
B, so the legality of a vector width (contiguous, aligned, never half out of the image)
is decided exactly from memory, not guessed from shapes. Operands that are graph inputs
or views of them (a transposed K in attention) are read through their strides; an
operand computed by a fused elementwise producer is evaluated by the ValueEmitter with
scalar loads. The formulas and the ``Operand`` class are in ``compiler.lower.operands``.

The kernel. A workgroup owns a BM x BN output tile of one batch; each of its
(BM/TM)*(BN/TN) thread positions owns TM x TN accumulators (distinct registers), and
``KW`` wave groups split every K tile between them (in-workgroup split-K: more waves per
CU for small-M GEMMs that cannot fill the GPU with workgroups; the partial tiles are
summed through LDS, each group finishing TM*TN/KW of the accumulators). The K loop stages
BM x BK of A and BN x BK of B in LDS with K innermost, so each micro-tile row is one
vector LDS read along K; global loads of the next K tile are issued before the FMAs of
the current one (register prefetch; the last tile is peeled so every index stays in
bounds). The ``lds_pad`` knob pads the LDS rows by 0, 1 (odd stride: scalar LDS reads) or
4 elements (one 16 B vector: rows stay aligned), or XOR-swizzles them at vector
granularity; staging writes that transpose (a vector along M or N) become b32 writes, so
their bank conflicts show in the counters.

The accumulator layout mimics MFMA's: thread t owns rows ``t % (BM/TM) + i*(BM/TM)`` and
columns ``t // (BM/TM) + j*(BN/TN)``. Consecutive lanes hold consecutive rows M, and a
thread's TN columns are spaced apart, so a direct store of a row-major (M, N) output
(NHWC conv, matmul) is one dword per lane, one cache line per lane: uncoalesced.

Output swizzle (knob ``swizzle``), rocMLIR's question:

- ``none``: epilogue per accumulator in the register layout; extra inputs (the residual)
  read in that layout; direct dword stores.
- ``after_fusion``: epilogue in the register layout, then the *results* round-trip LDS
  (write, barrier, read back so each thread owns SV consecutive elements of the output's
  contiguous dim and consecutive lanes own consecutive chunks) and are stored as vectors.
- ``before_fusion``: the raw accumulators round-trip LDS first; the epilogue runs in the
  swizzled layout, so an extra input stored like the output is read with vector loads,
  while one in another layout (channel-major residual) is read with strided scalar loads.

The output tile in LDS reuses the staging space; its inner dimension is padded by one
vector (SV elements), so rows stay aligned for the wide read-back.

Matrix cores (knob ``mma``, default ``fma``): ``mfma`` gives each wave one TM x TN = 32x32
(v_mfma_f32_32x32x2f32) or 16x16 (16x16x4f32) block of the tile, A/B fragments read from
the same K-innermost LDS tiles, accumulators in the MFMA layout (``gpusim.program.Mfma``);
split-K, the swizzle placements and the epilogue work on that layout unchanged in meaning
(none/after_fusion: epilogue and residual reads per accumulator in the MFMA layout;
before_fusion: LDS round trip first). CDNA only; in the schedule space by default except
the tiles ``compiler.schedule.contraction.MFMA_OPT_IN`` lists (``--fix mma=mfma``; their
stream-K points of f32 matmuls are searched by default, ``stream_k_opt_in``).

Split-K across workgroups (knob ``split_k``, default 1): the dispatch lowers to two
kernels, the partial sums of S slices of K to a workspace and a reduction kernel that
applies the epilogue once (:func:`lower_split_k`; docs/kernels.md), or, with
``split_reduce=last_wg``, to one kernel whose last-arriving workgroup per output tile
(an atomic arrival counter) does that reduction and the epilogue.

Stream-K (knob ``stream_k`` = W, default 0; Osama et al. 2023): W x CUs persistent
workgroups each walk an even share of the tiles x K-tiles iterations across tile
boundaries, storing one partial per tile segment; a fix-up kernel sums each tile's
segments in order and applies the epilogue once (:func:`lower_stream_k`).

Two tiles of register prefetch (knob ``prefetch`` = 2, :meth:`_Builder.k_loop_two_ahead`):
two register sets alternate, so a tile's global loads have two steps of math to arrive;
with per-workgroup K bounds (stream-K, uneven split-K) the odd step is chosen by the trip
count's parity at run time (:meth:`_Builder.k_loop_two_ahead_bounded`).

Simplifications: f32 math (f16 buffers widen on load); register prefetch only (one or
two tiles), no LDS double buffering; dispatch outputs are the root or one-to-one views of it (a transpose
or unit-dim reshape: written in their own order, see ``compiler.lower.layout``).
"""
from __future__ import annotations

import dataclasses
import functools
import math

from gpusim import program
from gpusim.hw import Arch
from gpusim.occupancy import without_decided_code

from compiler.ir.graph import Graph
from compiler.ir.ranges import fits_int8
from compiler.lower.common import (LoweringError, buffers, ceil_div, defined_registers, sanitize, split_at_last_load,
                                   tail_share)
from compiler.lower.conv import K_ORDERS, conv_root_index, setup_conv_gemm, tap_tile_why
from compiler.lower.operands import (Operand, _add, _affine_strides, _and, _digit_strides, _div,
                                     _mod, _mul, digit_offset)
from compiler.lower.emitter import (RegisterNamer, Unraveled, ValueEmitter, iadd, idiv, imod, imul, key)
from compiler.lower.layout import (forward_index, is_identity, output_maps, output_vectors, unit_only_reshape)

SWIZZLES = ("none", "after_fusion", "before_fusion")
LDS_PADS = (0, 1, 4, "xor")
MMAS = ("fma", "mfma")
#: mma=mfma: the GEMM dim the accumulator's columns (lane % TN) run along. "n" (default):
#: lanes along N, so a row-major (M, N) output is stored a row of lanes at a time; "m":
#: the block computes C^T (A and B swapped in the MFMA), lanes along M, each lane holding
#: runs of N, as rocMLIR's conv GEMM (gemmM = filters, gemmN = output positions) leaves
#: an NHWC output: consecutive lanes 2 KiB apart, every lane on its own line.
MFMA_LANES = ("n", "m")
DEFAULTS = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "KW": 1, "lds_pad": 4,
            "vec_a": 1, "vec_b": 1, "swizzle": "none", "mma": "fma", "split_k": 1,
            "stream_k": 0, "k_order": "layout", "tap_mask": 0, "prefetch": 1,
            "split_reduce": "kernel"}
#: how split-K's partial sums are reduced: "kernel", a second kernel in stream order;
#: "last_wg", in the one kernel by the workgroup that arrives last at its tile's
#: arrival counter (:func:`lower_split_k`). With split_k = 1 there is nothing to reduce
#: and either value is the one-kernel GEMM.
SPLIT_REDUCES = ("kernel", "last_wg")
#: split_k values a space may enumerate (at most the K tiles; an uneven S gives splits of nk//S
#: or one more K tiles, see check_schedule)
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
#: prefetch values: K tiles of global loads in flight ahead of the math (register sets)
PREFETCH = (1, 2)
#: stream_k values: persistent workgroups per CU (0: off; see :class:`StreamK`)
STREAM_K = (0, 1, 2)
#: mma=mfma: the wave block TM x TN picks the instruction.
MFMA_FOR_BLOCK = {32: "32x32x2f32", 16: "16x16x4f32"}


# ------------------------------------------------------------------ problem description
def _fold_batch(graph: Graph, dispatch, root):
    """(batch shape, M, A's affine view) when a batched matmul is one GEMM with its
    batch folded into M, else None: the right operand has no batch extent (a Linear
    layer over an (N, H, W, C) or (B, T, C) tensor, 2-D weights) and A's rows are one
    stride apart across the batch entries. torch.matmul computes that case so; as a batch
    of GEMMs each entry re-read the weight and padded its few rows to a whole tile
    (ConvNeXt-T's stage-3 pointwise convs: 7 entries of M = 7, 32-row tiles)."""
    a_t, b_t = root.inputs
    ta, tb, out = graph.op(a_t).type, graph.op(b_t).type, root.type.shape
    bshape = out[:-2]
    if math.prod(bshape) <= 1 or any(s != 1 for s in tb.shape[:-2]) \
            or ta.rank != len(out) or tuple(ta.shape[:-2]) != tuple(bshape):
        return None
    try:
        aff = _affine_strides(graph, dispatch, a_t)
    except LoweringError:
        return None
    if aff is None:
        return None
    strides, shape = aff[1], ta.shape
    sm = strides[-2]
    span = sm * shape[-2]   # elements from one batch entry's first row to the next's
    for d in reversed(range(len(bshape))):
        if shape[d] == 1:
            continue
        if strides[d] != span:
            return None
        span *= shape[d]
    return bshape, out[-2], aff


class Gemm:
    """The GEMM view of a matmul/conv root: sizes, operands, root index of (b, m, n)."""

    def __init__(self, graph: Graph, dispatch, k_order: str = "layout"):
        self.graph = graph
        root = graph.op(dispatch.root)
        self.root = root
        self.kind = root.kind
        #: a conv's K order (``compiler.lower.conv.K_ORDERS``); a matmul's is "layout"
        self.k_order = k_order
        if k_order != "layout" and root.kind != "conv2d":
            raise LoweringError(f"k_order={k_order!r}: only a conv has taps to order")
        #: the accumulator's dtype: f32, or i32 for an integer GEMM (MatMulInteger,
        #: QLinearMatMul: exact products and sums, wrapping at 32 bits as the hardware's)
        self.dtype = "i32" if root.type.dtype == "i32" else "f32"
        if root.kind == "matmul":
            self._matmul(dispatch)
        elif root.kind == "conv2d":
            self._conv(dispatch)
        else:
            raise LoweringError(f"dispatch {dispatch.name!r}: root {root.name!r} is a "
                                f"{root.kind}, not a matmul or conv2d")
        for opnd in (self.A, self.B):
            opnd.analyse(self.batch)
        self._propagate_layout(dispatch)
        self.mfma_kind, self.mfma_why = self._mfma_operands()
        self.arch = None  # set by lower_contraction: the arch picks the MFMA instruction

    def _mfma_operands(self) -> tuple:
        """(the MFMA operand kind, '' or why this GEMM has none): "i8" for an integer GEMM
        whose operands both lie in [-128, 127] (``compiler.ir.ranges``: the int8 matrix
        cores read one signed byte per element), "bf16" when both operands are bf16
        tensors (exact in the bf16 MFMA, f32 accumulation as the FMA path), else "f32"."""
        g = self.graph
        if self.dtype == "i32":
            bad = []
            for role, opnd in (("A", self.A), ("B", self.B)):
                ok, (lo, hi) = fits_int8(g, opnd.tensor)
                if not ok:
                    bad.append(f"{role} {opnd.tensor!r} spans [{lo:g}, {hi:g}]")
            if bad:
                return None, ("int8 matrix cores need both operands in [-128, 127]: "
                              + ", ".join(bad) + " (a uint8 tensor less a zero point other "
                              "than 128, or a runtime zero point)")
            return "i8", ""
        if all(g.op(o.tensor).type.dtype == "bf16" for o in (self.A, self.B)):
            return "bf16", ""
        return "f32", ""

    def _propagate_layout(self, dispatch):
        """Output index maps and, when an output is a view of the result in another
        order, the write direction from its memory (``compiler.lower.layout``)."""
        self.out_maps = output_maps(self.graph, dispatch, self.root.name)
        self.out_vec = None
        # a reshape that splits or merges dims on the way to an output: the epilogue's
        # view of the root index is then not syntactically the tile's (see epilogue_vector)
        self.reindexed = any(op.kind == "reshape" and not unit_only_reshape(self.graph, op)
                             for p in self.out_maps.values() for op, _ in p)
        if all(is_identity(self.graph, p) for p in self.out_maps.values()):
            return
        self.out_vec = output_vectors(self, self.graph, self.out_maps)
        other = "m" if self.vec_dim == "n" else "n"
        if self.out_vec[other] > self.out_vec[self.vec_dim]:
            self.vec_dim = other

    def out_index(self, o, idx):
        """Index of dispatch output ``o`` holding the root element at ``idx``."""
        return forward_index(self.graph, self.out_maps[o], idx)

    # ---------------------------------------------------------------- matmul
    def _matmul(self, dispatch):
        g = self.graph
        a_t, b_t = self.root.inputs
        ta = g.op(a_t).type
        out = self.root.type.shape
        self.bshape = out[:-2]
        self.batch = math.prod(self.bshape)
        self.M, self.N, self.K = out[-2], out[-1], ta.shape[-1]
        self.vec_dim = "n"
        #: (batch shape, rows per batch entry, A's affine view) when the batch is folded
        #: into M (:func:`_fold_batch`), else None
        self.fold = _fold_batch(g, dispatch, self.root)
        if self.fold is not None:
            self.bshape, self.batch, self.M = (), 1, self.batch * self.M

        def batch_index(b, rank):
            idx = []
            rest = b
            for s in reversed(self.bshape):
                idx.append(_mod(rest, s))
                rest = _div(rest, s)
            idx = list(reversed(idx))
            lead = len(self.bshape) - (rank - 2)
            return idx[lead:]

        def make(tensor, rows, cols, order):
            t = g.op(tensor).type
            aff = _affine_strides(g, dispatch, tensor)

            def index(b, r, c):
                bi = batch_index(b, t.rank)
                bi = [0 if s == 1 else i for i, s in zip(bi, t.shape[:-2])]
                return tuple(bi) + ((r, c) if order == "rc" else (c, r)), None

            if aff is None:
                # a reshape merging dims not adjacent in memory (attention's heads and
                # head dim before an output projection): affine in each index's digits
                dig = _digit_strides(g, dispatch, tensor)
                if dig is None:
                    op = Operand(tensor, None, rows, cols, None, via_emitter=True)
                    op.index_fn = index
                    return op
                src, digits, base = dig
            else:
                src, strides, base = aff
                digits = tuple(((1, s),) for s in strides)

            def offset(b, r, c):
                ix, _ = index(b, r, c)
                off = base
                for i, ds in zip(ix, digits):
                    off = _add(off, digit_offset(i, ds))
                return off, None

            opnd = Operand(tensor, src, rows, cols, offset)
            opnd.separable = True  # offset = f(b) + g(r) + h(c): strides of one view
            return opnd

        if self.fold is not None:  # rows of A one stride apart across the batch
            src, strides, base = self.fold[2]
            sm, sk = strides[-2], strides[-1]
            self.A = Operand(a_t, src, self.M, self.K,
                             lambda b, r, c: (_add(_add(base, _mul(r, sm)), _mul(c, sk)), None))
            self.A.separable = True
        else:
            self.A = make(a_t, self.M, self.K, "rc")
        self.B = make(b_t, self.K, self.N, "rc")

    # ---------------------------------------------------------------- conv
    def _conv(self, dispatch):
        setup_conv_gemm(self, dispatch, self.k_order)

    # ---------------------------------------------------------------- root index
    def root_index(self, b, m, n):
        """Logical index of the root tensor for GEMM element (b, m, n)."""
        if self.kind == "matmul" and self.fold is not None:
            # the folded row m is (batch entry, row) in the root: digits of m, and for a
            # row-major tensor of the root's shape its linear number (no div/mod)
            bshape, rows = self.fold[0], self.fold[1]
            idx = [_mod(m, rows)]
            rest = _div(m, rows)
            for s in reversed(bshape):
                idx.append(_mod(rest, s) if s > 1 else
                           program.i32(0) if isinstance(rest, program.Expr) else 0)
                rest = _div(rest, s) if s > 1 else rest
            idx = tuple(reversed(idx)) + (n,)
            if not isinstance(m, program.Expr) and not isinstance(n, program.Expr):
                return idx
            return Unraveled(idx, _add(_mul(m, self.N), n), self.root.type.shape)
        if self.kind == "matmul":
            idx = []
            rest = b
            for s in reversed(self.bshape):
                idx.append(_mod(rest, s))
                rest = _div(rest, s)
            return tuple(reversed(idx)) + (m, n)
        return conv_root_index(self, b, m, n)

    def swizzle_width(self, BM, BN):
        """Elements per thread after the output swizzle: 4 along the output's contiguous
        dim when that keeps vectors inside one row of the output, else 2 or 1."""
        if self.out_vec is not None:  # an output in another order: its memory decides
            tile = BN if self.vec_dim == "n" else BM
            for w in (4, 2, 1):
                if w <= self.out_vec[self.vec_dim] and tile % w == 0:
                    return w
        if self.vec_dim == "n":
            size, tile = self.N, BN
        elif self.kind == "matmul":
            size, tile = self.M, BM
        else:
            size, tile = self.conv[8], BM  # consecutive m stay in one output row
        for w in (4, 2, 1):
            if size % w == 0 and tile % w == 0:
                return w
        return 1


def extra_inputs(graph: Graph, dispatch) -> list:
    """Boundary tensors the epilogue reads (everything reached from the outputs without
    passing through the root)."""
    ops, seen, found = set(dispatch.ops), set(), []

    def walk(t):
        if t in seen or t == dispatch.root:
            return
        seen.add(t)
        op = graph.op(t)
        if t in dispatch.inputs or t not in ops:
            if not (op.kind == "constant" and op.type.size == 1):
                found.append(t)
            return
        for i in op.inputs:
            walk(i)

    for o in dispatch.outputs:
        walk(o)
    return found


# ------------------------------------------------------------------ schedule checks
def _pad_elems(pad) -> int:
    """Elements added to each LDS row: 0, 1 (odd stride), 4 (one 16 B vector), 0 for xor."""
    return pad if isinstance(pad, int) else 0


def read_width(s) -> int:
    """Width of the inner loop's LDS reads along K (ds_read_b128/b64/b32): the widest that
    divides each wave group's K slice and stays aligned (a 1-element pad breaks it)."""
    bkw = int(s["BK"]) // int(s.get("KW", 1))
    if s["lds_pad"] == 1:
        return 1
    for w in (4, 2):
        if bkw % w == 0:
            return w
    return 1


def mfma_shape(gemm: Gemm, TM: int, arch: Arch | None) -> str:
    """The MFMA instruction of a TM x TM wave block for this GEMM's operands on ``arch``:
    the f32 form, or the arch's bf16 or int8 one (int8: 32x32x8 / 16x16x16 on gfx90a,
    32x32x16 / 16x16x32 on gfx942, ``program.MFMA_PACK``)."""
    kind = getattr(gemm, "mfma_kind", "f32") or "f32"
    if kind == "f32" or arch is None:
        return MFMA_FOR_BLOCK[TM]
    for shape, (_, k, _) in program.MFMA_PACK.items():
        if k == kind and program.MFMA_SHAPES[shape][0] == TM and shape in arch.mfma_passes:
            return shape
    return MFMA_FOR_BLOCK[TM]


def mfma_read_width(s) -> int:
    """mma=mfma: each lane reads a run of (BK/KW)/k consecutive K elements (its k slot's
    share of the wave group's K slice; k = the f32 form's K, the number of k slots of
    every shape of that block size); the widest aligned LDS read that divides it."""
    steps = (int(s["BK"]) // int(s.get("KW", 1))) // program.MFMA_SHAPES[MFMA_FOR_BLOCK[int(s["TM"])]][2]
    if s["lds_pad"] == 1:
        return 1
    for w in (4, 2):
        if steps % w == 0:
            return w
    return 1


def check_schedule(gemm: Gemm, s: dict, arch: Arch) -> str:
    """'' when the schedule is legal for this GEMM on ``arch``, else the reason (the space
    and the lowering share it)."""
    wave_size, lds_limit = arch.wave_size, arch.lds_bytes_per_workgroup
    max_threads, max_regs = arch.max_block_threads, arch.arch_vgprs_per_lane
    BM, BN, BK, TM, TN = (int(s[k]) for k in ("BM", "BN", "BK", "TM", "TN"))
    KW = int(s.get("KW", 1))
    mma = s.get("mma", "fma")
    if mma not in MMAS:
        return f"mma={mma!r} not in {MMAS}"
    if BM % TM or BN % TN:
        return f"micro-tile {TM}x{TN} does not divide block tile {BM}x{BN}"
    group = (BM // TM) * (BN // TN)
    if gemm.dtype == "i32":  # the integer GEMM keeps to a single kernel
        if mma == "mfma" and gemm.mfma_kind != "i8":
            return f"mma=mfma: {gemm.mfma_why}"
        if s["swizzle"] != "none" or int(s.get("split_k", 1)) != 1 or int(s.get("stream_k", 0)) \
                or (mma == "fma" and int(s.get("KW", 1)) != 1):
            return ("integer GEMMs keep to one kernel and integer LDS tiles: swizzle=none, "
                    "split_k=1, no stream-K, and KW=1 with mma=fma")
    if mma == "mfma":
        if not arch.mfma_passes:
            return f"mma=mfma: {arch.name} has no MFMA matrix cores (CDNA only)"
        if TM != TN or TM not in MFMA_FOR_BLOCK:
            return f"mma=mfma: the wave block TMxTN={TM}x{TN} must be 32x32 or 16x16"
        shape = mfma_shape(gemm, TM, arch)
        if program.MFMA_PACK[shape][1] != (gemm.mfma_kind or "f32"):
            return f"mma=mfma: {arch.name} has no {gemm.mfma_kind} MFMA for a {TM}x{TN} block"
        kstep, nacc = program.MFMA_SHAPES[shape][2], program.MFMA_SHAPES[shape][3]
        if s["lds_pad"] == "xor":
            return "mma=mfma reads LDS with plain row addresses; lds_pad=xor is not supported"
        if BK % KW or (BK // KW) % kstep:
            return f"mma=mfma: each wave group's K slice BK/KW must be a multiple of {kstep}"
        if KW not in (1, 2, 4, 8, 16) or nacc % KW:
            return f"KW={KW} must divide the {nacc} MFMA accumulators per lane"
        if s.get("mfma_lanes", "n") not in MFMA_LANES:
            return f"mfma_lanes={s['mfma_lanes']!r} not in {MFMA_LANES}"
        group *= wave_size  # one wave per TM x TN block
    threads = group * KW
    if threads > max_threads:
        return f"{threads} threads per workgroup > {max_threads}"
    if group % wave_size:
        return (f"{group} threads per K group is not a whole number of waves "
                f"({wave_size}): each wave must own one K slice")
    if mma == "fma" and (KW not in (1, 2, 4, 8, 16) or BK % KW or (TM * TN) % KW):
        return f"KW={KW} must divide BK={BK} and the {TM * TN} accumulators per thread"
    if s["lds_pad"] not in LDS_PADS:
        return f"lds_pad={s['lds_pad']!r} not in {LDS_PADS}"
    if s["lds_pad"] == "xor" and BK % 4:
        return f"lds_pad=xor swizzles 4-element chunks; BK={BK} is not a multiple of 4"
    if s["swizzle"] not in SWIZZLES:
        return f"swizzle={s['swizzle']!r} not in {SWIZZLES}"
    for name, opnd, tile in (("vec_a", gemm.A, (BM, BK)), ("vec_b", gemm.B, (BK, BN))):
        v = int(s[name])
        if v not in (1, 2, 4):
            return f"{name}={v}: vector widths are 1, 2 or 4"
        mv = opnd.max_vec[opnd.inner]
        if v > mv:
            why = ("read through a fused producer (scalar only)" if opnd.via_emitter else
                   f"memory is contiguous and aligned only for {mv}-wide groups")
            return f"{name}={v} misaligned: operand {opnd.tensor!r} {why}"
        inner_len = tile[1] if opnd.inner == "c" else tile[0]
        if inner_len % v:
            return f"{name}={v} does not divide the tile's inner size {inner_len}"
    k_order = s.get("k_order", "layout")
    if k_order not in K_ORDERS:
        return f"k_order={k_order!r} not in {K_ORDERS}"
    if k_order != gemm.k_order:
        return f"k_order={k_order!r}: the GEMM view was built for k_order={gemm.k_order!r}"
    if k_order == "tap":
        why = tap_tile_why(gemm.geo, BK)
        if why:
            return why
    prefetch = s.get("prefetch", 1)
    if prefetch not in PREFETCH:
        return f"prefetch={prefetch!r} not in {PREFETCH}"
    tap_mask = s.get("tap_mask", 0)
    if tap_mask not in (0, 1):
        return f"tap_mask={tap_mask!r} not in (0, 1)"
    if tap_mask and gemm.A.im2col_mask is None:
        return ("tap_mask=1: only a conv of several taps in k_order=layout has a padding "
                "test per tap to keep as a mask")
    if s.get("stream_k", 0) and tap_period_applies(gemm, s):
        return ("stream_k with the taps fixed across the K loop (BK a multiple of the "
                "taps): hipcc kept 130-172 VGPRs live in the segment loop against the "
                "estimate's 87-124 (tests/test_conv_taps.py)")
    S = int(s.get("split_k", 1))
    if S not in SPLITS:
        return f"split_k={S} not in {SPLITS}"
    nk = ceil_div(gemm.K, BK)
    if S > nk:
        return (f"split_k={S} exceeds the {nk} K tiles of BK={BK} (K={gemm.K}): a split "
                f"would have no K tile")
    SR = s.get("split_reduce", "kernel")
    if SR not in SPLIT_REDUCES:
        return f"split_reduce={SR!r} not in {SPLIT_REDUCES}"
    SK = s.get("stream_k", 0)
    if SK not in STREAM_K:
        return f"stream_k={SK!r} not in {STREAM_K}"
    if SK:
        if S > 1:
            return "stream_k and split_k exclude each other (stream-K splits K per workgroup)"
        why = StreamK(gemm, s, arch).why_not()
        if why:
            return why
    lds = lds_bytes(gemm, s)
    if SR == "last_wg" and (S > 1 or SK):
        lds += 4   # the arrival's old counter value, broadcast through LDS (``arrive``)
    if lds > lds_limit:
        return f"LDS {lds} B > {lds_limit} B per CU"
    regs = vgpr_estimate(s, threads)
    if regs > max_regs:
        return f"about {regs} VGPRs per thread > {max_regs}"
    return ""


def stages_bytes(gemm, s) -> bool:
    """Whether the operand tiles are staged in LDS one byte per element: an integer GEMM
    on the int8 matrix cores, whose operands are proven to fit a signed byte (the MFMA
    reads only that byte). The FMA path's integer operands may not fit one (a uint8 less
    a zero point): they stay i32 tiles."""
    return gemm.dtype == "i32" and s.get("mma", "fma") == "mfma" and gemm.mfma_kind == "i8"


def lds_bytes(gemm, s) -> int:
    """The LDS a schedule declares: ``lds_elems`` 4-byte elements, or with byte staging
    (``stages_bytes``) the byte tiles plus, for KW > 1, the i32 partial sums' own array."""
    if not stages_bytes(gemm, s):
        return lds_elems(gemm, s) * 4
    BM, BN, BK, KW = int(s["BM"]), int(s["BN"]), int(s["BK"]), int(s.get("KW", 1))
    return (BM + BN) * (BK + _pad_elems(s["lds_pad"])) + (4 * KW * BM * BN if KW > 1 else 0)


def tap_period_applies(gemm, s) -> bool:
    """Whether ``s`` stages the conv's activation with its taps fixed across the K loop
    (``Operand.im2col_period``): tap_mask=1, scalar loads, BK a multiple of the taps."""
    p = gemm.A.im2col_period
    return (int(s.get("tap_mask", 0)) == 1 and p is not None and int(s["vec_a"]) == 1
            and int(s["BK"]) % p[0] == 0)


def lds_elems(gemm, s) -> int:
    """Staging (A as BM x BK, B as BN x BK, K innermost, padded rows), the split-K partial
    sums (KW x BM x BN) and the swizzled output tile share one LDS array."""
    BM, BN, BK = int(s["BM"]), int(s["BN"]), int(s["BK"])
    KW = int(s.get("KW", 1))
    p = _pad_elems(s["lds_pad"])
    need = (BM + BN) * (BK + p)
    if KW > 1:
        need = max(need, KW * BM * BN)
    if s["swizzle"] != "none":
        sv = gemm.swizzle_width(BM, BN)
        need = max(need, BM * (BN + sv) if gemm.vec_dim == "n" else BN * (BM + sv))
    return need


def mfma_reads_hoisted(s) -> bool:
    """mma=mfma with scalar LDS reads of a K run of several elements (the tiles whose BK
    is a multiple of a conv's taps, ``compiler.schedule.contraction.PERIOD_TILES``: 9
    reads of A and of B per lane and K tile): every read is issued before the first
    MFMA, as hipcc schedules them, instead of each MFMA waiting out its own read's LDS
    latency in turn."""
    if s.get("mma", "fma") != "mfma" or s["lds_pad"] == 1:
        return False
    steps = (int(s["BK"]) // int(s.get("KW", 1))) // program.MFMA_SHAPES[MFMA_FOR_BLOCK[int(s["TM"])]][2]
    return mfma_read_width(s) == 1 and steps > 1


def vgpr_estimate(s, threads) -> int:
    """Accumulators + one K-vector of A and B per micro-tile row/column + staged elements
    + LDS row addresses + index registers (mfma: the block's accumulators per lane)."""
    BM, BN, BK, TM, TN = (int(s[k]) for k in ("BM", "BN", "BK", "TM", "TN"))
    staging = (ceil_div(BM * BK, threads) + ceil_div(BK * BN, threads)) * int(s.get("prefetch", 1))
    if s.get("mma", "fma") == "mfma":
        nacc = program.MFMA_SHAPES[MFMA_FOR_BLOCK[TM]][3]
        reads = 2 * mfma_read_width(s)
        if mfma_reads_hoisted(s):  # the whole K run of A and B held at once
            reads = 2 * ((int(s["BK"]) // int(s.get("KW", 1)))
                         // program.MFMA_SHAPES[MFMA_FOR_BLOCK[TM]][2])
        return nacc + reads + staging + 2 + 16
    return TM * TN + read_width(s) * (TM + TN) + staging + TM + TN + 16


def _staging_walk(opnd, v: int, tile, kdim: str) -> tuple:
    """How a tile is staged: (whether the operand's contiguous dim is its columns, vectors
    per contiguous row, vectors in the tile, whether the vectors run along K): shared by
    ``stage`` and ``stage_taps``, which walk a tile the same way."""
    R, C = tile
    inner_is_c = opnd.inner == "c"
    outer_len, inner_len = (R, C) if inner_is_c else (C, R)
    per_row = inner_len // v
    return inner_is_c, per_row, outer_len * per_row, opnd.inner == kdim


# ------------------------------------------------------------------ the lowering
def analysed_gemm(graph: Graph, dispatch, k_order: str) -> Gemm:
    """``Gemm(graph, dispatch, k_order)``, built once per dispatch and K order and kept on
    the graph: its operand analysis (the exact offset table of an implicit GEMM, e.g.
    3136 x 576 offsets for ResNet-50's first 3x3 conv) does not depend on the schedule,
    and recomputing it for every point of a conv's space was three quarters of ranking
    that space (issue 26). A ``Gemm`` is not changed after construction except its
    ``arch``, which every lowering sets before use. The key holds the dispatch's ops and
    boundary and the graph's op count, so a graph grown after a lowering is analysed
    afresh."""
    cache = graph.__dict__.setdefault("_analysed_gemms", {})
    key = (dispatch.name, tuple(dispatch.ops), tuple(dispatch.inputs),
           tuple(dispatch.outputs), k_order, len(graph))
    gemm = cache.get(key)
    if gemm is None:
        if len(cache) > 64:
            cache.clear()
        gemm = cache[key] = Gemm(graph, dispatch, k_order)
    return gemm


def lower_contraction(graph: Graph, dispatch, schedule: dict, arch: Arch):
    """A tiled FMA GEMM/implicit-GEMM kernel with the dispatch's epilogue fused in; with
    ``split_k`` > 1 a ``KernelSequence``: the partial kernel (see :func:`lower_split_k`)
    then the reduction kernel that applies the epilogue once."""
    s = {**DEFAULTS, **schedule}
    gemm = analysed_gemm(graph, dispatch, s["k_order"])
    gemm.arch = arch
    why = check_schedule(gemm, s, arch)
    if why:
        raise LoweringError(f"dispatch {dispatch.name!r}: {why}")
    for o in dispatch.outputs:
        if graph.op(o).type.size != gemm.root.type.size:
            raise LoweringError(f"dispatch {dispatch.name!r}: output {o!r} has shape "
                                f"{graph.op(o).type.shape}, not the root's "
                                f"{gemm.root.type.shape} or a view of it")
    if int(s["split_k"]) > 1:
        return lower_split_k(graph, dispatch, gemm, s)
    if int(s.get("stream_k", 0)):
        return lower_stream_k(graph, dispatch, gemm, s, arch)
    return _Builder(graph, dispatch, gemm, s).build()


def workspace_name(dispatch) -> str:
    return sanitize(f"{dispatch.name}_splitk_partials")


def arrivals_name(dispatch) -> str:
    return sanitize(f"{dispatch.name}_splitk_arrivals")


def lower_split_k(graph: Graph, dispatch, gemm: Gemm, s: dict) -> program.KernelSequence:
    """Split-K across workgroups (knob ``split_k`` = S), as hipBLASLt and rocBLAS do for
    GEMMs with too few output tiles to fill the GPU: two kernels in stream order.

    1. The partial kernel: S x (the tile grid) workgroups; workgroup (split s, tile t)
       runs the usual K loop over K tiles ``s*nk//S .. (s+1)*nk//S - 1`` (``nk`` K tiles;
       where S does not divide nk the splits differ by one tile and the loop's bounds
       are per workgroup, as stream-K's) and stores its raw accumulators, no epilogue, to the f32
       workspace ``[S][tiles][accumulator e][thread]``: consecutive threads on
       consecutive dwords, so the stores coalesce whatever the output's layout.
    2. The reduction kernel: the tile grid again, the same threads and accumulator layout
       (FMA micro-tiles or MFMA blocks, ``KW`` owners); each thread loads its S partials
       per accumulator (coalesced, all issued before the adds), sums them in split order,
       and runs the dispatch's epilogue once, with the ``swizzle`` placement of the
       schedule, exactly as the one-kernel GEMM does after its K loop.

    The workspace costs ``2 * S * M * N * 4`` bytes of traffic (written, read back) and
    the second launch; gpusim charges both (``gpusim.sim._simulate_sequence``). The sum
    order stays fixed (deterministic results).

    ``split_reduce=last_wg``: one kernel, the reduction done by the workgroup that
    arrives last at its tile (CUDA's threadFenceReduction sample, CUTLASS's serial
    split-K), so the second launch goes. Each workgroup stores its partials as in 1.,
    fences (``__threadfence``: its stores visible device-wide), and after a barrier one
    thread adds 1 to the tile's i32 arrival counter (``AtomicAdd``, old value back) and
    puts the old value in LDS; after a second barrier every thread reads it (a broadcast
    LdsLoad, so the branch is uniform). The workgroup that read ``S - 1`` fences again
    (acquire), resets the counter to 0 for the next launch, sums the S partials in split
    order exactly as the reduction kernel does (its own included, read back: the result
    does not depend on who arrived last) and runs the epilogue once. The counters are a
    zero-filled workspace (``Buffer.zeroed``: the harness's hipMemset once, gpusim's
    zeros); the kernel leaves them zero.
    """
    if s.get("split_reduce", "kernel") == "last_wg":
        one = _Builder(graph, dispatch, gemm, s, phase="partial", last_wg=True).build()
        ws, cnt = one.buffer(workspace_name(dispatch)), one.buffer(arrivals_name(dispatch))
        meta = {**one.meta, "split_k": int(s["split_k"]), "split_reduce": "last_wg",
                "workspace_bytes": ws.size * 4 + cnt.size * 4}
        return program.KernelSequence(one.name, (one,), (
            program.Buffer(ws.name, "f32", ws.shape, "out"),
            program.Buffer(cnt.name, "i32", cnt.shape, "inout", zeroed=True)), meta)
    partial = _Builder(graph, dispatch, gemm, s, phase="partial").build()
    reduce = reduce_kernel(graph, dispatch, gemm, s)
    ws = partial.buffer(workspace_name(dispatch))
    meta = {**reduce.meta, "split_k": int(s["split_k"]),
            "workspace_bytes": ws.size * 4}
    return program.KernelSequence(sanitize(f"{dispatch.name}_gemm"), (partial, reduce),
                            (program.Buffer(ws.name, "f32", ws.shape, "out"),), meta)


class StreamK:
    """The stream-K partition (Osama, Merrill, Cecka, Garland, Owens: "Stream-K: Work-centric
    Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023):
    the GEMM's ``iters = tiles x nk`` MAC-loop iterations (one K tile of one output tile
    each), tile-major, dealt to ``G = stream_k x CUs`` persistent workgroups in even
    contiguous shares: workgroup g runs iterations ``g*iters//G .. (g+1)*iters//G - 1``,
    which may start and end inside a tile and span several tiles (its *segments*).

    Each segment's partial accumulators go to workspace slot ``(tile, j)``, j counting
    the workgroups that touch the tile in order, so the fix-up kernel sums a tile's
    ``count(tile)`` slots in a fixed order (deterministic) and applies the epilogue once.
    The same integer formulas serve the Python side (sizes) and the IR (indices):
    ``first(x) = ((x + 1) * G - 1) // iters`` is the workgroup owning iteration x.

    SIMPLIFICATION against the paper: every tile, even one a single workgroup covers
    whole, goes through the workspace and the fix-up (the paper's "data-parallel" tiles
    store directly); the fix-up is a separate kernel (no in-kernel flag wait), so no
    workgroup ever waits on another and co-residency is not needed."""

    def __init__(self, gemm, s, arch):
        self.W = int(s.get("stream_k", 0))
        self.BM, self.BN, self.BK = int(s["BM"]), int(s["BN"]), int(s["BK"])
        self.nk = ceil_div(gemm.K, self.BK)
        self.tiles = gemm.batch * ceil_div(gemm.M, self.BM) * ceil_div(gemm.N, self.BN)
        self.iters = self.tiles * self.nk
        self.G = self.W * arch.num_cus

    def why_not(self) -> str:
        G, iters = self.G, self.iters
        if G >= iters:
            return (f"stream_k={self.W}: {G} workgroups for {iters} MAC-loop iterations "
                    f"({self.tiles} tiles x {self.nk} K tiles): at most one each")
        if (iters + 1) * G >= 2 ** 31:
            return f"stream_k={self.W}: {iters} x {G} overflows the i32 index arithmetic"
        return ""

    def begin(self, g):
        return g * self.iters // self.G

    def first(self, x):
        return ((x + 1) * self.G - 1) // self.iters

    @functools.cached_property
    def segments(self) -> int:
        """Most tiles one workgroup touches (the partial kernel's segment loop)."""
        return max((self.begin(g + 1) - 1) // self.nk - self.begin(g) // self.nk + 1
                   for g in range(self.G))

    @functools.cached_property
    def touched(self) -> float:
        """The mean number of tiles one workgroup touches (segments that run)."""
        return sum((self.begin(g + 1) - 1) // self.nk - self.begin(g) // self.nk + 1
                   for g in range(self.G)) / self.G

    @functools.cached_property
    def slots(self) -> int:
        """Most workgroups touching one tile (workspace slots per tile)."""
        return max(self.first((t + 1) * self.nk - 1) - self.first(t * self.nk) + 1
                   for t in range(self.tiles))

    def first_ir(self, x):
        """``first`` as IR: the workgroup owning iteration ``x``."""
        return idiv(iadd(imul(iadd(x, 1), self.G), -1), self.iters)


def lower_stream_k(graph: Graph, dispatch, gemm: Gemm, s: dict, arch: Arch
                   ) -> program.KernelSequence:
    """Stream-K (knob ``stream_k``; :class:`StreamK`): two kernels in stream order.

    1. The partial kernel: ``G`` persistent workgroups; workgroup g loops over its
       segments (a rolled loop of ``segments`` trips): per segment the tile, its first
       and last K tile ``kt0 .. kt1-1`` (uniform, from block_id), then the usual pipelined
       K loop with those runtime bounds, and the raw accumulators to workspace slot
       ``(tile, g - first(tile))``, consecutive threads on consecutive dwords.
    2. The fix-up kernel: the tile grid; each thread sums its ``count(tile)`` slots (all
       ``slots`` loads issued, the missing ones guarded and zero, in slot order) and runs
       the dispatch's epilogue once, exactly as split-K's reduction does.

    Against split-K the grid is the CU count whatever the tile count (no partial last
    wave, any K), and the workspace holds about ``tiles + G`` partial tiles instead of
    ``S x tiles``.

    ``split_reduce=last_wg``: one kernel, the fix-up done inside the segment loop by the
    workgroup that arrives last at the segment's tile, as split-K's last arrival does
    (:func:`lower_split_k`): each segment stores its slot, fences, counts its arrival on
    the tile's counter, and the arrival that reads ``count(tile) - 1`` resets the counter,
    sums the tile's ``count(tile)`` slots in slot order (its own read back) and runs the
    epilogue once; a barrier closes the segment (its LDS reads before the next segment
    stages). The second launch goes; the fix-ups run on the workgroups that finish a tile
    last instead of a grid of their own. No workgroup waits for another."""
    sk = StreamK(gemm, s, arch)
    if s.get("split_reduce", "kernel") == "last_wg":
        one = _Builder(graph, dispatch, gemm, s, phase="partial", stream_k=sk,
                       last_wg=True).build()
        ws, cnt = one.buffer(workspace_name(dispatch)), one.buffer(arrivals_name(dispatch))
        meta = {**one.meta, "stream_k": sk.W, "stream_k_workgroups": sk.G,
                "stream_k_iterations": sk.iters, "split_reduce": "last_wg",
                "workspace_bytes": ws.size * 4 + cnt.size * 4}
        return program.KernelSequence(one.name, (one,), (
            program.Buffer(ws.name, "f32", ws.shape, "out"),
            program.Buffer(cnt.name, "i32", cnt.shape, "inout", zeroed=True)), meta)
    partial = _Builder(graph, dispatch, gemm, s, phase="partial", stream_k=sk).build()
    fixup = reduce_kernel(graph, dispatch, gemm, s, sk)
    ws = partial.buffer(workspace_name(dispatch))
    meta = {**fixup.meta, "stream_k": sk.W, "stream_k_workgroups": sk.G,
            "stream_k_iterations": sk.iters, "workspace_bytes": ws.size * 4}
    return program.KernelSequence(sanitize(f"{dispatch.name}_gemm"), (partial, fixup),
                                  (program.Buffer(ws.name, "f32", ws.shape, "out"),), meta)


class _KnobsRead(dict):
    """A schedule that records which knobs are read (by key, ``get`` or ``in``); a copy
    (``dict(s)``, ``{**s}``) reads none."""

    def __init__(self, s):
        super().__init__(s)
        self.read: set = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)

    def __contains__(self, k):
        self.read.add(k)
        return super().__contains__(k)


_ABSENT = object()


def reduce_kernel(graph: Graph, dispatch, gemm: Gemm, s: dict, sk=None) -> program.Kernel:
    """Split-K's reduction kernel (or stream-K's fix-up, ``sk``), built once per dispatch,
    arch, stream-K partition and values of the knobs its building read.

    Why: the reduction reads a few knobs (tile, threads, split, placement), so the points
    of a space share it (a 3x3 conv's 548 split and stream-K points build 70-odd distinct
    ones), and building it (the summed loads, the epilogue, the decided code removed) was
    a third of ranking such a space (issue 26). The building is a function of the graph,
    the dispatch's ``Gemm`` (kept on the graph by ``analysed_gemm``), the arch, ``sk`` and
    the knobs it reads, so a point agreeing on those knobs gets the same kernel; its
    ``meta`` is given the point's own schedule. ``tests/test_lower_memo.py`` lowers every
    point of real spaces with and without this and compares the kernels."""
    memo = gemm.__dict__.setdefault("_reduce_kernels", {})
    part = None if sk is None else (sk.W, sk.BM, sk.BN, sk.BK, sk.G, sk.iters)
    # the arch by identity (an ``Arch`` holds dicts: no hash), held by the entry so that
    # its id is not reused while the entry lives
    key = (id(gemm.arch), part, dispatch.name, dispatch.root,
           repr(getattr(dispatch, "kind", None)),
           tuple(getattr(dispatch, "epilogue_inputs", ())),
           tuple(getattr(dispatch, "recomputed", ())))
    entries = memo.setdefault(key, (gemm.arch, []))[1]
    for names, values, kernel in entries:
        if tuple(s.get(k, _ABSENT) for k in names) == values:
            return dataclasses.replace(kernel, meta={**kernel.meta, "schedule": dict(s)})
    rec = _KnobsRead(s)
    kernel = _Builder(graph, dispatch, gemm, rec, phase="reduce", stream_k=sk).build()
    names = tuple(sorted(rec.read, key=str))
    if len(entries) > 256:
        entries.clear()
    entries.append((names, tuple(s.get(k, _ABSENT) for k in names), kernel))
    return kernel


def _acc_row(shape, lane, r):
    """Row of accumulator register ``r`` of ``lane`` in the MFMA layout, as IR
    (``gpusim.program.mfma_acc_elem``)."""
    if program.MFMA_SHAPES[shape][0] == 32:
        return iadd(imul(idiv(lane, 32), 4), 8 * (r // 4) + r % 4)
    return iadd(imul(idiv(lane, 16), 4), r)


class _Builder:
    def __init__(self, graph, dispatch, gemm, s, phase=None, stream_k=None, last_wg=False):
        self.g, self.d, self.gemm, self.s = graph, dispatch, gemm, s
        #: split_reduce=last_wg: the "partial" phase, then the last-arrival tail
        #: (:meth:`arrive`) and the epilogue in the same kernel
        self.last_wg = last_wg
        self.tail_from = None
        #: None: the one-kernel GEMM; "partial"/"reduce": the two kernels of split-K,
        #: or of stream-K when ``stream_k`` (a :class:`StreamK`) is given
        self.phase = phase
        self.sk = stream_k
        self.S = int(s.get("split_k", 1))
        self.k_base = program.i32(0)
        self.BM, self.BN, self.BK, self.TM, self.TN = (int(s[k]) for k in
                                                       ("BM", "BN", "BK", "TM", "TN"))
        self.KW = int(s.get("KW", 1))
        self.group = (self.BM // self.TM) * (self.BN // self.TN)
        self.mma = s.get("mma", "fma")
        self.dt = gemm.dtype  # register, LDS and accumulator dtype (f32 or i32)
        #: the staged operand tiles' LDS dtype: i8 on the int8 matrix cores (one byte per
        #: element, ``stages_bytes``; the partial sums of KW > 1 then get their own i32
        #: array, ``self.acc_lds``), else the accumulator's
        self.byte_tiles = stages_bytes(gemm, s)
        self.acc_lds = "lds_acc" if self.byte_tiles else "lds"
        if self.mma == "mfma":  # one wave per TM x TN block, 64 lanes each
            self.shape = mfma_shape(gemm, self.TM, gemm.arch)
            self.group *= program.MFMA_WAVE
        self.threads = self.group * self.KW
        self.pad = _pad_elems(s["lds_pad"])
        self.row_len = self.BK + self.pad
        self.regs = RegisterNamer()
        self.em = ValueEmitter(graph, list(dispatch.ops), list(dispatch.inputs), self.regs)
        self.body: list = []
        self.rows_cache: dict = {}   # (operand, staging step) -> hoisted row registers

    def zero(self):
        """0 in the accumulator's dtype."""
        return program.f32(0.0) if self.dt == "f32" else program.i32(0)

    def mac(self, a, b, acc):
        """acc + a * b: one f32 FMA, or an i32 multiply and add (exact; the hardware's
        v_mad_u32_u24 / v_dot4_i32_i8 are not modelled, see docs/dtypes.md)."""
        if self.dt == "f32":
            return program.fma(a, b, acc)
        return acc + a * b

    def var(self, hint, dtype="i32"):
        return program.Var(self.regs.new(hint), dtype)

    def let(self, hint, value, out=None):
        v = self.var(hint, value.dtype)
        (self.body if out is None else out).append(program.Assign(v, value))
        return v

    # ---------------------------------------------------------------- staging
    def lds_index(self, base, row, k):
        """LDS element of (row, k) in a K-innermost staged tile (row = m for A, n for B)."""
        if self.s["lds_pad"] == "xor" and self.BK // 4 > 1:
            chunk = program.as_expr(idiv(k, 4)) ^ program.as_expr(imod(row, self.BK // 4))
            k = iadd(imul(chunk, 4), imod(k, 4))
        return iadd(base, iadd(imul(row, self.row_len), k))

    def stage(self, opnd, v, tile, base, r0, c0, b, loads_out, stores_out, kdim):
        """Global -> LDS copy of one operand tile, read along the operand's contiguous
        dim with ``v``-wide loads and stored K-innermost: a vector along K stays one
        ds_write (split when a 1-element pad misaligns it), a vector along M/N becomes
        ``v`` transposing ds_write_b32."""
        if opnd.taps is not None:
            return self.stage_taps(opnd, v, tile, base, r0, c0, b, loads_out, stores_out, kdim)
        R, C = tile
        inner_is_c, per_row, total, along_k = _staging_walk(opnd, v, tile, kdim)
        t = program.thread_id()
        period_tile: dict = {}
        for step in range(ceil_div(total, self.threads)):
            q = iadd(t, step * self.threads)
            stmts = []
            outer, inner = idiv(q, per_row), imul(imod(q, per_row), v)
            ro, ci = (outer, inner) if inner_is_c else (inner, outer)
            r, c = iadd(r0, ro), iadd(c0, ci)
            # "the vector's last element is inside": the same test when the start is a
            # multiple of v, and one the validator's interval analysis can use
            row_test = r < opnd.rows - (0 if inner_is_c else v - 1) if opnd.rows % R else None
            col_test = c < opnd.cols - (v - 1 if inner_is_c else 0) if opnd.cols % C else None
            valid = _and(row_test, col_test)
            regs = tuple(self.var(f"st_{opnd.tensor}", self.dt) for _ in range(v))
            if opnd.via_emitter:
                ix, _ = opnd.index_fn(b, r, c)
                loads = []
                with self.em.scope(loads):
                    val = self.em.value(opnd.tensor, ix)
                    loads.append(program.Assign(regs[0], val))
            elif opnd.im2col is not None and kdim == "c" and self.tap_period(opnd, v):
                # BK a multiple of the taps: the element's tap, offset and padding test
                # are registers set before the loop; the tile adds a uniform channel step
                rows_part, _ = self.hoisted_rows(
                    opnd, step, r, ci, b, row_test, loads_out,
                    None if self.s["lds_pad"] == "xor" else self.lds_index(base, ro, ci))
                T, fixed, tile_part = opnd.im2col_period
                pkey = ("period", opnd.tensor, step)
                if pkey not in self.rows_cache:
                    poff, pok = fixed(rows_part, rows_part["col"], lambda hint, val: self.let(
                        f"im_{hint}", program.as_expr(val), loads_out))
                    self.rows_cache[pkey] = {
                        "off": self.let("im_poff", program.as_expr(poff), loads_out),
                        "ok": self.let("im_pok", program.as_expr(
                            _and(rows_part.get("row_ok"), pok)), loads_out)
                        if _and(rows_part.get("row_ok"), pok) is not None else None}
                pf = self.rows_cache[pkey]
                if "ptile" not in period_tile:  # one uniform per K tile and operand
                    period_tile["ptile"] = tile_part(c0, lambda hint, val: self.let(
                        f"im_{hint}", program.as_expr(val), loads_out))
                if opnd.cols % C:  # a ragged last K tile
                    col_test = iadd(c0, rows_part["col"]) < opnd.cols
                valid = _and(pf["ok"], col_test)
                loads = [program.Load(regs, opnd.buffer, iadd(pf["off"], period_tile["ptile"]))]
            elif opnd.im2col is not None and kdim == "c":
                # the tile row (an output position) is the same on every K tile: its
                # part of the address and its guards are registers set before the loop
                rows_part, col_part = self.hoisted_rows(
                    opnd, step, r, ci, b, row_test, loads_out,
                    None if self.s["lds_pad"] == "xor" else self.lds_index(base, ro, ci))
                stmts.append(program.Assign(kv := self.var("im_k"), iadd(c0, rows_part["col"])))
                c = kv
                col_test = c < opnd.cols - (v - 1 if inner_is_c else 0) if opnd.cols % C else None

                def let(hint, value, out=stmts):
                    return self.let(f"im_{hint}", value, out) if isinstance(value, program.Expr) \
                        and not isinstance(value, (program.Var, program.Const)) else value
                off, pvalid = col_part(rows_part, kv, let)
                valid = _and(_and(rows_part.get("row_ok"), col_test), pvalid)
                loads = [program.Load(regs, opnd.buffer, off)]
            elif kdim == "r" and opnd.affine is not None and valid is None and \
                    self.tap_period(self.gemm.A, int(self.s["vec_a"])):
                # the filter beside a period-staged activation: its affine offset's
                # per-thread part (row ro of the tile, column c) is a register set
                # before the K loop; the tile adds the uniform k0 * K stride. Only
                # with whole K and N tiles: a bounds guard on the row would test
                # k0 + ro, which the validator cannot relate to the held register
                base_, sb, sr, sc = opnd.affine
                akey = ("affine", opnd.tensor, step)
                if akey not in self.rows_cache:
                    self.rows_cache[akey] = self.let("st_off", program.as_expr(_add(_add(_add(
                        base_, _mul(b, sb)), _mul(ro, sr)), _mul(c, sc))), loads_out)
                loads = [program.Load(regs, opnd.buffer,
                                      iadd(self.rows_cache[akey], imul(r0, sr)))]
            else:
                off, pvalid = opnd.offset_fn(b, r, c)
                valid = _and(valid, pvalid)
                loads = [program.Load(regs, opnd.buffer, off)]
            if valid is None:
                stmts += loads
            else:
                stmts += [program.Assign(x, self.zero()) for x in regs]
                stmts.append(program.If(valid, tuple(loads)))
            lstmts, stmts = stmts, []
            row, k = (ro, ci) if kdim == "c" else (ci, ro)
            held = self.rows_cache.get((opnd.tensor, step), {}).get("lds") \
                if opnd.im2col is not None and kdim == "c" else None
            stmts += self.lds_stores(base, row, k, regs, along_k, held)
            if total % self.threads and step == total // self.threads:
                # registers of a partial step: defined on every path for the validator
                loads_out += [program.Assign(x, self.zero()) for x in regs]
                loads_out.append(program.If(q < total, tuple(lstmts)))
                stores_out.append(program.If(q < total, tuple(stmts)))
            else:
                loads_out += lstmts
                stores_out += stmts

    def lds_stores(self, base, row, k, regs, along_k, held=None) -> list:
        """The LDS stores of one staged vector at (row, k) of a K-innermost tile: one
        store along K (split when a 1-element pad misaligns it), ``v`` transposing
        stores along M/N. ``held``: a register holding the (row, k) address, set
        before the K loop (the other elements are constant offsets from it)."""
        v = len(regs)

        def at(dr, dk):
            if held is not None:
                return iadd(held, dr * self.row_len + dk) if dr or dk else held
            return self.lds_index(base, iadd(row, dr) if dr else row, iadd(k, dk) if dk else k)
        if along_k and (self.pad != 1 or v == 1):
            return [program.LdsStore("lds", at(0, 0), regs)]
        if along_k:
            return [program.LdsStore("lds", at(0, e), (regs[e],)) for e in range(v)]
        return [program.LdsStore("lds", at(e, 0), (regs[e],)) for e in range(v)]

    def stage_taps(self, opnd, v, tile, base, r0, c0, b, loads_out, stores_out, kdim):
        """:meth:`stage` for a conv operand in ``k_order=tap`` (``Operand.taps``): the K
        tile lies inside one filter tap (BK divides C/G), so its tap, first channel and
        their offset are computed once per tile as wave-uniform scalars; each staged
        element adds its per-thread register (set before the K loop, like its LDS store
        address and the tap mask of its output position) to that: one VALU add, plus a
        shift and a mask for the padding test. No K bounds test: K = taps x C/G is a
        whole number of tiles."""
        R, C = tile
        inner_is_c, per_row, total, along_k = _staging_walk(opnd, v, tile, kdim)
        t = program.thread_id()
        fixed, per_tile = opnd.taps
        k0, x0 = (c0, r0) if kdim == "c" else (r0, c0)
        xsize, xtile = (opnd.rows, R) if kdim == "c" else (opnd.cols, C)
        along_x = not along_k  # the load's vector runs along the non-K index
        uniform = {}

        def let_tile(hint, value):  # one scalar register per K tile and operand
            if hint not in uniform:
                uniform[hint] = self.let(f"tp_{hint}", program.as_expr(value), loads_out) \
                    if isinstance(value, program.Expr) and not isinstance(
                        value, (program.Var, program.Const)) else value
            return uniform[hint]
        xor = self.s["lds_pad"] == "xor" and self.BK // 4 > 1
        for step in range(ceil_div(total, self.threads)):
            q = iadd(t, step * self.threads)
            outer, inner = idiv(q, per_row), imul(imod(q, per_row), v)
            ro, co = (outer, inner) if inner_is_c else (inner, outer)
            xl, kl = (ro, co) if kdim == "c" else (co, ro)
            row, k = (ro, co) if kdim == "c" else (co, ro)
            key = ("taps", opnd.tensor, step)
            if key not in self.rows_cache:  # the first tile: before the K loop
                x = self.let("tp_x", iadd(x0, xl), loads_out)
                kr = self.let("tp_kl", kl, loads_out)
                named = fixed(b, x, kr, lambda hint, val: self.let(
                    f"tp_{hint}", program.as_expr(val), loads_out))
                parts = {n: self.let(f"tp_{n}", program.as_expr(val), loads_out)
                         for n, val in named.items()}
                if xsize % xtile:
                    parts["x_ok"] = self.let(
                        "tp_x_ok", x < xsize - (v - 1 if along_x else 0), loads_out)
                if not xor:
                    parts["lds"] = self.let("tp_lds", self.lds_index(base, row, k), loads_out)
                self.rows_cache[key] = parts
            parts = self.rows_cache[key]
            off, tvalid = per_tile(parts, k0, let_tile)
            valid = _and(parts.get("x_ok"), tvalid)
            regs = tuple(self.var(f"st_{opnd.tensor}", self.dt) for _ in range(v))
            loads = [program.Load(regs, opnd.buffer, off)]
            if valid is None:
                lstmts = loads
            else:
                lstmts = [program.Assign(x, self.zero()) for x in regs]
                lstmts.append(program.If(valid, tuple(loads)))
            stmts = self.lds_stores(base, row, k, regs, along_k, parts.get("lds"))
            if total % self.threads and step == total // self.threads:
                loads_out += [program.Assign(x, self.zero()) for x in regs]
                loads_out.append(program.If(q < total, tuple(lstmts)))
                stores_out.append(program.If(q < total, tuple(stmts)))
            else:
                loads_out += lstmts
                stores_out += stmts

    def tap_period(self, opnd, v) -> bool:
        """Whether this schedule stages ``opnd`` (the activation) with its taps fixed
        across the K loop (:func:`tap_period_applies`)."""
        return opnd is self.gemm.A and v == 1 and tap_period_applies(self.gemm, self.s)

    def hoisted_rows(self, opnd, step, r, c_local, b, row_valid, out, lds_at=None):
        """(the row part of ``opnd.im2col`` for this thread's row ``r`` of staging step
        ``step``, the column part): the row part's values (and the row's own bounds test
        ``row_valid``) become registers the first time, appended to ``out`` (the first
        tile's loads, before the K loop, outside any guard), and are reused by every
        later tile. The column's bounds test (a ragged last K tile) stays per tile."""
        key = (opnd.tensor, step)
        # tap_mask=1: the padding test as a bit of a tap mask, and the element's LDS
        # store address held in a register too (``Operand.im2col_mask``)
        split = opnd.im2col_mask if int(self.s.get("tap_mask", 0)) and \
            opnd.im2col_mask is not None else opnd.im2col
        if key not in self.rows_cache:
            rv = self.let("im_m", r, out)
            col = self.let("im_c", c_local, out)
            named = split[0](b, rv, lambda hint, v: self.let(f"im_{hint}", program.as_expr(v), out)) \
                if split is opnd.im2col_mask else split[0](b, rv)
            parts = {name: self.let(f"im_{name}", program.as_expr(v), out)
                     for name, v in named.items()}
            parts["col"] = col
            if row_valid is not None:
                parts["row_ok"] = self.let("im_row_ok", row_valid, out)
            if split is opnd.im2col_mask and lds_at is not None:
                parts["lds"] = self.let("im_lds", lds_at, out)
            self.rows_cache[key] = parts
        return self.rows_cache[key], split[1]

    # ---------------------------------------------------------------- build
    def build(self) -> program.Kernel:
        if self.mma == "mfma":
            return self.build_mfma()
        s = self.s
        BM, BN, BK, TM, TN, KW = self.BM, self.BN, self.BK, self.TM, self.TN, self.KW
        tm_thr, tn_thr = BM // TM, BN // TN
        va, vb = int(s["vec_a"]), int(s["vec_b"])
        rv = read_width(s)
        bkw = BK // KW
        t = program.thread_id()
        b, m0, n0, tiles_m, tiles_n = self.tile_origin()
        if KW > 1:
            kg = self.let("kg", idiv(t, self.group))   # K group: wave-uniform
            tig = self.let("tig", imod(t, self.group))
        else:
            kg, tig = program.i32(0), t
        tx = self.let("tx", imod(tig, tm_thr))
        ty = self.let("ty", idiv(tig, tm_thr))
        self.kg, self.tig, self.tx, self.ty = kg, tig, tx, ty
        acc = [[self.let(f"acc{i}_{j}", self.zero()) for j in range(TN)] for i in range(TM)]
        a_base, b_base = 0, BM * self.row_len

        # per-thread LDS row addresses of its TM rows of A and TN rows (columns n) of B,
        # computed once: inside the loop an address is one add of a constant (hipcc
        # folds it into the ds_read offset field; here it costs one VALU op)
        xor = s["lds_pad"] == "xor" and BK // 4 > 1
        rows = []
        for name, base, cnt, first, step in (("ra", a_base, TM, tx, tm_thr),
                                             ("rb", b_base, TN, ty, tn_thr)
                                             ) if self.phase != "reduce" else ():
            lst = []
            for i in range(cnt):
                row = iadd(first, i * step)
                addr = iadd(base, imul(row, self.row_len))
                if not xor and KW > 1:
                    addr = iadd(addr, imul(kg, bkw))
                lst.append((self.let(f"{name}{i}", addr),
                            self.let(f"{name}x{i}", imod(row, BK // 4)) if xor else None))
            rows.append(lst)
        gch = self.let("gch", imul(kg, bkw // 4)) if xor and KW > 1 and \
            self.phase != "reduce" else program.i32(0)

        def read_addr(base, rmod, kq):
            if not xor:
                return base if kq == 0 else iadd(base, kq)
            chunk = program.as_expr(iadd(gch, kq // 4)) ^ program.as_expr(rmod)
            return iadd(base, iadd(imul(chunk, 4), kq % 4))

        # K loop with register prefetch (the classic single-LDS-buffer pipeline): the
        # global loads of tile kt+1 are issued before the FMAs on tile kt, so their
        # latency hides behind the math; LDS reads run one K-vector ahead of the FMAs.
        stage_tile = self.stage_first_tile(va, vb, a_base, b_base, m0, n0, b) \
            if self.phase != "reduce" else None
        steps = list(range(0, bkw, rv))

        def compute():
            out, regs_of = [], {}

            def reads(kq):
                a_regs = [tuple(self.var(f"a{i}_", self.dt) for _ in range(rv))
                          for i in range(TM)]
                b_regs = [tuple(self.var(f"b{j}_", self.dt) for _ in range(rv))
                          for j in range(TN)]
                regs_of[kq] = (a_regs, b_regs)
                r = [program.LdsLoad(a_regs[i], "lds", read_addr(base, rmod, kq))
                     for i, (base, rmod) in enumerate(rows[0])]
                return r + [program.LdsLoad(b_regs[j], "lds", read_addr(base, rmod, kq))
                            for j, (base, rmod) in enumerate(rows[1])]

            out += reads(steps[0])
            for si, kq in enumerate(steps):
                if si + 1 < len(steps):
                    out += reads(steps[si + 1])
                a_regs, b_regs = regs_of[kq]
                for e in range(rv):
                    for i in range(TM):
                        for j in range(TN):
                            out.append(program.Assign(acc[i][j], self.mac(
                                a_regs[i][e], b_regs[j][e], acc[i][j])))
            return out

        if self.phase == "reduce":
            self.sum_partials(acc)
        else:
            self.k_loop(stage_tile, compute)
            if KW > 1:
                self.combine_split_k(acc)
        if self.phase == "partial" and self.last_wg:
            self.arrive(acc)
        elif self.phase == "partial":
            return self.write_partials(acc, tiles_m, tiles_n)

        mls = [iadd(tx, i * tm_thr) for i in range(TM)]
        nls = [iadd(ty, j * tn_thr) for j in range(TN)]
        return self.finish(b, m0, n0, acc, mls, nls, rv, tiles_m, tiles_n)

    def finish(self, b, m0, n0, acc, mls, nls, rv, tiles_m, tiles_n):
        """The epilogue (per swizzle placement) and the kernel: ``acc[i][j]`` holds the
        tile element (mls[i], nls[j]) (local rows and columns of the block tile)."""
        gm, s = self.gemm, self.s
        BM, BN, TM, TN = self.BM, self.BN, len(mls), len(nls)
        ms = [self.let(f"m{i}", iadd(m0, ml)) for i, ml in enumerate(mls)]
        ns = [self.let(f"n{j}", iadd(n0, nl)) for j, nl in enumerate(nls)]
        sv = gm.swizzle_width(BM, BN)
        swz = s["swizzle"]
        if swz == "none":
            self.epilogue_registers(b, ms, ns, acc, store=True)
        elif swz == "after_fusion":
            results = self.epilogue_registers(b, ms, ns, acc, store=False)
            for oi, o in enumerate(self.d.outputs):
                if oi:
                    self.body.append(program.Barrier())
                self.write_ctile(mls, nls, [[results.get((o, i, j)) for j in range(TN)]
                                            for i in range(TM)], sv)
                self.body.append(program.Barrier())
                self.read_ctile_and_store(b, m0, n0, sv, lambda regs, idxs, o=o: {o: regs},
                                          [o])
        else:
            self.write_ctile(mls, nls, acc, sv)
            self.body.append(program.Barrier())
            self.read_ctile_and_store(b, m0, n0, sv, self.epilogue_vector, self.d.outputs)

        lds_size = lds_elems(gm, s)
        if self.phase == "reduce":  # no staging, no in-workgroup K partials: the C tile only
            lds_size = 0 if swz == "none" else (BM * (BN + sv) if gm.vec_dim == "n" else
                                                BN * (BM + sv))
        extras = {}
        out_t = self.g.op(self.d.outputs[0]).type
        for e in extra_inputs(self.g, self.d):
            et = self.g.op(e).type
            extras[e] = {"layout_matches_output": et.shape == out_t.shape and
                         et.strides == out_t.strides,
                         "strides": et.strides, "output_strides": out_t.strides}
        meta = {"dispatch": self.d.name, "root": self.d.root, "kind": "contraction",
                "schedule": dict(s), "gemm": {"batch": gm.batch, "M": gm.M, "N": gm.N,
                                              "K": gm.K},
                "threads": self.threads, "swizzle_width": sv, "lds_read_width": rv,
                "mma": self.mma,
                "mfma_shape": self.shape if self.mma == "mfma" else None,
                "operand_inner": {"A": gm.A.inner, "B": gm.B.inner},
                "extra_inputs": extras,
                "epilogue_loads": list(self.em.loads)}
        if self.phase == "reduce":
            meta["split_k_phase"] = "reduce"
            # the guards the workgroup size decides (one column of 64-wide tiles over
            # N = 16: ``ty + 16 < 16`` false, ``ty < 16`` true) go, and with them the
            # partials of the columns past N: hipcc would keep both (it does not know
            # the work-item id is below 256) and hold every partial live across the
            # guarded epilogue (78-80 VGPRs for YOLO's 1x1 conv, 195 for Swin's fc2)
            self.body = list(without_decided_code(program.Kernel(
                "reduce", (), 1, self.threads, tuple(self.body))))
            return program.Kernel(sanitize(f"{self.d.name}_gemm_reduce"),
                            self.used(buffers(self.g, self.d), self.workspace("in")),
                            grid=gm.batch * tiles_m * tiles_n, block=self.threads,
                            body=tuple(self.body),
                            lds=(program.LdsArray("lds", "f32", (lds_size,)),) if lds_size else (),
                            meta=meta)
        if self.byte_tiles:  # i8 operand tiles, and the KW partial sums apart in i32
            lds = (program.LdsArray("lds", "i8", ((BM + BN) * self.row_len,)),)
            if self.KW > 1:
                lds += (program.LdsArray(self.acc_lds, "i32", (self.KW * BM * BN,)),)
        else:
            lds = (program.LdsArray("lds", self.dt, (lds_size,)),)
        params = buffers(self.g, self.d)
        if self.last_wg:  # the tail runs only in the workgroup that arrived last
            head, tail = self.body[:self.tail_from], self.body[self.tail_from:]
            # the tail says what it computes, as the reduce does (below): the guards
            # the workgroup size decides go (clang gives the work-item id [0, 1024), so
            # hipcc keeps ``ty + 16 < 32`` and sinks the sums into those blocks, every
            # partial live to them: Swin's fc2, 8 splits, 100-108 VGPRs, 78 without),
            # and so do the sums of the rows and columns past M and N with their partial
            # loads (``_dead_in_arm``). Without the first, the row guards and the loads
            # also stop clang 15's AMDGPU backend on ViT's o_proj (M = 17)
            cus = self.gemm.arch.num_cus if self.gemm.arch is not None else None
            if self.sk is None:
                share = tail_share(self.S, self.S * gm.batch * tiles_m * tiles_n, cus)
            else:  # per segment that runs: the tiles over the segments
                sk = self.sk
                share = tail_share(sk.G * sk.touched / sk.tiles, sk.G * sk.touched, cus)
            arm = program.If(self.tail_cond, tuple(tail), then_share=share)
            pruned = without_decided_code(program.Kernel(
                "tail", (), 1, self.threads, tuple(head) + (arm,)))
            self.body = head + [_dead_in_arm(pruned[-1])]
            lds += (program.LdsArray("lds_arrived", "i32", (1,)),)
            params += (self.workspace("inout"), self.arrivals())
            meta["split_k_phase"] = "last_wg"
            if self.sk is not None:
                # the segment's LDS reads (the C tile, the arrival) before the next
                # segment stages its operands and counts its own arrival
                self.body.append(program.Barrier())
                self.close_segment()
                meta["stream_k"] = self.sk.W
        splits = self.S if self.last_wg else 1   # last_wg: the partial kernel's grid
        grid = self.sk.G if self.sk is not None else splits * gm.batch * tiles_m * tiles_n
        return program.Kernel(sanitize(f"{self.d.name}_gemm"), params,
                        grid=grid, block=self.threads,
                        body=tuple(self.body), lds=lds, meta=meta)

    def build_mfma(self) -> program.Kernel:
        """mma=mfma: wave w of K group kg owns the TM x TN block (w % (BM/TM), w // (BM/TM))
        and accumulates it with one MFMA per K step in the MFMA accumulator layout.

        The K slice of a wave group (BK/KW elements) is split among the MFMA's k slots:
        lane l (slot l // TM) supplies, at step q, A and B at k = slot * steps + q, so each
        lane reads a run of consecutive K from the K-innermost LDS tiles (a vector read
        per ``mfma_read_width``); every k is summed exactly once.
        """
        s = self.s
        BM, BK, TM, TN, KW = self.BM, self.BK, self.TM, self.TN, self.KW
        shape = self.shape
        _, _, ks, nacc, _ = program.MFMA_SHAPES[shape]
        kpack = program.MFMA_PACK[shape][0]
        va, vb = int(s["vec_a"]), int(s["vec_b"])
        # int8 operands are byte tiles (``stages_bytes``): a 4-wide read is one
        # ds_read_b32 holding a 32x32x8i8 / 16x16x16i8 pack (half an 8-byte one)
        rv = mfma_read_width(s)
        lanes_m = s.get("mfma_lanes", "n") == "m"
        bkw = BK // KW
        ks //= kpack   # k slots: lanes TM apart supply different K runs
        steps = bkw // ks
        t = program.thread_id()
        b, m0, n0, tiles_m, tiles_n = self.tile_origin()
        waves_m = BM // TM
        wave = program.wave_id()
        if KW > 1:
            kg = self.let("kg", idiv(t, self.group))   # K group: wave-uniform
            tig = self.let("tig", imod(t, self.group))
            wg = imod(wave, self.group // program.MFMA_WAVE)
        else:
            kg, tig, wg = program.i32(0), t, wave
        self.kg, self.tig = kg, tig
        wm = self.let("wm", imul(imod(wg, waves_m), TM))   # wave block origin in the tile
        wn = self.let("wn", imul(idiv(wg, waves_m), TN))
        lane = program.lane()
        acc_regs = tuple(self.let(f"acc{r}", self.zero()) for r in range(nacc))
        a_base, b_base = 0, BM * self.row_len
        # LDS addresses of this lane's run: row (m or n) = block origin + lane % TM,
        # k = kg * bkw + (lane // TM) * steps
        kofs = iadd(imul(kg, bkw), imul(idiv(lane, TM), steps)) if KW > 1 else \
            imul(idiv(lane, TM), steps)
        if self.phase != "reduce":
            ra = self.let("ra", iadd(a_base, iadd(imul(iadd(wm, imod(lane, TM)),
                                                       self.row_len), kofs)))
            rb = self.let("rb", iadd(b_base, iadd(imul(iadd(wn, imod(lane, TN)),
                                                       self.row_len), kofs)))
            stage_tile = self.stage_first_tile(va, vb, a_base, b_base, m0, n0, b)

        hoist = mfma_reads_hoisted(s) and rv == mfma_read_width(s)

        def compute():
            out = []
            reads = []   # hoist: every LDS read of the K slice before the first MFMA
            xs, ys = [], []   # a packed shape's items, kpack consecutive K of the lane's run
            for q0 in range(0, steps, rv):
                av = tuple(self.var("fa", self.dt) for _ in range(rv))
                bv = tuple(self.var("fb", self.dt) for _ in range(rv))
                (reads if hoist else out).append(
                    program.LdsLoad(av, "lds", ra if q0 == 0 else iadd(ra, q0)))
                (reads if hoist else out).append(
                    program.LdsLoad(bv, "lds", rb if q0 == 0 else iadd(rb, q0)))
                for e in range(rv):
                    # lanes along M: the block computed is C^T = B^T A^T
                    x, y = (bv[e], av[e]) if lanes_m else (av[e], bv[e])
                    xs.append(x)
                    ys.append(y)
                    if len(xs) == kpack:
                        out.append(program.Mfma(acc_regs, xs[0] if kpack == 1 else tuple(xs),
                                                ys[0] if kpack == 1 else tuple(ys), shape))
                        xs, ys = [], []
            return reads + out

        if self.phase != "reduce":
            self.k_loop(stage_tile, compute)
        # from here on the epilogue sees an (nacc x 1) accumulator grid per lane (lanes
        # along N), or (1 x nacc) with lanes along M
        if lanes_m:
            acc = [list(acc_regs)]
            self.TM, self.TN = 1, nacc
        else:
            acc = [[r] for r in acc_regs]
            self.TM, self.TN = nacc, 1
        if self.phase == "reduce":
            self.sum_partials(acc)
        elif KW > 1:
            self.combine_split_k(acc)
        if self.phase == "partial" and self.last_wg:
            self.arrive(acc)
        elif self.phase == "partial":
            return self.write_partials(acc, tiles_m, tiles_n)
        if lanes_m:
            mls = [iadd(wm, imod(lane, TM))]
            nls = [iadd(wn, _acc_row(shape, lane, r)) for r in range(nacc)]
        else:
            mls = [iadd(wm, _acc_row(shape, lane, r)) for r in range(nacc)]
            nls = [iadd(wn, imod(lane, TN))]
        return self.finish(b, m0, n0, acc, mls, nls, rv, tiles_m, tiles_n)

    # ---------------------------------------------------------------- K pipeline
    def tile_origin(self):
        """(batch, first row, first column, tiles along M, along N) of this workgroup's
        output tile: workgroups walk M fastest, then N, then the batch."""
        gm, BM, BN = self.gemm, self.BM, self.BN
        tiles_m, tiles_n = ceil_div(gm.M, BM), ceil_div(gm.N, BN)
        bid = program.block_id()
        if self.phase == "reduce" and self.sk is None and gm.batch * tiles_m * tiles_n == 1:
            # a reduce over one tile runs as one workgroup: its id is 0. Said so, the
            # partials' offsets are the thread id plus constants (LLVM knows the thread
            # id non-negative, not a workgroup id): one offset VGPR and a scalar base per
            # load, where ``block_id * 4096 + ...`` took a 64-bit address pair each
            # (hipcc, Swin's fc2 reduce, gfx90a: 133 VGPRs, scheduled with every pair
            # computed ahead of the loads)
            bid = program.i32(0)
        if self.phase == "partial" and self.sk is not None:
            bid = self.open_segment()
        elif self.phase == "partial":
            # workgroup = (split, tile): the splits of one tile are tiles apart, so the
            # workgroups running at once cover all of K for a band of tiles
            ntiles = gm.batch * tiles_m * tiles_n
            ks = self.let("ks", idiv(bid, ntiles))
            bid = self.let("tile", imod(bid, ntiles))
            nk = ceil_div(gm.K, self.BK)
            if nk % self.S:
                # uneven split: split s runs K tiles s*nk//S .. (s+1)*nk//S - 1 (nk//S or
                # one more), a K loop with per-workgroup bounds as stream-K's
                self.kt0 = self.let("kt0", idiv(imul(ks, nk), self.S))
                self.kt1 = self.let("kt1", idiv(imul(iadd(ks, 1), nk), self.S))
                self.k_base = imul(self.kt0, self.BK)
            else:
                self.k_base = self.let("kbase", imul(ks, nk // self.S * self.BK))
            self.ks = ks
        self.tile = bid
        per_batch = tiles_m * tiles_n
        b = self.let("b", idiv(bid, per_batch)) if gm.batch > 1 else program.i32(0)
        rest = imod(bid, per_batch) if gm.batch > 1 else bid
        m0 = self.let("m0", imul(imod(rest, tiles_m), BM))
        # a split-K reduce over one column of tiles: the tile's column is 0. Written as
        # ``rest / tiles_m`` neither LLVM nor gpusim's estimate (neither knows the grid)
        # decides the epilogue's column guards (``n0 + ty + 16 < N``), and the reduce
        # loads and keeps live the partials of every column past N (3 of 4 in a 1x1
        # conv of 16 channels in a 64-wide tile); with the 0 the reduce drops them
        # (``without_decided_code`` below). The same in a last-arrival kernel, whose
        # tile is ``block_id % tiles``: LLVM folds ``(block_id % 4) / 4`` to 0 (the
        # remainder's range needs none of the workgroup id's), gpusim's interval
        # arithmetic did not, so the tail kept and summed the columns past N (UNet's
        # up-conv, N = 8 in a 64-wide tile, 12 splits: 192 partials estimated live, 213
        # VGPRs, hipcc 122)
        column_zero = tiles_n == 1 and (self.phase == "reduce" or self.last_wg)
        n0 = self.let("n0", program.i32(0) if column_zero else
                      imul(idiv(rest, tiles_m), BN))
        return b, m0, n0, tiles_m, tiles_n

    def open_segment(self):
        """Stream-K's partial kernel: this workgroup's share of the iterations, then the
        head of its segment loop (segment p: tile ``t0 + p``, K tiles ``kt0 .. kt1-1``);
        everything built after this, up to :meth:`close_segment`, is the segment's body
        (run when it has a K tile). Returns the segment's tile (all wave-uniform)."""
        sk = self.sk
        g = program.block_id()
        beg = self.let("it_begin", idiv(imul(g, sk.iters), sk.G))
        end = self.let("it_end", idiv(imul(iadd(g, 1), sk.iters), sk.G))
        t0 = self.let("tile0", idiv(beg, sk.nk))
        self.seg_var = self.var("seg")
        self.outer_body, self.body = self.body, []
        tile = self.let("tile", iadd(t0, self.seg_var))
        origin = self.let("it_tile", imul(tile, sk.nk))
        self.kt0 = self.let("kt0", program.maximum(program.as_expr(beg) - origin, 0))
        self.kt1 = self.let("kt1", program.minimum(program.as_expr(end) - origin, sk.nk))
        self.seg_head, self.body = self.body, []
        self.k_base = imul(self.kt0, self.BK)
        # workspace slot of this segment: how many workgroups before this one touch the tile
        self.ks = self.let("slot", program.as_expr(g) - sk.first_ir(origin))
        return tile

    def close_segment(self):
        """Wraps the segment body built since :meth:`open_segment` in the segment loop
        (rolled: hipcc keeps it a loop, as simulated)."""
        sk = self.sk
        seg = program.If(program.as_expr(self.kt1) > self.kt0, tuple(self.body),
                         then_share=sk.touched / sk.segments)
        self.body = self.outer_body + [program.For(
            self.seg_var, program.i32(0), program.i32(sk.segments), 1,
            tuple(self.seg_head) + (seg,), rolled=True)]

    def stage_first_tile(self, va, vb, a_base, b_base, m0, n0, b):
        """Stages K tile 0 (loads, LDS stores, barrier); returns ``stage_tile(kstart) ->
        (global loads, LDS stores)`` for the K loop."""
        gm, BM, BN, BK = self.gemm, self.BM, self.BN, self.BK

        def stage_tile(kstart):
            lo, st = [], []
            self.stage(gm.A, va, (BM, BK), a_base, m0, kstart, b, lo, st, "c")
            self.stage(gm.B, vb, (BK, BN), b_base, kstart, n0, b, lo, st, "r")
            return lo, st

        lo, st = stage_tile(self.k_base)
        self.body += lo + st + [program.Barrier()]
        return stage_tile

    def k_loop(self, stage_tile, compute):
        """The K loop with register prefetch (the classic single-LDS-buffer pipeline):
        the global loads of tile kt+1 are issued before the math on tile kt, so their
        latency hides behind it. Tiles 0 .. nk-2 prefetch their successor; the last tile
        is peeled (no prefetch, so every global index stays provably in bounds)."""
        BK = self.BK
        nk = ceil_div(self.gemm.K, BK) // self.S   # this split's K tiles
        kt = self.var("kt")
        k0 = self.var("k0")
        uneven = self.phase == "partial" and ceil_div(self.gemm.K, BK) % self.S
        if self.sk is not None and self.sk.nk == 1:
            # every segment is the one K tile already staged: no K loop. (Emitted, its
            # body would stage K tile 1, past the operand, in a loop that never runs.)
            self.body += compute() + [program.Barrier()]
            return
        if self.sk is not None or uneven:
            # stream-K's segment or an uneven split: K tiles kt0 .. kt1-1 (>= 1 of them)
            if int(self.s.get("prefetch", 1)) == 2:
                return self.k_loop_two_ahead_bounded(stage_tile, compute)
            kbody: list = [program.Assign(k0, imul(iadd(kt, 1), BK))]
            lo, st = stage_tile(k0)
            kbody += lo + compute() + [program.Barrier()] + st + [program.Barrier()]
            trips = max(self.mean_tiles() - 1, 0.0) \
                if self.sk is not None else ceil_div(self.gemm.K, BK) / self.S - 1
            self.body.append(program.For(kt, self.kt0, iadd(self.kt1, -1), 1, tuple(kbody),
                                         trips_hint=trips))
            self.body += compute() + [program.Barrier()]
            return
        if nk > 2 and int(self.s.get("prefetch", 1)) == 2:
            return self.k_loop_two_ahead(stage_tile, compute, nk)
        if nk > 1:
            k_next = imul(iadd(kt, 1), BK)
            if self.phase == "partial":
                k_next = iadd(self.k_base, k_next)
            kbody: list = [program.Assign(k0, k_next)]
            lo, st = stage_tile(k0)
            kbody += lo + compute() + [program.Barrier()] + st + [program.Barrier()]
            self.body.append(program.For(kt, program.i32(0), program.i32(nk - 1), 1, tuple(kbody)))
        self.body += compute() + [program.Barrier()]

    def k_loop_two_ahead(self, stage_tile, compute, nk):
        """The K loop with two tiles of register prefetch (``prefetch=2``): the global
        loads of tile t+2 are issued before the math on tile t, into the register set
        that tile t's LDS store freed one step earlier, so a load has two steps of math
        and barriers to arrive instead of one (a workgroup alone on its SIMDs waits out
        the whole global latency every K tile otherwise). Two register sets A and B
        alternate, so the loop body is two steps; an odd step and the last two tiles are
        peeled (every load stays inside K, as in :meth:`k_loop`)."""
        BK = self.BK
        base = self.k_base if self.phase == "partial" else 0
        ka, kb = self.var("k0a"), self.var("k0b")
        lo_a, st_a = stage_tile(ka)
        lo_b, st_b = stage_tile(kb)

        def k_of(tile):
            return iadd(base, tile) if self.phase == "partial" else tile

        def step(k_var, k_value, loads, stores):  # issue one set's loads, math, store the other
            return ([program.Assign(k_var, k_value)] + loads + compute() + [program.Barrier()]
                    + stores + [program.Barrier()])
        # tile 0 is in LDS (stage_first_tile); tile 1 goes to set B
        self.body += [program.Assign(kb, k_of(program.i32(BK)))] + lo_b
        pairs, odd = divmod(nk - 2, 2)
        if pairs:
            p = self.var("kp")
            first = k_of(imul(iadd(imul(p, 2), 2), BK))
            second = k_of(imul(iadd(imul(p, 2), 3), BK))
            body = step(ka, first, lo_a, st_b) + step(kb, second, lo_b, st_a)
            # rolled: hipcc unrolling it whole keeps every tile's loads live at once (a
            # 32x32 FMA tile reached 298 VGPRs and spilled, against 220 estimated)
            self.body.append(program.For(p, program.i32(0), program.i32(pairs), 1, tuple(body),
                                         rolled=True))
        last_stores = st_b
        if odd:  # tile nk-1 goes to set A
            self.body += step(ka, k_of(program.i32((nk - 1) * BK)), lo_a, st_b)
            last_stores = st_a
        self.body += compute() + [program.Barrier()] + last_stores + [program.Barrier()]
        self.body += compute() + [program.Barrier()]

    def mean_tiles(self) -> float:
        """The mean K tiles of one segment (stream-K) or split (uneven split-K): the trip
        counts' hint for analytic estimates (``program.For.trips_hint``)."""
        if self.sk is not None:
            return self.sk.iters / self.sk.G / self.sk.touched
        return ceil_div(self.gemm.K, self.BK) / self.S

    def k_loop_two_ahead_bounded(self, stage_tile, compute):
        """:meth:`k_loop_two_ahead` for a K range known only at run time: stream-K's
        segment or an uneven split, K tiles ``kt0 .. kt1-1`` (n >= 1 of them, bounds
        wave-uniform). The same two alternating register sets and rolled two-step loop,
        with the loop's trips ``(n - 2) // 2`` and the odd step chosen by n's parity at
        run time (a workgroup-uniform branch, so the barriers inside it are met by every
        wave); with n = 1 only the staged tile's math runs. Every load stays inside the
        range, as in :meth:`k_loop`."""
        BK = self.BK
        kt0, kt1 = program.as_expr(self.kt0), program.as_expr(self.kt1)
        ka, kb = self.var("k0a"), self.var("k0b")
        lo_a, st_a = stage_tile(ka)
        lo_b, st_b = stage_tile(kb)
        n = self.let("nkt", kt1 - kt0)

        def step(k_var, k_value, loads, stores):  # issue one set's loads, math, store the other
            return ([program.Assign(k_var, k_value)] + loads + compute() + [program.Barrier()]
                    + stores + [program.Barrier()])
        # tile kt0 is in LDS (stage_first_tile); tile kt0 + 1 goes to set B
        head = [program.Assign(kb, imul(iadd(kt0, 1), BK))] + lo_b
        p = self.var("kp")
        first = imul(iadd(kt0, iadd(imul(p, 2), 2)), BK)
        second = imul(iadd(kt0, iadd(imul(p, 2), 3)), BK)
        body = step(ka, first, lo_a, st_b) + step(kb, second, lo_b, st_a)
        head.append(program.For(p, program.i32(0), idiv(iadd(n, -2), 2), 1, tuple(body),
                                rolled=True,
                                # (n - 2) // 2 trips: a half trip less when n is odd
                                trips_hint=max((self.mean_tiles() - 2.5) / 2, 0.0)))
        # n odd: tile kt1 - 1 goes to set A while set B's tile is stored; then set A's
        odd = step(ka, imul(iadd(kt1, -1), BK), lo_a, st_b) + compute() + \
            [program.Barrier()] + st_a + [program.Barrier()]
        even = compute() + [program.Barrier()] + st_b + [program.Barrier()]
        head.append(program.If(imod(n, 2).eq(1), tuple(odd), tuple(even), then_share=0.5))
        self.body.append(program.If(program.as_expr(n) > 1, tuple(head)))
        self.body += compute() + [program.Barrier()]

    # ---------------------------------------------------------------- split-K combine
    def owner(self, i, j):
        """The K group that finishes accumulator (i, j) (reduce-scatter over groups)."""
        return (i * self.TN + j) % self.KW

    def owned(self, i, j, stmts):
        """``stmts`` run only by the owning group (a wave-uniform branch) when KW > 1."""
        if self.KW == 1:
            return list(stmts)
        return [program.If(program.as_expr(self.kg).eq(self.owner(i, j)), tuple(stmts))]

    def combine_split_k(self, acc):
        """Every group writes its partial accumulators (slot per group, consecutive lanes
        on consecutive dwords: conflict-free), barrier, then the owner of each accumulator
        sums the KW partials. The epilogue work is so spread over all the waves."""
        G, TT = self.group, self.TM * self.TN
        slot = self.let("slot", iadd(imul(self.kg, TT * G), self.tig))
        for i in range(self.TM):
            for j in range(self.TN):
                e = i * self.TN + j
                self.body.append(program.LdsStore(self.acc_lds, iadd(slot, e * G), (acc[i][j],)))
        self.body.append(program.Barrier())
        for i in range(self.TM):
            for j in range(self.TN):
                e = i * self.TN + j
                parts = [self.var("part", self.dt) for _ in range(self.KW)]
                stmts = [program.LdsLoad((parts[h],), self.acc_lds, iadd(self.tig, (h * TT + e) * G))
                         for h in range(self.KW)]
                total = parts[0]
                for h in range(1, self.KW):
                    total = total + parts[h]
                stmts.append(program.Assign(acc[i][j], total))
                self.body += self.owned(i, j, stmts)
        self.body.append(program.Barrier())

    # ---------------------------------------------------------------- split-K across workgroups
    def workspace(self, intent):
        """The workspace buffer: S x tiles x accumulators x threads of one K group."""
        gm = self.gemm
        ntiles = gm.batch * ceil_div(gm.M, self.BM) * ceil_div(gm.N, self.BN)
        if self.sk is not None:  # stream-K: [tile][slot]
            return program.Buffer(workspace_name(self.d), "f32",
                                  (ntiles, self.sk.slots, self.TM * self.TN, self.group), intent)
        return program.Buffer(workspace_name(self.d), "f32",
                        (self.S, ntiles, self.TM * self.TN, self.group), intent)

    def arrivals(self):
        """split_reduce=last_wg: one i32 arrival counter per output tile, zero between
        launches."""
        ws = self.workspace("in").shape
        ntiles = ws[0] if self.sk is not None else ws[1]   # stream-K: [tile][slot]
        return program.Buffer(arrivals_name(self.d), "i32", (ntiles,), "inout", zeroed=True)

    def arrive(self, acc):
        """split_reduce=last_wg, after the K loop: the partials to the workspace, a fence,
        the tile's arrival count (one thread's atomic add, its old value shared through
        LDS), and the start of the tail only the last arrival runs (wrapped in its ``If``
        by :meth:`finish`): acquire fence, counter reset, the S partials summed in split
        order. Everything built after this is the tail."""
        ws, cnt = self.workspace("inout"), self.arrivals()
        for i in range(self.TM):
            for j in range(self.TN):
                e = i * self.TN + j
                self.body += self.owned(i, j, [program.Store(
                    ws.name, self.partial_offset(self.ks, e), (acc[i][j],))])
        t0 = program.thread_id().eq(0)
        old, seen = self.var("arrived", "i32"), self.var("arrivals", "i32")
        self.body += [program.Fence(), program.Barrier(),
                      program.If(t0, (program.AtomicAdd(old, cnt.name, self.tile, program.i32(1)),
                                      program.LdsStore("lds_arrived", program.i32(0), (old,)))),
                      program.Barrier(),
                      program.LdsLoad((seen,), "lds_arrived", program.i32(0), broadcast=True)]
        arrivals = self.S if self.sk is None else self.segment_count()
        self.tail_cond = program.as_expr(seen).eq(iadd(arrivals, -1) if self.sk is not None
                                                  else arrivals - 1)
        self.tail_from = len(self.body)
        self.body += [program.Fence(),
                      program.If(t0, (program.Store(cnt.name, self.tile, (program.i32(0),)),))]
        self.sum_partials(acc)

    def partial_offset(self, split, e):
        """Workspace element of accumulator ``e`` of this thread for ``split`` (stream-K:
        for slot ``split`` of this tile)."""
        ntiles = self.workspace("in").shape[1]
        TT, G = self.TM * self.TN, self.group
        if self.sk is not None:
            row = iadd(imul(self.tile, self.sk.slots), split)
        elif not isinstance(split, int):
            row = iadd(imul(split, ntiles), self.tile)
        else:
            row = iadd(self.tile, split * ntiles)
        return iadd(imul(iadd(imul(row, TT), e), G), self.tig)

    def write_partials(self, acc, tiles_m, tiles_n) -> program.Kernel:
        """The partial kernel's end: every accumulator (its owner group's, KW > 1) to the
        workspace, consecutive threads on consecutive dwords."""
        ws = self.workspace("out")
        for i in range(self.TM):
            for j in range(self.TN):
                e = i * self.TN + j
                self.body += self.owned(i, j, [program.Store(ws.name, self.partial_offset(self.ks, e),
                                                       (acc[i][j],))])
        gm = self.gemm
        grid = self.S * gm.batch * tiles_m * tiles_n
        if self.sk is not None:
            self.close_segment()
            grid = self.sk.G
        meta = {"dispatch": self.d.name, "root": self.d.root, "kind": "contraction",
                "schedule": dict(self.s), "split_k_phase": "partial",
                "gemm": {"batch": gm.batch, "M": gm.M, "N": gm.N, "K": gm.K},
                "threads": self.threads, "mma": self.mma,
                "mfma_shape": self.shape if self.mma == "mfma" else None,
                "operand_inner": {"A": gm.A.inner, "B": gm.B.inner}}
        params = tuple(b for b in buffers(self.g, self.d) if b.intent == "in")
        if self.sk is not None:
            meta["stream_k"] = self.sk.W
        return program.Kernel(sanitize(f"{self.d.name}_gemm_partial"), self.used(params, ws),
                        grid=grid, block=self.threads,
                        body=tuple(self.body),
                        lds=(program.LdsArray("lds", "f32", (lds_elems(gm, self.s),)),), meta=meta)

    def sum_partials(self, acc):
        """The reduction kernel's start: each accumulator (by its owner group) is the sum
        of its S partials, every load issued before the first add."""
        ws = self.workspace("in")
        loads, adds = [], []
        nparts, count = self.S, None
        if self.sk is not None:  # stream-K: count(tile) slots of at most ``slots``
            nparts = self.sk.slots
            count = self.segment_count()
        for i in range(self.TM):
            for j in range(self.TN):
                e = i * self.TN + j
                parts = [self.var("part", "f32") for _ in range(nparts)]
                ld = [program.Load((parts[h],), ws.name, self.partial_offset(h, e))
                      for h in range(nparts)]
                if count is not None:  # slot h exists only when h < count (slot 0 always)
                    self.body += [program.Assign(x, program.f32(0.0)) for x in parts[1:]]
                    ld = ld[:1] + [program.If(program.as_expr(count) > h, (x,))
                                   for h, x in enumerate(ld) if h]
                total = parts[0]
                for h in range(1, nparts):
                    total = total + parts[h]
                loads += self.owned(i, j, ld)
                adds += self.owned(i, j, [program.Assign(acc[i][j], total)])
                if self.KW > 1:  # defined in every group for the validator
                    self.body += [program.Assign(x, program.f32(0.0)) for x in parts]
        self.body += loads + adds

    def segment_count(self):
        """Stream-K: how many workgroups touch this segment's tile (its slots), as IR,
        defined once per kernel where first asked for."""
        if getattr(self, "_nseg", None) is None:
            sk, t = self.sk, self.tile
            last = program.as_expr(sk.first_ir(iadd(imul(iadd(t, 1), sk.nk), -1)))
            self._nseg = self.let("nseg", iadd(last - sk.first_ir(imul(t, sk.nk)), 1))
        return self._nseg

    def used(self, params, extra):
        """``params`` the body reads or writes, then ``extra`` (the workspace)."""
        names = {x.buffer for x in program.walk(self.body) if isinstance(x, (program.Load, program.Store))}
        return tuple(b for b in params if b.name in names) + (extra,)

    # ---------------------------------------------------------------- epilogues
    def _guard(self, m, n, width=1):
        """(m, n) inside the GEMM; with a ``width``-vector along the output's contiguous
        dim, its last element inside (same test for aligned starts, provable bounds)."""
        g = None
        wm, wn = (width - 1, 0) if self.gemm.vec_dim == "m" else (0, width - 1)
        if self.gemm.M % self.BM:
            g = _and(g, m < self.gemm.M - wm)
        if self.gemm.N % self.BN:
            g = _and(g, n < self.gemm.N - wn)
        return g

    def epilogue_registers(self, b, ms, ns, acc, store):
        """The epilogue per accumulator, in the MFMA-like register layout. All extra-input
        loads are issued before any of them is used (as hipcc schedules them: one
        s_waitcnt for the batch, not one memory latency per accumulator)."""
        results = {}
        root = self.d.root
        loads_phase, compute_phase = [], []
        for i, m in enumerate(ms):
            for j, n in enumerate(ns):
                stmts: list = []
                idx = self.gemm.root_index(b, m, n)
                with self.em.scope(stmts):
                    self.em.bound[root] = lambda ix, r=acc[i][j]: r
                    for o in self.d.outputs:
                        oidx = self.gemm.out_index(o, idx)
                        val = self.em.value(o, oidx)
                        if store:
                            stmts.append(program.Store(o, self.em.offset(self.g.op(o).type, oidx),
                                                 (val,)))
                        else:
                            r = self.var(f"ep_{o}", "f32")
                            stmts.append(program.Assign(r, val))
                            results[(o, i, j)] = r
                pre, post = split_at_last_load(stmts)
                guard = self._guard(m, n)
                if pre:
                    # loads guarded (never out of bounds); their registers start at zero
                    # so the unguarded arithmetic below reads defined values
                    self.body += [program.Assign(r, program.f32(0.0) if r.dtype == "f32" else program.i32(0))
                                  for r in defined_registers(pre)]
                    block = pre if guard is None else [program.If(guard, tuple(pre))]
                    loads_phase += self.owned(i, j, block)
                if store and guard is not None:
                    post = [program.If(guard, tuple(post))]
                compute_phase += self.owned(i, j, post)
        if self.KW > 1 and not store:
            # each result exists only in its owner group; defined everywhere for the
            # validator (the LDS write of a result is under the same owner test)
            self.body += [program.Assign(r, program.f32(0.0)) for r in results.values()]
        self.body += loads_phase + compute_phase
        self.em.bound.pop(root, None)
        return results

    def ctile_index(self, ml, nl, sv):
        if self.gemm.vec_dim == "n":
            return iadd(imul(ml, self.BN + sv), nl)
        return iadd(imul(nl, self.BM + sv), ml)

    def write_ctile(self, mls, nls, vals, sv):
        """Each thread writes its (owned) values at their tile positions (mls[i], nls[j])."""
        for i in range(len(mls)):
            for j in range(len(nls)):
                if self.KW > 1 and vals[i][j] is None:
                    continue
                idx = self.ctile_index(mls[i], nls[j], sv)
                self.body += self.owned(i, j, [program.LdsStore("lds", idx, (vals[i][j],))])

    def read_ctile_and_store(self, b, m0, n0, sv, compute, outputs):
        """Read back SV consecutive elements per thread along the output's contiguous dim,
        consecutive lanes on consecutive chunks (every thread of the workgroup takes
        part); ``compute`` gives each output's values. As in the register epilogue, all
        loads of all steps are issued before the arithmetic that uses them."""
        BM, BN = self.BM, self.BN
        inner_len, outer_len = (BN, BM) if self.gemm.vec_dim == "n" else (BM, BN)
        per_row = inner_len // sv
        total = outer_len * per_row
        t = program.thread_id()
        loads_phase, compute_phase = [], []
        for step in range(ceil_div(total, self.threads)):
            q = iadd(t, step * self.threads)
            head: list = []
            outer, inner = idiv(q, per_row), imul(imod(q, per_row), sv)
            ml, nl = (outer, inner) if self.gemm.vec_dim == "n" else (inner, outer)
            m = self.let("sm", iadd(m0, ml), head)
            n = self.let("sn", iadd(n0, nl), head)
            regs = tuple(self.var("sw", "f32") for _ in range(sv))
            head.append(program.LdsLoad(regs, "lds", self.ctile_index(ml, nl, sv)))
            if self.gemm.vec_dim == "n":
                idxs = [self.gemm.root_index(b, m, iadd(n, e)) for e in range(sv)]
            else:
                idxs = [self.gemm.root_index(b, iadd(m, e), n) for e in range(sv)]
            body: list = []
            with self.em.scope(body):
                vals = compute(regs, idxs)
                for o in outputs:
                    off = self.em.offset(self.g.op(o).type, self.gemm.out_index(o, idxs[0]))
                    body.append(program.Store(o, off, tuple(vals[o])))
            pre, post = split_at_last_load(body)
            guard = self._guard(m, n, sv)
            if total % self.threads and step == total // self.threads:
                guard = _and(q < total, guard)
                head = [program.Assign(r, program.f32(0.0) if r.dtype == "f32" else program.i32(0))
                        for r in defined_registers(head) if isinstance(r, program.Var)] + \
                    [program.If(q < total, tuple(head))]
            if pre:
                self.body += [program.Assign(r, program.f32(0.0) if r.dtype == "f32" else program.i32(0))
                              for r in defined_registers(pre)]
                loads_phase += pre if guard is None else [program.If(guard, tuple(pre))]
            self.body += head
            compute_phase += post if guard is None else [program.If(guard, tuple(post))]
        self.body += loads_phase + compute_phase

    def epilogue_vector(self, regs, idxs):
        """before_fusion: the epilogue on SV swizzled accumulators, vector loads where the
        extra inputs' memory allows it."""
        root = self.d.root
        unit = [n == 1 for n in self.g.op(root).type.shape]
        zero = key(program.i32(0))

        def k(ix):  # a unit dim's index is 0 however a view wrote it
            return tuple(zero if u else key(e) for e, u in zip(ix, unit))
        out = {}
        if self.gemm.reindexed:
            # through a split/merged reshape the index the emitter walks back to the root
            # is another expression of the same element (h * D + d for n // D, n % D):
            # each accumulator is bound alone, its epilogue inputs loaded per element
            for o in self.d.outputs:
                out[o] = []
            for ix, r in zip(idxs, regs):
                self.em.bound[root] = lambda _ix, r=r: r
                for o in self.d.outputs:
                    out[o].append(self.em.value(o, self.gemm.out_index(o, ix)))
            self.em.bound.pop(root, None)
            return out
        regmap = {k(ix): r for ix, r in zip(idxs, regs)}
        self.em.bound[root] = lambda ix: regmap[k(ix)]
        for o in self.d.outputs:
            self.em.analyse_access(o, len(regs), stop_at=(root,))
            oidxs = [self.gemm.out_index(o, ix) for ix in idxs]
            out[o] = self.em.values(o, oidxs, len(regs)) if len(regs) > 1 else \
                [self.em.value(o, oidxs[0])]
        self.em.bound.pop(root, None)
        return out


def _dead_in_arm(arm: program.If) -> program.If:
    """The last statement of a kernel, an ``If``, without the loads and assignments of its
    arm whose registers nothing after them reads.

    The accumulators of a last-arrival tail are registers of the whole kernel (the
    partial stores read them), so the name-based pruning of ``without_decided_code``
    keeps every sum the tail assigns them, and every partial load under it, also for
    rows past M (Whisper's cross-attention fc2, M = 8: 12 of 16 sums dead). LLVM's SSA
    form drops them (hipcc 85-88 VGPRs; the estimate counted all 256 partials: 265);
    nothing follows the arm, so a value no later statement of the arm reads is dead."""
    from gpusim.analysis import expr_vars, stmt_defs, stmt_exprs
    live: set = set()
    kept = []
    for s in reversed(arm.then):
        defs = {v.name for v in stmt_defs(s)}
        if isinstance(s, (program.Assign, program.Load)) and defs and not defs & live:
            continue
        for x in program.walk([s]):
            for e in stmt_exprs(x):
                expr_vars(e, live)
        kept.append(s)
    return dataclasses.replace(arm, then=tuple(reversed(kept)))
