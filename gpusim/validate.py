"""Rejects kernels the modelled GPU cannot run, before any simulation.

Each check raises ``KernelError`` with a one-line message naming the problem and the fix:

- launch shape: grid and block > 0, block <= 1024 threads (HIP limit);
- LDS: the kernel's LDS bytes must fit the arch's per-workgroup limit (64 KiB, S1);
- names: buffers, LDS arrays and scalars that statements use must be declared;
- types: every register keeps one dtype; assignments, loads and stores match dtypes;
  loop counters are i32 with a positive step; vector widths are 1, 2 or 4 and the
  register count matches (and 3 for a global load of a 4-byte dtype: a dwordx3);
- undefined registers: a register read before any statement on every path defines it
  (an ``If`` defines what both of its arms define; a loop body's definitions count after
  the loop);
- misaligned vectors: a vector access's element index must be provably a multiple of
  its width (``Divisibility``), or hipcc could not issue one dwordx2/x4 (a dwordx3 load
  needs only dword alignment, which every 4-byte element has);
- provable out-of-bounds: the index interval (``Intervals``, refined by enclosing
  ``e < bound`` guards) lies outside the buffer and is attained (an affine index of
  independent ids and constant-bound loop counters, not under a guard), or lies wholly
  outside it; the body of a loop that provably runs no trip is dead code, not checked.
  Anything else is not a proof (interval analysis over-approximates), and the simulator
  still stops with a KernelError on any real out-of-bounds access;
- MFMA: only on an arch with matrix cores (CDNA: gfx90a, gfx942), a known single-block
  f32 shape with its number of distinct f32 accumulators, a block of whole waves, and
  wave-uniform control flow around it (every lane takes part);
- atomics: ``AtomicAdd`` on a declared i32 buffer the kernel writes, i32 operands; a
  ``broadcast`` LdsLoad needs a wave-uniform index;
- barriers under divergent control flow: an ``If``/``For`` whose condition varies across
  the lanes of a wave (thread_id, lane or per-lane registers) must not contain a Barrier.
"""
from __future__ import annotations

from gpusim.analysis import Divisibility, Intervals, Uniformity, stmt_exprs, INF
from gpusim.errors import KernelError
from gpusim.hw import DEFAULT_ARCH, get_arch
from gpusim.program import (
    DTYPE_BYTES, DTYPES, AtomicAdd, Assign, Barrier, Fence, BinOp, Buffer, Cast, Fma, For, If, LdsLoad, LdsStore, Load,
    MFMA_PACK, MFMA_SHAPES, Mfma, ScalarRef, Select, Shuffle, Store, UnOp, Var, WaveReduce, walk,
)

REDUCE_OPS = ("sum", "max", "min")
SHUFFLE_MODES = ("xor", "down")


def _reg_dtype(mem_dtype: str) -> str:
    return "i32" if mem_dtype in ("i32", "i8", "u8") else "f32"


def validate(kernel, arch=DEFAULT_ARCH, scalars: dict | None = None) -> None:
    """Raises ``KernelError`` for the first impossible thing in ``kernel``."""
    arch = get_arch(arch)
    _check_launch(kernel, arch)
    buffers = {b.name: b for b in kernel.buffers}
    lds = {a.name: a for a in kernel.lds}
    types = _RegisterTypes(kernel)
    for i, s in enumerate(walk(kernel.body)):
        _check_statement(kernel, arch, s, f"statement {i}, {type(s).__name__}", types,
                         buffers, lds)
    _check_defined(kernel)
    uni = Uniformity(kernel.body)
    for s in walk(kernel.body):
        if isinstance(s, LdsLoad) and s.broadcast and not uni.is_uniform(s.index):
            raise KernelError(f"{kernel.name}: a broadcast LdsLoad from {s.array!r} has an "
                              f"index that varies across lanes; every lane must read the "
                              f"same element")
    _check_barriers(kernel, uni)
    _check_mfma_uniform(kernel, uni)
    _check_alignment(kernel, arch, buffers, lds)
    _check_bounds(kernel, arch, buffers, lds, scalars)


