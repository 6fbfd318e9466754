"""The schedule space of a matmul/conv dispatch (see ``compiler.lower.contraction``).

Knobs: block tile ``BM x BN x BK``, thread micro-tile ``TM x TN``, ``KW`` wave groups that
split each K tile inside the workgroup (partials combined through LDS: more waves per CU
for small-M GEMMs that cannot fill the GPU with workgroups), LDS row padding ``lds_pad``
(0, 1 element: odd stride but scalar LDS reads, 4: one 16 B vector, "xor" chunks), global
load widths ``vec_a``/``vec_b`` (the widest legal, not a free knob: narrower only issues
more instructions), the output ``swizzle`` placement and ``mma``: ``fma`` (VALU
micro-tiles) or ``mfma`` (one matrix-core block per wave, CDNA only); ``prefetch`` (K
tiles of loads in flight) and, for a conv, the staging knobs ``tap_mask`` and ``k_order``
(``compiler.lower.conv``), each crossed with the tiles where it applies (issue 27).

The tiles are a short ranked list (small-M tiles with split-K first, then the classic
64x64); each is crossed with the swizzle placements, and the first tile also with every
lds_pad, so the space stays a few dozen legal points. Illegal points carry the reason.
A conv with few taps per output (depthwise) also gets the direct lowering (knob
``lowering``: gemm | direct), and every space ends its legal points with ``FALLBACK``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from gpusim.hw import Arch

from compiler.lower.common import LoweringError
from compiler.lower.common import ceil_div
from compiler.lower.contraction import (DEFAULTS, LDS_PADS, SPLITS, STREAM_K, SWIZZLES, Gemm,
                                        check_schedule)
from compiler.lower.conv import conv_geometry, tap_order_why
from compiler.lower.contraction import lower_contraction as lower  # noqa: F401  (the kind's lowering)
from compiler.lower.direct_conv import (DIRECT_PIXELS, DIRECT_WORKGROUPS, direct_applies,
                                       pixels_why)
from compiler.lower.layout import forward_index, output_maps
from compiler.schedule.common import Candidate, knob

NAME = "contraction"


@dataclass(frozen=True)
class Knobs:
    mma: str = knob(DEFAULTS["mma"], "fma: VALU micro-tiles; mfma: a matrix-core block per wave "
                              "(CDNA only; the tiles in MFMA_OPT_IN only with --fix mma=mfma, "
                              "but under stream-K on f32 matmuls)")
    BM: int = knob(DEFAULTS["BM"], "block tile rows (M)")
    BN: int = knob(DEFAULTS["BN"], "block tile columns (N)")
    BK: int = knob(DEFAULTS["BK"], "block tile depth (K) per LDS stage")
    TM: int = knob(DEFAULTS["TM"], "thread micro-tile rows")
    TN: int = knob(DEFAULTS["TN"], "thread micro-tile columns")
    KW: int = knob(DEFAULTS["KW"], "wave groups splitting each K tile (partials combined in LDS)")
    lds_pad: object = knob(DEFAULTS["lds_pad"], f"LDS row padding, one of {LDS_PADS}")
    vec_a: int = knob(DEFAULTS["vec_a"], "global load width of A (the space sets the widest legal; "
                                   "narrower is slower)")
    vec_b: int = knob(DEFAULTS["vec_b"], "global load width of B (the space sets the widest legal; "
                                   "narrower is slower)")
    swizzle: str = knob(DEFAULTS["swizzle"], f"output swizzle placement, one of {SWIZZLES}")
    lowering: str = knob("gemm", "gemm: implicit-GEMM tiles; direct: a thread per output "
                                 "(convs with few taps per output, e.g. depthwise)")
    workgroup: int = knob(64, "lowering=direct: threads per workgroup (64 or 256)")
    split_k: int = knob(DEFAULTS["split_k"], "workgroups splitting K (1: one kernel; S > 1: S "
                                      "partial sums in a workspace, then a reduction "
                                      "kernel that applies the epilogue once)")
    split_reduce: str = knob(DEFAULTS["split_reduce"], "split_k > 1 or stream_k: who sums the partials and "
                                              "runs the epilogue once: kernel (a second "
                                              "kernel) or last_wg (in the one kernel, the "
                                              "workgroup that arrives last at its tile's "
                                              "atomic counter)")
    k_order: str = knob(DEFAULTS["k_order"], "a conv's K order: layout (NCHW: (ci, ky, kx), NHWC: "
                                      "(ky, kx, ci)) or tap ((ky, kx, ci) with BK dividing "
                                      "C/G: each K tile inside one tap, its address part "
                                      "wave-uniform; compiler.lower.conv)")
    prefetch: int = knob(DEFAULTS["prefetch"], "K tiles of global loads in flight ahead of the "
                                        "math (register sets; under stream-K and uneven "
                                        "split-K the tail follows the trip count's "
                                        "parity at run time)")
    tap_mask: int = knob(DEFAULTS["tap_mask"], "k_order=layout conv: 1 keeps each staged row's "
                                        "padding test as a tap mask and its LDS store "
                                        "address in registers set before the K loop (0: "
                                        "both recomputed per K tile)")
    stream_k: int = knob(DEFAULTS["stream_k"], "stream-K persistent workgroups per CU (0: off; W > 0: "
                                        "W x CUs workgroups share the tiles x K-tiles "
                                        "iterations evenly, a fix-up kernel sums each "
                                        f"tile's segments; one of {STREAM_K})")


TILES = [  # (BM, BN, BK, TM, TN, KW), best-first prior
    (16, 32, 64, 2, 4, 8), (32, 32, 64, 4, 4, 16), (16, 32, 32, 2, 4, 4),
    (32, 32, 32, 4, 4, 4), (32, 64, 64, 4, 4, 8), (64, 32, 64, 4, 4, 8),
    (64, 64, 32, 4, 4, 4), (64, 64, 16, 4, 4, 1), (32, 64, 16, 4, 4, 1),
    (16, 64, 16, 1, 4, 1), (128, 128, 16, 8, 8, 1),
    (32, 32, 16, 8, 8, 1),      # 16 threads: less than a wave
    (128, 128, 32, 4, 4, 1),    # 1024 threads, LDS overflow with the swizzle
]


#: MFMA tiles (BM, BN, BK, TM, TN, KW): one 32x32 or 16x16 matrix-core block per wave,
#: KW wave groups splitting K; CDNA only (the same f32 peak as packed FMA on gfx942, twice
#: the FMA rate on gfx90a, S2/S3), ranked after the FMA tiles by the prior.
MFMA_TILES = [
    (32, 32, 64, 32, 32, 4), (32, 32, 128, 32, 32, 8), (32, 32, 32, 32, 32, 8),
    (32, 64, 64, 32, 32, 2), (64, 64, 32, 32, 32, 1), (16, 16, 64, 16, 16, 4),
    # two 16x16 blocks side by side along N: half the workgroups of 16x16x64 (ResNet-50's
    # 3x3 conv at 28x28: 196 workgroups, one per CU, instead of 392 with 88 CUs doubled);
    # its VGPR estimate met hipcc (38-42, gfx90a and gfx940) on the three points of that
    # conv checked (prefetch 1 and 2, tap_mask 0 and 1; docs/kernels.md)
    (16, 32, 64, 16, 16, 4),
]

#: MFMA tiles that stay opt-in (``--fix mma=mfma``); the others are default candidates on
#: every arch with matrix cores. A tile is a default candidate when gpusim's VGPR estimate
#: meets ``wavefuse check``'s rule against hipcc on every point of its class that was
#: compiled: ``tools/vgpr_sweep.py --kinds contraction --mma mfma --per-dispatch 8`` over
#: its default models (the built-ins and the three ONNX fixtures, gfx90a; 16x16x64 KW4
#: 127 of 127 points, 32x32x32 KW8 124 of 124), and the ``export --budget 3`` of every
#: built-in model checked on gfx90a and gfx940 (``tests/test_export_models.py``).
#: Opt-in, because the estimate misses and the search would rank them on an occupancy
#: they do not get: 64x64x32 KW1 (4 of 13 sampled points agree) and 32x32x64 KW4 (22 of
#: 24), where hipcc keeps the next tile's global loads, the LDS store addresses and parts
#: of the epilogue's addresses live across the first tile's MFMAs (8-28 VGPRs under);
#: 32x32x128 KW8 (124 of 133: large-K GEMMs of encoder_layer and vit_tiny, 12-32 under,
#: K loops hipcc keeps that the estimate unrolls, 64-bit gather addresses); 32x64x64 KW2
#: (8 of 8 sampled, but three points ``export`` picked miss: 68 vs 60 with K of one tile,
#: 68 vs 88 with two, 108 vs 88 with a kept 24-trip loop). Their stream-K points on f32
#: matmuls with the before_fusion swizzle are default candidates (:func:`stream_k_opt_in`:
#: there the estimate met hipcc on every kernel measured).
MFMA_OPT_IN = {(32, 32, 64, 32, 32, 4), (64, 64, 32, 32, 32, 1), (32, 64, 64, 32, 32, 2),
               (32, 32, 128, 32, 32, 8)}


def _prior(k: dict) -> tuple:
    """Smaller is tried first: FMA before MFMA, the tile's rank (the period tiles after
    the MFMA tiles), vector-padded LDS, swizzle order."""
    t = (k["BM"], k["BN"], k["BK"], k["TM"], k["TN"], k["KW"])
    pad_rank = {4: 0, "xor": 1, 0: 2, 1: 3}[k["lds_pad"]]
    tiles = MFMA_TILES if k["mma"] == "mfma" else TILES
    rank = tiles.index(t) if t in tiles else len(tiles) + k["BK"]
    return (k["mma"] == "mfma", rank, pad_rank, SWIZZLES.index(k["swizzle"]))


#: MFMA tiles for an NCHW conv of T taps (T = kH*kW > 1) whose BK is a multiple of T, so
#: the activation's taps stay fixed across the K loop (``Operand.im2col_period``; with
#: ``tap_mask=1``): (BM, BN, BK / T, TM, TN, KW, prefetch=2 offered). For a 3x3 conv BK is
#: 144 and 72. The 32x32 tile keeps one tile of prefetch: with two, hipcc took 184 VGPRs
#: against the estimate's 100 (gfx940). Their prefetch=2 points pass ``check`` against
#: hipcc (tests/test_conv_taps.py), although one register set stages 14-18 elements per
#: thread, over ``PREFETCH2_MAX_STAGED`` (a rule from an FMA tile).
PERIOD_TILES = [(16, 16, 16, 16, 16, 4, True), (16, 32, 16, 16, 16, 4, True),
                (32, 32, 8, 32, 32, 4, False)]


def period_points(gemm, arch: Arch, named: bool) -> list:
    """The legal points of :data:`PERIOD_TILES` for a conv whose activation has a tap
    period (issue 27: the layout order's ~13 VALU operators per staged element and K
    tile become one add); none for other contractions, for an integer conv (its K loop
    hipcc treats otherwise, see the prefetch rule above) or where BK would exceed K.
    ``named``: the space's points name ``prefetch`` (else only prefetch=1 points)."""
    p = gemm.A.im2col_period if gemm.kind == "conv2d" else None
    if p is None or gemm.dtype == "i32":
        return []
    va, vb = gemm.A.max_vec[gemm.A.inner], gemm.B.max_vec[gemm.B.inner]
    out = []
    for bm, bn, per, tm, tn, kw, deep in PERIOD_TILES:
        bk = per * p[0]
        if bk > gemm.K:
            continue
        for swz, pf in itertools.product(SWIZZLES, (1, 2) if deep and named else (1,)):
            if pf == 2 and ceil_div(gemm.K, bk) <= 2:
                continue
            knobs = {"mma": "mfma", "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn,
                     "KW": kw, "lds_pad": 4, "vec_a": va, "vec_b": vb, "swizzle": swz,
                     "k_order": "layout", "tap_mask": 1}
            if named:
                knobs["prefetch"] = pf
            if not check_schedule(gemm, knobs, arch):
                out.append(Candidate(knobs, True, ""))
    return out


