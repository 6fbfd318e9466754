"""The simulator loop: one compute unit at a time, waves issuing instructions in time order.

This module is plain Python over flat numpy arrays. ``gpusim.engine_jit`` wraps every
function here with ``numba.njit(cache=True)``; importing this module directly gives the
pure-Python interpreter of exactly the same code, the reference the JIT path is tested
against (``simulate(..., jit=False)``).

Written for Numba (compile time and speed, ``python -m gpusim.bench``): the engine never
allocates (``new_state`` and ``gpusim.sim`` make every array); a constant handed to a helper
is written ``int(0)`` / ``bool(True)`` (or starts a counter that way), because Numba
compiles a helper once more for each literal argument; hot per-lane loops work on one
register row (``F[s, r]``) at a time.

The operators' formulas (``fun``, ``fbin`` ...) are written here although the graph's op
table (``compiler/ir/ops.py``) holds a numpy function for each: numba compiles these
functions, a jitted function cannot call through a table of Python callables, and gpusim
imports nothing from the compiler; ``tests/test_reference.py`` checks the two agree.

Program. ``gpusim.compile`` turns the kernel tree into ``code`` (one row per instruction:
opcode, registers, jump target, timing category, instruction counts) plus a scoreboard
table ``srcs`` (the registers each instruction reads). Each wave has an f32 and an i32
register file (``F``, ``I``: slot x register x lane) and an execution mask; structured
control flow keeps a stack of masks (If/else/loop), as the hardware's EXEC save/restore.

Functional semantics. f32 arithmetic is evaluated in float64 and rounded to f32 when it
is stored (exact for + - * / sqrt; transcendental functions are the C library's double
functions rounded to f32, so JIT and Python agree bit for bit). i32 arithmetic wraps to 32
bits; division and modulo truncate toward zero as in C. f16 memory rounds to nearest
even on store. WaveReduce is the xor butterfly the HIP backend prints, over all lanes.

Timing model (per compute unit; see ``gpusim.simulate`` for the whole-GPU combination):
- Waves live in slots; a workgroup's waves launch together when a workgroup slot frees
  (``workgroups_per_cu`` slots, from the occupancy calculation). Wave ``j`` of the CU
  sits on SIMD ``j % simds_per_cu``.
- The next instruction issued is the one of the wave that is ready earliest (ties: lowest
  slot). An instruction whose operands are still in flight (scoreboard, like s_waitcnt)
  moves its wave's ready time to when they arrive: a memory stall, attributed to the
  instruction that produced the late operand.
- Issue: on CDNA each SIMD gets an issue turn every 4 cycles (round-robin, S4); in a turn
  at most one instruction per category (VALU, VMEM, LDS, SALU, branch) issues per SIMD. A
  wave64 VALU op keeps its SIMD16 busy 4 cycles (S13), transcendentals 4x longer.
- Global memory: the lanes' byte ranges map to cache lines (L1 line size). The address
  unit (TA) coalesces only within a quad of 4 consecutive lanes: each quad sends one
  vL1D access per distinct line it touches (TCP_TOTAL_ACCESSES, the quantity behind
  rocprof's coalescing metric: 16 per fully coalesced wave64 instruction, up to 64 and
  more when every lane is on its own line, S6, S13), and the vL1D tag lookup takes one
  access per cycle (S7: one line per clock). So a VMEM instruction holds the L1 pipe for
  its TCP accesses, not for its wave-unique lines: strided lanes cost L1 time even when
  their lines are shared across quads. SIMPLIFICATION: misses to one line from several
  quads of the instruction merge ("hit-on-miss", S6): one L2 request per unique line.
  Each unique line is looked up in an LRU set-associative L1
  (per CU) and on a miss in the L2 (per XCD on gfx942). The L2 keeps 32-byte sectors: a
  load fetches from memory only the sectors of its L1 line the L2 lacks (64 B per miss on
  gfx90a, whose L1 lines are half an L2 line), at the memory level's latency (HBM, or the
  MALL when the kernel fits it, ``gpusim.sim``) and this CU's share of its achievable
  read bandwidth. Each L2 request holds this CU's share of the L2's achievable read (or,
  for stores, write) bandwidth. Lines still in flight are waited for. Loads return when
  their last line arrives; stores are write-through to L2 (no L1 allocate), write-back
  L2: each sector's 32 bytes are charged to memory write bandwidth when it first becomes
  dirty, so a partial-line store costs its sectors, not the line.
- LDS: per phase group, the maximum number of distinct dwords on one bank, minus one, is
  that group's conflict cycles (same-address lanes broadcast); an access is (groups +
  conflicts) cycles of bank work. The SIMDs reach the LDS in pairs (S4: SIMD ``s`` on pair
  ``s % (simds / 2)``, ASSUMPTION: which SIMDs pair is not published), one port per pair
  that moves ``lds_port_bytes_per_clk`` (64 B, S4) per cycle: an access holds its pair's port
  for its active lanes' addresses (4 B each) and data, one access at a time (S4 for stores:
  a 4 B store 8 cycles, a 16 B store 20; for reads CALIBRATED on nod-ai's MI300X conflict-
  free ds_read_b32 / b64, ``gpusim.fidelity``), so a wave64 ds_read_b32 / b64 / b128 holds
  it 8 / 12 / 20 cycles. A pair's accesses run in order; the two pairs' run at once and share
  the banks round-robin. SIMPLIFICATION (processor sharing): an access that finds the
  other pair's bank work pending takes as long again as its own work (at most that
  remainder) and pushes the other pair's later work back as much, but the other's access
  already in flight keeps its booked end. Data returns the LDS latency after the access.
  With one pair (RDNA3's CU of two SIMD32s) the CU's accesses simply queue.
- MFMA (CDNA matrix cores): each SIMD has one matrix core; an Mfma issues in its own
  category when that core is free, keeps it busy passes x 4 cycles (``Arch.mfma_passes``,
  S17) and its accumulators become readable when it finishes. The wave itself may issue
  independent instructions (VALU included) meanwhile, as MFMA/VALU co-execution allows;
  dependent MFMAs on the same accumulators therefore run back to back at full rate.
  Counted as ``mfma_insts`` (not in ``valu_insts``, as rocprof's instruction mix) with
  2*M*N*K FLOPs each.
- Atomics and fences (split-K's last-arrival reduction): an AtomicAdd executes at the
  L2 (``exec_atomic``: one L2 request per active lane, the old value back after the L2
  hit latency); a Fence (``__threadfence``) holds its wave until every global access it
  issued is complete (``Waves.VMD``: stores written to the L2, loads arrived), what
  ``s_waitcnt vmcnt(0)`` does; the L1 invalidation of its acquire side is not charged
  (the tail's reads miss the L1 anyway: the lines were written by other CUs).
- Barrier: a wave arrives once its own LDS accesses are done (HIP's ``__syncthreads``:
  ``s_waitcnt lgkmcnt(0)`` before ``s_barrier``) and waits until every live wave of its
  workgroup arrived.
"""
import math
from collections import namedtuple

import numpy as np

# ------------------------------------------------------------------------------ opcodes
OP_FBIN, OP_IBIN, OP_FCMP, OP_ICMP, OP_FUN, OP_IUN, OP_FFMA, OP_FSEL, OP_ISEL = range(9)
OP_CVT_IF, OP_CVT_FI, OP_FMOV, OP_IMOV = 9, 10, 11, 12
OP_GLOAD, OP_GSTORE, OP_LLOAD, OP_LSTORE, OP_BARRIER, OP_SHFL, OP_WRED = 13, 14, 15, 16, 17, 18, 19
OP_IF, OP_ELSE, OP_ENDIF, OP_LOOP_BEGIN, OP_LOOP_TEST, OP_LOOP_STEP, OP_END = 20, 21, 22, 23, 24, 25, 26
OP_MFMA = 27
OP_ATOMIC, OP_FENCE = 28, 29

# binary sub-ops (aux column)
B_ADD, B_SUB, B_MUL, B_DIV, B_MOD, B_MIN, B_MAX, B_POW = range(8)
B_SHL, B_SHR, B_AND, B_OR, B_XOR, B_FMOD = 8, 9, 10, 11, 12, 13
C_LT, C_LE, C_GT, C_GE, C_EQ, C_NE, C_LAND, C_LOR = range(8)
U_NEG, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_TANH, U_ERF, U_ABS, U_RECIP, U_SIGMOID, U_RELU, U_NOT, \
    U_RINT, U_RBF16, U_SIN, U_COS, U_FLOOR, U_CEIL = range(18)
R_SUM, R_MAX, R_MIN = range(3)

# code columns
K_OP, K_DST, K_A, K_B, K_C, K_AUX, K_WIDTH, K_CAT, K_JUMP = range(9)
K_V0 = 9  # K_V0..K_V0+3: vector registers of loads/stores
K_MULT, K_NVALU, K_NSALU, K_NBRANCH, K_ISF = 13, 14, 15, 16, 17
NCOL = 18

# timing categories
CAT_NONE, CAT_VALU, CAT_VMEM, CAT_LDS, CAT_SALU, CAT_BRANCH, CAT_BARRIER, CAT_MFMA = range(8)
NCAT = 8

# the launch's parameters, one typed record (see ``gpusim.sim._Launch``): arch constants
# (issue period, cache geometry, latencies in cycles, this CU's share of L2 and HBM
# bandwidth as cycles per line) and the launch's shape, trace capacity and probe
Params = namedtuple("Params", (
    "W block grid nsimd period valu nf ni depth nlf nli wgs wpw l1_line l2_line l1_sets "
    "l1_ways l2_sets l2_ways n_l2 lds_lat l1_lat l2_lat hbm_lat bar_cyc launch nbanks lds_port lds_addr "
    "trace_cap probe_pc probe_wg probe_wave l2_cyc l2w_cyc hbm_cyc hbmw_cyc l1_sh l2_sh"))