def _check_launch(kernel, arch) -> None:
    """The launch shape and the declared memory against the arch's limits and dtypes."""
    if kernel.grid <= 0:
        raise KernelError(f"{kernel.name}: grid must be > 0 workgroups, got {kernel.grid}; launch at least one")
    if kernel.block <= 0:
        raise KernelError(f"{kernel.name}: block must be > 0 threads, got {kernel.block}")
    if kernel.block > arch.max_block_threads:
        raise KernelError(f"{kernel.name}: block of {kernel.block} threads exceeds the limit of "
                          f"{arch.max_block_threads}; use a smaller workgroup and a larger grid")
    if kernel.lds_bytes > arch.lds_bytes_per_workgroup:
        raise KernelError(f"{kernel.name}: LDS use {kernel.lds_bytes} B exceeds the {arch.name} limit of "
                          f"{arch.lds_bytes_per_workgroup} B per workgroup; shrink the tiles")
    for p in kernel.params:
        if isinstance(p, Buffer) and p.dtype not in DTYPES:
            raise KernelError(f"{kernel.name}: buffer {p.name!r} has unsupported dtype {p.dtype!r}; use "
                              f"{', '.join(DTYPES)}")
    for a in kernel.lds:
        if a.dtype not in DTYPES:
            raise KernelError(f"{kernel.name}: LDS array {a.name!r} has unsupported dtype {a.dtype!r}")