def check_outputs(graph, dispatch) -> str:
    """The part of :func:`check` an epilogue merge can change: every output is the
    result, a tensor computed beside it element for element, or a view the tile maps its
    index through (``lower.layout``: no slice, no reshape that splits or merges dims),
    with the result's element count. '' when so, else why not."""
    root = graph.op(dispatch.root)
    try:
        maps = output_maps(graph, dispatch, root.name)
        for path in maps.values():
            forward_index(graph, path, (0,) * root.type.rank)
    except LoweringError as e:
        return str(e)
    for o in dispatch.outputs:
        if graph.op(o).type.size != root.type.size:
            return (f"dispatch {dispatch.name!r}: output {o!r} has shape "
                    f"{graph.op(o).type.shape}, not the root's {root.type.shape} or a "
                    f"view of it")
    return ""


def _structure(graph, dispatch):
    """The dispatch's GEMM view, or why no tile can compute it: an output the tile cannot
    write (:func:`check_outputs`) or an operand it cannot address (the same refusals as
    ``lower_contraction``)."""
    why = check_outputs(graph, dispatch)
    if why:
        return why
    try:
        return Gemm(graph, dispatch)
    except LoweringError as e:
        return str(e)


def check(graph, dispatch) -> str:
    """'' when the space has a legal point (``FALLBACK`` fits every arch: 256 threads,
    10 KiB of LDS, scalar loads), else why not. Fusion asks :func:`check_outputs` before
    every merge that touches a contraction (``passes.core``): the operands, the other
    part, are the root's own whatever joins its epilogue."""
    gemm = _structure(graph, dispatch)
    return gemm if isinstance(gemm, str) else ""