#: L2 lines are tracked in 32-byte sectors (the L2 -> memory request size, S7): a line's
#: ``Cache.dirty`` byte holds its dirty sectors in bits 0-3 and its valid sectors in bits
#: 4-7 (up to 4 sectors: 128-byte lines).
SECTOR = 32

# counters
(N_VALU, N_VMEM, N_LDS, N_SALU, N_BRANCH, N_GLD_REQ, N_GST_REQ, N_GLD_LINES, N_GST_LINES,
 N_TCP, N_QUADS, N_HBM_RD, N_HBM_WR, N_L2_HIT, N_L2_ACC, N_L1_HIT, N_L1_ACC, N_LDS_CONF,
 N_LDS_IDX, N_BARRIERS, N_GLD_BYTES, N_GST_BYTES, N_WAVES, N_STALL, N_MFMA, N_MFMA_FLOPS) = range(26)
NCNT = 26

# per-instruction records
I_EXEC, I_LINES, I_TCP, I_CONF, I_STALL, I_IDX = range(6)
NREC = 6

# trace kinds
T_VALU, T_VMEM, T_LDS, T_SALU, T_BARRIER, T_STALL, T_MFMA = range(7)

# wave status
S_EMPTY, S_RUN, S_BAR, S_DONE = 0, 1, 2, 3

#: an inactive lane in an LDS conflict or coalescing memo pattern (``exec_lds``, ``exec_vmem``)
NO_LANE = -(1 << 62)

# runtime errors
E_OK, E_OOB_GLOBAL, E_OOB_LDS, E_DIV0 = 0, 1, 2, 3


def wrap32(v):
    """Two's-complement wrap of an integer to 32 bits."""
    return ((v + 2147483648) & 4294967295) - 2147483648


def pdiv(x, d, sh):
    """``x // d``; a shift when ``d`` is a power of two (``sh`` = log2 d, else -1): a
    division by a value known only at run time costs tens of cycles, and the memory
    model divides per lane. Floor division and the arithmetic shift agree for every x."""
    if sh >= 0:
        return x >> sh
    return x // d


def pmod(x, d):
    """``x % d``; a mask when ``d`` is a power of two (equal for every x, as ``pdiv``)."""
    if d & (d - 1) == 0:
        return x & (d - 1)
    return x % d


def round_f16(x):
    """Rounds a float to the nearest f16 value (ties to even), returned as float64."""
    if x != x or x == 0.0:
        return x
    ax = abs(x)
    s = 1.0 if x > 0 else -1.0
    if ax >= 65520.0:
        return s * math.inf
    if ax < 6.103515625e-05:  # subnormal f16: quantum 2^-24
        q = 5.960464477539063e-08
    else:
        m, e = math.frexp(ax)
        q = math.ldexp(1.0, e - 11)
    return s * np.rint(ax / q) * q


def round_bf16(x):
    """Rounds a float to the nearest bfloat16 value (8 significant bits, f32's exponent
    range; ties to even; past the largest finite bf16, 0x7F7F0000, to inf), as float64.
    bf16 memory is held in the float array as these values (``store_elem``)."""
    if x != x or x == 0.0 or math.isinf(x):
        return x
    ax = abs(x)
    s = 1.0 if x > 0 else -1.0
    if ax < 1.1754943508222875e-38:  # subnormal: quantum 2^-133
        q = 9.183549615799121e-41
    else:
        m, e = math.frexp(ax)
        q = math.ldexp(1.0, e - 8)
    r = np.rint(ax / q) * q
    if r > 3.3895313892515355e38:
        return s * math.inf
    return s * r


def int_kind(kind):
    """An element kind held in the int memory arrays: 2 (i32), 4 (i8), 5 (u8)."""
    return kind == 2 or kind >= 4


def store_elem(dst_f, dst_i, pos, kind, F, I, s, reg, l):
    """One lane's register to memory in the buffer's element kind (0 f32, 1 f16, 2 int,
    3 bf16, 4 i8, 5 u8): the one rule both global and LDS stores follow, f16 and bf16
    rounded to nearest even, i8/u8 keeping the register's low byte (buffer_store_byte /
    ds_write_b8), read back sign- (i8) or zero-extended (u8): memory holds the value a
    load returns."""
    if kind == 2:
        dst_i[pos] = I[s, reg, l]
    elif kind == 4:
        dst_i[pos] = ((I[s, reg, l] + 128) & 255) - 128
    elif kind == 5:
        dst_i[pos] = I[s, reg, l] & 255
    elif kind == 1:
        dst_f[pos] = round_f16(np.float64(F[s, reg, l]))
    elif kind == 3:
        dst_f[pos] = round_bf16(np.float64(F[s, reg, l]))
    else:
        dst_f[pos] = F[s, reg, l]


def fbin(op, x, y):
    if op == B_ADD:
        return x + y
    if op == B_SUB:
        return x - y
    if op == B_MUL:
        return x * y
    if op == B_DIV:
        if y == 0.0:
            if x == 0.0 or x != x:
                return math.nan
            return math.inf if (x > 0) == (math.copysign(1.0, y) > 0) else -math.inf
        return x / y
    if op == B_MIN:  # fminf: the non-NaN operand
        if x != x:
            return y
        if y != y:
            return x
        return x if x < y else y
    if op == B_MAX:
        if x != x:
            return y
        if y != y:
            return x
        return x if x > y else y
    if op == B_POW:
        if x < 0.0 and y != math.floor(y):
            return math.nan
        if x == 0.0 and y < 0.0:
            return math.inf
        return math.pow(x, y)
    if op == B_MOD:
        if y == 0.0:
            return math.nan
        return x - y * math.trunc(x / y)  # fmod up to rounding of x / y
    if op == B_FMOD:  # C's fmod, exact (np.fmod: numba has no math.fmod); the cases
        # where Python's math.fmod raises, and numpy warns, are NaN here first
        if y == 0.0 or math.isinf(x) or x != x or y != y:
            return math.nan
        if math.isinf(y):
            return x
        return np.fmod(x, y)
    return math.nan


def ibin(op, x, y):
    """i32 operation on int64 operands; returns int64 (caller wraps)."""
    if op == B_ADD:
        return x + y
    if op == B_SUB:
        return x - y
    if op == B_MUL:
        return x * y
    if op == B_DIV:
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q
    if op == B_MOD:
        r = abs(x) % abs(y)
        return r if x >= 0 else -r
    if op == B_MIN:
        return x if x < y else y
    if op == B_MAX:
        return x if x > y else y
    if op == B_SHL:
        return x << (y & 31)
    if op == B_SHR:
        return x >> (y & 31)
    if op == B_AND:
        return x & y
    if op == B_OR:
        return x | y
    if op == B_XOR:
        return x ^ y
    return 0


def fcmp(op, x, y):
    if op == C_LT:
        return 1 if x < y else 0
    if op == C_LE:
        return 1 if x <= y else 0
    if op == C_GT:
        return 1 if x > y else 0
    if op == C_GE:
        return 1 if x >= y else 0
    if op == C_EQ:
        return 1 if x == y else 0
    if op == C_NE:
        return 1 if x != y else 0
    if op == C_LAND:
        return 1 if (x != 0 and y != 0) else 0
    return 1 if (x != 0 or y != 0) else 0


def fun(op, x):
    if op == U_NEG:
        return -x
    if op == U_ABS:
        return abs(x)
    if op == U_RELU:
        return x if x > 0.0 else 0.0
    if x != x:
        return x
    if op == U_EXP:
        if x > 709.0:
            return math.inf
        return math.exp(x)
    if op == U_LOG:
        if x < 0.0:
            return math.nan
        if x == 0.0:
            return -math.inf
        return math.log(x)
    if op == U_SQRT:
        if x < 0.0:
            return math.nan
        return math.sqrt(x)
    if op == U_RSQRT:
        if x < 0.0:
            return math.nan
        if x == 0.0:
            return math.inf
        return 1.0 / math.sqrt(x)
    if op == U_TANH:
        return math.tanh(x)
    if op == U_ERF:
        return math.erf(x)
    if op == U_RECIP:
        if x == 0.0:
            return math.copysign(math.inf, x)
        return 1.0 / x
    if op == U_SIGMOID:
        if -x > 709.0:
            return 0.0
        return 1.0 / (1.0 + math.exp(-x))
    if op == U_RINT:  # round half to even (C's rintf in the default rounding mode)
        return np.rint(x)
    if op == U_RBF16:  # an f32 register rounded to the bf16 value a bf16 op yields
        return round_bf16(x)
    if op == U_SIN:  # sin(+-inf) is NaN, as C's sinf (Python's math.sin raises there)
        if math.isinf(x):
            return math.nan
        return math.sin(x)
    if op == U_COS:
        if math.isinf(x):
            return math.nan
        return math.cos(x)
    if op == U_FLOOR:  # np.floor, not math.floor: a float (and +-inf) back, as C's floorf
        return np.floor(x)
    if op == U_CEIL:
        return np.ceil(x)
    return math.nan


def iun(op, x):
    if op == U_NEG:
        return -x
    if op == U_ABS:
        return abs(x)
    if op == U_RELU:
        return x if x > 0 else 0
    if op == U_NOT:
        return 1 if x == 0 else 0
    return 0


def cache_access(tag, lru, rdy, dirty, nsets, ways, line, clock, allocate):
    """LRU set-associative lookup in one cache instance (set x way arrays). Returns
    (hit, way); way < 0 when not allocated."""
    st = pmod(line, nsets)
    for w in range(ways):
        if tag[st, w] == line:
            lru[st, w] = clock
            return 1, w
    if not allocate:
        return 0, -1
    victim = 0
    best = lru[st, 0]
    for w in range(ways):
        if tag[st, w] < 0:
            victim = w
            break
        if lru[st, w] < best:
            best = lru[st, w]
            victim = w
    tag[st, victim] = line
    lru[st, victim] = clock
    rdy[st, victim] = 0.0
    dirty[st, victim] = 0
    return 0, victim


