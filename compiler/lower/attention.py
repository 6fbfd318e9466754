"""The lowering of the attention dispatch kind (``compiler.fusion.attention``) and the one
legality check its space (``compiler.schedule.attention``) shares: ``O = softmax(f(Q K^T))
V`` in one kernel with the online softmax (FlashAttention's algorithm), with FMA
micro-kernels (``mma=fma``) or on CDNA's matrix cores (``mma=mfma``, :class:`_MfmaBuilder`).

One workgroup owns ``BQ`` query rows of one (batch, head). It stages its Q block in LDS
once, then walks the keys in blocks of ``BK``: stage the K and V blocks in LDS, compute
the ``BQ x BK`` scores, apply the fused score chain ``f`` (scale, masks) through the
ValueEmitter, and update per row

    m_new = max(m, max_c x_c);  alpha = exp(m - m_new);  p_c = exp(x_c - m_new)
    l = l * alpha + sum_c p_c;   acc = acc * alpha + sum_c p_c V[c];   m = m_new

and finally writes ``acc / l`` (through PV's epilogue, if any). Exactly the softmax:
after the last block every p_c has been multiplied by the alphas of the later blocks,
exp(x_c - m_j) * prod exp(m_j - m_{j+1}) = exp(x_c - m_final), so acc / l = sum_c
softmax(x)_c V[c]. S and P never reach global memory: the kernel reads Q, K, V (and the
mask) and writes O.

mma=fma. Threads: ``T = waves * wave_size``; a row has ``TPR = T / BQ`` threads (consecutive
lanes). Thread ``j`` of a row computes the scores of keys ``j, j+TPR, ...`` of the block
and owns output columns ``j, j+TPR, ...`` of the row (``NV = ceil(Dv / TPR)``
accumulators). The row's maximum and sum combine the TPR partials either by xor shuffles
inside a wave (``row_stats=registers``: TPR <= wave size, each lane keeps m and l in
registers) or through an LDS array of partials with barriers (``row_stats=lds``: a row
may span waves). ``lds_pad`` (0, 1, 4 words per LDS row of Q, K and P) trades the bank
conflicts of the column walk (K rows read by TPR lanes at a stride of the head dim) for
vector reads: 0 and 4 allow 16-byte ``ds_read_b128`` along the head dim, 1 makes the
stride odd but reads are scalar. Keys past the end of a block (``Sk`` not a multiple of
``BK``) get the score -1e30 (probability 0); query rows past ``Sq`` are clamped on load
and not stored.

Numerics (what the tests hold it to, see :func:`tolerance`): the fused kernel reorders
the sums of the reference (numpy computes S, then the softmax row by row, then P @ V) and
adds one rounding per rescale, so its error grows with the number of key blocks. The
MFMA variant sums each block of k products exactly and rounds once (as gpusim models the
instruction), within the same bound.
Flash-decoding (knob ``key_splits``, default 1; FMA and MFMA tiles): the keys are
split over KS workgroups per query block and a combine kernel merges their partial
outputs, maxima and sums (:func:`lower_flash_decoding`; docs/kernels.md).

Model simplifications of the MFMA variant: its query block is one MFMA block per wave
and RM (no split of the keys over waves or workgroups); the V operand is read from LDS
one word per lane per step (a transposed V tile would allow wider reads).
"""
from __future__ import annotations

import math

from gpusim import program
from gpusim.hw import Arch

from compiler.ir.attention_pattern import AttentionPattern, match
from compiler.ir.graph import Graph
from compiler.lower.common import LoweringError, buffers, ceil_div, sanitize, tail_share
from compiler.lower.emitter import RegisterNamer, ValueEmitter, unravel
from compiler.lower.loadmerge import merge_loads

#: the score of a key past the end of the last block: exp(-1e30 - m) is exactly 0, and
#: no rescale sees -inf - -inf (every row's first block holds key 0)
NEG = -1.0e30
MMAS = ("fma", "mfma")
#: mma=mfma: the MFMA block edge M (query rows of one wave block) -> the instruction
MFMA_FOR_BLOCK = {32: "32x32x2f32", 16: "16x16x4f32"}
BQS = (16, 32, 64, 128)
BKS = (16, 32, 64)
WAVES = (1, 2, 4)
RMS = (1, 2, 4)
Q_IN = ("registers", "lds")
ROW_STATS = ("registers", "lds")
LDS_PADS = (4, 1, 0)
#: per-thread registers the score and accumulator tiles may take (of 256 VGPRs; the
#: rest holds addresses, staging values and the row statistics)
MAX_TILE_REGS = 160
F32_EPS = 2.0 ** -24
#: elements each thread copies per trip of a staging loop (loads in flight at once)
CHUNK = 8
#: flash-decoding: the key splits a schedule may take (``key_splits``; 1 = one kernel)
KEY_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 32)
#: threads per workgroup of flash-decoding's combine kernel (one thread per output element)
COMBINE_THREADS = 256
#: flash-decoding: who merges the key splits (``split_reduce``): "kernel", the combine
#: kernel; "last_wg", in the split kernel by the workgroup that arrives last at its
#: query block's atomic counter (one launch; ``compiler.lower.contraction``'s pattern)
SPLIT_REDUCES = ("kernel", "last_wg")
#: split_reduce=last_wg: registers the combine tail's partial loads of one chunk may take
#: (KS x (m, l and W columns) per column group; the split's tiles are dead by then)
TAIL_LOAD_REGS = 96


def hoist_loads(stmts: list) -> list:
    """Global loads and the integer index arithmetic before them, first: a stable
    partition that is legal because no index depends on a float value, and lets the
    loads of a block overlap instead of waiting one memory latency each."""
    first = [x for x in stmts if isinstance(x, program.Load) or
             (isinstance(x, program.Assign) and x.dst.dtype == "i32")]
    ids = {id(x) for x in first}
    return first + [x for x in stmts if id(x) not in ids]


def _merged_loads(body: tuple, wave_size: int) -> tuple:
    """The MFMA kernels' score epilogue reads a lane's four consecutive keys (4 x slot +
    0..3) of an additive mask or bias with four scalar loads; LLVM's load/store
    vectorizer merges them into one ``global_load_dwordx4`` (Swin's relative-position
    bias), so the IR says so where the first key is provably 16-byte aligned
    (``loadmerge``; the simulator's vector accesses are aligned, and so is this one:
    the lane's first key is a multiple of 4 whenever the row length is)."""
    return merge_loads(body, wave_size, frozenset(
        x.buffer for x in program.walk(body) if isinstance(x, program.Store)))


class Attention:
    """The attention of a dispatch: roles of its ops and the extents."""

    def __init__(self, graph: Graph, dispatch):
        pats = [match(graph, n) for n in dispatch.ops if graph.op(n).kind == "matmul"]
        pats = [p for p in pats if isinstance(p, AttentionPattern)]
        if len(pats) != 1:
            raise LoweringError(f"dispatch {dispatch.name!r} is not one attention "
                                f"(QK^T, row softmax, PV)")
        self.pat = p = pats[0]
        missing = [n for n in p.ops if n not in dispatch.ops]
        if missing:
            raise LoweringError(f"dispatch {dispatch.name!r} lacks {missing} of the attention")
        if len(dispatch.outputs) != 1 or \
                graph.op(dispatch.outputs[0]).type.shape != graph.op(p.pv).type.shape:
            raise LoweringError(f"dispatch {dispatch.name!r}: an attention writes one "
                                f"result of PV's shape, not {list(dispatch.outputs)}")
        self.graph, self.dispatch = graph, dispatch
        self.out = dispatch.outputs[0]
        self.q, self.kt = graph.op(p.qk).inputs
        self.v = graph.op(p.pv).inputs[1]
        self.batch, self.sq, self.sk, self.dk, self.dv = p.batch, p.sq, p.sk, p.dk, p.dv


def mfma_geometry(a: Attention, s: dict) -> dict:
    """mma=mfma: the block edge M = BQ / (waves x RM) (one MFMA block of M query rows per
    wave and RM), the instruction, its k slots, accumulators per lane, the head dim padded
    to whole k-slot runs (DP; the pad columns of Q and K are zero in LDS), the run each
    lane reads per slot (R) and its LDS read width, and V's columns padded to whole blocks."""
    m = s["BQ"] // max(s["waves"] * s["RM"], 1)
    shape = MFMA_FOR_BLOCK.get(m)
    slots = program.MFMA_WAVE // m if shape else 1
    rv = 4 if s["lds_pad"] % 4 == 0 else 1
    dp = ceil_div(a.dk, slots * rv) * slots * rv
    nacc = program.MFMA_SHAPES[shape][3] if shape else 0
    return {"M": m, "shape": shape, "slots": slots, "nacc": nacc, "DP": dp, "R": dp // slots,
            "rv": rv, "DVP": ceil_div(a.dv, m) * m if m else a.dv}


def mfma_tile_regs(a: Attention, s: dict, mg: dict) -> dict:
    """Per-lane registers of the MFMA variant's tiles: S^T and O^T accumulators, Q's run
    (q_in=registers), the K fragments of one read step and one V operand."""
    blocks_k, blocks_v = s["BK"] // mg["M"], mg["DVP"] // mg["M"]
    return {"S": s["RM"] * blocks_k * mg["nacc"], "O": s["RM"] * blocks_v * mg["nacc"],
            "Q": s["RM"] * mg["R"] if s["q_in"] == "registers" else 0,
            "frag": blocks_k * mg["rv"] + 1}