def contraction_space(graph, dispatch, arch: Arch) -> list[Candidate]:
    """Every candidate schedule of a contraction dispatch, legal ones first."""
    gemm = _structure(graph, dispatch)
    if isinstance(gemm, str):
        return [Candidate({}, False, gemm)]
    va = gemm.A.max_vec[gemm.A.inner]
    vb = gemm.B.max_vec[gemm.B.inner]
    legal, illegal = [], []
    points = [("fma", ti, t) for ti, t in enumerate(TILES)]
    points += [("mfma", ti, t) for ti, t in enumerate(MFMA_TILES)]
    for mma, ti, (bm, bn, bk, tm, tn, kw) in points:
        first = ti == 0 and mma == "fma"
        for pad, swz in itertools.product(LDS_PADS if first else (4,), SWIZZLES):
            knobs = {"mma": mma, "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": kw,
                     "lds_pad": pad, "vec_a": va, "vec_b": vb, "swizzle": swz}
            why = check_schedule(gemm, knobs, arch)
            if why and mma == "mfma" and not arch.mfma_passes:
                if ti or swz != SWIZZLES[0]:
                    continue  # one illegal point says why, not the whole MFMA list
            opt_in = "mma" if mma == "mfma" and (bm, bn, bk, tm, tn, kw) in MFMA_OPT_IN \
                else ""
            (illegal if why else legal).append(Candidate(knobs, not why, why, opt_in))
    base = {"mma": "fma", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "KW": 1,
            "lds_pad": 4, "vec_a": va, "vec_b": vb, "swizzle": "none"}
    for name, best in (("vec_a", va), ("vec_b", vb)):
        if best < 4:
            knobs = {**base, name: 4}
            illegal.append(Candidate(knobs, False,
                                     check_schedule(gemm, knobs, arch)))
    n_plain = len(legal)
    tap_legal, tap_illegal = tap_points(graph, dispatch, gemm, arch)
    if gemm.A.im2col_mask is not None:  # tap_mask=1 on each vector-padded point
        legal += [Candidate({**c.knobs, "tap_mask": 1}, True, "", c.opt_in)
                  for c in legal if c.knobs["lds_pad"] == 4]
    legal += tap_legal
    if len(legal) + len(tap_illegal) > n_plain:  # every point names both (pins match them)
        for c in legal + illegal:
            c.knobs = {**c.knobs, "k_order": c.knobs.get("k_order", "layout"),
                       "tap_mask": c.knobs.get("tap_mask", 0)}
    # two tiles of prefetch on each vector-padded point with more than two K tiles (with
    # fewer it is the same kernel); every point then names the knob. Not for an integer
    # GEMM (i32 accumulator): hipcc treats its K loop differently (kept, every fragment
    # read hoisted: docs/dtypes.md) and MatMulInteger's 4-K-tile GEMM with prefetch=2 took
    # 324-328 VGPRs under hipcc on gfx90a against an estimate of 67 (one wave per SIMD)
    deep = [Candidate({**c.knobs, "prefetch": 2}, True, "", c.opt_in) for c in legal
            if c.knobs["lds_pad"] == 4 and ceil_div(gemm.K, c.knobs["BK"]) > 2
            and staged_per_thread(c.knobs) <= PREFETCH2_MAX_STAGED
            and gemm.dtype != "i32"]
    deep = [c for c in deep if not check_schedule(view(gemm, c.knobs), c.knobs, arch)]
    if deep:
        for c in legal + illegal + tap_illegal:
            c.knobs = {**c.knobs, "prefetch": 1}
        legal += deep
    legal += period_points(gemm, arch, bool(deep))
    legal.sort(key=lambda c: _prior(c.knobs))
    out = legal + [fallback_candidate(gemm, arch)] + illegal + tap_illegal
    out = with_direct_conv(graph, dispatch, with_stream_k(gemm, with_split_k(gemm, out, arch), arch))
    for name, off in (("split_k", 1), ("stream_k", 0), ("k_order", "layout"), ("tap_mask", 0),
                      ("prefetch", 1)):
        if any(name in c.knobs for c in out):
            # the direct conv is one kernel too: ``--fix split_k=1`` (``stream_k=0``)
            # keeps it in the running; it has no K order either
            for c in out:
                if c.knobs.get("lowering") == "direct":
                    c.knobs = {**c.knobs, name: off}
    return out