def unique_sorted(buf, n):
    """Sorts buf[:n] in place (insertion sort, fast when nearly sorted); returns #unique."""
    for i in range(1, n):
        v = buf[i]
        j = i - 1
        while j >= 0 and buf[j] > v:
            buf[j + 1] = buf[j]
            j -= 1
        buf[j + 1] = v
    if n == 0:
        return 0
    u = 1
    for i in range(1, n):
        if buf[i] != buf[u - 1]:
            buf[u] = buf[i]
            u += 1
    return u


def add_trace(trace, trace_n, cap, cu, simd, wave, t0, t1, kind):
    n = trace_n[0]
    if n < cap:
        trace[n, 0] = cu
        trace[n, 1] = simd
        trace[n, 2] = wave
        trace[n, 3] = t0
        trace[n, 4] = t1
        trace[n, 5] = kind
    trace_n[0] = n + 1


# ------------------------------------------------------------------------------ state records
# The engine's state travels between the jitted helpers as named tuples of arrays, so a
# helper names what it touches (``wv.READY``, ``cu.free[FR_L1]``) instead of taking thirty
# positional arrays. Numba compiles each helper once for these fixed types.
Waves = namedtuple("Waves", "F I EX MS SP PC READY STATUS SLOT_WG NACT RREADY RPROD KEY LDSD VMD")
Groups = namedtuple("Groups", "ID LIVE ARR BAR DONE IDX LDSF LDSI")
Cache = namedtuple("Cache", "tag lru rdy dirty")
CuState = namedtuple("CuState", "valu_free mfma_free cat_last free clock")
Scratch = namedtuple("Scratch", "lines lane_lo lane_hi qbuf dbuf bank_cnt fvals gvals ivals idx "
                                "lds_pat lds_conf vm_pat vm_rel vm_rec ftmp itmp")
Out = namedtuple("Out", "counters per_inst sess_cycles wg_done trace trace_n probe err")
Prog = namedtuple("Prog", "code srcs mfma_regs fconst_reg fconst_val iconst_reg iconst_val "
                          "buf_tab lds_tab group_of n_groups group_lanes")
Sessions = namedtuple("Sessions", "wgs off cu")

# CuState.free: the cycle each shared pipe of the CU is next free
# (FR_LDS: the LDS crossbar of shuffles and wave reductions; FR_PORT + k, FR_BANK + k: when
# SIMD pair k's LDS port, and the bank work booked through it, are next free, ``exec_lds``)
FR_L1, FR_L2, FR_HBM, FR_LDS, FR_PORT, FR_BANK = 0, 1, 2, 3, 4, 6
NFREE = 8


def new_state(p, n_inst=1):
    """The per-launch state records (waves, workgroup slots, CU pipes, scratch), zeroed.
    Allocated by the caller, outside the jitted code, so the engine never allocates.
    ``n_inst``: the program's instruction count (the LDS conflict and coalescing memos,
    ``exec_lds``, ``exec_vmem``)."""
    W = p.W
    nsimd = p.nsimd
    wgs = p.wgs
    nslots = wgs * p.wpw
    NF = p.nf
    NI = p.ni
    wv = Waves(np.zeros((nslots, NF, W), np.float32), np.zeros((nslots, NI, W), np.int32),
               np.zeros((nslots, W), np.uint8), np.zeros((nslots, p.depth + 1, W), np.uint8),
               np.zeros(nslots, np.int64), np.zeros(nslots, np.int64), np.zeros(nslots, np.float64),
               np.zeros(nslots, np.int64), np.zeros(nslots, np.int64), np.zeros(nslots, np.int64),
               np.zeros((nslots, NF + NI), np.float64), np.zeros((nslots, NF + NI), np.int64),
               np.full(nslots, math.inf), np.zeros(nslots, np.float64),
               np.zeros(nslots, np.float64))
    grp = Groups(np.zeros(wgs, np.int64), np.zeros(wgs, np.int64), np.zeros(wgs, np.int64),
                 np.zeros(wgs, np.float64), np.zeros(wgs, np.float64), np.zeros(wgs, np.int64),
                 np.zeros((wgs, max(p.nlf, 1)), np.float32), np.zeros((wgs, max(p.nli, 1)), np.int32))
    cu = CuState(np.zeros(nsimd, np.float64), np.zeros(nsimd, np.float64),
                 np.zeros((nsimd, NCAT), np.float64), np.zeros(NFREE, np.float64), np.zeros(1, np.int64))
    sc = Scratch(np.zeros(W * 2, np.int64), np.zeros(W, np.int64), np.zeros(W, np.int64),
                 np.zeros(8, np.int64), np.zeros(4 * W, np.int64), np.zeros(p.nbanks, np.int64),
                 np.zeros(8 * W, np.float64), np.zeros(8 * W, np.float64), np.zeros(W, np.int64),
                 np.zeros(W, np.int64), np.zeros((n_inst, W), np.int64),
                 np.full(n_inst, -1, np.int64), np.zeros((n_inst, 2 * W), np.int64),
                 np.zeros((n_inst, 2 * W), np.int64), np.full((n_inst, 3), -1, np.int64),
                 np.zeros(W, np.float32), np.zeros(W, np.int32))
    return wv, grp, cu, sc


def launch_wg(g, wg, t, p, prog, wv, grp, counters):
    """Starts workgroup ``wg`` in workgroup slot ``g`` at cycle ``t``."""
    W = p.W
    wpw = p.wpw
    block = p.block
    grp.ID[g] = wg
    grp.LIVE[g] = wpw
    grp.ARR[g] = 0
    grp.BAR[g] = 0.0
    grp.DONE[g] = t
    grp.LDSF[g, :] = 0.0
    grp.LDSI[g, :] = 0
    F = wv.F
    I = wv.I
    fconst_reg = prog.fconst_reg
    fconst_val = prog.fconst_val
    iconst_reg = prog.iconst_reg
    iconst_val = prog.iconst_val
    for j in range(wpw):
        s = g * wpw + j
        wv.LDSD[s] = t
        wv.VMD[s] = t
        F[s, :, :] = 0.0
        I[s, :, :] = 0
        for k in range(fconst_reg.shape[0]):
            for l in range(W):
                F[s, fconst_reg[k], l] = fconst_val[k]
        for k in range(iconst_reg.shape[0]):
            for l in range(W):
                I[s, iconst_reg[k], l] = iconst_val[k]
        for l in range(W):
            tid = j * W + l
            I[s, 0, l] = tid
            I[s, 1, l] = l
            I[s, 2, l] = j
            I[s, 3, l] = wg
            I[s, 4, l] = W
            wv.EX[s, l] = 1 if tid < block else 0
        wv.NACT[s] = min(W, max(0, block - j * W))
        wv.SP[s] = 0
        wv.PC[s] = 0
        wv.READY[s] = t + p.launch
        wv.STATUS[s] = S_RUN
        wv.SLOT_WG[s] = g
        wv.RREADY[s, :] = 0.0
        wv.RPROD[s, :] = -1
        wv.KEY[s] = wv.READY[s]
        counters[N_WAVES] += 1


# ------------------------------------------------------------------------------ issue and scheduling
def pick_wave(KEY, fast, s2, bt2):
    """The running wave that is ready earliest (ties: lowest slot): returns (s, s2, bt2),
    s < 0 when no wave runs. ``KEY`` is each slot's ready time while its wave runs, +inf
    otherwise (one load and one test per slot in the scan). ``fast`` is the last wave
    issued; while it is still ahead of the runner-up (s2 at bt2) nothing else changed,
    so the full scan is skipped."""
    if fast >= 0 and (KEY[fast] < bt2 or (KEY[fast] == bt2 and fast < s2)):
        return fast, s2, bt2
    s = -1
    bt = math.inf
    s2 = -1
    bt2 = math.inf
    for k in range(KEY.shape[0]):
        v = KEY[k]
        if v < bt2:
            if v < bt:
                s2 = s
                bt2 = bt
                bt = v
                s = k
            else:
                bt2 = v
                s2 = k
    return s, s2, bt2


def operands_ready(srcs, pc, RREADY, RPROD, s, t0):
    """Scoreboard (s_waitcnt at first use): when the operands of ``pc`` have arrived and
    the instruction that produced the latest one (-1 when none is late)."""
    opr = t0
    prod = -1
    for k in range(srcs.shape[1]):
        r = srcs[pc, k]
        if r < 0:
            break
        if RREADY[s, r] > opr:
            opr = RREADY[s, r]
            prod = RPROD[s, r]
    return opr, prod


def issue_time(t0, simd, period, cat, cat_last, valu_free):
    """Earliest cycle >= t0 on this SIMD's issue turn with the category port free."""
    t = math.ceil(t0)
    if cat == CAT_VALU and valu_free[simd] > t:
        t = math.ceil(valu_free[simd])
    if period > 1:
        t += pmod(simd - t, period)
    while cat_last[simd, cat] >= t:
        t += period
    return t


def issue(cat, t0, simd, period, cu):
    """The issue cycle of an instruction of category ``cat`` whose wave is ready at ``t0``;
    books the category's issue slot. MFMA also waits for this SIMD's matrix core."""
    if cat == CAT_NONE or cat == CAT_BARRIER:
        return t0
    if cat == CAT_MFMA:
        t = issue_time(max(t0, cu.mfma_free[simd]), simd, period, cat, cu.cat_last, cu.valu_free)
    else:
        t = issue_time(t0, simd, period, cat, cu.cat_last, cu.valu_free)
    cu.cat_last[simd, cat] = t
    return t


