"""Small kernels with answers derivable by hand, written in the IR.

They are the simulator's known-answer tests and the benchmark mix: strided loads
(coalescing), a stream (HBM bandwidth), a tile transpose through LDS with and without
padding (bank conflicts), a b128 LDS pattern that only the measured phase grouping keeps
conflict-free, a barrier-bound kernel, a row reduction (WaveReduce + Shuffle + LDS) and an
LDS-tiled matmul, and a matrix-core GEMM (``mfma_gemm``, CDNA only).
"""
from __future__ import annotations

import numpy as np

from gpusim.program import (
    MFMA_SHAPES, Assign, Barrier, Buffer, For, If, Kernel, LdsArray, LdsLoad, LdsStore, Load,
    Mfma, Scalar,
    ScalarRef, Shuffle, Store, Var, WaveReduce, block_id, f32, fma, i32, lane, thread_id, wave_id,
)


def strided_load(stride: int, width: int = 1, offset: int = 0, block: int = 64,
                 grid: int = 1, dtype: str = "f32") -> Kernel:
    """Thread t loads ``width`` elements at ``offset + t * stride`` and stores their sum."""
    n = offset + (block * grid - 1) * stride + width
    regs = tuple(Var(f"x{i}") for i in range(width))
    gid, acc = Var("gid", "i32"), Var("acc")
    total = regs[0]
    for r in regs[1:]:
        total = total + r
    body = (
        Assign(gid, block_id() * block + thread_id()),
        Load(regs, "a", gid * stride + offset),
        Assign(acc, total),
        Store("out", gid, (acc,)),
    )
    return Kernel(f"strided_load_s{stride}_w{width}_o{offset}",
                  (Buffer("a", dtype, (n,)), Buffer("out", "f32", (block * grid,), "out")),
                  grid=grid, block=block, body=body)


def quad_gather(offsets, loads: int) -> Kernel:
    """One wave: lane l reads ``a[offsets[l]]`` once to warm the L1 (and waits for it),
    then ``loads`` more times into distinct registers, back to back. With every line an L1
    hit, the extra loads are paced by the vL1D pipe alone: one cycle per TCP access, so
    each costs its quads' distinct lines, however few lines the whole wave touches."""
    offsets = [int(o) for o in offsets]
    assert len(offsets) == 64
    idx, warm, acc = Var("idx", "i32"), Var("warm"), Var("acc")
    regs = [Var(f"x{i}") for i in range(loads)]
    total = warm
    for r in regs:
        total = total + r
    body = (
        Load((idx,), "offsets", thread_id()),
        Load((warm,), "a", idx),
        Assign(acc, warm),  # s_waitcnt: the lines are in the L1 from here on
    ) + tuple(Load((r,), "a", idx) for r in regs) + (
        Assign(acc, total + acc),
        Store("out", thread_id(), (acc,)),
    )
    return Kernel(f"quad_gather_{loads}",
                  (Buffer("offsets", "i32", (64,)), Buffer("a", "f32", (max(offsets) + 1,)),
                   Buffer("out", "f32", (64,), "out")),
                  grid=1, block=64, body=body)


def stream_copy(n: int, block: int = 256, width: int = 4) -> Kernel:
    """b[i] = a[i] with ``width``-element vectors: the bandwidth-bound stream."""
    per_block = block * width
    assert n % per_block == 0
    regs = tuple(Var(f"v{i}") for i in range(width))
    i = Var("i", "i32")
    body = (Assign(i, (block_id() * block + thread_id()) * width),
            Load(regs, "a", i), Store("b", i, regs))
    return Kernel(f"stream_copy_x{width}", (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n,), "out")),
                  grid=n // per_block, block=block, body=body)