class _RegisterTypes:
    """One dtype per register name across the kernel, and well-typed expressions."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.dtypes: dict = {}
        self.scalar_decl = {p.name: p for p in kernel.scalars}

    def check_var(self, v: Var, where: str):
        old = self.dtypes.setdefault(v.name, v.dtype)
        if old != v.dtype:
            raise KernelError(f"{self.kernel.name}: register {v.name!r} is used as {old} and as {v.dtype} "
                              f"({where}); give each dtype its own register")

    def check_expr(self, e, where: str):
        name, scalar_decl = self.kernel.name, self.scalar_decl
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Var):
                self.check_var(x, where)
            elif isinstance(x, ScalarRef):
                if x.name not in scalar_decl:
                    raise KernelError(f"{name}: scalar {x.name!r} is read ({where}) but not a "
                                      f"parameter; add Scalar({x.name!r}) to params")
                if scalar_decl[x.name].dtype != x.dtype:
                    raise KernelError(f"{name}: scalar {x.name!r} is {scalar_decl[x.name].dtype} "
                                      f"but read as {x.dtype} ({where})")
            elif isinstance(x, BinOp):
                stack += [x.a, x.b]
            elif isinstance(x, (UnOp, Cast)):
                stack.append(x.a)
            elif isinstance(x, Fma):
                for y in (x.a, x.b, x.c):
                    if y.dtype != "f32":
                        raise KernelError(f"{name}: fma operands must be f32 ({where}); cast them")
                stack += [x.a, x.b, x.c]
            elif isinstance(x, Select):
                stack += [x.cond, x.a, x.b]


def _check_statement(kernel, arch, s, where: str, types: _RegisterTypes, buffers: dict,
                     lds: dict) -> None:
    """One statement: its expressions, its registers' dtypes and its own rules."""
    check_var = types.check_var
    for e in stmt_exprs(s):
        types.check_expr(e, where)
    if isinstance(s, Assign):
        check_var(s.dst, where)
        if s.dst.dtype != s.value.dtype:
            raise KernelError(f"{kernel.name}: {where} assigns a {s.value.dtype} value to {s.dst.dtype} "
                              f"register {s.dst.name!r}; wrap the value in cast()")
    elif isinstance(s, For):
        check_var(s.var, where)
        if s.var.dtype != "i32" or s.start.dtype != "i32" or s.stop.dtype != "i32":
            raise KernelError(f"{kernel.name}: loop {s.var.name!r} ({where}) needs an i32 counter and bounds")
        if int(s.step) <= 0:
            raise KernelError(f"{kernel.name}: loop {s.var.name!r} has step {s.step}; only positive steps are supported")
    elif isinstance(s, If):
        if s.cond.dtype != "i32":
            raise KernelError(f"{kernel.name}: {where} condition is {s.cond.dtype}; compare it to get an i32 truth value")
    elif isinstance(s, (Load, Store, LdsLoad, LdsStore)):
        _check_access(kernel, s, where, check_var, buffers, lds)
    elif isinstance(s, Shuffle):
        check_var(s.dst, where)
        if s.mode not in SHUFFLE_MODES:
            raise KernelError(f"{kernel.name}: {where} has shuffle mode {s.mode!r}; use 'xor' or 'down'")
        if not (0 <= int(s.offset) < arch.wave_size):
            raise KernelError(f"{kernel.name}: {where} shuffle offset {s.offset} is outside 0..{arch.wave_size - 1}")
        if s.dst.dtype != s.value.dtype:
            raise KernelError(f"{kernel.name}: {where} shuffles a {s.value.dtype} into {s.dst.dtype} "
                              f"register {s.dst.name!r}")
    elif isinstance(s, WaveReduce):
        check_var(s.dst, where)
        if s.op not in REDUCE_OPS:
            raise KernelError(f"{kernel.name}: {where} reduction {s.op!r} is not one of {REDUCE_OPS}")
        if s.dst.dtype != s.value.dtype:
            raise KernelError(f"{kernel.name}: {where} reduces a {s.value.dtype} into {s.dst.dtype} "
                              f"register {s.dst.name!r}")
    elif isinstance(s, Mfma):
        _check_mfma(kernel, arch, s, where, check_var)
    elif isinstance(s, AtomicAdd):
        check_var(s.dst, where)
        if s.buffer not in buffers:
            raise KernelError(f"{kernel.name}: {where} uses buffer {s.buffer!r}, which is not a "
                              f"parameter; declare it in params")
        b = buffers[s.buffer]
        if b.dtype != "i32" or b.intent == "in":
            raise KernelError(f"{kernel.name}: {where} adds atomically to {b.dtype} buffer "
                              f"{s.buffer!r} ({b.intent}); atomics need an i32 buffer the "
                              f"kernel writes (intent 'out' or 'inout')")
        if s.index.dtype != "i32" or s.value.dtype != "i32" or s.dst.dtype != "i32":
            raise KernelError(f"{kernel.name}: {where} needs an i32 index, value and "
                              f"destination register")
    elif not isinstance(s, (Barrier, Fence)):
        raise KernelError(f"{kernel.name}: {where} is not a statement the simulator knows")


def _check_access(kernel, s, where: str, check_var, buffers: dict, lds: dict) -> None:
    """A global or LDS load/store: a declared memory, a vector width of 1, 2 or 4, an i32
    index and registers of the memory's register dtype."""
    if isinstance(s, (Load, Store)):
        name, table, what = s.buffer, buffers, "buffer"
        missing = "which is not a parameter; declare it in params"
    else:
        name, table, what = s.array, lds, "LDS array"
        missing = "which is not declared; add it to Kernel.lds"
    if name not in table:
        raise KernelError(f"{kernel.name}: {where} uses {what} {name!r}, {missing}")
    mem = table[name]
    load = isinstance(s, (Load, LdsLoad))
    regs = s.dsts if load else s.values
    dword3 = len(regs) == 3 and isinstance(s, Load) and DTYPE_BYTES.get(mem.dtype) == 4
    if len(regs) not in (1, 2, 4) and not dword3:
        raise KernelError(f"{kernel.name}: vector width {len(regs)} ({where}) is not 1, 2 or 4 "
                          f"(3 only for a global load of 4-byte elements); split the access")
    if s.index.dtype != "i32":
        raise KernelError(f"{kernel.name}: {where} index is {s.index.dtype}; indices must be i32")
    for r in regs:
        if load:
            if not isinstance(r, Var):
                raise KernelError(f"{kernel.name}: {where} loads into {type(r).__name__}; destinations must be Var")
            check_var(r, where)
        if r.dtype != _reg_dtype(mem.dtype):
            raise KernelError(f"{kernel.name}: {where} moves {r.dtype} through {mem.dtype} {what} "
                              f"{name!r}; use {_reg_dtype(mem.dtype)} registers or cast()")
    # reading an "out" buffer is legal (read-modify-write); HIP allows it


