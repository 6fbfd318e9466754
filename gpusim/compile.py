"""Compiles a kernel tree into the flat arrays the engine interprets (structure of arrays).

Instruction selection, which also decides the instruction counts:

- every operator node of an expression is one instruction; constants, ids and scalar
  parameters are free (inline constants / preloaded registers);
- an i32 operator whose operands are wave-uniform (``analysis.Uniformity``) is a SALU
  instruction, anything else (all f32 math, comparisons of per-lane values) is VALU; a
  transcendental (exp, log, sqrt, rsqrt, tanh, erf, recip, sigmoid, pow) occupies the
  SIMD ``transcendental_rate_divisor`` times longer;
- each statement evaluates its own expressions (no common-subexpression elimination or
  loop-invariant hoisting across statements: the counts are those of -O0-like code);
- global Load/Store: one VMEM instruction; LdsLoad/LdsStore: one LDS instruction;
  AtomicAdd: one VMEM instruction (global_atomic_add with return); Fence: one SALU
  instruction (the s_waitcnt of __threadfence; the wave waits for its global accesses);
  Shuffle: one LDS instruction (ds_bpermute); Mfma: one MFMA instruction (matrix core,
  passes x 4 cycles from ``Arch.mfma_passes``; its operands evaluated first); WaveReduce: log2(wave) rounds of one
  ds_bpermute plus one VALU op (the butterfly the HIP backend prints);
- control flow: a uniform If costs a branch; a divergent If adds one SALU (EXEC save)
  and a branch, its else one SALU and a branch, its end one SALU (EXEC restore); a loop
  iteration costs a compare and a branch at the test plus an add and a branch at the
  step (SALU for uniform counters, VALU + EXEC SALU for per-lane ones); loops marked
  ``unroll`` cost no control instructions (the compiler unrolls them);
- a loop's stop expression is evaluated once before the loop when no register it reads
  is written in the loop body, otherwise at every test.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusim import engine
from gpusim.analysis import Uniformity, expr_vars, stmt_defs
from gpusim.program import (
    AtomicAdd, Assign, Barrier, BinOp, Fence, Cast, Const, Fma, For, If, LdsLoad, LdsStore, Load, MFMA_PACK, MFMA_SHAPES,
    Mfma, ScalarRef, Select, Shuffle, Special, Store, UnOp, Var, WaveReduce, walk, DTYPE_BYTES,
    IR_BINARY, IR_UNARY,
)

#: engine opcodes per IR operator and register type: views of program.IR_BINARY/IR_UNARY
FBIN = {k: o.engine for k, o in IR_BINARY.items() if o.kind in ("arith", "float")}
IBIN = {k: o.engine for k, o in IR_BINARY.items() if o.kind in ("arith", "int")}
CMP = {k: o.engine for k, o in IR_BINARY.items() if o.kind == "cmp"}
UN = {k: o.engine for k, o in IR_UNARY.items()}
TRANSCENDENTAL = tuple(k for k, o in {**IR_BINARY, **IR_UNARY}.items() if o.transcendental)
SPECIAL_REG = {"thread_id": 0, "lane": 1, "wave_id": 2, "block_id": 3, "wave_size": 4}
#: element kind of each memory dtype, the engine's ``store_elem`` rule (2, 4, 5: integer
#: memory, held in the int arrays; 4 and 5 one byte per element)
MEM_KIND = {"f32": 0, "f16": 1, "i32": 2, "bf16": 3, "i8": 4, "u8": 5}
REDUCE = {"sum": engine.R_SUM, "max": engine.R_MAX, "min": engine.R_MIN}


@dataclass
class Program:
    """A compiled kernel: the engine's arrays plus the maps back to statements."""
    code: np.ndarray          # int32 [n, NCOL]
    srcs: np.ndarray          # int32 [n, 6] unified register ids read (f: r, i: NF + r)
    nf: int
    ni: int
    depth: int
    fconst: dict              # f32 bit pattern (an int) -> f register
    iconst: dict              # value -> i register
    scalar_regs: dict         # name -> (isf, reg)
    inst_stmt: np.ndarray     # int64 [n]: statement index (walk order) of each instruction
    stmt_main: dict           # statement index -> its main instruction (memory op / root)
    statements: list          # walk order
    mfma_regs: np.ndarray = None  # int32 [n_mfma, 32]: accumulators, a and b items per Mfma