# ------------------------------------------------------------------------------ vector ALU
def exec_alu(op, aux, a, b, c, d, s, full, W, wv, err, pc, tmpf, tmpi):
    """Functional semantics of the ALU opcodes (OP_FBIN..OP_IMOV). Returns False after
    recording an integer division by zero in ``err``.

    A full wave's add, sub, mul and fma whose destination is one of its sources (``acc =
    acc + x``) compute into the scratch row ``tmpf`` / ``tmpi`` (f32 / i32, rounded as the
    register is) and then copy it: the compiler's vector loop checks at run time that
    the rows it writes and reads do not overlap, so the in-place form always ran its
    scalar fallback."""
    F = wv.F
    I = wv.I
    EX = wv.EX
    if op == OP_FBIN and full and aux <= B_MUL:
        Fa = F[s, a]
        Fb = F[s, b]
        alias = d == a or d == b
        Fo = tmpf if alias else F[s, d]
        if aux == B_ADD:
            for l in range(W):
                Fo[l] = np.float64(Fa[l]) + np.float64(Fb[l])
        elif aux == B_SUB:
            for l in range(W):
                Fo[l] = np.float64(Fa[l]) - np.float64(Fb[l])
        else:
            for l in range(W):
                Fo[l] = np.float64(Fa[l]) * np.float64(Fb[l])
        if alias:
            Fd = F[s, d]
            for l in range(W):
                Fd[l] = tmpf[l]
    elif op == OP_FFMA and full:
        Fa = F[s, a]
        Fb = F[s, b]
        Fc = F[s, c]
        alias = d == a or d == b or d == c
        Fo = tmpf if alias else F[s, d]
        for l in range(W):
            Fo[l] = np.float64(Fa[l]) * np.float64(Fb[l]) + np.float64(Fc[l])
        if alias:
            Fd = F[s, d]
            for l in range(W):
                Fd[l] = tmpf[l]
    elif op == OP_IBIN and full and aux <= B_MUL:
        Ia = I[s, a]
        Ib = I[s, b]
        alias = d == a or d == b
        Io = tmpi if alias else I[s, d]
        if aux == B_ADD:
            for l in range(W):
                Io[l] = wrap32(np.int64(Ia[l]) + np.int64(Ib[l]))
        elif aux == B_SUB:
            for l in range(W):
                Io[l] = wrap32(np.int64(Ia[l]) - np.int64(Ib[l]))
        else:
            for l in range(W):
                Io[l] = wrap32(np.int64(Ia[l]) * np.int64(Ib[l]))
        if alias:
            Id = I[s, d]
            for l in range(W):
                Id[l] = tmpi[l]
    elif op == OP_IBIN and full and (aux == B_DIV or aux == B_MOD):
        Ia = I[s, a]
        Ib = I[s, b]
        zero = 0
        for l in range(W):
            zero += 1 if Ib[l] == 0 else 0
        if zero > 0:
            for l in range(W):
                if Ib[l] == 0:
                    err[0] = E_DIV0
                    err[1] = pc
                    return False
        alias = d == a or d == b
        Io = tmpi if alias else I[s, d]
        # |x| // |y| through float64: exact for 32-bit operands (a non-integral |x| / |y|
        # is at least 1/|x| >= 2**-31 relative below the next integer, far above the
        # division's 2**-53 rounding), and a vector division instead of a scalar one per
        # lane; the signs as ``ibin`` (C truncation)
        for l in range(W):
            x = np.int64(Ia[l])
            y = np.int64(Ib[l])
            ax = abs(x)
            ay = abs(y)
            q = np.int64(np.float64(ax) / np.float64(ay))
            if aux == B_DIV:
                Io[l] = wrap32(q if (x >= 0) == (y >= 0) else -q)
            else:
                Io[l] = wrap32(ax - q * ay if x >= 0 else q * ay - ax)
        if alias:
            Id = I[s, d]
            for l in range(W):
                Id[l] = tmpi[l]
    elif op == OP_FMOV and full:
        Fd = F[s, d]
        Fa = F[s, a]
        for l in range(W):
            Fd[l] = Fa[l]
    elif op == OP_IMOV and full:
        Id = I[s, d]
        Ia = I[s, a]
        for l in range(W):
            Id[l] = Ia[l]
    elif op == OP_FBIN:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = fbin(np.int64(aux), np.float64(F[s, a, l]), np.float64(F[s, b, l]))
    elif op == OP_IBIN:
        for l in range(W):
            if EX[s, l]:
                xi = np.int64(I[s, a, l])
                yi = np.int64(I[s, b, l])
                if (aux == B_DIV or aux == B_MOD) and yi == 0:
                    err[0] = E_DIV0
                    err[1] = pc
                    return False
                I[s, d, l] = wrap32(ibin(aux, xi, yi))
    elif op == OP_FCMP:
        for l in range(W):
            if EX[s, l]:
                I[s, d, l] = fcmp(aux, np.float64(F[s, a, l]), np.float64(F[s, b, l]))
    elif op == OP_ICMP:
        for l in range(W):
            if EX[s, l]:
                I[s, d, l] = fcmp(aux, np.float64(I[s, a, l]), np.float64(I[s, b, l]))  # i32 exact in f64
    elif op == OP_FUN:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = fun(aux, np.float64(F[s, a, l]))
    elif op == OP_IUN:
        for l in range(W):
            if EX[s, l]:
                I[s, d, l] = wrap32(iun(aux, np.int64(I[s, a, l])))
    elif op == OP_FFMA:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = np.float64(F[s, a, l]) * np.float64(F[s, b, l]) + np.float64(F[s, c, l])
    elif op == OP_FSEL:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = F[s, b, l] if I[s, a, l] != 0 else F[s, c, l]
    elif op == OP_ISEL:
        for l in range(W):
            if EX[s, l]:
                I[s, d, l] = I[s, b, l] if I[s, a, l] != 0 else I[s, c, l]
    elif op == OP_CVT_IF:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = np.float64(I[s, a, l])
    elif op == OP_CVT_FI:
        for l in range(W):
            if EX[s, l]:
                xf = np.float64(F[s, a, l])
                if xf != xf:
                    I[s, d, l] = 0
                elif xf >= 2147483647.0:
                    I[s, d, l] = 2147483647
                elif xf <= -2147483648.0:
                    I[s, d, l] = -2147483648
                else:
                    I[s, d, l] = int(xf)
    elif op == OP_FMOV:
        for l in range(W):
            if EX[s, l]:
                F[s, d, l] = F[s, a, l]
    elif op == OP_IMOV:
        for l in range(W):
            if EX[s, l]:
                I[s, d, l] = I[s, a, l]
    return True


def exec_control(op, a, b, aux, s, pc, jump, W, wv):
    """Structured control flow on the execution mask (the EXEC save/restore stack).
    Returns the next pc."""
    EX = wv.EX
    MS = wv.MS
    SP = wv.SP
    I = wv.I
    nxt_pc = pc + 1
    if op == OP_IF:
        for l in range(W):
            MS[s, SP[s], l] = EX[s, l]
        SP[s] += 1
        anyl = 0
        for l in range(W):
            v8 = 1 if (EX[s, l] and I[s, a, l] != 0) else 0
            EX[s, l] = v8
            anyl += v8
        wv.NACT[s] = anyl
        if anyl == 0:
            nxt_pc = jump
    elif op == OP_ELSE:
        top = SP[s] - 1
        anyl = 0
        for l in range(W):
            v8 = 1 if (MS[s, top, l] and not EX[s, l]) else 0
            EX[s, l] = v8
            anyl += v8
        wv.NACT[s] = anyl
        if anyl == 0:
            nxt_pc = jump
    elif op == OP_ENDIF:
        SP[s] -= 1
        anyl = 0
        for l in range(W):
            EX[s, l] = MS[s, SP[s], l]
            anyl += EX[s, l]
        wv.NACT[s] = anyl
    elif op == OP_LOOP_BEGIN:
        for l in range(W):
            MS[s, SP[s], l] = EX[s, l]
        SP[s] += 1
    elif op == OP_LOOP_TEST:
        anyl = 0
        for l in range(W):
            v8 = 1 if (EX[s, l] and I[s, a, l] < I[s, b, l]) else 0
            EX[s, l] = v8
            anyl += v8
        wv.NACT[s] = anyl
        if anyl == 0:
            SP[s] -= 1
            for l in range(W):
                EX[s, l] = MS[s, SP[s], l]
                anyl += EX[s, l]
            wv.NACT[s] = anyl
            nxt_pc = jump
    elif op == OP_LOOP_STEP:
        for l in range(W):
            if EX[s, l]:
                I[s, a, l] = wrap32(np.int64(I[s, a, l]) + aux)
        nxt_pc = jump
    return nxt_pc