def _check_defined(k):
    def reads(e, defined, where):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Var) and x.name not in defined:
                raise KernelError(f"{k.name}: register {x.name!r} is read ({where}) before it is "
                                  f"assigned on every path; initialise it first")
            if isinstance(x, BinOp):
                stack += [x.a, x.b]
            elif isinstance(x, (UnOp, Cast)):
                stack.append(x.a)
            elif isinstance(x, Fma):
                stack += [x.a, x.b, x.c]
            elif isinstance(x, Select):
                stack += [x.cond, x.a, x.b]

    def visit(body, defined: set) -> set:
        defined = set(defined)
        for s in body:
            where = type(s).__name__
            for e in stmt_exprs(s):
                reads(e, defined, where)
            if isinstance(s, For):
                inner = visit(s.body, defined | {s.var.name})
                defined |= inner
            elif isinstance(s, If):
                t = visit(s.then, defined)
                o = visit(s.orelse, defined)
                defined |= (t & o)
            elif isinstance(s, Assign):
                defined.add(s.dst.name)
            elif isinstance(s, (Load, LdsLoad)):
                defined.update(v.name for v in s.dsts)
            elif isinstance(s, (Shuffle, WaveReduce, AtomicAdd)):
                defined.add(s.dst.name)
            elif isinstance(s, Mfma):
                defined.update(v.name for v in s.acc)
        return defined

    visit(k.body, set())


def _check_mfma(k, arch, s, where, check_var):
    if s.shape not in MFMA_SHAPES:
        raise KernelError(f"{k.name}: {where} has MFMA shape {s.shape!r}; use one of "
                          f"{', '.join(MFMA_SHAPES)}")
    inst = MFMA_SHAPES[s.shape][4]
    if s.shape not in arch.mfma_passes:
        have = ", ".join(arch.mfma_passes) or "none (MFMA is CDNA only: gfx90a, gfx942); use FMA"
        raise KernelError(f"{k.name}: {where}: {arch.name} has no {inst}; its MFMA shapes: {have}")
    if k.block % arch.wave_size:
        raise KernelError(f"{k.name}: {where}: MFMA needs whole waves, but block {k.block} is not a "
                          f"multiple of {arch.wave_size}")
    nacc = MFMA_SHAPES[s.shape][3]
    kpack, kind, acc_dt = MFMA_PACK[s.shape]
    if len(s.acc) != nacc:
        raise KernelError(f"{k.name}: {where}: {inst} has {nacc} accumulator registers "
                          f"per lane, got {len(s.acc)}")
    for v in s.acc:
        if not isinstance(v, Var) or v.dtype != acc_dt:
            raise KernelError(f"{k.name}: {where}: {inst} accumulators must be {acc_dt} registers")
        check_var(v, where)
    if len({v.name for v in s.acc}) != nacc:
        raise KernelError(f"{k.name}: {where}: MFMA accumulators must be distinct registers")
    op_dt = "i32" if kind == "i8" else "f32"
    for name, items in (("a", s.a_items), ("b", s.b_items)):
        if len(items) != kpack:
            raise KernelError(f"{k.name}: {where}: {inst} takes {kpack} element(s) of {name} per "
                              f"lane, got {len(items)}")
        if any(x.dtype != op_dt for x in items):
            raise KernelError(f"{k.name}: {where}: {inst} operands must be {op_dt} "
                              f"({kind} values); cast them")