class _Compiler:
    def __init__(self, kernel, arch):
        self.k = kernel
        self.arch = arch
        self.uni = Uniformity(kernel.body)
        self.rows = []
        self.row_srcs = []
        self.row_stmt = []
        self.fregs, self.iregs = {}, {}
        self.nf, self.ni = 0, len(SPECIAL_REG)
        self.fconst, self.iconst = {}, {}
        self.scalar_regs = {}
        self.ftemp_pool, self.itemp_pool = [], []
        self.ftemp_used, self.itemp_used = 0, 0
        self.depth = 0
        self.cur_stmt = -1
        self.stmt_main = {}
        self.mfma_rows = []
        self.statements = list(walk(kernel.body))
        self.stmt_index = {id(s): i for i, s in enumerate(self.statements)}
        for p in kernel.scalars:
            if p.dtype == "f32":
                self.scalar_regs[p.name] = (1, self._new_f())
            else:
                self.scalar_regs[p.name] = (0, self._new_i())

    # registers -------------------------------------------------------------------------
    def _new_f(self):
        self.nf += 1
        return self.nf - 1

    def _new_i(self):
        self.ni += 1
        return self.ni - 1

    def var(self, v: Var):
        if v.dtype == "f32":
            if v.name not in self.fregs:
                self.fregs[v.name] = self._new_f()
            return 1, self.fregs[v.name]
        if v.name not in self.iregs:
            self.iregs[v.name] = self._new_i()
        return 0, self.iregs[v.name]

    def temp(self, isf):
        if isf:
            if self.ftemp_used == len(self.ftemp_pool):
                self.ftemp_pool.append(self._new_f())
            self.ftemp_used += 1
            return self.ftemp_pool[self.ftemp_used - 1]
        if self.itemp_used == len(self.itemp_pool):
            self.itemp_pool.append(self._new_i())
        self.itemp_used += 1
        return self.itemp_pool[self.itemp_used - 1]

    def uid(self, isf, r):
        return r if isf else -(r + 1)  # resolved to unified ids at the end

    # emission ------------------------------------------------------------------------
    def emit(self, op, dst=0, a=0, b=0, c=0, aux=0, width=0, cat=engine.CAT_NONE, jump=0,
             vec=(), mult=1, nvalu=0, nsalu=0, nbranch=0, isf=0, reads=()):
        row = [0] * engine.NCOL
        row[engine.K_OP], row[engine.K_DST], row[engine.K_A], row[engine.K_B], row[engine.K_C] = op, dst, a, b, c
        row[engine.K_AUX], row[engine.K_WIDTH], row[engine.K_CAT], row[engine.K_JUMP] = aux, width, cat, jump
        for i, r in enumerate(vec):
            row[engine.K_V0 + i] = r
        row[engine.K_MULT], row[engine.K_NVALU], row[engine.K_NSALU], row[engine.K_NBRANCH] = mult, nvalu, nsalu, nbranch
        row[engine.K_ISF] = isf
        self.rows.append(row)
        self.row_srcs.append(list(reads))
        self.row_stmt.append(self.cur_stmt)
        return len(self.rows) - 1

    def alu(self, op, isf_dst, dst, a, b=0, c=0, aux=0, uniform=False, mult=1, reads=()):
        if uniform and not isf_dst:
            return self.emit(op, dst, a, b, c, aux, cat=engine.CAT_SALU, nsalu=1, reads=reads)
        return self.emit(op, dst, a, b, c, aux, cat=engine.CAT_VALU, nvalu=1, mult=mult, reads=reads)

    def expr(self, e, dst=None):
        """Evaluates ``e``; returns (isf, reg). Writes into ``dst`` (isf, reg) if given."""
        isf = 1 if e.dtype == "f32" else 0
        leaf = None
        if isinstance(e, Var):
            leaf = self.var(e)
        elif isinstance(e, Const):
            if isf:
                # keyed by the f32 bit pattern: 0.0 == -0.0 (and hash alike), so a value
                # key gave -0.0 the register of a +0.0 in the same kernel
                v = int(np.float32(e.value).view(np.uint32))
                if v not in self.fconst:
                    self.fconst[v] = self._new_f()
                leaf = (1, self.fconst[v])
            else:
                v = int(e.value)
                if v not in self.iconst:
                    self.iconst[v] = self._new_i()
                leaf = (0, self.iconst[v])
        elif isinstance(e, Special):
            leaf = (0, SPECIAL_REG[e.name])
        elif isinstance(e, ScalarRef):
            leaf = self.scalar_regs[e.name]
        if leaf is not None:
            if dst is None:
                return leaf
            op = engine.OP_FMOV if isf else engine.OP_IMOV
            self.alu(op, isf, dst[1], leaf[1], uniform=self.uni.is_uniform(e),
                     reads=[self.uid(*leaf)])
            return dst
        uniform = self.uni.is_uniform(e)
        if isinstance(e, BinOp):
            a = self.expr(e.a)
            b = self.expr(e.b)
            out = dst or (isf, self.temp(isf))
            reads = [self.uid(*a), self.uid(*b)]
            if e.op in CMP:
                if a[0] != b[0]:
                    raise TypeError(f"comparison of {e.a.dtype} with {e.b.dtype}")
                op = engine.OP_FCMP if a[0] else engine.OP_ICMP
                self.alu(op, 0, out[1], a[1], b[1], aux=CMP[e.op], uniform=uniform and not a[0],
                         reads=reads)
            elif isf:
                self.alu(engine.OP_FBIN, 1, out[1], a[1], b[1], aux=FBIN[e.op],
                         mult=self.arch.transcendental_rate_divisor if e.op in TRANSCENDENTAL else 1,
                         reads=reads)
            else:
                self.alu(engine.OP_IBIN, 0, out[1], a[1], b[1], aux=IBIN[e.op], uniform=uniform,
                         reads=reads)
            return out
        if isinstance(e, UnOp):
            a = self.expr(e.a)
            out = dst or (isf, self.temp(isf))
            if a[0]:
                if e.op == "not":
                    z = self.expr(Const(0.0, "f32"))
                    self.alu(engine.OP_FCMP, 0, out[1], a[1], z[1], aux=engine.C_EQ,
                             reads=[self.uid(*a), self.uid(*z)])
                else:
                    mult = self.arch.transcendental_rate_divisor if e.op in TRANSCENDENTAL else 1
                    self.alu(engine.OP_FUN, 1, out[1], a[1], aux=UN[e.op], mult=mult,
                             reads=[self.uid(*a)])
            else:
                self.alu(engine.OP_IUN, 0, out[1], a[1], aux=UN[e.op], uniform=uniform,
                         reads=[self.uid(*a)])
            return out
        if isinstance(e, Fma):
            a, b, c = self.expr(e.a), self.expr(e.b), self.expr(e.c)
            out = dst or (1, self.temp(1))
            self.alu(engine.OP_FFMA, 1, out[1], a[1], b[1], c[1],
                     reads=[self.uid(*a), self.uid(*b), self.uid(*c)])
            return out
        if isinstance(e, Select):
            cnd, a, b = self.expr(e.cond), self.expr(e.a), self.expr(e.b)
            out = dst or (isf, self.temp(isf))
            self.alu(engine.OP_FSEL if isf else engine.OP_ISEL, isf, out[1], cnd[1], a[1], b[1],
                     uniform=uniform, reads=[self.uid(*cnd), self.uid(*a), self.uid(*b)])
            return out
        if isinstance(e, Cast):
            a = self.expr(e.a)
            src_f = a[0]
            if src_f == isf:
                if dst is None:
                    return a
                self.alu(engine.OP_FMOV if isf else engine.OP_IMOV, isf, dst[1], a[1], uniform=uniform,
                         reads=[self.uid(*a)])
                return dst
            out = dst or (isf, self.temp(isf))
            self.alu(engine.OP_CVT_IF if isf else engine.OP_CVT_FI, isf, out[1], a[1],
                     reads=[self.uid(*a)])
            return out
        raise TypeError(f"cannot compile expression {type(e).__name__}")

    # statements ----------------------------------------------------------------------
    def body(self, stmts, depth):
        self.depth = max(self.depth, depth)
        for s in stmts:
            self.stmt(s, depth)

    def stmt(self, s, depth):
        """Compiles one statement and records the row of its main instruction."""
        self.cur_stmt = si = self.stmt_index[id(s)]
        self.ftemp_used = self.itemp_used = 0
        if isinstance(s, Assign):
            start = len(self.rows)
            self.expr(s.value, dst=self.var(s.dst))   # dst = itself emits nothing: -1
            self.stmt_main[si] = len(self.rows) - 1 if len(self.rows) > start else -1
        elif isinstance(s, (Load, Store, LdsLoad, LdsStore)):
            self.stmt_main[si] = self._memory(s)
        elif isinstance(s, Barrier):
            self.stmt_main[si] = self.emit(engine.OP_BARRIER, cat=engine.CAT_BARRIER)
        elif isinstance(s, Shuffle):
            self.stmt_main[si] = self._shuffle(s)
        elif isinstance(s, WaveReduce):
            self.stmt_main[si] = self._wave_reduce(s)
        elif isinstance(s, Mfma):
            self.stmt_main[si] = self._mfma(s)
        elif isinstance(s, AtomicAdd):
            idx = self.expr(s.index)
            val = self.expr(s.value)
            d = self.var(s.dst)
            aux = [p.name for p in self.k.buffers].index(s.buffer)
            self.stmt_main[si] = self.emit(engine.OP_ATOMIC, d[1], idx[1], val[1], 0, aux, 1,
                                           engine.CAT_VMEM,
                                           reads=[self.uid(*idx), self.uid(*val)])
        elif isinstance(s, Fence):
            self.stmt_main[si] = self.emit(engine.OP_FENCE, cat=engine.CAT_SALU, nsalu=1)
        elif isinstance(s, If):
            self._if(s, si, depth)
        elif isinstance(s, For):
            self._for(s, si, depth)
        else:
            raise TypeError(f"cannot compile statement {type(s).__name__}")

    def _memory(self, s) -> int:
        """A global or LDS load/store: one vector memory instruction."""
        idx = self.expr(s.index)
        glob = isinstance(s, (Load, Store))
        if glob:
            b = self.k.buffer(s.buffer)
            aux = [p.name for p in self.k.buffers].index(s.buffer)
            dtype = b.dtype
        else:
            arr = self.k.lds_array(s.array)
            aux = [a.name for a in self.k.lds].index(s.array)
            dtype = arr.dtype
        load = isinstance(s, (Load, LdsLoad))
        regs = [self.var(v) for v in s.dsts] if load else [self.expr(v) for v in s.values]
        width = len(regs)
        nbytes = width * DTYPE_BYTES[dtype]
        # LDS phase groups by bytes per lane. SIMPLIFICATION: 1- and 2-byte accesses
        # (ds_read_u8/u16, ds_write_b8/b16) are grouped as ds_read_b32 (two halves of 32
        # lanes), their conflicts counted on the dwords they touch (lanes on one dword
        # broadcast); no measurement of the sub-dword forms was found
        wc = 0 if nbytes <= 4 else (1 if nbytes <= 8 else 2)
        reads = [self.uid(*idx)] + ([] if load else [self.uid(*r) for r in regs])
        if glob:
            op = engine.OP_GLOAD if load else engine.OP_GSTORE
            pc = self.emit(op, 0, idx[1], 0, 0, aux, width, engine.CAT_VMEM, vec=[r[1] for r in regs],
                           reads=reads)
        else:
            op = engine.OP_LLOAD if load else engine.OP_LSTORE
            pc = self.emit(op, 0, idx[1], 0, wc, aux, width, engine.CAT_LDS, vec=[r[1] for r in regs],
                           reads=reads)
        return pc

    def _shuffle(self, s) -> int:
        v = self.expr(s.value)
        d = self.var(s.dst)
        mode = 0 if s.mode == "xor" else 1
        return self.emit(engine.OP_SHFL, d[1], v[1], int(s.offset), 0, mode,
                         cat=engine.CAT_LDS, isf=d[0], reads=[self.uid(*v)])

    def _wave_reduce(self, s) -> int:
        """The xor butterfly over the wave: one instruction counting its steps as VALU."""
        v = self.expr(s.value)
        d = self.var(s.dst)
        steps = max(1, (self.arch.wave_size - 1).bit_length())
        return self.emit(engine.OP_WRED, d[1], v[1], 0, 0, REDUCE[s.op],
                         cat=engine.CAT_LDS, isf=d[0], nvalu=steps, reads=[self.uid(*v)])

    def _mfma(self, s) -> int:
        """A matrix-core op; its registers go in the MFMA register table: a row of 16
        accumulators, then the ``kpack`` items of a (columns 16-23) and of b (24-31).
        K_WIDTH holds M (32 or 16), K_AUX kpack, K_C the row, K_ISF 1 for an f32
        accumulator (0: i32), K_A the operand kind (0 f32, 1 bf16, 2 int8)."""
        kpack, kind, acc_dt = MFMA_PACK[s.shape]
        a = [self.expr(x) for x in s.a_items]
        b = [self.expr(x) for x in s.b_items]
        accs = [self.var(v)[1] for v in s.acc]
        isf = 1 if acc_dt == "f32" else 0
        row = len(self.mfma_rows)
        self.mfma_rows.append(accs + [0] * (16 - len(accs))
                              + [x[1] for x in a] + [0] * (8 - kpack)
                              + [x[1] for x in b] + [0] * (8 - kpack))
        return self.emit(
            engine.OP_MFMA, 0, ("f32", "bf16", "i8").index(kind), 0, row,
            aux=kpack, width=MFMA_SHAPES[s.shape][0], cat=engine.CAT_MFMA,
            mult=self.arch.mfma_cycles(s.shape), isf=isf,
            reads=[self.uid(*x) for x in a + b] + [self.uid(isf, r) for r in accs])

    def _if(self, s, si, depth) -> None:
        """IF, the then-body, ELSE and the else-body when there is one, ENDIF; the jumps
        are patched once the bodies are laid out."""
        c = self.expr(s.cond)
        uniform = self.uni.is_uniform(s.cond)
        pc_if = self.emit(engine.OP_IF, a=c[1], cat=engine.CAT_BRANCH, nbranch=1,
                          nsalu=0 if uniform else 1, reads=[self.uid(*c)])
        self.stmt_main[si] = pc_if
        self.body(s.then, depth + 1)
        self.cur_stmt = si
        pc_else = None
        if s.orelse:
            pc_else = self.emit(engine.OP_ELSE, cat=engine.CAT_BRANCH, nbranch=1,
                                nsalu=0 if uniform else 1)
            self.body(s.orelse, depth + 1)
            self.cur_stmt = si
        pc_end = self.emit(engine.OP_ENDIF, cat=engine.CAT_NONE if uniform else engine.CAT_SALU,
                           nsalu=0 if uniform else 1)
        self.rows[pc_if][engine.K_JUMP] = pc_else if pc_else is not None else pc_end
        if pc_else is not None:
            self.rows[pc_else][engine.K_JUMP] = pc_end

    def _for(self, s, si, depth) -> None:
        """Counter start, the stop value (once before the loop when the body does not
        write what it reads), LOOP_TEST, the body, LOOP_STEP back to the test."""
        v = self.var(s.var)
        self.expr(s.start, dst=v)
        written = set()
        for x in walk(s.body):
            written.update(d.name for d in stmt_defs(x))
        written.add(s.var.name)
        invariant = not (expr_vars(s.stop) & written)
        uniform = self.uni.is_uniform(s.start) and self.uni.is_uniform(s.stop)
        stop_reg = self._new_i()
        if invariant:
            self.expr(s.stop, dst=(0, stop_reg))
        self.emit(engine.OP_LOOP_BEGIN)
        pc_test_start = len(self.rows)
        if not invariant:
            self.ftemp_used = self.itemp_used = 0
            self.expr(s.stop, dst=(0, stop_reg))
        if s.unroll:
            counts = dict(cat=engine.CAT_NONE)
            step_counts = dict(cat=engine.CAT_NONE)
        elif uniform:
            counts = dict(cat=engine.CAT_BRANCH, nsalu=1, nbranch=1)
            step_counts = dict(cat=engine.CAT_BRANCH, nsalu=1, nbranch=1)
        else:
            counts = dict(cat=engine.CAT_BRANCH, nvalu=1, nsalu=1, nbranch=1)
            step_counts = dict(cat=engine.CAT_BRANCH, nvalu=1, nbranch=1)
        pc_test = self.emit(engine.OP_LOOP_TEST, a=v[1], b=stop_reg,
                            reads=[self.uid(*v), self.uid(0, stop_reg)], **counts)
        self.stmt_main[si] = pc_test
        self.body(s.body, depth + 1)
        self.cur_stmt = si
        self.emit(engine.OP_LOOP_STEP, a=v[1], aux=int(s.step), jump=pc_test_start,
                  reads=[self.uid(*v)], **step_counts)
        self.rows[pc_test][engine.K_JUMP] = len(self.rows)