# ------------------------------------------------------------------------------ vector memory and caches
def exec_vmem(p, prog, pc, s, t, probing, l2i, gmem_f, gmem_i, wv, cu, l1, l2, sc, out):
    """A global load or store: moves the values, counts lines and TCP accesses, walks the
    L1 / L2 / HBM model and sets when loaded registers arrive. Returns False after
    recording an out-of-bounds access in ``out.err``."""
    W = p.W
    NF = p.nf
    l1_line = p.l1_line
    l1_sh = p.l1_sh
    code = prog.code
    buf_tab = prog.buf_tab
    F = wv.F
    I = wv.I
    EX = wv.EX
    lines = sc.lines
    lane_lo = sc.lane_lo
    lane_hi = sc.lane_hi
    qbuf = sc.qbuf
    counters = out.counters
    per_inst = out.per_inst
    probe = out.probe
    err = out.err
    a = code[pc, K_A]
    aux = code[pc, K_AUX]
    store = code[pc, K_OP] == OP_GSTORE
    width = code[pc, K_WIDTH]
    kind = buf_tab[aux, 0]
    off = buf_tab[aux, 1]
    size = buf_tab[aux, 2]
    base = buf_tab[aux, 3]
    es = buf_tab[aux, 4]
    secs = sc.dbuf
    ix = sc.idx
    # every active lane's element index, checked before any value moves (a failed
    # access aborts the launch)
    bad = lane_indices(s, a, width, size, W, wv, ix)
    if bad >= 0:
        err[0] = E_OOB_GLOBAL
        err[1] = pc
        err[2] = ix[bad]
        err[3] = aux
        return False
    full = wv.NACT[s] == W
    if store:  # lane by lane: where lanes overlap, the higher lane's values win
        for l in range(W):
            if ix[l] >= 0:
                for v in range(width):
                    store_elem(gmem_f, gmem_i, off + ix[l] + v, kind, F, I, s, code[pc, K_V0 + v], l)
    else:  # component by component (each goes to its own register), as exec_lds
        for v in range(width):
            reg = code[pc, K_V0 + v]
            if int_kind(kind):
                Id = I[s, reg]
                if full:
                    for l in range(W):
                        Id[l] = gmem_i[off + ix[l] + v]
                else:
                    for l in range(W):
                        if ix[l] >= 0:
                            Id[l] = gmem_i[off + ix[l] + v]
            else:
                Fd = F[s, reg]
                if full:
                    for l in range(W):
                        Fd[l] = gmem_f[off + ix[l] + v]
                else:
                    for l in range(W):
                        if ix[l] >= 0:
                            Fd[l] = gmem_f[off + ix[l] + v]
    nl = int(0)
    ns = int(0)
    nact = 0
    for l in range(W):
        lane_lo[l] = -1
        if ix[l] < 0:
            continue
        nact += 1
        addr = base + ix[l] * es
        lane_lo[l] = pdiv(addr, l1_line, l1_sh)
        lane_hi[l] = pdiv(addr + width * es - 1, l1_line, l1_sh)
        if store:
            for sec in range(addr // SECTOR, (addr + width * es - 1) // SECTOR + 1):
                secs[ns] = sec
                ns += 1
        lines[nl] = lane_lo[l]
        nl += 1
        if lane_hi[l] != lane_lo[l]:
            lines[nl] = lane_hi[l]
            nl += 1
        if probing:
            probe[l, 0] = addr
            probe[l, 1] = width * es
            probe[l, 2] = 1
    if probing:
        probe[W, 0] = 1
    # Memo per instruction (as in exec_lds): the unique lines, TCP accesses and active
    # quads depend only on the lanes' lines relative to the first active lane's (a uniform
    # shift of every line shifts the sorted unique lines and keeps every count), so a
    # pattern this instruction met last (another wave, iteration or workgroup) reuses its
    # counts and its sorted lines, both stored relative to that lane's line.
    pat = sc.vm_pat[pc]
    rel = sc.vm_rel[pc]
    rec = sc.vm_rec[pc]
    lo0 = np.int64(0)
    for l in range(W):
        if lane_lo[l] >= 0:
            lo0 = lane_lo[l]
            break
    hit = False
    if rec[0] >= 0:
        diff = np.int64(0)
        for l in range(W):
            rl = lane_lo[l] - lo0 if lane_lo[l] >= 0 else NO_LANE
            rh = lane_hi[l] - lo0 if lane_lo[l] >= 0 else NO_LANE
            diff |= (rl ^ pat[l]) | (rh ^ pat[W + l])
        hit = diff == 0
    if hit:
        nu = rec[0]
        tcp = rec[1]
        quads = rec[2]
        for k in range(nu):
            lines[k] = lo0 + rel[k]
    else:
        nu, tcp, quads = coalesce(lane_lo, lane_hi, W, lines, nl, qbuf)
        for l in range(W):
            pat[l] = lane_lo[l] - lo0 if lane_lo[l] >= 0 else NO_LANE
            pat[W + l] = lane_hi[l] - lo0 if lane_lo[l] >= 0 else NO_LANE
        for k in range(nu):
            rel[k] = lines[k] - lo0
        rec[0] = nu
        rec[1] = tcp
        rec[2] = quads
    counters[N_VMEM] += 1
    counters[N_TCP] += tcp
    counters[N_QUADS] += quads
    per_inst[pc, I_LINES] += nu
    per_inst[pc, I_TCP] += tcp
    if store:
        counters[N_GST_REQ] += 1
        counters[N_GST_LINES] += nu
        counters[N_GST_BYTES] += nact * width * es
    else:
        counters[N_GLD_REQ] += 1
        counters[N_GLD_LINES] += nu
        counters[N_GLD_BYTES] += nact * width * es
    ns = unique_sorted(secs, ns) if store else ns
    done = memory_lines(p, t, nu, tcp, store, l2i, lines, secs, ns, cu, l1, l2, counters)
    if done > wv.VMD[s]:
        wv.VMD[s] = done  # what a Fence (s_waitcnt vmcnt(0)) waits for
    if not store:
        for v in range(width):
            r = code[pc, K_V0 + v]
            ur = (NF + r) if int_kind(kind) else r
            wv.RREADY[s, ur] = done
            wv.RPROD[s, ur] = pc
    return True


def exec_atomic(p, prog, pc, s, t, gmem_i, wv, cu, sc, out):
    """AtomicAdd: each active lane, in lane order, adds its value to its i32 element and
    gets the old value (the memory order gpusim gives atomics is the engine's execution
    order: sessions in turn, issue time within one). Timing: one VMEM instruction whose
    request goes to the L2 (atomics execute there, past the L1) and whose old value comes
    back after the L2 hit latency, ``Arch.l2_hit_latency_cycles`` (the documented load
    figure, sourced per arch in gpusim/hw: mt4g's L2 pointer chase on MI210 and MI300X;
    SIMPLIFICATION: an atomic's L2 round trip costs what a load's L2 hit does, no
    measurement of a returning global_atomic_add was found; one L2 request per active
    lane, which the L2 takes at this CU's share of its write request rate).
    Returns False after an out-of-bounds access."""
    W = p.W
    code = prog.code
    buf_tab = prog.buf_tab
    I = wv.I
    counters = out.counters
    err = out.err
    a = code[pc, K_A]
    aux = code[pc, K_AUX]
    dst = code[pc, K_DST]
    val = code[pc, K_B]
    off = buf_tab[aux, 1]
    size = buf_tab[aux, 2]
    ix = sc.idx
    bad = lane_indices(s, a, 1, size, W, wv, ix)
    if bad >= 0:
        err[0] = E_OOB_GLOBAL
        err[1] = pc
        err[2] = ix[bad]
        err[3] = aux
        return False
    nact = 0
    for l in range(W):
        if ix[l] >= 0:
            old = gmem_i[off + ix[l]]
            gmem_i[off + ix[l]] = wrap32(np.int64(old) + np.int64(I[s, val, l]))
            I[s, dst, l] = old
            nact += 1
    t2 = max(float(t), cu.free[FR_L2])
    cu.free[FR_L2] = t2 + p.l2w_cyc * nact
    done = t2 + p.l2w_cyc * nact + p.l2_lat
    counters[N_VMEM] += 1
    counters[N_L2_ACC] += nact
    counters[N_L2_HIT] += nact
    out.per_inst[pc, I_LINES] += nact
    out.per_inst[pc, I_TCP] += nact
    ur = p.nf + dst
    wv.RREADY[s, ur] = done
    wv.RPROD[s, ur] = pc
    if done > wv.VMD[s]:
        wv.VMD[s] = done
    return True


def coalesce(lane_lo, lane_hi, W, lines, nl, qbuf):
    """(unique lines, TCP accesses, active quads) of one VMEM instruction whose ``nl``
    lines (each active lane's first and, if other, last line) are in ``lines``, left
    sorted and unique there; ``lane_lo`` is -1 for an inactive lane. TCP accesses are the
    unique lines per quad of lanes (rocprof coalescing)."""
    nu = unique_sorted(lines, nl)
    tcp = int(0)
    quads = int(0)
    for q in range(W // 4):
        nq = int(0)
        for l in range(4 * q, 4 * q + 4):
            if lane_lo[l] >= 0:
                qbuf[nq] = lane_lo[l]
                nq += 1
                if lane_hi[l] != lane_lo[l]:
                    qbuf[nq] = lane_hi[l]
                    nq += 1
        if nq > 0:
            quads += 1
            tcp += unique_sorted(qbuf, nq)
    return nu, tcp, quads


def popcount4(m):
    return (m & 1) + ((m >> 1) & 1) + ((m >> 2) & 1) + ((m >> 3) & 1)


def memory_lines(p, t, nu, tcp, store, l2i, lines, secs, ns, cu, l1, l2, counters):
    """Sends the ``nu`` unique lines of one VMEM instruction through L1, L2 and memory;
    the L1 pipe is held for ``tcp`` cycles. ``secs[:ns]`` are the sorted 32-byte sectors a
    store writes. Returns when the last line is back (loads) or written to L2 (stores).

    The L2 keeps valid and dirty bits per 32-byte sector (``SECTOR``): a load that misses
    the L1 needs the sectors of its L1 line (two on gfx90a's 64-byte lines, a whole
    128-byte line on gfx942) and fetches from memory only those the L2 lacks; a store
    dirties the sectors it writes, and each newly dirty sector costs 32 bytes of memory
    write bandwidth (partial-line writes cost their sectors, not the line)."""
    l1_line = p.l1_line
    l2_line = p.l2_line
    l1_sh = p.l1_sh
    l2_sh = p.l2_sh
    l1_sets = p.l1_sets
    l1_ways = p.l1_ways
    l2_sets = p.l2_sets
    l2_ways = p.l2_ways
    free = cu.free
    l1_tag = l1.tag[0]
    l1_lru = l1.lru[0]
    l1_rdy = l1.rdy[0]
    l1_dirty = l1.dirty[0]
    l2_tag = l2.tag[l2i]
    l2_lru = l2.lru[l2i]
    l2_rdy = l2.rdy[l2i]
    l2_dirty = l2.dirty[l2i]
    l2_free = free[FR_L2]
    hbm_free = free[FR_HBM]
    clock = cu.clock[0]
    tl = max(float(t), free[FR_L1])
    done = float(t)
    step = tcp / nu if nu > 0 else 1.0  # L1 cycles per unique line
    per_l2 = l2_line // SECTOR
    k = 0  # next sector of secs
    for j in range(nu):
        clock += 1
        tj = tl + j * step
        line = lines[j]
        l2line = pdiv(line * l1_line, l2_line, l2_sh)
        if store:
            wmask = 0
            while k < ns and pdiv(secs[k] * SECTOR, l1_line, l1_sh) < line:
                k += 1
            while k < ns and pdiv(secs[k] * SECTOR, l1_line, l1_sh) == line:
                wmask |= 1 << (secs[k] % per_l2)
                k += 1
            cache_access(l1_tag, l1_lru, l1_rdy, l1_dirty, l1_sets, l1_ways, line, clock, bool(False))
            t2 = max(tj, l2_free)
            l2_free = t2 + p.l2w_cyc
            counters[N_L2_ACC] += 1
            hit2, w2 = cache_access(l2_tag, l2_lru, l2_rdy, l2_dirty, l2_sets, l2_ways, l2line,
                                    clock, bool(True))
            st2 = pmod(l2line, l2_sets)
            if hit2:
                counters[N_L2_HIT] += 1
            state = l2_dirty[st2, w2]
            new = wmask & ~(state & 15)
            if new:
                nb = popcount4(new) * SECTOR
                counters[N_HBM_WR] += nb
                th = max(t2, hbm_free)
                hbm_free = th + p.hbmw_cyc * nb / l2_line
            l2_dirty[st2, w2] = state | wmask | (wmask << 4)
            done = max(done, t2 + p.l2w_cyc)
        else:
            counters[N_L1_ACC] += 1
            hit1, w1 = cache_access(l1_tag, l1_lru, l1_rdy, l1_dirty, l1_sets, l1_ways, line,
                                    clock, bool(True))
            st1 = pmod(line, l1_sets)
            if hit1:
                counters[N_L1_HIT] += 1
                arrive = max(tj + p.l1_lat, l1_rdy[st1, w1])
            else:
                first = ((line * l1_line) % l2_line) // SECTOR
                need = 0
                for q in range(first, first + l1_line // SECTOR):
                    need |= 1 << q
                t2 = max(tj, l2_free)
                l2_free = t2 + p.l2_cyc
                counters[N_L2_ACC] += 1
                hit2, w2 = cache_access(l2_tag, l2_lru, l2_rdy, l2_dirty, l2_sets, l2_ways, l2line,
                                        clock, bool(True))
                st2 = pmod(l2line, l2_sets)
                state = l2_dirty[st2, w2]
                missing = need & ~(state >> 4)
                if missing == 0:
                    counters[N_L2_HIT] += 1
                    arrive = max(t2 + p.l2_lat, l2_rdy[st2, w2] + p.l1_lat)
                else:
                    nb = popcount4(missing) * SECTOR
                    th = max(t2, hbm_free)
                    hbm_free = th + p.hbm_cyc * nb / l2_line
                    counters[N_HBM_RD] += nb
                    arrive = th + p.hbm_lat
                    l2_rdy[st2, w2] = arrive - p.l1_lat
                    l2_dirty[st2, w2] = state | (need << 4)
                l1_rdy[st1, w1] = arrive
            done = max(done, arrive)
    free[FR_L1] = tl + max(tcp, nu)
    free[FR_L2] = l2_free
    free[FR_HBM] = hbm_free
    cu.clock[0] = clock
    return done


# ------------------------------------------------------------------------------ LDS
def lane_indices(s, a, width, size, W, wv, idx):
    """The element index of each active lane (register ``a``) into ``idx``, -1 for an
    inactive lane. Returns the first active lane whose ``width`` elements do not fit in
    ``[0, size)``, or -1. Checked before any value moves: a failed access aborts the launch.
    The copy and the range of the indices are branch-free loops (vectorised); only an
    access out of range looks for its first lane."""
    EX = wv.EX
    Ia = wv.I[s, a]
    lo = np.int64(0)
    hi = np.int64(0)
    if wv.NACT[s] == W:
        lo = np.int64(Ia[0])
        hi = lo
        for l in range(W):
            i = np.int64(Ia[l])
            idx[l] = i
            lo = min(lo, i)
            hi = max(hi, i)
    else:
        for l in range(W):
            idx[l] = np.int64(Ia[l]) if EX[s, l] else np.int64(-1)
        first = True
        for l in range(W):
            if EX[s, l]:
                i = idx[l]
                if first:
                    lo = i
                    hi = i
                    first = False
                lo = min(lo, i)
                hi = max(hi, i)
    if lo >= 0 and hi + width <= size:
        return -1
    for l in range(W):
        if (wv.NACT[s] == W or EX[s, l]) and (idx[l] < 0 or idx[l] + width > size):
            return l
    return -1


def lds_conflicts(idx, base, es, nbytes, nbanks, ng, gsize, lanes_of, dbuf, bank_cnt):
    """Bank-conflict cycles of one LDS access: per phase group (``lanes_of[gi]``, the
    groups partition the lanes) the most distinct dwords on one bank, minus one (lanes on
    one address broadcast). A group whose dwords all lie in one bank-width window has none."""
    conflict = 0
    for gi in range(ng):
        lanes = lanes_of[gi]
        dmin = 1 << 62
        dmax = -1
        for k in range(gsize):
            i = idx[lanes[k]]
            if i >= 0:
                addr = base + i * es
                if addr // 4 < dmin:
                    dmin = addr // 4
                if (addr + nbytes - 1) // 4 > dmax:
                    dmax = (addr + nbytes - 1) // 4
        if dmax - dmin < nbanks:
            continue  # all dwords within one bank-width window: distinct banks
        nd = int(0)
        for k in range(gsize):
            i = idx[lanes[k]]
            if i >= 0:
                addr = base + i * es
                for dw in range(addr // 4, (addr + nbytes - 1) // 4 + 1):
                    dbuf[nd] = dw
                    nd += 1
        nu = unique_sorted(dbuf, nd)
        for k in range(nbanks):
            bank_cnt[k] = 0
        mx = 0
        for k in range(nu):
            bk = pmod(dbuf[k], nbanks)
            bank_cnt[bk] += 1
            if bank_cnt[bk] > mx:
                mx = bank_cnt[bk]
        if mx > 1:
            conflict += mx - 1
    return conflict


def exec_lds(p, prog, pc, s, g, t, probing, wv, grp, cu, sc, out):
    """An LDS load or store: moves the values, counts bank conflicts per phase group and
    books the LDS pipe. Returns False after recording an out-of-bounds access."""
    W = p.W
    NF = p.nf
    nbanks = p.nbanks
    code = prog.code
    lds_tab = prog.lds_tab
    n_groups = prog.n_groups
    group_lanes = prog.group_lanes
    F = wv.F
    I = wv.I
    idx = sc.idx
    dbuf = sc.dbuf
    bank_cnt = sc.bank_cnt
    counters = out.counters
    per_inst = out.per_inst
    probe = out.probe
    err = out.err
    a = code[pc, K_A]
    aux = code[pc, K_AUX]
    store = code[pc, K_OP] == OP_LSTORE
    width = code[pc, K_WIDTH]
    kind = lds_tab[aux, 0]
    off = lds_tab[aux, 1]
    size = lds_tab[aux, 2]
    base = lds_tab[aux, 3]
    es = lds_tab[aux, 4]
    bad = lane_indices(s, a, width, size, W, wv, idx)
    if bad >= 0:
        err[0] = E_OOB_LDS
        err[1] = pc
        err[2] = idx[bad]
        err[3] = aux
        return False
    if store:  # lane by lane: where lanes overlap, the higher lane's values win
        LDSF = grp.LDSF[g]
        LDSI = grp.LDSI[g]
        for l in range(W):
            i = idx[l]
            if i >= 0:
                for v in range(width):
                    reg = code[pc, K_V0 + v]
                    store_elem(LDSF, LDSI, off + i + v, kind, F, I, s, reg, l)
    else:  # component by component (each goes to its own register); a full wave's
        # loop has no lane test
        full = wv.NACT[s] == W
        for v in range(width):
            reg = code[pc, K_V0 + v]
            if int_kind(kind):
                Id = I[s, reg]
                LDSI = grp.LDSI[g]
                if full:
                    for l in range(W):
                        Id[l] = LDSI[off + idx[l] + v]
                else:
                    for l in range(W):
                        if idx[l] >= 0:
                            Id[l] = LDSI[off + idx[l] + v]
            else:
                Fd = F[s, reg]
                LDSF = grp.LDSF[g]
                if full:
                    for l in range(W):
                        Fd[l] = LDSF[off + idx[l] + v]
                else:
                    for l in range(W):
                        if idx[l] >= 0:
                            Fd[l] = LDSF[off + idx[l] + v]
    if probing:
        for l in range(W):
            if idx[l] >= 0:
                probe[l, 0] = base + idx[l] * es
                probe[l, 1] = width * es
                probe[l, 2] = 1
        probe[W, 0] = 1
    # bank conflicts per phase group (the groups partition the lanes): dword addresses
    wc = code[pc, K_C]  # width class 0: <=4 B, 1: 8 B, 2: 16 B per lane
    rw = 1 if store else 0
    ng = n_groups[rw, wc]
    gsize = W // ng
    nbytes = width * es
    # Memo per instruction: when the elements are whole dwords, the conflicts depend only
    # on the lanes' element indices relative to the first active lane's (a uniform shift
    # of every dword moves each bank's dwords to another bank: the same counts, permuted),
    # so a pattern this instruction met last (another wave, iteration or workgroup) reuses
    # its count. The pattern is stored relative to that lane, an inactive lane as NO_LANE.
    memo = (es & 3) == 0
    hit = False
    pat = sc.lds_pat[pc]
    i0 = np.int64(0)
    if memo:
        for l in range(W):
            if idx[l] >= 0:
                i0 = idx[l]
                break
        if sc.lds_conf[pc] >= 0:
            diff = np.int64(0)
            for l in range(W):
                r = idx[l] - i0 if idx[l] >= 0 else NO_LANE
                diff |= r ^ pat[l]
            hit = diff == 0
    if hit:
        conflict = sc.lds_conf[pc]
    else:
        conflict = lds_conflicts(idx, base, es, nbytes, nbanks, ng, gsize, group_lanes[rw, wc],
                                 dbuf, bank_cnt)
        if memo:
            for l in range(W):
                pat[l] = idx[l] - i0 if idx[l] >= 0 else NO_LANE
            sc.lds_conf[pc] = conflict
    idx_cyc = ng + conflict
    counters[N_LDS] += 1
    counters[N_LDS_CONF] += conflict
    counters[N_LDS_IDX] += idx_cyc
    per_inst[pc, I_CONF] += conflict
    per_inst[pc, I_IDX] += idx_cyc
    # Ports (S4): SIMD pair k's port moves 64 B per cycle, one access at a time, its
    # addresses (4 B per lane) and store data in, then its read data out; the pairs' ports
    # run at once and share the banks (idx_cyc of work per access) round-robin.
    npairs = max(1, p.nsimd // 2)
    pr = pmod(pmod(s, p.nsimd), npairs)
    nact = W
    if wv.NACT[s] != W:
        nact = 0
        for l in range(W):
            if idx[l] >= 0:
                nact += 1
    xfer = (nact * (p.lds_addr + nbytes) + p.lds_port - 1) // p.lds_port
    free = cu.free
    tl = max(float(t), free[FR_PORT + pr])
    share = 0.0
    if npairs == 2:
        # processor sharing with the other pair's pending bank work: this access takes
        # as long again as its own work (at most the other's remainder) and pushes the
        # other's work back as much (its in-flight access keeps its booked end)
        q = 1 - pr
        share = min(float(idx_cyc), max(0.0, free[FR_BANK + q] - tl))
        free[FR_BANK + q] += share
        if free[FR_PORT + q] < free[FR_BANK + q]:
            free[FR_PORT + q] = free[FR_BANK + q]
    free[FR_BANK + pr] = tl + idx_cyc + share
    end = max(tl + idx_cyc + share, tl + xfer)
    free[FR_PORT + pr] = end
    if wv.LDSD[s] < end:
        wv.LDSD[s] = end  # a barrier waits for it (s_waitcnt lgkmcnt(0))
    if not store:
        done = end + p.lds_lat
        if wv.LDSD[s] < done:
            wv.LDSD[s] = done
        for v in range(width):
            r = code[pc, K_V0 + v]
            ur = (NF + r) if int_kind(kind) else r
            wv.RREADY[s, ur] = done
            wv.RPROD[s, ur] = pc
    return True


def exec_shuffle(p, prog, pc, s, t, wv, cu, sc, counters):
    """A lane shuffle (xor or down, ds_swizzle / DPP) through the LDS crossbar."""
    W = p.W
    code = prog.code
    n_groups = prog.n_groups
    F = wv.F
    I = wv.I
    fvals = sc.fvals
    ivals = sc.ivals
    a = code[pc, K_A]
    b = code[pc, K_B]
    d = code[pc, K_DST]
    aux = code[pc, K_AUX]
    isf = code[pc, K_ISF]
    for l in range(W):
        if isf:
            fvals[l] = F[s, a, l]
        else:
            ivals[l] = I[s, a, l]
    for l in range(W):
        if not wv.EX[s, l]:
            continue
        src = (l ^ b) if aux == 0 else l + b
        if src >= W:
            src = l
        if isf:
            F[s, d, l] = fvals[src]
        else:
            I[s, d, l] = ivals[src]
    ng = n_groups[0, 0]
    counters[N_LDS] += 1
    counters[N_LDS_IDX] += ng
    tl = max(float(t), cu.free[FR_LDS])
    cu.free[FR_LDS] = tl + ng
    ur = d if isf else p.nf + d
    wv.RREADY[s, ur] = tl + ng + p.lds_lat
    wv.RPROD[s, ur] = pc


def exec_wave_reduce(p, prog, pc, s, t, wv, cu, sc, counters):
    """WaveReduce: the xor butterfly over all lanes, one LDS crossbar step per level."""
    W = p.W
    code = prog.code
    n_groups = prog.n_groups
    F = wv.F
    I = wv.I
    fvals = sc.fvals
    ivals = sc.ivals
    a = code[pc, K_A]
    d = code[pc, K_DST]
    aux = code[pc, K_AUX]
    isf = code[pc, K_ISF]
    bop = B_MAX if aux == R_MAX else B_MIN
    for l in range(W):
        if isf:
            fvals[l] = F[s, a, l]
        else:
            ivals[l] = I[s, a, l]
    steps = 0
    off2 = W // 2
    while off2 > 0:
        steps += 1
        for l in range(W):
            m = l ^ off2
            if l < m:
                if isf:
                    xf = fvals[l]
                    yf = fvals[m]
                    if aux == R_SUM:
                        rf = np.float64(np.float32(xf + yf))
                    else:
                        rf = fbin(np.int64(bop), xf, yf)  # one signature with exec_alu's
                    fvals[l] = rf
                    fvals[m] = rf
                else:
                    xi = ivals[l]
                    yi = ivals[m]
                    if aux == R_SUM:
                        ri = wrap32(xi + yi)
                    elif aux == R_MAX:
                        ri = xi if xi > yi else yi
                    else:
                        ri = xi if xi < yi else yi
                    ivals[l] = ri
                    ivals[m] = ri
        off2 //= 2
    for l in range(W):
        if wv.EX[s, l]:
            if isf:
                F[s, d, l] = fvals[l]
            else:
                I[s, d, l] = ivals[l]
    ng = n_groups[0, 0]
    counters[N_LDS] += steps
    counters[N_LDS_IDX] += steps * ng
    tl = max(float(t), cu.free[FR_LDS])
    cu.free[FR_LDS] = tl + steps * ng
    ur = d if isf else p.nf + d
    wv.RREADY[s, ur] = tl + steps * (ng + p.lds_lat + p.valu)
    wv.RPROD[s, ur] = pc


# ------------------------------------------------------------------------------ MFMA
def exec_mfma(p, prog, pc, s, simd, t, wv, cu, sc, counters):
    """One matrix-core instruction: every lane takes part (the validator requires full,
    uniform waves); the SIMD's matrix core is busy ``K_MULT`` cycles.

    Lane ``l`` supplies items ``e`` < kpack of A row ``l % M`` and of B column ``l % M`` at
    k = kpack * (l // M) + e (``program.mfma_a_elem``). Float shapes: products and sum in
    f64, one rounding to the f32 accumulator (a bf16 operand rounded to bf16 first, as the
    HIP packing does). int8: each operand is its register's low byte, sign-extended, the
    sum exact and wrapped to 32 bits, as the hardware's i32 accumulator."""
    W = p.W
    code = prog.code
    mfma_regs = prog.mfma_regs
    F = wv.F
    I = wv.I
    kind = code[pc, K_A]          # 0 f32, 1 bf16, 2 int8
    mdim = code[pc, K_WIDTH]
    kp = code[pc, K_AUX]
    isf = code[pc, K_ISF]
    slots = W // mdim
    kdim = slots * kp
    nacc = mdim * mdim // W
    mcyc = float(code[pc, K_MULT])
    row = code[pc, K_C]
    # operands snapshot first (an operand register may also be an accumulator): lane l's
    # item e at [l * 8 + e] of the scratch (8 * W long for the widest pack)
    av = sc.fvals
    bv = sc.gvals
    for l in range(W):
        for e in range(kp):
            ra = mfma_regs[row, 16 + e]
            rb = mfma_regs[row, 24 + e]
            if int_kind(kind):
                av[l * 8 + e] = ((np.int64(I[s, ra, l]) + 128) & 255) - 128
                bv[l * 8 + e] = ((np.int64(I[s, rb, l]) + 128) & 255) - 128
            elif kind == 1:
                av[l * 8 + e] = round_bf16(np.float64(F[s, ra, l]))
                bv[l * 8 + e] = round_bf16(np.float64(F[s, rb, l]))
            else:
                av[l * 8 + e] = np.float64(F[s, ra, l])
                bv[l * 8 + e] = np.float64(F[s, rb, l])
    for l in range(W):
        j = l % mdim
        for r in range(nacc):
            if mdim == 32:
                i = 8 * (r // 4) + 4 * (l // 32) + r % 4
            else:
                i = 4 * (l // 16) + r
            reg = mfma_regs[row, r]
            if isf:
                acc_v = np.float64(F[s, reg, l])
                for kk in range(slots):
                    for e in range(kp):
                        acc_v += av[(i + mdim * kk) * 8 + e] * bv[(j + mdim * kk) * 8 + e]
                F[s, reg, l] = acc_v
            else:
                acc_i = np.int64(I[s, reg, l])
                for kk in range(slots):
                    for e in range(kp):
                        acc_i += np.int64(av[(i + mdim * kk) * 8 + e]) * np.int64(bv[(j + mdim * kk) * 8 + e])
                acc_i = ((acc_i + 2147483648) & 4294967295) - 2147483648
                I[s, reg, l] = acc_i
    counters[N_MFMA] += 1
    counters[N_MFMA_FLOPS] += 2 * mdim * mdim * kdim
    cu.mfma_free[simd] = t + mcyc
    for r in range(nacc):
        reg = mfma_regs[row, r]
        ur = reg if isf else p.nf + reg
        wv.RREADY[s, ur] = t + mcyc
        wv.RPROD[s, ur] = pc


# ------------------------------------------------------------------------------ barriers and wave end
def barrier_arrive(p, s, g, t, timed, cu_id, wv, grp, out):
    """Wave ``s`` reaches a barrier at cycle ``t``; the last live wave of its workgroup
    releases all of them ``bar_cyc`` cycles after the latest arrival."""
    wpw = p.wpw
    cap = p.trace_cap
    if t < wv.LDSD[s]:
        t = wv.LDSD[s]  # HIP's __syncthreads: s_waitcnt lgkmcnt(0) before s_barrier
    wv.STATUS[s] = S_BAR
    grp.ARR[g] += 1
    if t > grp.BAR[g]:
        grp.BAR[g] = t
    if grp.ARR[g] >= grp.LIVE[g]:
        rel = grp.BAR[g] + p.bar_cyc
        for k in range(g * wpw, g * wpw + wpw):
            if wv.STATUS[k] == S_BAR:
                if timed and cap > 0:
                    add_trace(out.trace, out.trace_n, cap, cu_id, k % p.nsimd, grp.ID[g] * wpw + k - g * wpw,
                              wv.READY[k], rel, int(T_BARRIER))
                wv.STATUS[k] = S_RUN
                wv.READY[k] = rel
        grp.ARR[g] = 0
        grp.BAR[g] = 0.0
    else:
        wv.READY[s] = t


def wave_end(p, s, g, t, wv, grp):
    """Wave ``s`` ends at cycle ``t`` (its last loads still count). A barrier the rest of
    the workgroup waits at opens when this was the last wave missing. Returns the
    workgroup's completion cycle when this was its last live wave, else -1."""
    wpw = p.wpw
    wv.STATUS[s] = S_DONE
    fin = float(t)
    for k in range(p.nf + p.ni):
        if wv.RREADY[s, k] > fin:
            fin = wv.RREADY[s, k]
    if fin > grp.DONE[g]:
        grp.DONE[g] = fin
    grp.LIVE[g] -= 1
    if grp.LIVE[g] > 0 and grp.ARR[g] >= grp.LIVE[g] and grp.ARR[g] > 0:
        rel = grp.BAR[g] + p.bar_cyc
        for k in range(g * wpw, g * wpw + wpw):
            if wv.STATUS[k] == S_BAR:
                wv.STATUS[k] = S_RUN
                wv.READY[k] = rel
        grp.ARR[g] = 0
    if grp.LIVE[g] == 0:
        return grp.DONE[g]
    return -1.0


# ------------------------------------------------------------------------------ the loop
def run(p, prog, sess, gmem_f, gmem_i, wv, grp, cu, sc, l1, l2, out):
    """Simulates every session (a CU with its list of workgroups) in order.

    ``p`` is the ``Params`` record, ``prog`` the ``Prog`` tables, ``sess`` the
    ``Sessions``; the state records come from ``new_state``. Session 0 is the timed CU:
    its per-workgroup completion times go to ``out.wg_done`` and its events to
    ``out.trace``. Returns nothing; results land in ``out`` and the memories.
    """
    W = p.W
    nsimd = p.nsimd
    period = p.period
    valu_cyc = p.valu
    wgs = p.wgs
    wpw = p.wpw
    cap = p.trace_cap
    code = prog.code
    srcs = prog.srcs
    counters = out.counters
    per_inst = out.per_inst
    trace = out.trace
    trace_n = out.trace_n
    probe = out.probe
    wg_done = out.wg_done
    READY = wv.READY
    STATUS = wv.STATUS
    PC = wv.PC

    for si in range(sess.cu.shape[0]):
        cu_id = sess.cu[si]
        l2i = cu_id % p.n_l2
        timed = si == 0
        first = sess.off[si]
        last = sess.off[si + 1]
        nxt = first
        l1.tag[:, :, :] = -1
        l1.lru[:, :, :] = 0
        cu.valu_free[:] = 0.0
        cu.mfma_free[:] = 0.0
        cu.cat_last[:, :] = -1.0
        cu.free[:] = 0.0
        STATUS[:] = S_EMPTY
        wv.KEY[:] = math.inf
        end_time = 0.0
        for g in range(wgs):
            if nxt < last:
                grp.IDX[g] = nxt - first
                launch_wg(g, sess.wgs[nxt], 0.0, p, prog, wv, grp, counters)
                nxt += 1
        fast = int(-1)  # the last wave issued, still known to be the earliest-ready one
        s2 = int(-1)
        bt2 = math.inf
        while True:
            s, s2, bt2 = pick_wave(wv.KEY, fast, s2, bt2)
            if s < 0:
                break
            fast = s
            pc = PC[s]
            g = wv.SLOT_WG[s]
            simd = pmod(s, nsimd)
            wave_gid = grp.ID[g] * wpw + (s - g * wpw)
            t0 = READY[s]
            opr, prod = operands_ready(srcs, pc, wv.RREADY, wv.RPROD, s, t0)
            if opr > t0:
                if prod >= 0:
                    per_inst[prod, I_STALL] += opr - t0
                counters[N_STALL] += opr - t0
                if timed and cap > 0:
                    add_trace(trace, trace_n, cap, cu_id, simd, wave_gid, t0, opr, int(T_STALL))
                READY[s] = opr
                wv.KEY[s] = opr
                continue
            op = code[pc, K_OP]
            cat = code[pc, K_CAT]
            t = issue(cat, t0, simd, period, cu)
            per_inst[pc, I_EXEC] += 1  # the instruction mix is counted from it at the end
            nxt_pc = pc + 1
            busy = float(period)  # cycles until this wave may issue again
            trace_kind = T_SALU
            if cat == CAT_VALU:
                busy = float(valu_cyc * code[pc, K_MULT])
                cu.valu_free[simd] = t + busy
                trace_kind = T_VALU
            probing = (pc == p.probe_pc and timed and grp.ID[g] == p.probe_wg
                       and s - g * wpw == p.probe_wave and probe[W, 0] == 0)
            if op <= OP_IMOV:
                if not exec_alu(op, int(code[pc, K_AUX]), code[pc, K_A], code[pc, K_B], code[pc, K_C],
                                code[pc, K_DST], s, wv.NACT[s] == W, W, wv, out.err, pc,
                                sc.ftmp, sc.itmp):
                    return
            elif op == OP_GLOAD or op == OP_GSTORE:
                if not exec_vmem(p, prog, pc, s, t, probing, l2i, gmem_f, gmem_i, wv, cu, l1, l2,
                                 sc, out):
                    return
                trace_kind = T_VMEM
            elif op == OP_ATOMIC:
                if not exec_atomic(p, prog, pc, s, t, gmem_i, wv, cu, sc, out):
                    return
                trace_kind = T_VMEM
            elif op == OP_FENCE:
                # __threadfence: s_waitcnt vmcnt(0) (this wave's global stores and loads
                # complete) with the cache maintenance of a device-scope release/acquire
                if wv.VMD[s] > t + busy:
                    counters[N_STALL] += wv.VMD[s] - t - busy
                    busy = wv.VMD[s] - t
            elif op == OP_LLOAD or op == OP_LSTORE:
                if not exec_lds(p, prog, pc, s, g, t, probing, wv, grp, cu, sc, out):
                    return
                trace_kind = T_LDS
            elif op == OP_SHFL:
                exec_shuffle(p, prog, pc, s, t, wv, cu, sc, counters)
                trace_kind = T_LDS
            elif op == OP_WRED:
                exec_wave_reduce(p, prog, pc, s, t, wv, cu, sc, counters)
                trace_kind = T_LDS
            elif op == OP_MFMA:
                exec_mfma(p, prog, pc, s, simd, t, wv, cu, sc, counters)
                trace_kind = T_MFMA
                busy = float(period)
            elif op == OP_BARRIER:
                counters[N_BARRIERS] += 1
                PC[s] = nxt_pc
                barrier_arrive(p, s, g, t, timed, cu_id, wv, grp, out)
                for k in range(g * wpw, g * wpw + wpw):
                    wv.KEY[k] = READY[k] if STATUS[k] == S_RUN else math.inf
                fast = -1
                continue
            elif op == OP_END:
                fast = -1
                tdone = wave_end(p, s, g, t, wv, grp)
                for k in range(g * wpw, g * wpw + wpw):
                    wv.KEY[k] = READY[k] if STATUS[k] == S_RUN else math.inf
                if tdone >= 0.0:
                    if tdone > end_time:
                        end_time = tdone
                    if timed and grp.IDX[g] < wg_done.shape[0]:
                        wg_done[grp.IDX[g]] = tdone
                    if nxt < last:
                        grp.IDX[g] = nxt - first
                        launch_wg(g, sess.wgs[nxt], tdone, p, prog, wv, grp, counters)
                        nxt += 1
                continue
            else:
                nxt_pc = exec_control(op, code[pc, K_A], code[pc, K_B], code[pc, K_AUX], s, pc,
                                      code[pc, K_JUMP], W, wv)
            if timed and cap > 0 and cat != CAT_NONE:
                add_trace(trace, trace_n, cap, cu_id, simd, wave_gid, t, t + busy, trace_kind)
            PC[s] = nxt_pc
            READY[s] = t + busy if cat != CAT_NONE else t
            wv.KEY[s] = READY[s]
        out.sess_cycles[si] = end_time
    # VALU / SALU / branch instructions: each row's counts times its executions (exact:
    # whole numbers), once here instead of three counter updates per issued instruction
    for pc in range(code.shape[0]):
        n = per_inst[pc, I_EXEC]
        counters[N_VALU] += n * code[pc, K_NVALU]
        counters[N_SALU] += n * code[pc, K_NSALU]
        counters[N_BRANCH] += n * code[pc, K_NBRANCH]