def _check_mfma_uniform(k, uni: Uniformity):
    def visit(body, divergent):
        for s in body:
            if isinstance(s, Mfma) and divergent:
                raise KernelError(f"{k.name}: an Mfma sits under control flow that varies across "
                                  f"lanes; every lane of the wave must execute it (guard loads, "
                                  f"not the MFMA)")
            if isinstance(s, If):
                d = divergent or not uni.is_uniform(s.cond)
                visit(s.then, d)
                visit(s.orelse, d)
            elif isinstance(s, For):
                visit(s.body, divergent or not (uni.is_uniform(s.start) and uni.is_uniform(s.stop)))
    visit(k.body, False)


def _contains_barrier(body) -> bool:
    return any(isinstance(s, Barrier) for s in walk(body))


def _check_barriers(k, uni: Uniformity):
    def visit(body):
        for s in body:
            if isinstance(s, If):
                if not uni.is_uniform(s.cond) and (_contains_barrier(s.then) or _contains_barrier(s.orelse)):
                    raise KernelError(f"{k.name}: a Barrier sits inside an If whose condition varies across "
                                      f"lanes; move the barrier out of the divergent branch")
                visit(s.then)
                visit(s.orelse)
            elif isinstance(s, For):
                if not (uni.is_uniform(s.start) and uni.is_uniform(s.stop)) and _contains_barrier(s.body):
                    raise KernelError(f"{k.name}: a Barrier sits inside loop {s.var.name!r} whose bounds vary "
                                      f"across lanes; make the trip count uniform")
                visit(s.body)
    visit(k.body)


def _check_alignment(k, arch, buffers, lds):
    div = Divisibility(k.body, arch.wave_size)
    for i, s in enumerate(walk(k.body)):
        if isinstance(s, (Load, Store, LdsLoad, LdsStore)):
            regs = s.dsts if isinstance(s, (Load, LdsLoad)) else s.values
            w = len(regs)
            if w in (1, 3):  # a dwordx3 load needs dword alignment only (program.py)
                continue
            m = div.multiple_of(s.index)
            if m % w != 0:
                name = s.buffer if isinstance(s, (Load, Store)) else s.array
                raise KernelError(f"{k.name}: statement {i} {type(s).__name__} of width {w} on {name!r}: "
                                  f"index is only provably a multiple of {m}; make it a multiple of {w} "
                                  f"or use width 1")


def _check_bounds(k, arch, buffers, lds, scalars):
    iv = Intervals(k, arch.wave_size, scalars)

    def visit(body, guards, provable):
        for s in body:
            if isinstance(s, If):
                iv.empty = False
                g, ok = iv.guards_of(s.cond, guards)
                if iv.empty:
                    ok = False  # contradictory guards (dead code for some unrolled copies)
                visit(s.then, g, provable and ok)
                visit(s.orelse, guards, False)  # else arm: its implied guards are not tracked
            elif isinstance(s, For):
                if not iv.never_runs(s):  # dead code cannot access anything
                    visit(s.body, guards, provable)
            elif isinstance(s, (Load, Store, LdsLoad, LdsStore)) and provable:
                regs = s.dsts if isinstance(s, (Load, LdsLoad)) else s.values
                if isinstance(s, (Load, Store)):
                    name, size, what = s.buffer, buffers[s.buffer].size, "buffer"
                else:
                    name, size, what = s.array, lds[s.array].size, "LDS array"
                iv.empty = False
                lo, hi = iv.interval(s.index, guards)
                if iv.empty or lo == -INF or hi == INF:
                    continue
                # interval analysis over-approximates, so a range past the end proves an
                # out-of-bounds access only when it is attained (affine index, no guard)
                # or when the whole range lies outside the array
                attained = not guards and iv.is_exact(s.index)
                outside = lo >= size or hi + len(regs) <= 0
                if (attained or outside) and (lo < 0 or hi + len(regs) > size):
                    raise KernelError(f"{k.name}: {type(s).__name__} on {what} {name!r} can reach elements "
                                      f"[{int(lo)}, {int(hi) + len(regs) - 1}] but it has {size}; "
                                      f"guard the access with an If or fix the index")
    visit(k.body, {}, True)