def tap_points(graph, dispatch, gemm, arch: Arch) -> tuple[list, list]:
    """(legal, illegal) ``k_order=tap`` points of a conv (``compiler.lower.conv``): each
    tile (vector-padded LDS rows) whose BK divides C/G, crossed with the swizzle
    placements, on the tap-ordered GEMM view (kept as ``gemm.tap_view`` for the split-K
    and stream-K points built on them); a conv the order cannot stage gets one illegal
    point saying why. A matmul gets none."""
    gemm.tap_view = None
    if gemm.kind != "conv2d":
        return [], []
    why = tap_order_why(gemm.geo)
    if why:
        return [], [Candidate({**FALLBACK, "k_order": "tap"}, False, why)]
    tg = gemm.tap_view = Gemm(graph, dispatch, "tap")
    va, vb = tg.A.max_vec[tg.A.inner], tg.B.max_vec[tg.B.inner]
    # the order makes an OIHW filter strided along K (scalar filter loads, 1/9 of each
    # line per tile of a 3x3): slower than the layout order on every ResNet-50 3x3 tile
    # measured (docs/kernels.md), so there it is opt-in (``--fix k_order=tap``)
    strided = "k_order" if vb < gemm.B.max_vec[gemm.B.inner] else ""
    legal, illegal = [], []
    points = [("fma", t) for t in TILES] + [("mfma", t) for t in MFMA_TILES]
    for mma, (bm, bn, bk, tm, tn, kw) in points:
        for swz in SWIZZLES:
            knobs = {"mma": mma, "BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn, "KW": kw,
                     "lds_pad": 4, "vec_a": va, "vec_b": vb, "swizzle": swz, "k_order": "tap"}
            why = check_schedule(tg, knobs, arch)
            if why and (mma == "mfma" and not arch.mfma_passes or illegal):
                continue  # one illegal point says why
            opt_in = "mma" if mma == "mfma" and (bm, bn, bk, tm, tn, kw) in MFMA_OPT_IN \
                else strided
            (illegal if why else legal).append(Candidate(knobs, not why, why, opt_in))
    return legal, illegal