def geometry(a: Attention, s: dict, wave_size: int) -> dict:
    """Derived sizes of a schedule: threads, threads per row, tiles, LDS bytes."""
    if s.get("mma", "fma") == "mfma":
        mg = mfma_geometry(a, s)
        ls = mg["DP"] + s["lds_pad"]
        lds = {"Qs": (s["BQ"], ls)} if s["q_in"] == "lds" else {}
        krows = s["BK"] if s["q_in"] == "lds" else max(s["BK"], s["BQ"])
        # V's row stride: 16x16 blocks read rows 4 apart (slots 0 and 1) in one b32
        # phase group of 32 lanes, a 2-way conflict unless 4 rows are 16 banks apart
        vs = mg["DVP"] + (4 if mg["M"] == 16 and mg["DVP"] % 8 == 0 else 0)
        lds.update({"Ks": (krows, ls), "Vs": (s["BK"], vs)})
        return {**mg, "T": s["waves"] * program.MFMA_WAVE, "TPR": mg["slots"], "LS": ls, "VS": vs,
                "lds": lds, "lds_bytes": 4 * sum(r * c for r, c in lds.values()),
                "grid": math.prod(a.batch) * ceil_div(a.sq, s["BQ"])}
    t = s["waves"] * wave_size
    tpr = max(t * s["RM"] // s["BQ"], 1)
    nv = ceil_div(a.dv, tpr)
    pad = s["lds_pad"]
    qk_vec = 4 if a.dk % 4 == 0 and pad % 4 == 0 else 1
    p_vec = 4 if s["BK"] % 4 == 0 and pad % 4 == 0 else 1
    lds = {"Qs": (s["BQ"], a.dk + pad)} if s["q_in"] == "lds" else {}
    # q_in=registers stages the Q block through the K array once (rows: max(BQ, BK))
    krows = s["BK"] if s["q_in"] == "lds" else max(s["BK"], s["BQ"])
    lds.update({"Ks": (krows, a.dk + pad), "Vs": (s["BK"], nv * tpr),
                "Ps": (s["BQ"], s["BK"] + pad)})
    if s["row_stats"] == "lds":
        lds["Red"] = (s["BQ"], tpr)
    return {"T": t, "TPR": tpr, "NC": s["BK"] // tpr if s["BK"] >= tpr else 0, "NV": nv,
            "DVP": nv * tpr, "qk_vec": qk_vec, "p_vec": p_vec, "lds": lds,
            "lds_bytes": 4 * sum(r * c for r, c in lds.values()),
            "grid": math.prod(a.batch) * ceil_div(a.sq, s["BQ"])}


def _meta(a: Attention, s: dict, g: dict, **kernel_specific) -> dict:
    """What both micro-kernels record for the views, the search and the export."""
    return {"dispatch": a.dispatch.name, "kind": "attention", "schedule": dict(s),
            "lds_bytes": g["lds_bytes"], **kernel_specific,
            "key_blocks": ceil_div(a.sk, s["BK"]),
            "causal_skip": bool(a.pat.causal and a.sq == a.sk),
            "seq_q": a.sq, "seq_k": a.sk, "head_dim": a.dk}


def check_schedule(a: Attention, s: dict, arch: Arch) -> str:
    """'' when the schedule is legal on ``arch``, else why not (the space and the lowering
    share it). A schedule whose tiles plus the operands one step loads before its FMAs
    (the V values of a PV trip, or the K values of a QK step) exceed the VGPRs FMAs can
    use could never be allocated without spills (hipcc: 256 VGPRs + AGPR spills for
    BQ=64 BK=64 waves=1 on gfx940), so it is refused here rather than by the simulator."""
    wave_size, lds_limit, vgpr_limit = (arch.wave_size, arch.lds_bytes_per_workgroup,
                                        arch.vgprs_per_lane)
    mma = s.get("mma", "fma")
    if mma not in MMAS:
        return f"mma={mma!r} not in {MMAS}"
    why = _check_key_splits(a, s)
    if why:
        return why
    if mma == "mfma":
        return _check_mfma(a, s, arch)
    t = s["waves"] * wave_size
    if t > arch.max_block_threads:
        return f"{t} threads per workgroup, over {arch.max_block_threads}"
    if s["BQ"] % s["RM"] or (t * s["RM"]) % s["BQ"]:
        return (f"{t} threads do not split evenly over BQ={s['BQ']} rows in groups of "
                f"RM={s['RM']}")
    tpr = t * s["RM"] // s["BQ"]
    if tpr & (tpr - 1):
        return f"{tpr} threads per row is not a power of two"
    if s["BK"] % tpr:
        return f"BK={s['BK']} keys do not split over {tpr} threads per row"
    if s["row_stats"] == "registers" and tpr > wave_size:
        return (f"row_stats=registers needs a row inside one wave: {tpr} threads per row "
                f"over a wave of {wave_size}")
    g = geometry(a, s, wave_size)
    # Q staged in LDS is no cheaper once the key loop has two trips: hipcc hoists its reads
    # out of that loop (LICM), so it sits in RM x head-dim registers all the same
    # (gpusim.occupancy's hoisting rule; tests/test_attention_vgprs.py)
    hoisted = s["q_in"] == "lds" and ceil_div(a.sk, s["BK"]) > 1
    qregs = s["RM"] * a.dk if s["q_in"] == "registers" or hoisted else 0
    if s["RM"] * (g["NC"] + g["NV"]) + qregs > MAX_TILE_REGS:
        return (f"{s['RM']} rows x ({g['NC']} scores + {g['NV']} accumulators"
                + (f" + {a.dk} of Q" if qregs else "")
                + (" hoisted out of the key loop" if hoisted else "") + f") registers per thread, over "
                f"{MAX_TILE_REGS}")
    # operands in flight beside the tiles: the V values of one PV trip, or the K values of
    # one QK step (NC keys x qk_vec x the head-dim chunks loaded before their FMAs: two
    # with Q in registers, ``steps`` with Q in LDS); FMA operands live in the arch VGPRs
    # only (gfx90a/gfx942's AGPRs hold MFMA accumulators and spills, not FMA operands)
    w, chunks = g["qk_vec"], a.dk // g["qk_vec"]
    kregs = (g["NC"] * w + (s["RM"] * w if s["q_in"] == "lds" else 0)) * min(2, chunks)
    vregs = g["p_vec"] * g["NV"]
    need = s["RM"] * (g["NC"] + g["NV"]) + qregs + max(vregs, kregs)
    if need > arch.arch_vgprs_per_lane:
        return (f"{need} registers per thread (tiles + {max(vregs, kregs)} "
                + (f"V values per PV trip" if vregs >= kregs else "K values per QK step")
                + f") over the {arch.arch_vgprs_per_lane} VGPRs per lane FMAs can use")
    if g["lds_bytes"] > lds_limit:
        return f"LDS {g['lds_bytes']} B over the {lds_limit} B limit"
    return ""


def _check_key_splits(a: Attention, s: dict) -> str:
    """flash-decoding (``key_splits`` > 1): the key blocks split evenly; FMA and MFMA
    tiles alike. Under a causal mask over Sq = Sk each split stops at its query block's
    last row like the one-kernel loop, so a light query block's later splits run no key
    block (``causal_key_blocks``)."""
    ks = int(s.get("key_splits", 1))
    if ks not in KEY_SPLITS:
        return f"key_splits={ks} not in {KEY_SPLITS}"
    if s.get("split_reduce", "kernel") not in SPLIT_REDUCES:
        return f"split_reduce={s.get('split_reduce')!r} not in {SPLIT_REDUCES}"
    if ks == 1:
        return ""
    nkb = ceil_div(a.sk, s["BK"])
    if nkb % ks:
        return (f"key_splits={ks} does not divide the {nkb} key blocks of BK={s['BK']} "
                f"(Sk={a.sk}): every split walks the same number of blocks")
    return ""


def _check_mfma(a: Attention, s: dict, arch: Arch) -> str:
    wave_size, lds_limit, vgpr_limit = (arch.wave_size, arch.lds_bytes_per_workgroup,
                                        arch.vgprs_per_lane)
    if wave_size != program.MFMA_WAVE or not arch.mfma_passes:
        return f"mma=mfma needs CDNA matrix cores (wave64: gfx90a, gfx942), not {arch.name}"
    t = s["waves"] * program.MFMA_WAVE
    if t > arch.max_block_threads:
        return f"{t} threads per workgroup, over {arch.max_block_threads}"
    mg = mfma_geometry(a, s)
    if mg["shape"] is None or s["BQ"] != mg["M"] * s["waves"] * s["RM"]:
        return (f"mma=mfma: BQ={s['BQ']} must be waves x RM x 32 or x 16 (one MFMA block "
                f"of query rows per wave and RM), not {s['waves']} x {s['RM']} x "
                f"{s['BQ'] / (s['waves'] * s['RM']):g}")
    if s["BK"] % mg["M"]:
        return f"mma=mfma: BK={s['BK']} keys must be whole {mg['M']}-key MFMA blocks"
    if s["row_stats"] != "registers":
        return ("mma=mfma keeps the row statistics in registers (each lane holds one query "
                "row of the accumulators: row_stats=registers)")
    r = mfma_tile_regs(a, s, mg)
    tiles = r["S"] + r["O"] + r["Q"]
    if tiles > MAX_TILE_REGS:
        return (f"{r['S']} score + {r['O']} output accumulators"
                + (f" + {r['Q']} of Q" if r["Q"] else "") + f" registers per lane, over "
                f"{MAX_TILE_REGS}")
    if tiles + r["frag"] > vgpr_limit:
        return (f"{tiles + r['frag']} registers per lane (tiles + {r['frag']} operands) over "
                f"the {vgpr_limit} VGPRs per lane")
    g = geometry(a, s, wave_size)
    if g["lds_bytes"] > lds_limit:
        return f"LDS {g['lds_bytes']} B over the {lds_limit} B limit"
    return ""


def tolerance(a: Attention, bk: int, score_range: float, vmax: float) -> float:
    """Bound on |O_fused - O_numpy| to first order in the f32 unit roundoff u = 2^-24.

    Per output element O = sum_c p_c v_c / l:
    - the dot products Q.K are summed in another order: |dS| <= dk * u * |S|_abs, which
      is a relative error dk * u * |S|_abs on each exp (|S|_abs: the largest sum of
      |q_d k_d| times the scale, bounded by ``score_range``);
    - each p_c = exp(x_c - m_j) is rescaled by the alphas of up to nb = ceil(Sk/BK)
      later blocks; each alpha adds an exp rounding (2u) and the rounding of m_j - m_{j+1}
      (u * range); each exp(x_c - m) rounds x_c - m (u * range) and itself (2u);
    - l and acc are sums of Sk terms (Sk * u each, relative, since p_c >= 0), in the
      reference and in the fused kernel.
    All of these are relative to sum p_c |v_c| / l <= max |v|, so
    |dO| <= max|v| * u * (dk * range + nb * (2 + range) + 2 + range + 4 * Sk),
    doubled for the reference's own rounding.
    """
    nb = ceil_div(a.sk, bk)
    r = max(score_range, 1.0)
    return 2.0 * vmax * F32_EPS * (a.dk * r + nb * (2 + r) + 2 + r + 4 * a.sk)


# ------------------------------------------------------------------------- lowering
def lower_attention(graph, dispatch, schedule: dict, arch: Arch) -> program.Kernel:
    a = Attention(graph, dispatch)
    s = dict(schedule)
    why = check_schedule(a, s, arch)
    if why:
        raise LoweringError(f"dispatch {dispatch.name!r}: {why}")
    if int(s.get("key_splits", 1)) > 1:
        return lower_flash_decoding(a, s, arch)
    if s.get("mma", "fma") == "mfma":
        return _MfmaBuilder(a, s, arch.wave_size, cus=arch.num_cus).build()
    return _Builder(a, s, arch.wave_size, cus=arch.num_cus).build()


def workspace_names(a: Attention) -> tuple[str, str]:
    name = sanitize(a.dispatch.name)
    return f"{name}_fd_partial_out", f"{name}_fd_partial_stats"


def arrivals_name(a: Attention) -> str:
    return f"{sanitize(a.dispatch.name)}_fd_arrivals"


def lower_flash_decoding(a: Attention, s: dict, arch: Arch) -> program.KernelSequence:
    """Flash-decoding (knob ``key_splits`` = KS), for attentions whose query blocks alone
    leave CUs idle (decoding: one query block per head): two kernels in stream order.

    1. The split kernel: KS x (the query-block grid) workgroups; workgroup (split s,
       query block) runs the one-kernel loop over key blocks ``s*nkb/KS ..
       (s+1)*nkb/KS - 1`` and stores, unnormalised, its rows' accumulators and each
       row's running maximum m_s and sum l_s (the online softmax's state) to two f32
       workspaces: ``[KS][blocks][BQ][Dv padded]`` and ``[KS][blocks][BQ][2]``.
    2. The combine kernel: one thread per output element: M = max_s m_s, w_s =
       exp(m_s - M), O = sum_s w_s acc_s / sum_s w_s l_s, then PV's epilogue, once.
       Exactly the softmax: each acc_s and l_s is scaled by exp(m_s - M), which
       turns the split's exp(x - m_s) into exp(x - M).

    The split kernel is the FMA micro-kernel's (``mma=fma``) or the matrix cores'
    (``mma=mfma``, :class:`_MfmaBuilder`: each lane stores its O^T registers, four
    consecutive head-dim columns of its query row, and the first k slot of a row its
    (m, l)); both write the same workspaces, so one combine kernel serves both.

    ``split_reduce=last_wg``: one kernel. After its stores each split workgroup fences
    (``__threadfence``), and after a barrier one thread adds 1 to its query block's i32
    arrival counter (``AtomicAdd``, the old value through LDS, read back by every thread
    as a broadcast, so the branch is uniform). The workgroup that read ``KS - 1`` fences
    again (acquire), resets the counter to 0 for the next launch and runs the combine of
    2. for its query block's BQ x Dv outputs, its T threads on consecutive elements: the
    KS partials read back from the workspaces in split order (its own included), so the
    values are the combine kernel's bit for bit whoever arrives last. The counters are a
    zero-filled workspace (``Buffer.zeroed``) the kernel leaves zero. The second launch
    goes (3.5 us on gfx942, ``gpusim/hw``), which was half of ViT-B/16's roofline.
    """
    split_builder = _MfmaBuilder if s.get("mma", "fma") == "mfma" else _Builder
    if s.get("split_reduce", "kernel") == "last_wg":
        one = split_builder(a, s, arch.wave_size, phase="split", last_wg=True).build()
        wo, wst = workspace_names(a)
        ws = tuple(program.Buffer(b.name, b.dtype, b.shape, "out", zeroed=b.zeroed)
                   if b.name != arrivals_name(a) else b
                   for b in one.buffers if b.name in (wo, wst, arrivals_name(a)))
        meta = {**one.meta, "key_splits": int(s["key_splits"]), "split_reduce": "last_wg",
                "workspace_bytes": sum(b.size * 4 for b in ws)}
        return program.KernelSequence(one.name, (one,), ws, meta)
    split = split_builder(a, s, arch.wave_size, phase="split").build()
    combine = _Builder(a, s, arch.wave_size, phase="combine").build_combine()
    wo, wst = workspace_names(a)
    ws = tuple(program.Buffer(b.name, b.dtype, b.shape, "out")
               for b in split.buffers if b.name in (wo, wst))
    meta = {**combine.meta, "key_splits": int(s["key_splits"]),
            "workspace_bytes": sum(b.size * 4 for b in ws)}
    return program.KernelSequence(sanitize(a.dispatch.name), (split, combine), ws, meta)


class _Builder:
    def __init__(self, a: Attention, s: dict, ws: int, phase=None, last_wg=False,
                 cus: int | None = None):
        self.a, self.s, self.ws = a, s, ws
        self.cus = cus  # the arch's CUs: the key loop's trips hint (``mean_key_blocks``)
        #: None: the one-kernel attention; "split"/"combine": flash-decoding's kernels
        self.phase = phase
        #: split_reduce=last_wg: the split kernel's last arrival per query block combines
        self.last_wg = last_wg
        self.KS = int(s.get("key_splits", 1))
        self.g = geometry(a, s, ws)
        self.regs = RegisterNamer()
        self.em = ValueEmitter(a.graph, a.dispatch.ops, a.dispatch.inputs, self.regs)

    def reg(self, hint, dtype="f32"):
        return program.Var(self.regs.new(hint), dtype)

    def causal_skip(self) -> bool:
        return bool(self.a.pat.causal and self.a.sq == self.a.sk)

    def query_block(self, body: list, bid, nqb: int):
        """This workgroup's query block. Under a causal mask a query block's work grows
        with its index (it stops at its own last row), so the heaviest go first
        (workgroup 0 takes the last query block of its head): the dispatcher deals
        workgroups round-robin, the late light ones fill the CUs the heavy ones leave,
        as FlashAttention-2 orders its blocks; and gpusim times CU 0 (``gpusim.sim``),
        which then runs the critical path rather than the lightest workgroup (before
        this order, a causal attention with at most one workgroup per CU was timed at
        its first query block: one key block of up to 16)."""
        if nqb == 1:
            return program.i32(0)
        if self.causal_skip():
            return self.let(body, "qb", (nqb - 1) - bid % nqb, "i32")
        return self.let(body, "qb", bid % nqb, "i32")

    def mean_key_blocks(self) -> float | None:
        """The key loop's trips per workgroup of the timed CU (CU 0: workgroups 0, CUs,
        2 CUs...), for the analytic ranking (``program.For.trips_hint``): under a causal
        mask each query block stops at its own last row, so the loop's bound is not a
        constant (counted once without it, the ranking put 16-row query blocks 10x under
        their simulated time)."""
        a, BQ, BK = self.a, self.s["BQ"], self.s["BK"]
        if not self.causal_skip():
            return None
        total = ceil_div(a.sk, BK) // self.KS
        nqb = ceil_div(a.sq, BQ)
        nt = math.prod(a.batch) * nqb
        grid = nt * (self.KS if self.phase == "split" else 1)
        trips = []
        for w in range(0, grid, self.cus or grid):
            split, q = divmod(w, nt)
            qb = (nqb - 1) - q % nqb
            reach = ceil_div(min(qb * BQ + BQ, a.sq), BK)
            trips.append(min(max(reach - split * total, 0), total))
        return sum(trips) / len(trips)

    def workspace_tile(self, body: list, ksplit, nqb: int) -> None:
        """Where the split workgroup's partials go: tile ``split x blocks + query block``
        of the workspaces, the query block counted in the order the combine reads
        (``self.wblock``; ``self.wtile`` with the split). The workgroup's own index is
        that tile, but under a causal mask the query blocks are dealt heaviest first
        (``query_block``), so the tile is computed from the block it runs."""
        self.wblock, self.wtile = self.qblock, program.block_id()
        if ksplit is not None and self.causal_skip() and nqb > 1:
            nt = math.prod(self.a.batch) * nqb
            self.wblock = self.let(body, "wblock", self.bh * nqb + self.qb, "i32")
            self.wtile = self.let(body, "wtile_b", ksplit * nt + self.wblock, "i32")

    def causal_key_blocks(self, qb, kfirst):
        """The key loop's trips: the split's share of the key blocks (``kfirst``: its
        first block, None for the one-kernel loop); under a causal mask over Sq = Sk no
        block past the query block's last row, so a split that starts past it runs none
        (its partial (m, l, O) stays (NEG, 0, 0), which the combine weighs exp(NEG - M)
        = 0: split 0 holds key 0, which every row sees, so M is a real maximum)."""
        a, BQ, BK = self.a, self.s["BQ"], self.s["BK"]
        nkb = program.i32(ceil_div(a.sk, BK) // self.KS)
        if not self.causal_skip():
            return nkb
        last = program.minimum(qb * BQ + BQ, a.sq) if a.sq % BQ else qb * BQ + BQ
        reach = (last + (BK - 1)) // BK
        if kfirst is not None:
            reach = program.maximum(reach - kfirst, 0)
        return program.minimum(reach, nkb)

    def let(self, out: list, hint, value, dtype=None):
        v = self.reg(hint, dtype or value.dtype)
        out.append(program.Assign(v, value))
        return v

    def width(self, tensor: str, cols: int) -> int:
        """4 when the rows of ``tensor`` can be read as aligned 16-byte vectors (the
        emitter's exact offset-table test), else 1."""
        if cols % 4:
            return 1
        kinds = self.em.analyse_access(tensor, 4)
        return 4 if kinds and all(k == "vector" for k in kinds.values()) else 1

    def copy_trips(self, R: int, C: int, tensor: str, vector: bool = True) -> int:
        """Trips of ``copy_tile``'s staging loop for an R x C tile of ``tensor``."""
        w = self.width(tensor, C) if vector else 1
        cg = C // w
        n, per_trip = (R, self.g["T"] // cg) if self.g["T"] % cg == 0 else (R * cg, self.g["T"])
        per = ceil_div(n, per_trip)
        return ceil_div(per, min(per, CHUNK))

    def copy_tile(self, out: list, lds: str, R: int, C: int, LS: int, row0, limit: int,
                  tensor: str, index, it_name: str, vector: bool = True, stores=None):
        """Cooperative copy of rows ``row0 .. row0 + R`` (clamped below ``limit``), columns
        ``0 .. C`` of ``tensor`` into LDS array ``lds`` (row stride ``LS``). ``index(row,
        col)`` is the tensor index of an element; ``vector`` says that ``col`` is the
        tensor's innermost index (only then may a vector load run along it). Each thread copies ``CHUNK`` vectors
        per trip, every load issued before the first LDS store waits on one (one memory
        latency per trip, as hipcc schedules an unrolled copy). ``stores``: a list that
        takes the LDS stores (a one-trip copy only), the loads going to ``out``, so the
        loads of the next block can be issued before the math on this one."""
        T, em = self.g["T"], self.em
        w = self.width(tensor, C) if vector else 1
        cg = C // w
        fast = T % cg == 0
        rpp = T // cg if fast else 0
        n = R if fast else R * cg            # rows (fast) or vectors to cover
        per = ceil_div(n, rpp) if fast else ceil_div(n, T)
        chunk = min(per, CHUNK)
        trips = ceil_div(per, chunk)
        exact = trips * chunk * (rpp if fast else T) == n
        it = program.Var(it_name, "i32")
        body = []
        if fast:
            tr = self.let(body, "tr", self.tid // cg if cg > 1 else self.tid, "i32")
            tc = self.let(body, "tc", (self.tid % cg) * w, "i32") if cg > 1 else program.i32(0)
        items = []
        with em.scope(body):
            for u in range(chunk):
                if fast:
                    base = (it * chunk + u) * rpp if trips > 1 else program.i32(u * rpp)
                    r = self.let(body, "tr", base + tr, "i32")
                    rc = r if exact else self.let(body, "trc", program.minimum(r, R - 1), "i32")
                    col = tc
                    guard = r < R
                else:
                    base = (it * chunk + u) * T if trips > 1 else program.i32(u * T)
                    e = self.let(body, "e", base + self.tid, "i32")
                    ec = e if exact else self.let(body, "ec", program.minimum(e, n - 1), "i32")
                    rc, col = ec // cg, (ec % cg) * w
                    r, guard = rc, e < n
                src = row0 + rc
                if limit % R or not exact:
                    src = program.minimum(src, limit - 1)
                src = self.let(body, "src", src, "i32")
                idxs = [index(src, col + x if x else col) for x in range(w)]
                vals = em.values(tensor, idxs, w) if w > 1 else [em.value(tensor, idxs[0])]
                items.append((r, col, guard, vals))
            for r, col, guard, vals in items:
                at = r * LS + col
                sts = ([program.LdsStore(lds, at, tuple(vals))] if LS % w == 0 else
                       [program.LdsStore(lds, at + x, (v,)) for x, v in enumerate(vals)])
                body.extend(sts if exact else [program.If(guard, tuple(sts))])
        body = hoist_loads(body)
        if stores is not None:
            if trips != 1:
                raise LoweringError(f"a copy split from its stores must be one trip, not {trips}")
            out.extend(x for x in body if not isinstance(x, (program.LdsStore, program.If)))
            stores.extend(x for x in body if isinstance(x, (program.LdsStore, program.If)))
        elif trips == 1:
            out.extend(body)
        else:
            out.append(program.For(it, program.i32(0), program.i32(trips), 1, tuple(body)))

    # ------------------------------------------------------------ flash-decoding
    def workspaces(self, intent):
        """(partial outputs [KS][blocks][BQ][DVP], row statistics [KS][blocks][BQ][2])."""
        a, s, g = self.a, self.s, self.g
        nt = math.prod(a.batch) * ceil_div(a.sq, s["BQ"])
        wo, wst = workspace_names(a)
        return (program.Buffer(wo, "f32", (self.KS, nt, s["BQ"], g["DVP"]), intent),
                program.Buffer(wst, "f32", (self.KS, nt, s["BQ"], 2), intent))

    def store_split(self, body, bid, lrow, m, l_, accs) -> program.Kernel:
        """The split kernel's end: each thread's unnormalised accumulators (consecutive
        lanes on consecutive columns) and, by a row's first thread, its (m, l)."""
        a, s, g = self.a, self.s, self.g
        wo, wst = self.workspaces("out")
        BQ, DVP, TPR = s["BQ"], g["DVP"], g["TPR"]
        for k in range(len(lrow)):
            row = self.let(body, "wrow", bid * BQ + lrow[k], "i32")
            for e, x in enumerate(accs[k]):
                body.append(program.Store(wo.name, row * DVP + self.j + e * TPR
                                    if TPR > 1 or e else row * DVP, (x,)))
            st = program.Store(wst.name, row * 2, (m[k], l_[k]))
            body.append(st if TPR == 1 else program.If(program.as_expr(self.j).eq(0), (st,)))
        lds = tuple(program.LdsArray(name, "f32", shp, s["lds_pad"] if name in ("Qs", "Ks", "Ps")
                               else 0) for name, shp in g["lds"].items())
        return self.split_kernel(body, lds, threads_per_row=TPR)

    def split_kernel(self, body, lds, **meta) -> program.Kernel:
        """The split kernel of either builder from its body: with ``last_wg`` the arrival
        count and the last arrival's combine appended (:meth:`arrive_and_combine`)."""
        a, s, g = self.a, self.s, self.g
        params = buffers(a.graph, a.dispatch)
        extra = self.workspaces("out")
        phase = "split"
        if self.last_wg:
            self.arrive_and_combine(body)
            extra = self.workspaces("inout") + (self.arrivals(),)
            lds = lds + (program.LdsArray("lds_arrived", "i32", (1,)),)
            phase = "split_last_wg"
        else:
            params = tuple(b for b in params if b.intent == "in")
        body = self.em.provably_aligned(tuple(body), self.ws)
        if s.get("mma", "fma") == "mfma":
            body = _merged_loads(body, self.ws)
        name = f"{a.dispatch.name}_fd_split" if not self.last_wg else f"{a.dispatch.name}_fd"
        return program.Kernel(sanitize(name), _used(params, body) + extra,
                              self.KS * g["grid"], g["T"], body, lds=lds,
                              meta=_meta(a, s, g, flash_decoding=phase, **meta))

    def arrivals(self):
        """split_reduce=last_wg: one i32 arrival counter per query block (of every batch
        and head), zero between launches."""
        nt = math.prod(self.a.batch) * ceil_div(self.a.sq, self.s["BQ"])
        return program.Buffer(arrivals_name(self.a), "i32", (nt,), "inout", zeroed=True)

    def arrive_and_combine(self, body: list) -> None:
        """split_reduce=last_wg, after the split's stores: a fence, the query block's
        arrival count (thread 0's atomic add, the old value shared through LDS), and,
        only in the workgroup that arrived last, the acquire fence, the counter's reset
        and the combine of :meth:`build_combine` over this query block's BQ x Dv
        outputs, ``T`` threads on consecutive elements (the partials in split order)."""
        a, s, g, em = self.a, self.s, self.g, self.em
        BQ, DVP, KS, T = s["BQ"], g["DVP"], self.KS, g["T"]
        Sq, Dv = a.sq, a.dv
        nt = math.prod(a.batch) * ceil_div(Sq, BQ)
        wo, wst = self.workspaces("inout")
        cnt = self.arrivals()
        t0 = program.as_expr(self.tid).eq(0)
        old, seen = self.reg("arrived", "i32"), self.reg("arrivals", "i32")
        body += [program.Fence(), program.Barrier(),
                 program.If(t0, (program.AtomicAdd(old, cnt.name, self.qblock, program.i32(1)),
                                 program.LdsStore("lds_arrived", program.i32(0), (old,)))),
                 program.Barrier(),
                 program.LdsLoad((seen,), "lds_arrived", program.i32(0), broadcast=True)]
        tail: list = [program.Fence(),
                      program.If(t0, (program.Store(cnt.name, self.qblock, (program.i32(0),)),))]
        # each thread takes groups of W consecutive columns of a row (16-byte partial
        # loads and output stores where Dv allows), every group's loads of a chunk issued
        # before its first exp: the tail is one workgroup, so each trip of loads waits
        # out a whole memory latency (one trip per element made the tail 16 round trips
        # on ViT-B/16's 64 x 64 block, 7.5 us of simulated CU time)
        W = 4 if Dv % 4 == 0 and DVP % 4 == 0 else 1
        cg = Dv // W                       # column groups of a row
        n = BQ * cg
        groups = ceil_div(n, T)
        chunk = max(1, min(groups, TAIL_LOAD_REGS // (KS * (2 + W))))
        bidx = tuple(unravel(self.bh, a.batch)) if a.batch else ()
        outt = a.graph.op(a.out).type
        for u0 in range(0, groups, chunk):
            loads, maths = [], []
            for u in range(u0, min(groups, u0 + chunk)):
                e = self.let(tail, "e", self.tid + u * T if u else self.tid, "i32")
                # past the block's last group: the loads read the last group again (every
                # BQ row of the workspace was stored), only the store is guarded
                ec = self.let(tail, "ec", program.minimum(e, n - 1), "i32") \
                    if (u + 1) * T > n else e
                r = self.let(tail, "r", ec // cg, "i32")
                col = self.let(tail, "col", (ec % cg) * W, "i32")
                row = self.let(tail, "row", self.qb * BQ + r, "i32")
                wrow = self.let(tail, "wrow", self.wblock * BQ + r, "i32")
                guard = None
                if (u + 1) * T > n:
                    guard = e < n
                if Sq % BQ:
                    guard = row < Sq if guard is None else program.land(guard, row < Sq)
                ld: list = []
                stats, outs = [], []
                for h in range(KS):
                    ml = (self.reg("m"), self.reg("l"))
                    o = tuple(self.reg("o") for _ in range(W))
                    at = wrow + h * nt * BQ if h else wrow
                    ld.append(program.Load(ml, wst.name, at * 2))
                    ld.append(program.Load(o, wo.name, at * DVP + col))
                    stats.append(ml)
                    outs.append(o)
                mt: list = []
                mx = stats[0][0]
                for ml in stats[1:]:
                    mx = program.maximum(mx, ml[0])
                mx = self.let(mt, "mmax", mx)
                ws_ = [self.let(mt, "w", program.exp(m_s - mx)) for m_s, _ in stats]
                lsum = None
                for w, (_, l_s) in zip(ws_, stats):
                    lsum = w * l_s if lsum is None else program.fma(w, l_s, lsum)
                lsum = self.let(mt, "lsum", lsum)
                vals = []
                for c in range(W):
                    osum = None
                    for w, o in zip(ws_, outs):
                        osum = w * o[c] if osum is None else program.fma(w, o[c], osum)
                    vals.append(self.let(mt, "o_norm", osum / lsum))   # the combine's rounding
                st: list = []
                with em.scope(st):
                    out_vals = []
                    for c in range(W):
                        em.bound = {a.pat.pv: (lambda ix, v=vals[c]: v)}
                        out_vals.append(em.value(a.out, bidx + (row, col + c if c else col)))
                    st.append(program.Store(a.out, em.offset(outt, bidx + (row, col)),
                                            tuple(out_vals)))
                em.bound = {}
                st = hoist_loads(st)
                mt += st if guard is None else [program.If(guard, tuple(st))]
                loads += ld
                maths += mt
            tail += loads + maths
        body.append(program.If(program.as_expr(seen).eq(KS - 1), tuple(tail),
                               then_share=tail_share(KS, KS * g["grid"], self.cus)))

    def build_combine(self) -> program.Kernel:
        """Flash-decoding's combine: one thread per (batch, query row, column) element."""
        a, s, g, em = self.a, self.s, self.g, self.em
        BQ, DVP, KS = s["BQ"], g["DVP"], self.KS
        Sq, Dv = a.sq, a.dv
        nqb = ceil_div(Sq, BQ)
        nt = math.prod(a.batch) * nqb
        total = math.prod(a.batch) * Sq * Dv
        wo, wst = self.workspaces("in")
        body: list = []
        t = self.let(body, "t", program.block_id() * COMBINE_THREADS + program.thread_id(), "i32")
        tc = self.let(body, "tc", program.minimum(t, total - 1), "i32") if total % COMBINE_THREADS \
            else t
        col = self.let(body, "col", tc % Dv, "i32")
        r = self.let(body, "r", tc // Dv, "i32")
        row = self.let(body, "row", r % Sq, "i32")
        bh = self.let(body, "bh", r // Sq, "i32")
        wrow = self.let(body, "wrow", (bh * nqb + row // BQ) * BQ + row % BQ, "i32")
        stats, outs = [], []
        for h in range(KS):
            ml = (self.reg("m"), self.reg("l"))
            o = self.reg("o")
            at = wrow + h * nt * BQ if h else wrow
            body.append(program.Load(ml, wst.name, at * 2))
            body.append(program.Load((o,), wo.name, at * DVP + col))
            stats.append(ml)
            outs.append(o)
        mx = stats[0][0]
        for ml in stats[1:]:
            mx = program.maximum(mx, ml[0])
        mx = self.let(body, "mmax", mx)
        lsum = osum = None
        for (m_s, l_s), o in zip(stats, outs):
            w = self.let(body, "w", program.exp(m_s - mx))
            lsum = w * l_s if lsum is None else program.fma(w, l_s, lsum)
            osum = w * o if osum is None else program.fma(w, o, osum)
        val = self.let(body, "o_norm", osum / lsum)
        bidx = tuple(unravel(bh, a.batch)) if a.batch else ()
        outt = a.graph.op(a.out).type
        st: list = []
        with em.scope(st):
            em.bound = {a.pat.pv: (lambda ix: val)}
            v = em.value(a.out, bidx + (row, col))
            st.append(program.Store(a.out, em.offset(outt, bidx + (row, col)), (v,)))
        em.bound = {}
        st = hoist_loads(st)
        body.extend(st if total % COMBINE_THREADS == 0 else [program.If(t < total, tuple(st))])
        body = em.provably_aligned(tuple(body), self.ws)
        params = buffers(a.graph, a.dispatch)
        return program.Kernel(sanitize(f"{a.dispatch.name}_fd_combine"),
                        _used(params, body) + (wo, wst), ceil_div(total, COMBINE_THREADS),
                        COMBINE_THREADS, body,
                        meta=_meta(a, s, g, flash_decoding="combine"))

    def row_reduce(self, out: list, value, op: str, lrow):
        """The row's combined max/sum of each thread's partial ``value``."""
        tpr = self.g["TPR"]
        f = program.maximum if op == "max" else (lambda x, y: x + y)
        acc = self.let(out, f"row{op}", value)
        if tpr == 1:
            return acc
        if self.s["row_stats"] == "registers":
            off = tpr // 2
            while off:
                o = self.reg(f"sh{op}")
                out.append(program.Shuffle(o, acc, "xor", off))
                out.append(program.Assign(acc, f(acc, o)))
                off //= 2
            return acc
        base = lrow * tpr
        out.append(program.LdsStore("Red", base + self.j, (acc,)))
        out.append(program.Barrier())
        first = self.reg(f"red{op}")
        out.append(program.LdsLoad((first,), "Red", base))
        out.append(program.Assign(acc, first))
        for jj in range(1, tpr):
            o = self.reg(f"red{op}")
            out.append(program.LdsLoad((o,), "Red", base + jj))
            out.append(program.Assign(acc, f(acc, o)))
        out.append(program.Barrier())   # the partials are read before the next reduction writes
        return acc

    def build(self) -> program.Kernel:
        a, s, g, em = self.a, self.s, self.g, self.em
        BQ, BK, pad, RM = s["BQ"], s["BK"], s["lds_pad"], s["RM"]
        T, TPR, NC, NV, DVP = g["T"], g["TPR"], g["NC"], g["NV"], g["DVP"]
        D, Dv, Sq, Sk = a.dk, a.dv, a.sq, a.sk
        nqb = ceil_div(Sq, BQ)
        body = []
        self.tid = self.let(body, "tid", program.thread_id(), "i32")
        rg = self.let(body, "rg", self.tid // TPR if TPR > 1 else self.tid, "i32")
        self.j = self.let(body, "j", self.tid % TPR, "i32") if TPR > 1 else program.i32(0)
        bid = program.block_id()
        if self.phase == "split":  # workgroup = (key split, query block of a head)
            nt = math.prod(a.batch) * nqb
            ksplit = self.let(body, "ksplit", bid // nt, "i32")
            bid = self.let(body, "qblock", bid % nt, "i32")
            kfirst = self.let(body, "kfirst", ksplit * (ceil_div(Sk, BK) // self.KS), "i32")
        bh = self.let(body, "bh", bid // nqb, "i32") if nqb > 1 else bid
        qb = self.query_block(body, bid, nqb)
        self.qblock, self.bh, self.qb = bid, bh, qb   # the last arrival's combine
        self.workspace_tile(body, ksplit if self.phase == "split" else None, nqb)
        # this thread's RM rows: local rg * RM + k, global row0 + k
        lrow = [rg * RM + k if RM > 1 else rg for k in range(RM)]
        row0 = self.let(body, "row0", qb * BQ + rg * RM if RM > 1 else qb * BQ + rg, "i32")
        rows = [row0 + k if k else row0 for k in range(RM)]
        rowc = [self.let(body, "rowc", program.minimum(r, Sq - 1), "i32") if Sq % BQ else r
                for r in rows]
        bidx = tuple(unravel(bh, a.batch)) if a.batch else ()

        # Q block -> LDS, or this thread's RM rows of Q -> registers, once
        if s["q_in"] == "lds":
            self.copy_tile(body, "Qs", BQ, D, D + pad, qb * BQ, Sq, a.q,
                           lambda r, c: bidx + (r, c), "iq")
            qreg = None
        else:   # through the K array (free until the first key block): one cooperative
            # copy instead of TPR lanes loading the same row, then LDS -> registers once
            self.copy_tile(body, "Ks", BQ, D, D + pad, qb * BQ, Sq, a.q,
                           lambda r, c: bidx + (r, c), "iq")
            body.append(program.Barrier())
            wq = g["qk_vec"]
            qreg = [[] for _ in range(RM)]
            for k in range(RM):
                for d0 in range(0, D, wq):
                    regs = tuple(self.reg("q") for _ in range(wq))
                    body.append(program.LdsLoad(regs, "Ks", lrow[k] * (D + pad) + d0))
                    qreg[k] += list(regs)
        if DVP > Dv:   # V's pad columns stay zero: their accumulators are never stored
            for u in range(ceil_div(BK * (DVP - Dv), T)):
                e = self.tid + u * T
                zero = program.LdsStore("Vs", (e // (DVP - Dv)) * DVP + Dv + e % (DVP - Dv),
                                  (program.f32(0.0),))
                body.append(zero if (u + 1) * T <= BK * (DVP - Dv) else
                            program.If(e < BK * (DVP - Dv), (zero,)))

        m = [self.reg("m") for _ in range(RM)]
        l_ = [self.reg("l") for _ in range(RM)]
        accs = [[self.reg(f"acc{k}_{e}") for e in range(NV)] for k in range(RM)]
        body += [program.Assign(x, program.f32(NEG)) for x in m] + [program.Assign(x, program.f32(0.0)) for x in l_]
        body += [program.Assign(x, program.f32(0.0)) for row in accs for x in row]

        kb = program.Var("kb", "i32")
        loop = [program.Barrier()]   # Q staged / the previous block's K, V, P no longer read
        key0 = self.let(loop, "key0", (kb + kfirst) * BK if self.phase == "split" else kb * BK,
                        "i32")

        def clamp_key(k):
            return program.minimum(k, Sk - 1) if Sk % BK else k

        kop = a.graph.op(a.kt)
        rank = kop.type.rank
        if a.kt in a.dispatch.ops and kop.kind == "transpose" and tuple(kop.attrs["perm"]) \
                == tuple(range(rank - 2)) + (rank - 1, rank - 2):
            ksrc, kidx = kop.inputs[0], (lambda r, c: bidx + (r, c))   # K itself, rows = keys
        else:
            ksrc, kidx = a.kt, (lambda r, c: bidx + (c, r))            # K^T from memory
        self.copy_tile(loop, "Ks", BK, D, D + pad, key0, Sk, ksrc, kidx, "ik",
                       vector=ksrc != a.kt)
        self.copy_tile(loop, "Vs", BK, Dv, DVP, key0, Sk, a.v, lambda r, c: bidx + (r, c), "iv")
        loop.append(program.Barrier())

        # scores of rows (k) x keys j, j + TPR, ... (i): RM x NC FMAs per head-dim step
        sc = [[self.reg(f"s{k}_{i}") for i in range(NC)] for k in range(RM)]
        loop += [program.Assign(x, program.f32(0.0)) for row in sc for x in row]
        w = g["qk_vec"]
        steps = 2 if (D // w) % 2 == 0 else 1   # head-dim steps per trip, loads first
        dd = program.Var("d", "i32")
        # per-lane LDS bases computed once; the uniform rest of each address is SALU work
        # (what hipcc folds into the ds_read offset field)
        qbase = [self.let(body, "qbase", lrow[k] * (D + pad), "i32") for k in range(RM)] \
            if s["q_in"] == "lds" else []
        kbase = self.let(body, "kbase", self.j * (D + pad), "i32") if TPR > 1 else program.i32(0)

        def plus(base, uniform):
            return base + uniform if not (isinstance(uniform, program.Const) and uniform.value == 0) \
                else base
        if s["q_in"] == "registers":   # unrolled over the head dim: Q never re-read
            for h0 in range(0, D // w, 2):
                hs = range(h0, min(h0 + 2, D // w))
                kv = {(h, i): tuple(self.reg("k") for _ in range(w)) for h in hs
                      for i in range(NC)}
                loop += [program.LdsLoad(kv[h, i], "Ks", plus(kbase, program.i32(h * w + i * TPR * (D + pad))))
                         for h in hs for i in range(NC)]
                loop += [program.Assign(sc[k][i], program.fma(qreg[k][h * w + x], kv[h, i][x], sc[k][i]))
                         for h in hs for k in range(RM) for i in range(NC) for x in range(w)]
        loads, fmas = [], []
        for h in range(steps if s["q_in"] == "lds" else 0):
            qv = [tuple(self.reg("q") for _ in range(w)) for _ in range(RM)]
            kv = [tuple(self.reg("k") for _ in range(w)) for _ in range(NC)]
            loads += [program.LdsLoad(qv[k], "Qs", plus(qbase[k], dd + h * w if h else dd))
                      for k in range(RM)]
            loads += [program.LdsLoad(kv[i], "Ks", plus(kbase, dd + (h * w + i * TPR * (D + pad))
                                                  if h or i else dd))
                      for i in range(NC)]
            fmas += [program.Assign(sc[k][i], program.fma(x, y, sc[k][i]))
                     for k in range(RM) for i in range(NC) for x, y in zip(qv[k], kv[i])]
        if loads:
            loop.append(program.For(dd, program.i32(0), program.i32(D), w * steps, tuple(loads + fmas)))

        chain = []
        xs = [[None] * NC for _ in range(RM)]
        with em.scope(chain):
            keys = [self.let(chain, "key", key0 + self.j + i * TPR, "i32") for i in range(NC)]
            for k in range(RM):
                for i in range(NC):
                    em.bound = {a.pat.qk: (lambda ix, r=sc[k][i]: r)}
                    x = em.value(a.pat.scores, bidx + (rowc[k], clamp_key(keys[i])))
                    if Sk % BK:
                        x = program.select(keys[i] < Sk, x, program.f32(NEG))
                    xs[k][i] = self.let(chain, "x", x)
        em.bound = {}
        loop.extend(hoist_loads(chain))   # the mask's loads, all before the first use
        alphas = []
        for k in range(RM):
            bmax = xs[k][0]
            for x in xs[k][1:]:
                bmax = program.maximum(bmax, x)
            bmax = self.row_reduce(loop, bmax, "max", lrow[k])
            m_new = self.let(loop, "mnew", program.maximum(m[k], bmax))
            alpha = self.let(loop, "alpha", program.exp(m[k] - m_new))
            ps = [self.let(loop, "p", program.exp(x - m_new)) for x in xs[k]]
            psum = ps[0]
            for p in ps[1:]:
                psum = psum + p
            psum = self.row_reduce(loop, psum, "sum", lrow[k])
            loop.append(program.Assign(l_[k], program.fma(l_[k], alpha, psum)))
            loop.append(program.Assign(m[k], m_new))
            for i, p in enumerate(ps):
                loop.append(program.LdsStore("Ps", lrow[k] * (BK + pad) + self.j + i * TPR, (p,)))
            alphas.append(alpha)
        for k in range(RM):
            for x in accs[k]:
                loop.append(program.Assign(x, x * alphas[k]))
        loop.append(program.Barrier())

        # acc += P V over the block's keys: RM x NV FMAs per key
        pw = g["p_vec"]
        c = program.Var("c", "i32")
        pv = [tuple(self.reg("pp") for _ in range(pw)) for _ in range(RM)]
        vv = [[self.reg("vv") for _ in range(NV)] for _ in range(pw)]
        pbase = [self.let(body, "pbase", lrow[k] * (BK + pad), "i32") for k in range(RM)]
        inner = [program.LdsLoad(pv[k], "Ps", pbase[k] + c) for k in range(RM)]
        inner += [program.LdsLoad((x,), "Vs", ((c * DVP + (u * DVP + e * TPR)) if u or e else c * DVP)
                            + self.j)
                  for u in range(pw) for e, x in enumerate(vv[u])]   # the trip's loads first
        inner += [program.Assign(accs[k][e], program.fma(pv[k][u], x, accs[k][e]))
                  for u in range(pw) for k in range(RM) for e, x in enumerate(vv[u])]
        # kept a loop in hipcc's output too: fully unrolled (BK / p_vec trips), hipcc 15
        # issues every trip's P and V reads first and needs all 256 VGPRs plus AGPR spills
        # (vit_tiny, seq 17: 276 VGPRs; rolled: 85, the estimate 81)
        loop.append(program.For(c, program.i32(0), program.i32(BK), pw, tuple(inner), rolled=True))
        # this split's key blocks; under a causal mask, keys after this query block's
        # last row are masked to -1e4 or less: their probabilities are exactly 0 in f32,
        # so their blocks are skipped
        nkb = self.causal_key_blocks(qb, kfirst if self.phase == "split" else None)
        body.append(program.For(kb, program.i32(0), nkb, 1, tuple(loop),
                                trips_hint=self.mean_key_blocks()))
        if self.phase == "split":
            return self.store_split(body, self.wtile, lrow, m, l_, accs)

        # O = acc / l, through PV's epilogue
        outt = a.graph.op(a.out).type
        for k in range(RM):
            inv = self.let(body, "inv_l", program.f32(1.0) / l_[k])
            stores = []
            with em.scope(stores):
                for e in range(NV):
                    col = self.j + e * TPR
                    element = []   # the statements that store this output element
                    with em.scope(element):
                        em.bound = {a.pat.pv: (lambda ix, x=accs[k][e], y=inv: x * y)}
                        val = em.value(a.out, bidx + (rowc[k], col))
                        element.append(program.Store(a.out, em.offset(outt, bidx + (rows[k], col)), (val,)))
                    stores.extend(element if DVP == Dv else [program.If(col < Dv, tuple(element))])
            em.bound = {}
            body.extend(stores if Sq % BQ == 0 else [program.If(rows[k] < Sq, tuple(stores))])

        lds = tuple(program.LdsArray(name, "f32", shp, pad if name in ("Qs", "Ks", "Ps") else 0)
                    for name, shp in g["lds"].items())
        body = em.provably_aligned(tuple(body), self.ws)
        return program.Kernel(sanitize(a.dispatch.name), buffers(a.graph, a.dispatch), g["grid"],
                        T, tuple(body), lds=lds,
                        meta=_meta(a, s, g, threads_per_row=TPR))


def _used(params, body) -> tuple:
    """``params`` the body reads or writes."""
    names = {x.buffer for x in program.walk(body) if isinstance(x, (program.Load, program.Store))}
    return tuple(b for b in params if b.name in names)


class _MfmaBuilder(_Builder):
    """mma=mfma: the transposed products S^T = K Q^T and O^T = V^T P^T on the matrix
    cores, so that every lane holds one query row (column ``lane % M`` of both
    accumulators) and the row statistics are per lane.

    Wave w owns RM blocks of M query rows (block k: local rows ``(w * RM + k) * M ..``).
    Lane l sits in k slot ``l // M`` of the MFMA; in the accumulator layout
    (``gpusim.program.mfma_acc_elem``) register r of lane l holds row ``base(r) + 4 * slot``
    and column ``l % M``, base(r) = 8 (r // 4) + r % 4 (32x32) or r (16x16). Hence:

    - QK^T: A = the K block (keys x head dim, from LDS), B = Q^T; slot h of the MFMA sums
      the head-dim run ``h * R .. (h + 1) * R`` (consecutive words: 16-byte LDS reads, or
      registers for Q), so every d is summed once. The accumulator register r of lane l is
      the score of query ``l % M`` with key ``base(r) + 4 * slot``.
    - row statistics: a lane's partial max / sum runs over its own registers, then the
      64 / M slots holding the same query combine with xor shuffles at offsets M, 2M, ...
      (1 for 32x32, 2 for 16x16): no LDS array, no barrier. m, l and alpha are one
      register per lane and query block; the rescale is acc * alpha on every O^T register.
    - PV: O^T += V^T P^T, whose k-step t takes the key ``base(t) + 4 * slot`` in slot
      ``slot``: exactly the key the lane's S^T register t holds. So P never leaves the
      registers (no LDS round trip, no layout conversion): register t of each score block
      is the B operand of step t, and A reads V[key][dv] from LDS (consecutive lanes,
      consecutive words).
    - the output: O^T registers 4j .. 4j + 3 of a lane are 4 consecutive head-dim columns
      of its query row, one 16-byte store when Dv % 4 == 0.
    """

    def k_source(self) -> str:
        """K itself when K^T is a transpose inside the dispatch (rows = keys, vector loads
        along the head dim), else K^T as it is in memory."""
        a = self.a
        kop = a.graph.op(a.kt)
        rank = kop.type.rank
        if a.kt in a.dispatch.ops and kop.kind == "transpose" and tuple(kop.attrs["perm"]) \
                == tuple(range(rank - 2)) + (rank - 1, rank - 2):
            return kop.inputs[0]
        return a.kt

    def build(self) -> program.Kernel:
        a, s, g, em = self.a, self.s, self.g, self.em
        ksrc = self.k_source()
        g["prefetch"] = (a.sk > s["BK"] and   # one key block: nothing to overlap
                         self.copy_trips(s["BK"], a.dk, ksrc, ksrc != a.kt) == 1 and
                         self.copy_trips(s["BK"], a.dv, a.v) == 1)
        BQ, BK, RM = s["BQ"], s["BK"], s["RM"]
        M, shape, nacc, R, rv, LS = g["M"], g["shape"], g["nacc"], g["R"], g["rv"], g["LS"]
        DP, DVP, VS, slots = g["DP"], g["DVP"], g["VS"], g["slots"]
        D, Dv, Sq, Sk = a.dk, a.dv, a.sq, a.sk
        nqb = ceil_div(Sq, BQ)
        nkb_blocks, nvb = BK // M, DVP // M
        body = []
        self.tid = self.let(body, "tid", program.thread_id(), "i32")
        lane = self.let(body, "lane", program.lane(), "i32")
        wave = self.let(body, "wave", program.wave_id(), "i32")
        col = self.let(body, "col", lane % M, "i32")          # this lane's query (column)
        slot4 = self.let(body, "slot4", (lane // M) * 4, "i32")   # 4 * k slot
        bid = program.block_id()
        kfirst = None
        if self.phase == "split":  # workgroup = (key split, query block of a head)
            nt = math.prod(a.batch) * nqb
            ksplit = self.let(body, "ksplit", bid // nt, "i32")
            bid = self.let(body, "qblock", bid % nt, "i32")
            kfirst = self.let(body, "kfirst", ksplit * (ceil_div(Sk, BK) // self.KS), "i32")
        bh = self.let(body, "bh", bid // nqb, "i32") if nqb > 1 else bid
        qb = self.query_block(body, bid, nqb)
        self.qblock, self.bh, self.qb = bid, bh, qb   # the last arrival's combine
        self.workspace_tile(body, ksplit if self.phase == "split" else None, nqb)
        lrow = [self.let(body, "lrow", (wave * RM + k) * M + col, "i32") for k in range(RM)]
        rows = [self.let(body, "row", qb * BQ + lrow[k], "i32") for k in range(RM)]
        rowc = [self.let(body, "rowc", program.minimum(r, Sq - 1), "i32") if Sq % BQ else r
                for r in rows]
        bidx = tuple(unravel(bh, a.batch)) if a.batch else ()
        T = g["T"]

        def zero_fill(arr, nrows, c0, c1, stride):
            """Columns c0 .. c1 of ``nrows`` rows of ``arr`` := 0 (the head-dim pad the
            MFMA's k slots read; no copy ever writes them)."""
            w = c1 - c0
            n = nrows * w
            for u in range(ceil_div(n, T)):
                e = self.tid + u * T
                zero = program.LdsStore(arr, (e // w) * stride + c0 + e % w, (program.f32(0.0),))
                body.append(zero if (u + 1) * T <= n else program.If(e < n, (zero,)))

        krows = g["lds"]["Ks"][0]
        if DP > D:
            zero_fill("Ks", krows, D, DP, LS)
            if s["q_in"] == "lds":
                zero_fill("Qs", BQ, D, DP, LS)
        if DVP > Dv:   # V's pad columns stay zero: their accumulators are never stored
            zero_fill("Vs", BK, Dv, DVP, VS)
        # this slot's head-dim run: slot h reads run h, except that 16x16 blocks swap the
        # slots' two bits (run order 0, 2, 1, 3), so that the two slots a ds_read_b128
        # phase group serves (lanes 0-3 with 20-23, ...: rows r and r + 4 of slots h and
        # h + 1) start 2R words apart: a multiple of 32 banks when R is a multiple of 16
        # words, where R apart (R = 16 at head dim 64) is a 2-way conflict
        run = (lane // M) if M == 32 else ((lane // M) % 2) * 2 + lane // (2 * M)
        run0 = self.let(body, "run0", run * R, "i32")
        qtile = "Qs" if s["q_in"] == "lds" else "Ks"
        self.copy_tile(body, qtile, BQ, D, LS, qb * BQ, Sq, a.q,
                       lambda r, c: bidx + (r, c), "iq")
        qaddr = [self.let(body, "qaddr", lrow[k] * LS + run0, "i32") for k in range(RM)]
        qreg = None
        if s["q_in"] == "registers":   # staged through the K array, then held
            body.append(program.Barrier())
            qreg = [[] for _ in range(RM)]
            for k in range(RM):
                for t0 in range(0, R, rv):
                    regs = tuple(self.reg("q") for _ in range(rv))
                    body.append(program.LdsLoad(regs, "Ks", qaddr[k] + t0 if t0 else qaddr[k]))
                    qreg[k] += list(regs)
        kaddr = self.let(body, "kaddr", col * LS + run0, "i32")
        vaddr = self.let(body, "vaddr", slot4 * VS + col, "i32")

        m = [self.reg("m") for _ in range(RM)]
        l_ = [self.reg("l") for _ in range(RM)]
        oacc = [[tuple(self.reg(f"o{k}_{b}_") for _ in range(nacc)) for b in range(nvb)]
                for k in range(RM)]
        body += [program.Assign(x, program.f32(NEG)) for x in m] + [program.Assign(x, program.f32(0.0)) for x in l_]
        body += [program.Assign(x, program.f32(0.0)) for row in oacc for blk in row for x in blk]

        kb = program.Var("kb", "i32")
        ksrc = self.k_source()
        kidx = (lambda r, c: bidx + (r, c)) if ksrc != a.kt else (lambda r, c: bidx + (c, r))
        nkb = self.causal_key_blocks(qb, kfirst)   # this split's key blocks
        if not isinstance(nkb, program.Const):
            nkb = self.let(body, "nkb", nkb, "i32")

        def first_key(block):   # the key of this split's ``block``-th key block
            return (block + kfirst) * BK if kfirst is not None else block * BK

        def stage(out, first_key, stores=None):
            self.copy_tile(out, "Ks", BK, D, LS, first_key, Sk, ksrc, kidx, "ik",
                           vector=ksrc != a.kt, stores=stores)
            self.copy_tile(out, "Vs", BK, Dv, VS, first_key, Sk, a.v,
                           lambda r, c: bidx + (r, c), "iv", stores=stores)

        if g["prefetch"]:
            # block 0 staged before the loop; each trip loads block kb + 1 (clamped: the
            # last trip reloads its own block, never read) into registers before its math
            # and stores it to LDS after, so the load latency hides behind the MFMAs
            if s["q_in"] == "registers":
                body.append(program.Barrier())   # Q read out of the K array
            stage(body, kfirst * BK if kfirst is not None else program.i32(0))
            loop = [program.Barrier()]
            key0 = self.let(loop, "key0", first_key(kb), "i32")
            nxt = self.let(loop, "knext", first_key(program.minimum(kb + 1, nkb - 1)), "i32")
            late = []
            stage(loop, nxt, late)
        else:
            loop = [program.Barrier()]   # Q staged / the previous block's K, V no longer read
            key0 = self.let(loop, "key0", first_key(kb), "i32")
            stage(loop, key0)
            loop.append(program.Barrier())

        # S^T blocks (key block i of M keys, query block k): MFMAs over the head-dim runs
        sacc = [[tuple(self.reg(f"s{k}_{i}_") for _ in range(nacc)) for i in range(nkb_blocks)]
                for k in range(RM)]
        loop += [program.Assign(x, program.f32(0.0)) for row in sacc for blk in row for x in blk]
        def pipelined(steps):
            """(reads, MFMAs) steps with the reads of step j + 1 issued before the MFMAs
            of step j: one step's matrix work hides the next one's LDS latency."""
            out = list(steps[0][0]) if steps else []
            for j, (_, maths) in enumerate(steps):
                out += (steps[j + 1][0] if j + 1 < len(steps) else []) + maths
            return out

        steps = []   # one step: a key block's fragment run (and Q's, with the first)
        for t0 in range(0, R, rv):
            if qreg is None:
                qv = [tuple(self.reg("q") for _ in range(rv)) for _ in range(RM)]
                qreads = [program.LdsLoad(qv[k], "Qs", qaddr[k] + t0 if t0 else qaddr[k])
                          for k in range(RM)]
            else:
                qv, qreads = [qreg[k][t0:t0 + rv] for k in range(RM)], []
            for i in range(nkb_blocks):
                kv = tuple(self.reg("k") for _ in range(rv))
                reads = [program.LdsLoad(kv, "Ks", kaddr + (i * M * LS + t0) if i or t0 else kaddr)]
                steps.append((reads + (qreads if i == 0 else []),
                              [program.Mfma(sacc[k][i], kv[e], qv[k][e], shape)
                               for e in range(rv) for k in range(RM)]))
        loop += pipelined(steps)

        def base(r):   # accumulator row of register r, less the lane's 4 * slot
            return 8 * (r // 4) + r % 4 if M == 32 else r

        chain = []
        xs = [[[None] * nacc for _ in range(nkb_blocks)] for _ in range(RM)]
        with em.scope(chain):
            kk = self.let(chain, "kk", key0 + slot4, "i32")
            keys = [[self.let(chain, "key", kk + (i * M + base(r)) if i * M + base(r) else kk,
                              "i32") for r in range(nacc)] for i in range(nkb_blocks)]
            for k in range(RM):
                for i in range(nkb_blocks):
                    for r in range(nacc):
                        key = keys[i][r]
                        em.bound = {a.pat.qk: (lambda ix, x=sacc[k][i][r]: x)}
                        x = em.value(a.pat.scores, bidx + (rowc[k], program.minimum(key, Sk - 1)
                                                           if Sk % BK else key))
                        if Sk % BK:
                            x = program.select(key < Sk, x, program.f32(NEG))
                        xs[k][i][r] = self.let(chain, "x", x)
        em.bound = {}
        loop.extend(hoist_loads(chain))

        def across_slots(out, v, op):
            f = program.maximum if op == "max" else (lambda x, y: x + y)
            acc = self.let(out, f"row{op}", v)
            off = M
            while off < program.MFMA_WAVE:
                o = self.reg(f"sh{op}")
                out.append(program.Shuffle(o, acc, "xor", off))
                out.append(program.Assign(acc, f(acc, o)))
                off *= 2
            return acc

        ps = [[None] * nkb_blocks for _ in range(RM)]
        for k in range(RM):
            flat = [x for blk in xs[k] for x in blk]
            bmax = flat[0]
            for x in flat[1:]:
                bmax = program.maximum(bmax, x)
            bmax = across_slots(loop, bmax, "max")
            m_new = self.let(loop, "mnew", program.maximum(m[k], bmax))
            alpha = self.let(loop, "alpha", program.exp(m[k] - m_new))
            for i in range(nkb_blocks):
                ps[k][i] = [self.let(loop, "p", program.exp(x - m_new)) for x in xs[k][i]]
            pflat = [p for blk in ps[k] for p in blk]
            psum = pflat[0]
            for p in pflat[1:]:
                psum = psum + p
            # l stays this lane's partial sum (alpha is the same on every slot of the
            # row, m being combined): the slots' partials are added once, after the loop
            loop.append(program.Assign(l_[k], program.fma(l_[k], alpha, psum)))
            loop.append(program.Assign(m[k], m_new))
            loop += [program.Assign(x, x * alpha) for blk in oacc[k] for x in blk]

        # O^T += V^T P^T: step t of key block i takes key i*M + base(t) + 4*slot
        steps = []
        for i in range(nkb_blocks):
            for t in range(nacc):
                vv = [self.reg("v") for _ in range(nvb)]
                off = (i * M + base(t)) * VS
                steps.append(([program.LdsLoad((vv[b],), "Vs", vaddr + (off + b * M)
                                         if off + b * M else vaddr) for b in range(nvb)],
                              [program.Mfma(oacc[k][b], vv[b], ps[k][i][t], shape)
                               for k in range(RM) for b in range(nvb)]))
        loop += pipelined(steps)
        if g["prefetch"]:
            loop += [program.Barrier()] + late   # every wave is done with block kb
        body.append(program.For(kb, program.i32(0), nkb, 1, tuple(loop),
                                trips_hint=self.mean_key_blocks()))
        if self.phase == "split":
            return self.store_split_mfma(body, lrow, m, l_, oacc, slot4, across_slots, base)

        # O = acc / l through PV's epilogue; registers 4j..4j+3 are 4 consecutive columns
        outt = a.graph.op(a.out).type
        vec = 4 if Dv % 4 == 0 else 1
        for k in range(RM):
            inv = self.let(body, "inv_l", program.f32(1.0) / across_slots(body, l_[k], "sum"))
            stores = []
            with em.scope(stores):
                for b in range(nvb):
                    for r0 in range(0, nacc, vec):
                        c0 = self.let(stores, "dv", slot4 + (b * M + base(r0))
                                      if b * M + base(r0) else slot4, "i32")
                        st = []
                        with em.scope(st):
                            vals = []
                            for e in range(vec):
                                em.bound = {a.pat.pv: (lambda ix, x=oacc[k][b][r0 + e], y=inv:
                                                       x * y)}
                                vals.append(em.value(a.out, bidx + (rowc[k], c0 + e if e else c0)))
                            st.append(program.Store(a.out, em.offset(outt, bidx + (rows[k], c0)),
                                              tuple(vals)))
                        stores.extend(st if DVP == Dv else [program.If(c0 < Dv, tuple(st))])
            em.bound = {}
            body.extend(stores if Sq % BQ == 0 else [program.If(rows[k] < Sq, tuple(stores))])

        lds = tuple(program.LdsArray(name, "f32", shp, LS - D if name in ("Qs", "Ks") else VS - Dv)
                    for name, shp in g["lds"].items())
        body = _merged_loads(em.provably_aligned(tuple(body), self.ws), self.ws)
        return program.Kernel(sanitize(a.dispatch.name), buffers(a.graph, a.dispatch), g["grid"],
                        T, tuple(body), lds=lds,
                        meta=_meta(a, s, g, mfma_shape=shape, threads_per_row=slots))

    def store_split_mfma(self, body, lrow, m, l_, oacc, slot4, across_slots, base):
        """Flash-decoding's split kernel on the matrix cores, its end: each lane's O^T
        registers unnormalised (registers 4j .. 4j + 3: four consecutive head-dim columns
        of its query row, one 16-byte store; the pad columns of DVP too, never read), and
        each row's (m, l) by the row's first k slot (l summed over the slots first: each
        slot holds a partial sum of the row's keys). Rows past Sq in a ragged last query
        block are stored too: the workspace has BQ rows per block and the combine never
        reads them."""
        a, s, g = self.a, self.s, self.g
        wo, wst = self.workspaces("out")
        BQ, DVP, M, nacc = s["BQ"], g["DVP"], g["M"], g["nacc"]
        wbase = self.let(body, "wtile", self.wtile * BQ, "i32")
        for k in range(len(lrow)):
            row = self.let(body, "wrow", wbase + lrow[k], "i32")
            for b, blk in enumerate(oacc[k]):
                for r0 in range(0, nacc, 4):
                    c0 = slot4 + (b * M + base(r0)) if b * M + base(r0) else slot4
                    body.append(program.Store(wo.name, row * DVP + c0, tuple(blk[r0:r0 + 4])))
            lsum = across_slots(body, l_[k], "sum")
            body.append(program.If(program.as_expr(slot4).eq(0),
                                   (program.Store(wst.name, row * 2, (m[k], lsum)),)))
        lds = tuple(program.LdsArray(name, "f32", shp, g["LS"] - a.dk if name in ("Qs", "Ks")
                                     else g["VS"] - a.dv)
                    for name, shp in g["lds"].items())
        return self.split_kernel(body, lds, mfma_shape=g["shape"], threads_per_row=g["slots"])