def lds_transpose(n: int = 32, pad: int = 0) -> Kernel:
    """out = in.T for an n x n f32 matrix, one 32x32 tile per 1024-thread workgroup.

    Rows are written to the LDS tile and columns read back; without padding every column
    read puts 32 lanes of a phase on one bank (31 conflict cycles per half-wave).
    """
    T = 32
    tiles = n // T
    tid, r, c, bi, bj = (Var(x, "i32") for x in ("tid", "r", "c", "bi", "bj"))
    x = Var("x")
    body = (
        Assign(tid, thread_id()),
        Assign(r, tid // T), Assign(c, tid % T),
        Assign(bi, block_id() // tiles), Assign(bj, block_id() % tiles),
        Load((x,), "inp", (bi * T + r) * n + bj * T + c),
        LdsStore("tile", r * (T + pad) + c, (x,)),
        Barrier(),
        LdsLoad((x,), "tile", c * (T + pad) + r),
        Store("out", (bj * T + r) * n + bi * T + c, (x,)),
    )
    return Kernel(f"lds_transpose_pad{pad}",
                  (Buffer("inp", "f32", (n, n)), Buffer("out", "f32", (n, n), "out")),
                  grid=tiles * tiles, block=T * T, body=body,
                  lds=(LdsArray("tile", "f32", (T, T + pad), padding=pad),))


def lds_broadcast(block: int = 64) -> Kernel:
    """Every lane reads the same LDS word: one broadcast, no conflict."""
    x = Var("x")
    body = (
        If(thread_id() < 1, (LdsStore("s", thread_id() * 0 + 5, (f32(3.0),)),)),
        Barrier(),
        LdsLoad((x,), "s", thread_id() * 0 + 5),
        Store("out", block_id() * block + thread_id(), (x,)),
    )
    return Kernel("lds_broadcast", (Buffer("out", "f32", (block,), "out"),), grid=1, block=block,
                  body=body, lds=(LdsArray("s", "f32", (64,)),))


def lds_b128_pattern(write: bool = False) -> Kernel:
    """ds_read_b128 / ds_write_b128 where quad q of lanes uses banks 0-15 if (q // 4) is even
    and 16-31 otherwise, each quad in its own 64-dword row.

    Under the measured ds_read_b128 grouping ({0-3,20-23}, {4-7,16-19}, ...) every group
    pairs one low-half quad with one high-half quad: 0 conflicts. Under contiguous 8-lane
    groups (ds_write_b128) both quads of a group share a half: 1 conflict per group, 8 in all.
    """
    q = Var("q", "i32")
    addr = Var("addr", "i32")
    regs = tuple(Var(f"v{i}") for i in range(4))
    body = [Assign(q, lane() // 4),
            Assign(addr, q * 64 + ((q // 4) % 2) * 16 + (lane() % 4) * 4)]
    if write:
        body += [LdsStore("s", addr, (f32(1.0),) * 4)]
    else:
        body += [LdsLoad(regs, "s", addr), Store("out", thread_id(), (regs[0] + regs[3],))]
    return Kernel(f"lds_b128_{'write' if write else 'read'}", (Buffer("out", "f32", (64,), "out"),),
                  grid=1, block=64, body=tuple(body), lds=(LdsArray("s", "f32", (1024,)),))


def barrier_imbalance(work: int, block: int = 256) -> Kernel:
    """Wave 0 runs ``work`` dependent VALU ops, then every wave meets at a barrier."""
    acc = Var("acc")
    body = (
        Assign(acc, f32(1.0)),
        If(wave_id() < 1, (For(Var("k", "i32"), 0 * block_id(), work + 0 * block_id(), 1,
                                (Assign(acc, fma(acc, f32(1.0001), f32(0.5))),), unroll=True),)),
        Barrier(),
        Store("out", thread_id(), (acc,)),
    )
    return Kernel(f"barrier_imbalance_{work}", (Buffer("out", "f32", (block,), "out"),), grid=1,
                  block=block, body=body)


def barrier_loop(iterations: int, block: int = 256) -> Kernel:
    """Nothing but barriers in a loop: time is barrier latency and loop control."""
    k = Var("k", "i32")
    body = (For(k, 0 * block_id(), iterations + 0 * block_id(), 1, (Barrier(),)),
            Store("out", thread_id(), (f32(1.0),)))
    return Kernel(f"barrier_loop_{iterations}", (Buffer("out", "f32", (block,), "out"),), grid=1,
                  block=block, body=body)


def row_sum(rows: int, cols: int, block: int = 256, use_shuffle: bool = False, wave: int = 64) -> Kernel:
    """out[r] = sum(a[r, :]): strided partial sums, a wave reduction (WaveReduce, or a
    Shuffle-down butterfly), then the waves' partials combined through LDS."""
    waves = block // wave
    acc, x, t = Var("acc"), Var("x"), Var("t")
    j = Var("j", "i32")
    row = Var("row", "i32")
    body = [Assign(row, block_id()), Assign(acc, f32(0.0)),
            For(j, thread_id(), cols + 0 * block_id(), block,
                (Load((x,), "a", row * cols + j), Assign(acc, acc + x)))]
    if use_shuffle:
        off = wave // 2
        while off >= 1:
            body += [Shuffle(t, acc, "down", off), Assign(acc, acc + t)]
            off //= 2
    else:
        body += [WaveReduce(acc, acc, "sum")]
    body += [If(lane().eq(0), (LdsStore("part", wave_id(), (acc,)),)),
             Barrier(),
             If(thread_id().eq(0), (
                 Assign(acc, f32(0.0)),
                 For(j, 0 * block_id(), waves + 0 * block_id(), 1,
                     (LdsLoad((x,), "part", j), Assign(acc, acc + x))),
                 Store("out", row, (acc,))))]
    return Kernel(f"row_sum_{'shfl' if use_shuffle else 'wred'}",
                  (Buffer("a", "f32", (rows, cols)), Buffer("out", "f32", (rows,), "out")),
                  grid=rows, block=block, body=tuple(body),
                  lds=(LdsArray("part", "f32", (waves,)),))


def tiled_matmul(m: int, n: int, k: int, tile: int = 16) -> Kernel:
    """C = A @ B with tile x tile LDS tiles of A and B, one output element per thread."""
    T = tile
    assert m % T == 0 and n % T == 0 and k % T == 0
    tx, ty, bi, bj, kk, p = (Var(x, "i32") for x in ("tx", "ty", "bi", "bj", "kk", "p"))
    acc, a, b = Var("acc"), Var("a"), Var("b")
    inner = (
        Load((a,), "A", (bi * T + ty) * k + kk + tx),
        LdsStore("As", ty * T + tx, (a,)),
        Load((b,), "B", (kk + ty) * n + bj * T + tx),
        LdsStore("Bs", ty * T + tx, (b,)),
        Barrier(),
        For(p, 0 * block_id(), T + 0 * block_id(), 1,
            (LdsLoad((a,), "As", ty * T + p), LdsLoad((b,), "Bs", p * T + tx),
             Assign(acc, fma(a, b, acc))), unroll=True),
        Barrier(),
    )
    body = (Assign(tx, thread_id() % T), Assign(ty, thread_id() // T),
            Assign(bi, block_id() // (n // T)), Assign(bj, block_id() % (n // T)),
            Assign(acc, f32(0.0)),
            For(kk, 0 * block_id(), k + 0 * block_id(), T, inner),
            Store("C", (bi * T + ty) * n + bj * T + tx, (acc,)))
    return Kernel(f"tiled_matmul_{m}x{n}x{k}",
                  (Buffer("A", "f32", (m, k)), Buffer("B", "f32", (k, n)), Buffer("C", "f32", (m, n), "out")),
                  grid=(m // T) * (n // T), block=T * T, body=body,
                  lds=(LdsArray("As", "f32", (T, T)), LdsArray("Bs", "f32", (T, T))))


def saxpy(n: int, block: int = 256) -> Kernel:
    """y = alpha * x + y with a bounds guard (grid rounded up) and a scalar parameter."""
    i = Var("i", "i32")
    x, y = Var("x"), Var("y")
    body = (Assign(i, block_id() * block + thread_id()),
            If(i < ScalarRef("n"), (Load((x,), "x", i), Load((y,), "y", i),
                                    Store("y", i, (fma(ScalarRef("alpha", "f32"), x, y),)))))
    return Kernel("saxpy", (Buffer("x", "f32", (n,)), Buffer("y", "f32", (n,), "inout"),
                            Scalar("n"), Scalar("alpha", "f32")),
                  grid=-(-n // block), block=block, body=body)


def mfma_gemm(m: int, n: int, k: int, shape: str = "32x32x2f32", waves: int = 1) -> Kernel:
    """D = C + A @ B (all row-major f32) with one MFMA block per wave, straight from global
    memory (no LDS): lane l reads A[m0 + l % M][k0 + l // M] and B[k0 + l // N][n0 + l % N]
    each K step, and the accumulators start from C and are stored in the MFMA layout
    (``program.mfma_acc_elem``). ``m``, ``n``, ``k`` are multiples of the block shape."""
    bm, bn, bk, nacc, _ = MFMA_SHAPES[shape]
    blocks_n = n // bn
    nblocks = (m // bm) * blocks_n
    assert m % bm == 0 and n % bn == 0 and k % bk == 0 and nblocks % waves == 0
    l = lane()
    blk = Var("blk", "i32")
    m0, n0, kk = Var("m0", "i32"), Var("n0", "i32"), Var("kk", "i32")
    a, b = Var("a"), Var("b")
    acc = tuple(Var(f"acc{r}") for r in range(nacc))
    # the accumulator layout (program.mfma_acc_elem) as index arithmetic: row(l, r), col l % N
    half = l // 32 if bm == 32 else l // 16
    rows = [(8 * (r // 4) + r % 4) + 4 * half if bm == 32 else 4 * half + r for r in range(nacc)]
    body = [Assign(blk, block_id() * waves + wave_id()),
            Assign(m0, (blk // blocks_n) * bm), Assign(n0, (blk % blocks_n) * bn)]
    body += [Load((acc[r],), "C", (m0 + rows[r]) * n + n0 + l % bn) for r in range(nacc)]
    body.append(For(kk, i32(0), i32(k), bk, (
        Load((a,), "A", (m0 + l % bm) * k + kk + l // bm),
        Load((b,), "B", (kk + l // bn) * n + n0 + l % bn),
        Mfma(acc, a, b, shape),
    )))
    body += [Store("D", (m0 + rows[r]) * n + n0 + l % bn, (acc[r],)) for r in range(nacc)]
    params = (Buffer("A", "f32", (m, k)), Buffer("B", "f32", (k, n)), Buffer("C", "f32", (m, n)),
              Buffer("D", "f32", (m, n), "out"))
    return Kernel(f"mfma_gemm_{shape}", params, grid=nblocks // waves, block=64 * waves,
                  body=tuple(body), meta={"shape": shape})


# ------------------------------------------------------------------ fidelity microbenchmarks
# The kernels ``gpusim.fidelity`` times to set the model beside published measurements.
# Each mirrors the published harness it is compared with (the docstring says which).

def pointer_chase(steps: int, stride: int, span: int, size: int | None = None,
                  lds: bool = False, wave: int = 64) -> Kernel:
    """One lane follows a dependent chain (a p-chase, as mt4g's latency tests), every
    address waiting for the previous load. Global memory: ``idx = (idx + a[idx] +
    stride) % span`` over an all-zero buffer of ``size`` elements (the three dependent
    integer ops stand for the address arithmetic a compiled chase does per step), so the
    footprint ``span * 4`` bytes picks the level that answers. ``lds=True``: the wave first
    writes ``s[i] = (i + stride) % span`` into an LDS array, then lane 0 chases
    ``idx = s[idx]`` (mt4g's shared-memory latency test)."""
    size = span if size is None else size
    idx, x, k = Var("idx", "i32"), Var("x", "i32"), Var("k", "i32")
    if lds:
        init = (For(k, thread_id(), i32(span), wave,
                    (LdsStore("s", k, ((k + stride) % span,)),)), Barrier())
        step = (LdsLoad((idx,), "s", idx),)
    else:
        init = ()
        step = (Load((x,), "a", idx), Assign(idx, (idx + x + stride) % span))
    body = init + (Assign(idx, thread_id() * 0),
                   If(thread_id() < 1, (For(k, i32(0), i32(steps), 1, step),
                                        Store("out", thread_id(), (idx,)))))
    params = (Buffer("out", "i32", (wave,), "out"),)
    arrays = ()
    if lds:
        arrays = (LdsArray("s", "i32", (size,)),)
    else:
        params = (Buffer("a", "i32", (size,)),) + params
    return Kernel(f"chase_{'lds' if lds else 'global'}_{span}_{steps}", params, grid=1,
                  block=wave, body=body, lds=arrays)


def stream(kind: str, n: int, block: int = 256, width: int = 4, passes: int = 1,
           region: int | None = None) -> Kernel:
    """BabelStream-style kernels over ``n`` f32 elements, ``width``-wide vectors:
    ``read`` (each thread sums its vectors and stores the sum only if it is below -1e30,
    which never happens for the all-zero input but keeps the loads live), ``write`` (b[i] = 1),
    ``copy`` (b[i] = a[i]). One vector per thread per workgroup chunk of ``block * width``
    elements. With ``region``, workgroup ``w`` owns elements [w * region, (w + 1) * region)
    and sweeps them ``passes`` times, chunk after chunk: after the first sweep every access
    hits whichever cache holds the resident workgroups' regions (mt4g's cache bandwidth
    tests); without it, one chunk per workgroup, once (``n`` elements in all)."""
    chunk = block * width
    region = chunk if region is None else region
    assert n % region == 0 and region % chunk == 0
    steps = passes * (region // chunk)
    regs = tuple(Var(f"v{i}") for i in range(width))
    j, r = Var("j", "i32"), Var("r", "i32")
    acc = Var("acc")
    total = regs[0]
    for v in regs[1:]:
        total = total + v
    addr = block_id() * region + (thread_id() * width + r * chunk) % region
    if kind == "read":
        inner = (Assign(j, addr), Load(regs, "a", j), Assign(acc, acc + total))
        body = (Assign(acc, f32(0.0)), For(r, i32(0), i32(steps), 1, inner),
                If(acc < f32(-1e30), (Store("b", block_id() * block + thread_id(), (acc,)),)))
        params = (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n // region * block,), "out"))
    elif kind == "write":
        body = (For(r, i32(0), i32(steps), 1, (Assign(j, addr), Store("b", j, (f32(1.0),) * width))),)
        params = (Buffer("b", "f32", (n,), "out"),)
    elif kind == "copy":
        body = (For(r, i32(0), i32(steps), 1, (Assign(j, addr), Load(regs, "a", j), Store("b", j, regs))),)
        params = (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n,), "out"))
    else:
        raise ValueError(f"stream kind {kind!r}: use read, write or copy")
    return Kernel(f"stream_{kind}_{n}_r{region}_p{passes}", params, grid=n // region,
                  block=block, body=body)


def gpu_benches_stream(kind: str, block: int, n: int = 2 * 128 * 1024 * 1024,
                       spoiler: bool = True) -> Kernel:
    """gpu-benches' ``gpu-stream`` kernels (github te42kyfo/gpu-benches, gpu-stream/main.cu;
    Hübner et al.) as their source writes them: one ``double`` per thread (``tidx =
    threadIdx.x + blockIdx.x * blockDim.x``), ``N / blockSize + 1`` workgroups, and a
    ``__shared__ double spoiler[4096]`` (32 KiB on AMD) that leaves two workgroups per CU,
    so the block size sets the occupancy (1024: 32 waves per CU, 256: 8). ``init``
    (``A[i] = 0.23``), ``read`` (``temp = B[i]``, stored only if it equals 123), ``scale``
    (``A[i] = B[i] * 1.2``), ``triad`` (``A[i] = B[i] * 1.2 + C[i]``). SIMPLIFICATION: the
    IR has no f64, so a double is two f32 moved by one 8-byte access per lane (the bytes and
    the ``global_load_dwordx2`` of the double); ``n`` counts f32 (the harness's 128 Mi
    doubles per array: 1 GiB, past every cache of the GPUs modelled but MI300X's MALL).
    ``spoiler=False``: no LDS array, BabelStream's HIP kernels (one double per thread,
    ``TBSIZE`` 1024; its ``mul`` is ``scale``)."""
    assert n % (2 * block) == 0
    i = Var("i", "i32")
    b = (Var("b0"), Var("b1"))
    c = (Var("c0"), Var("c1"))
    body = [Assign(i, (block_id() * block + thread_id()) * 2)]
    a_out = Buffer("A", "f32", (n,), "out")
    if kind == "init":
        body += [Store("A", i, (f32(0.23), f32(0.23)))]
        params = (a_out,)
    elif kind == "read":
        body += [Load(b, "B", i), If(b[0].eq(f32(123.0)), (Store("A", i, b),))]
        params = (a_out, Buffer("B", "f32", (n,)))
    elif kind == "scale":
        body += [Load(b, "B", i), Store("A", i, (b[0] * f32(1.2), b[1] * f32(1.2)))]
        params = (a_out, Buffer("B", "f32", (n,)))
    elif kind == "triad":
        body += [Load(b, "B", i), Load(c, "C", i),
                 Store("A", i, (fma(b[0], f32(1.2), c[0]), fma(b[1], f32(1.2), c[1])))]
        params = (a_out, Buffer("B", "f32", (n,)), Buffer("C", "f32", (n,)))
    else:
        raise ValueError(f"gpu-benches stream kind {kind!r}: use init, read, scale or triad")
    return Kernel(f"gpu_benches_{kind}_b{block}", params, grid=n // (2 * block), block=block,
                  body=tuple(body), lds=(LdsArray("spoiler", "f32", (8192,)),) if spoiler else ())


#: gpu-benches' stream kernels: f32 buffers each kernel streams (init 1, read 1, scale 2,
#: triad 3: the harness's ``streamCount``)
GPU_BENCHES_STREAMS = {"init": 1, "read": 1, "scale": 2, "triad": 3}


def mt4g_stream(kind: str, grid: int, n: int = 1 << 27, block: int = 256) -> Kernel:
    """mt4g's main-memory bandwidth kernels (github caps-tum/mt4g,
    src/benchmarks/shared/bandwidth/mainMemory{Read,Write}Bandwidth.cpp) as their source
    writes them: ``grid`` = CUs x ``maxBlocksPerMultiProcessor`` (2 on MI210 and MI300X:
    8 waves per CU) workgroups of ``warpSize * SIMDs`` = 256 threads, each thread a
    grid-stride loop of 16-byte vectors (``flat_load_dwordx4`` into a XOR, or
    ``flat_store_dwordx4``). ``n`` f32 elements. SIMPLIFICATION: the harness streams a
    quarter of the device memory (16 GiB on MI210) and the read's XOR consumes each load
    in the same trip, which here waits for it (one load per wave in flight); the
    simulated 512 MiB are as far past the caches of the GPUs it is used for (no MALL on
    MI210) and every trip is the same, so only the length of the run differs."""
    chunk = grid * block * 4  # f32 per grid-wide trip (the last trip partial, as in the harness)
    assert n % 4 == 0
    i, j = Var("i", "i32"), Var("j", "i32")
    regs = tuple(Var(f"v{k}") for k in range(4))
    acc = Var("acc")
    gid = (block_id() * block + thread_id()) * 4
    if kind == "read":
        body = (Assign(acc, f32(0.0)),
                For(i, gid, i32(n), chunk, (Assign(j, i), Load(regs, "src", j),
                                            Assign(acc, acc + regs[0]))),
                If(acc < f32(-1e30), (Store("dst", thread_id(), (acc,)),)))
        params = (Buffer("src", "f32", (n,)), Buffer("dst", "f32", (block,), "out"))
    elif kind == "write":
        body = (For(i, gid, i32(n), chunk, (Assign(j, i), Store("dst", j, (f32(1.0),) * 4))),)
        params = (Buffer("dst", "f32", (n,), "out"),)
    else:
        raise ValueError(f"mt4g stream kind {kind!r}: use read or write")
    return Kernel(f"mt4g_{kind}_{n}", params, grid=grid, block=block, body=body)


#: nod-ai's lds_phase_mask harness (S11, bench/lds_phase_mask.hip.cpp): BLOCKS launched
#: workgroups, and an LDS array of MAX_LDS_DWORD_INDEX / (dwords per element) + 1 elements
#: (32256 B + one element: two workgroups per 64 KiB CU)
HARNESS_BLOCKS = 4096
HARNESS_MAX_DWORD_INDEX = 63 * 128


def lds_burst(reads: int, stride_bytes: int, width: int = 1, grid: int = HARNESS_BLOCKS,
              wave: int = 64, lds_bytes: int | None = None) -> Kernel:
    """nod-ai's ``lds_phase_mask`` kernel (S11) as its source writes it, one wave per
    workgroup: every lane first fills the workgroup's LDS array (``for j = tid; j <
    element_count; j += blockDim: arr[j] = init``), then, between two barriers (the
    harness's timed region), reads ``width`` dwords at byte ``lane * stride_bytes``
    ``reads`` times into distinct registers, and after the second barrier sums them and
    stores the sum and the elapsed time (each barrier waits for the wave's LDS accesses, as
    HIP's ``__syncthreads``, ``gpusim.engine``). ``grid`` is the harness's 4096 workgroups: they pass
    through each CU's two workgroup slots in a stream, each replacement filling its array
    while the other slot reads (``gpusim.fidelity.lds_burst_cycles`` times the region
    between the barriers per workgroup, as the harness's per-thread timer)."""
    words = (HARNESS_MAX_DWORD_INDEX // width + 1) * width if lds_bytes is None else lds_bytes // 4
    n_el = words // width
    regs = [tuple(Var(f"r{k}_{c}", "i32") for c in range(width)) for k in range(reads)]
    addr, j = Var("addr", "i32"), Var("j", "i32")
    acc = Var("acc", "i32")
    body = [For(j, thread_id(), i32(n_el), wave,
                (LdsStore("s", j * width, (i32(1),) * width),)),
            Assign(acc, i32(0)), Barrier(),
            Assign(addr, (lane() * (stride_bytes // 4)) % words)]
    body += [LdsLoad(rg, "s", addr) for rg in regs]
    body += [Barrier()]
    for rg in regs:
        for v in rg:
            body.append(Assign(acc, acc + v))
    gid = block_id() * wave + thread_id()
    body += [Store("elapsed", gid, (i32(0),)), Store("out", gid, (acc,))]
    return Kernel(f"lds_burst_{reads}_s{stride_bytes}_b{width * 32}",
                  (Buffer("out", "i32", (grid * wave,), "out"),
                   Buffer("elapsed", "i32", (grid * wave,), "out")), grid=grid, block=wave,
                  body=tuple(body), lds=(LdsArray("s", "i32", (words,)),))


#: pyhip's LDS bank test (github tingqli/pyhip, tests/bank-conflict: README.md's "LDS bank
#: size" results on MI300, test.py's ``test_lds_bank_size``, dsread_test.cpp's ``dsread_test``):
#: one workgroup of 1024 threads, a 64 KiB ``__shared__ uint32_t lds_mem[16384]``, 10000 reads
PYHIP_WORDS = 16384
PYHIP_BLOCK = 1024
PYHIP_ITERS = 10000


def lds_bank_sweep(stride_dword: int = 0, iters: int = PYHIP_ITERS, block: int = PYHIP_BLOCK,
                   words: int = PYHIP_WORDS, width: int = 1) -> Kernel:
    """pyhip's ``dsread_test`` kernels (its LDS bank test) as their source writes them: one
    workgroup fills a ``words``-dword LDS array from global memory (``for i = tid; i <
    words; i += blockDim``; no barrier follows, as in the source), reads its lane's element
    index from a 64-entry table (``indices[tid & 63]``), then does ``sum += lds[idx + (n &
    sm)]`` ``iters`` times (``sm`` = 0: the same element every iteration) and thread 0 stores
    the sum. ``width`` dwords per element: 1 ``dsread_test`` (ds_read_b32), 2
    ``dsread_testx2`` (uint2, ds_read_b64), 4 ``dsread_testx4`` (uint4, ds_read_b128).
    The harness times the launch with HIP events, launch included; with 16 waves on 4 SIMDs
    the LDS is saturated, so the time is the LDS's throughput for the lanes' pattern.
    ``stride_dword`` is the data of the bank-size sweep (``indices = lane * stride``); its
    table wraps at the array (the published strides 512 and 1024 read past it; they are not
    compared)."""
    j, n, acc, idx, addr, d = (Var(x, "i32") for x in ("j", "n", "acc", "idx", "addr", "d"))
    regs = tuple(Var(f"v{c}", "i32") for c in range(width))
    total = regs[0]
    for r in regs[1:]:
        total = total + r
    body = (For(j, thread_id(), i32(words), block,
                (Load((d,), "data", j), LdsStore("s", j, (d,)))),
            Load((idx,), "indices", lane()),
            Assign(addr, idx * width),
            Assign(acc, i32(0)),
            For(n, 0 * block_id(), i32(iters), 1,
                (LdsLoad(regs, "s", addr), Assign(acc, acc + total))),
            If(thread_id() < 1, (Store("out", thread_id(), (acc,)),)))
    return Kernel(f"lds_bank_sweep_b{32 * width}",
                  (Buffer("data", "i32", (words,)), Buffer("indices", "i32", (64,)),
                   Buffer("out", "i32", (1,), "out")),
                  grid=1, block=block, body=body, lds=(LdsArray("s", "i32", (words,)),))


def bank_sweep_indices(stride_dword: int, words: int = PYHIP_WORDS):
    """pyhip's bank-size sweep table: lane ``l`` reads dword ``l * stride`` (wrapped)."""
    return np.array([(l * stride_dword) % words for l in range(64)], dtype=np.int32)


def empty_kernel(block: int = 64) -> Kernel:
    """One store per thread of one workgroup: the launch overhead test."""
    return Kernel("empty", (Buffer("out", "f32", (block,), "out"),), grid=1, block=block,
                  body=(Store("out", thread_id(), (f32(0.0),)),))