def compile_kernel(kernel, arch) -> Program:
    """Kernel tree -> ``Program`` (flat arrays for ``gpusim.engine.run``)."""
    c = _Compiler(kernel, arch)
    c.body(kernel.body, 1)
    c.cur_stmt = -1
    c.emit(engine.OP_END, cat=engine.CAT_SALU, nsalu=1)  # s_endpgm
    n = len(c.rows)
    code = np.array(c.rows, dtype=np.int32).reshape(n, engine.NCOL)
    nsrc = max(1, max(len(r) for r in c.row_srcs))
    srcs = np.full((n, nsrc), -1, dtype=np.int32)
    nf = max(c.nf, 1)
    for i, rs in enumerate(c.row_srcs):
        seen = []
        for r in rs:
            u = r if r >= 0 else nf + (-r - 1)
            if u not in seen:
                seen.append(u)
        srcs[i, :len(seen)] = seen
    return Program(code=code, srcs=srcs, nf=nf, ni=max(c.ni, 1), depth=c.depth + 1,
                   fconst=c.fconst, iconst=c.iconst, scalar_regs=c.scalar_regs,
                   inst_stmt=np.array(c.row_stmt, dtype=np.int64),
                   stmt_main=c.stmt_main, statements=c.statements,
                   mfma_regs=np.array(c.mfma_rows or [[0] * 32], dtype=np.int32).reshape(-1, 32))