#: prefetch=2 is offered where one register set stages at most this many elements per
#: thread: a 64-thread 32x32x16 FMA tile (16 per set) took 298 VGPRs under hipcc and
#: spilled, against gpusim's estimate of 220 (tests/test_conv_taps.py)
PREFETCH2_MAX_STAGED = 8


def staged_per_thread(k: dict) -> int:
    """Elements of A and B one thread stages per K tile."""
    threads = (k["BM"] // k["TM"]) * (k["BN"] // k["TN"]) * k["KW"]
    if k["mma"] == "mfma":
        threads *= 64  # one wave per TM x TN block (wave64: MFMA is CDNA only)
    return ceil_div(k["BM"] * k["BK"], threads) + ceil_div(k["BK"] * k["BN"], threads)


def view(gemm, knobs: dict):
    """The GEMM view a point's knobs were checked on (``k_order=tap``: the tap order's)."""
    return gemm.tap_view if knobs.get("k_order") == "tap" else gemm


def with_split_k(gemm, space: list, arch: Arch) -> list:
    """Split-K points for a GEMM whose tile grid does not fill the GPU: each point whose
    tiles number fewer than the CUs (with the vector-padded LDS rows) also gets one of
    the legal splits S (``lower.contraction.SPLITS`` up to its K tiles, even or not): the
    smallest that gives every CU a workgroup, else the largest (``split_k`` = 1 stays
    the one-kernel GEMM; more splits only add workspace traffic once every CU has a
    workgroup, fewer leave CUs idle); a point with no legal split gets one illegal point
    saying why. The split point of the best-ranked tile nearest one workgroup per CU is
    tried whatever the budget (``always``), so the search always weighs a split against
    the sampled tiles. A dispatch whose tiles fill the GPU gets no ``split_k`` knob.
    Each such tile also gets one ``split_reduce=last_wg`` point (the last-arriving
    workgroup reduces: one launch), at the largest S whose workgroups are one round on
    the CUs (below); the always-tried split is that point where
    legal (one launch less: it beat its two-kernel twin on every point compared,
    docs/kernels.md)."""
    extra, first = [], None
    for c in space:
        if not c.legal or c.fallback:
            continue
        k = c.knobs
        grid = gemm.batch * ceil_div(gemm.M, k["BM"]) * ceil_div(gemm.N, k["BN"])
        if grid >= arch.num_cus or k["lds_pad"] != 4:
            continue  # the padding choice is the one-kernel space's (first tile only)
        ok = [S for S in SPLITS[1:] if not check_schedule(view(gemm, k), {**k, "split_k": S}, arch)]
        under = [S for S in ok if grid * S < arch.num_cus]
        fills = [S for S in ok if grid * S >= arch.num_cus]
        tries = fills[:1] or under[-1:]
        if not tries:
            knobs = {**k, "split_k": SPLITS[1]}
            extra.append(Candidate(knobs, False, check_schedule(view(gemm, k), knobs, arch),
                                   c.opt_in))
        # reduced in the one kernel by each tile's last arrival: the largest split whose
        # workgroups are one round on the CUs (a partial second round costs a whole one:
        # ResNet-50's 7x7 conv on 16x16 MFMA tiles, 128 tiles, S = 2 15.5 us, S = 3 21.6,
        # docs/kernels.md), else the smallest
        one_round = [S for S in ok if grid * S <= arch.num_cus]
        lw = (one_round[-1] if one_round else ok[0]) if ok else None
        twin = None
        if lw is not None:
            one = {**k, "split_k": lw, "split_reduce": "last_wg"}
            why = check_schedule(view(gemm, k), one, arch)
            twin = Candidate(one, not why, why, c.opt_in)
            extra.append(twin)
        for S in tries:
            cand = Candidate({**k, "split_k": S, "split_reduce": "kernel"}, True, "", c.opt_in)
            extra.append(cand)
            if not c.opt_in and first is None and grid * S >= arch.num_cus:
                first = twin if twin is not None and twin.legal else cand
    if not extra:
        return space
    if first is None:  # no split reaches a workgroup per CU: the largest legal one
        first = max((c for c in extra if c.legal and not c.opt_in),
                    key=lambda c: c.knobs["split_k"], default=None)
    if first is not None:
        first.always = True
    for c in space:  # the fallback keeps exactly FALLBACK's knobs (one kernel)
        if c.knobs and not c.fallback:
            c.knobs = {**c.knobs, "split_k": 1}
    legal = [c for c in space if c.legal and not c.fallback]
    rest = [c for c in space if not (c.legal and not c.fallback)]
    return legal + [c for c in extra if c.legal] + rest + [c for c in extra if not c.legal]


def stream_k_opt_in(gemm, c) -> str:
    """The opt-in reason of a one-kernel point's stream-K points: a matmul's
    :data:`MFMA_OPT_IN` tile is a default candidate under stream-K. Its partial kernel
    has none of what makes the one-kernel tile's estimate miss (docs/kernels.md,
    "Larger MFMA tiles under stream-K"): the K loop's bounds are the segment's, known at
    run time only, so hipcc keeps the loop (no peeled first tile whose next-tile loads
    and store addresses live across its MFMAs, no constant trip count to unroll), inside
    a rolled segment loop, and the accumulators go raw to the workspace (no epilogue
    addresses). Measured: the estimate meets ``check``'s rule against hipcc on all 240
    partial kernels of the four tiles x stream_k 1, 2 x the three swizzles on BERT-base's
    FFN GEMMs and ViT-B/16's QKV and FFN GEMMs, gfx90a and gfx940. Only with ``swizzle``
    before_fusion: there the fix-up kernel stores its slot sums to LDS before a barrier
    and its epilogue reads come after it, and the estimate met hipcc on all 80 of those
    fix-ups; with none / after_fusion hipcc issues every slot load and the epilogue's
    guarded bias loads before the first add and holds each row's index, 67-101 VGPRs
    where 38-86 are estimated, on 51 of 160 (a gap the default 32x32x32 KW8 tile's
    fix-up shares: 38 vs 67 on ViT-B/16's QKV GEMM). Not convs (their partial kernels
    carry the im2col address), nor bf16 / int8 MFMAs: not measured. Everything else
    keeps the point's reason, but a 1x1 conv's 32x64x64 KW2 points
    (:data:`STREAM_K_1X1_CONV_TILES`)."""
    t = tuple(c.knobs[n] for n in ("BM", "BN", "BK", "TM", "TN", "KW"))
    f32 = (getattr(gemm, "mfma_kind", "f32") or "f32") == "f32" and gemm.dtype == "f32"
    if gemm.kind == "conv2d":
        one_tap = gemm.geo["kh"] == gemm.geo["kw"] == 1
        ok = one_tap and t in STREAM_K_1X1_CONV_TILES
    else:
        ok = t in MFMA_OPT_IN
    if c.opt_in == "mma" and ok and f32 and c.knobs["swizzle"] == "before_fusion":
        return ""
    return c.opt_in


#: The MFMA_OPT_IN tiles whose stream-K points (before_fusion swizzle) are default
#: candidates on a 1x1 conv: its im2col address has no taps (a strided pixel gather:
#: ResNet-50's stride-2 downsamples, whose 32-column tiles re-read the activation once per
#: column tile). Measured (fill27, 2026-12-02): ``check`` agrees with hipcc on gfx90a and
#: gfx940, no scratch, on the partial and fix-up kernels of ResNet-50's d15, d28, d47
#: (1x1 stride 2; stream_k 1 and 2) and d29 (1x1 stride 1 with the residual; stream_k 1):
#: the estimate is over hipcc's count on the partials (112-136 vs 96-104) and within 1 on
#: the fix-ups. 64x64x32 KW1 is not among them: on d47 hipcc spilled 10 VGPRs of the
#: fix-up into AGPRs and on d29 merged the fix-up's LDS stores to 16 bytes.
STREAM_K_1X1_CONV_TILES = {(32, 64, 64, 32, 32, 2)}


#: stream-K is offered where the one-kernel grid leaves a partial last wave of at most
#: this many waves in all (further on, the tail is a small part of the time)
STREAM_K_MAX_WAVES = 4


def with_stream_k(gemm, space: list, arch: Arch) -> list:
    """Stream-K points (``stream_k`` = 1: one persistent workgroup per CU, and 2: two,
    where the rule allows that too) for each legal one-kernel point (vector-padded LDS
    rows) whose tile grid does not divide evenly over the CUs, with under
    ``STREAM_K_MAX_WAVES`` waves: there the last wave leaves CUs idle (or, under one
    wave, most of them). Where the rule refuses W = 1 (too few MAC-loop iterations, the
    i32 index range), the first such point is kept illegal with the reason, and the
    dispatch keeps its other lowerings. The best-ranked legal stream-K
    point is tried whatever the budget (``always``), so the search weighs it against
    the one-kernel tiles and split-K. A dispatch with no such tile gets no ``stream_k``."""
    extra = []
    for c in space:
        k = c.knobs
        if not c.legal or c.fallback or k.get("split_k", 1) != 1 or k["lds_pad"] != 4:
            continue
        grid = gemm.batch * ceil_div(gemm.M, k["BM"]) * ceil_div(gemm.N, k["BN"])
        if grid % arch.num_cus == 0 or grid >= STREAM_K_MAX_WAVES * arch.num_cus:
            continue
        knobs = {**k, "stream_k": 1}
        why = check_schedule(view(gemm, k), knobs, arch)
        if why and any(not e.legal for e in extra):
            continue
        opt_in = stream_k_opt_in(gemm, c)
        extra.append(Candidate(knobs, not why, why, opt_in))
        two = {**k, "stream_k": 2}
        if not why and not check_schedule(gemm, two, arch):
            # two workgroups per CU, each walking half the share: where two fit a CU,
            # one's global loads hide behind the other's math (the search weighs it)
            extra.append(Candidate(two, True, "", opt_in))
            # and its fix-up done in the one kernel by each tile's last arrival
            # (``split_reduce=last_wg``): the second launch goes, and with two workgroups
            # on a CU one's fix-up runs beside the other's MAC loop. Only at W = 2 (at
            # W = 1 the fix-ups run on otherwise idle CUs): BERT-base's FFN down GEMM
            # (128 x 768 x 3072, 32x32x64 MFMA KW 4) 19.45 -> 17.49 us, its FFN up
            # GEMM with GELU 17.57 -> 22.39 (the erf epilogue on the last arrivals), so
            # the search weighs the two
            last = {**two, "split_reduce": "last_wg"}
            if not check_schedule(gemm, last, arch):
                extra.append(Candidate(last, True, "", opt_in))
    if not extra:
        return space
    first = next((c for c in extra if c.legal and not c.opt_in), None)
    if first is not None:
        first.always = True
    # a 1x1 conv's 64-column MFMA tile (``STREAM_K_1X1_CONV_TILES``) is tried too, at its
    # largest W: it halves the activation's re-reads, which bound ResNet-50's stride-2
    # downsamples in the model, and a cold tune's ranking reached it on one of three
    # (d28, not d15 and d47, where a tune of the dispatch alone did; docs/kernels.md)
    wide = [c for c in extra if c.legal and not c.opt_in and gemm.kind == "conv2d"
            and tuple(c.knobs[n] for n in ("BM", "BN", "BK", "TM", "TN", "KW"))
            in STREAM_K_1X1_CONV_TILES]
    if wide:
        max(wide, key=lambda c: c.knobs["stream_k"]).always = True
    for c in space:  # the fallback keeps exactly FALLBACK's knobs (one kernel)
        if c.knobs and not c.fallback and c.knobs.get("lowering") != "direct":
            c.knobs = {**c.knobs, "stream_k": 0}
    legal = [c for c in space if c.legal and not c.fallback]
    rest = [c for c in space if not (c.legal and not c.fallback)]
    return legal + [c for c in extra if c.legal] + rest + [c for c in extra if not c.legal]


def with_direct_conv(graph, dispatch, space: list) -> list:
    """A conv with few taps per output (depthwise) also gets the direct lowering
    (``compiler.lower.direct_conv``), tried whatever the budget; the knob ``lowering`` (gemm |
    direct) then tells them apart."""
    if direct_applies(graph, graph.op(dispatch.root)):
        return space
    for c in space:
        c.knobs = {"lowering": "gemm", **c.knobs}
    direct = [Candidate({"lowering": "direct", "workgroup": wg}, always=True)
              for wg in DIRECT_WORKGROUPS]
    if _reads_channels_last(graph, dispatch):
        # an NCHW conv whose input is stored channels-last: lanes on channels read it
        # along its contiguous axis (``direct_conv.DIRECT_ORDERS``)
        direct += [Candidate({"lowering": "direct", "workgroup": wg, "order": "channels"},
                             always=True) for wg in DIRECT_WORKGROUPS]
    # several outputs along x per thread (``direct_conv.DIRECT_PIXELS``, lanes on
    # channels): the filter taps held across them, each window element read once, vector
    # stores. Offered on NCHW inputs too: a lane's window rows then lie in its own
    # channel's plane, one line per lane per load, but each line serves the lane's next
    # columns from the L1 (ConvNeXt-T's later 56x56 depthwise convs: 16.85 us with one
    # output per thread, lanes on pixels, 9.66 with four, lanes on channels; simulated)
    geo = conv_geometry(graph, graph.op(dispatch.root))
    direct += [Candidate({"lowering": "direct", "workgroup": wg, "order": "channels",
                          "pixels": px}, always=True)
               for px in DIRECT_PIXELS[1:] for wg in DIRECT_WORKGROUPS
               if not pixels_why(geo, px, "channels")]
    return direct + space


def _reads_channels_last(graph, dispatch) -> bool:
    """The conv is NCHW and its activation is a transpose (a view in the dispatch) of a
    stored tensor whose last axis is the conv's channel axis."""
    root = graph.op(dispatch.root)
    if conv_geometry(graph, root)["fmt"] != "NCHW":
        return False
    x = graph.op(root.inputs[0])
    while x.kind in ("reshape",) and x.name in dispatch.ops:
        x = graph.op(x.inputs[0])
    if x.kind != "transpose" or x.name not in dispatch.ops:
        return False
    perm = tuple(int(p) for p in x.attrs["perm"])
    return len(perm) == 4 and perm[1] == len(perm) - 1


#: The always-lowerable point: 256 threads (a whole number of waves on wave32 and wave64),
#: 10 KiB of LDS, scalar global loads (legal whatever the operands' alignment), no split-K
#: and no swizzle; the guards on M, N and K make it correct at every size.
FALLBACK = {"mma": "fma", "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "KW": 1,
            "lds_pad": 4, "vec_a": 1, "vec_b": 1, "swizzle": "none"}


def fallback_candidate(gemm, arch: Arch) -> Candidate:
    why = check_schedule(gemm, FALLBACK, arch)
    return Candidate(dict(FALLBACK), not why, why, fallback=True)


space = contraction_space
