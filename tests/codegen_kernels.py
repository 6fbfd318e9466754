"""Small kernels built directly in the IR, shared by the codegen tests.

Each exercises one thing the HIP backend must print exactly: vector loads, wave
reductions, padded LDS tiles, unrolled loops, f16 conversion, scalar parameters, guards.
They assume wave64 (CDNA), like the archs the tests compile for.
"""
from gpusim.program import (
    Assign, Barrier, Buffer, For, If, Kernel, LdsArray, LdsLoad, LdsStore, Load, Scalar,
    ScalarRef, Shuffle, Store, Var, WaveReduce, block_id, cast, exp, f32, fma, lane,
    maximum, relu, rsqrt, select, thread_id, wave_id,
)

N_ELEM = 4096


def elementwise_f4(n=N_ELEM, block=256):
    """y = relu(x * alpha + 1) four elements per thread, guarded by i < n."""
    i = Var("i", "i32")
    xs = [Var(f"x{k}") for k in range(4)]
    alpha = ScalarRef("alpha", "f32")
    body = (
        Assign(i, (block_id() * block + thread_id()) * 4),
        If(i < ScalarRef("n"), (
            Load(tuple(xs), "x", i),
            Store("y", i, tuple(relu(fma(x, alpha, f32(1.0))) for x in xs)),
        )),
    )
    return Kernel("elementwise_f4", (Buffer("x", "f32", (n,), "in"), Buffer("y", "f32", (n,), "out"),
                                     Scalar("n", "i32"), Scalar("alpha", "f32")),
                  grid=n // (4 * block), block=block, body=body,
                  meta={"vector_width": 4, "op": "relu(x*alpha+1)"})


def row_sum(rows=64, cols=256, waves_per_block=4):
    """One wave per row: each lane sums cols/64 strided elements, then a WaveReduce."""
    row, acc, v, total, j = Var("row", "i32"), Var("acc"), Var("v"), Var("total"), Var("j", "i32")
    body = (
        Assign(row, block_id() * waves_per_block + wave_id()),
        Assign(acc, f32(0.0)),
        For(j, lane(), cols, 64, (
            Load((v,), "x", row * cols + j),
            Assign(acc, acc + v),
        )),
        WaveReduce(total, acc, "sum"),
        If(lane().eq(0), (Store("out", row, (total,)),)),
    )
    return Kernel("row_sum", (Buffer("x", "f32", (rows, cols), "in"), Buffer("out", "f32", (rows,), "out")),
                  grid=rows // waves_per_block, block=64 * waves_per_block, body=body,
                  meta={"reduction": "wave", "rows_per_block": waves_per_block})


def transpose_lds(n=128, padding=1):
    """32x32 tiles through a (32, 32 + padding) LDS tile; 256 threads, 8 rows per pass."""
    tiles = n // 32
    tx, ty, bx, by, k, v = (Var("tx", "i32"), Var("ty", "i32"), Var("bx", "i32"),
                            Var("by", "i32"), Var("k", "i32"), Var("v"))
    w = 32 + padding
    body = (
        Assign(tx, thread_id() % 32), Assign(ty, thread_id() // 32),
        Assign(bx, block_id() % tiles), Assign(by, block_id() // tiles),
        For(k, 0, 32, 8, (
            Load((v,), "a", (by * 32 + ty + k) * n + bx * 32 + tx),
            LdsStore("tile", (ty + k) * w + tx, (v,)),
        ), unroll=True),
        Barrier(),
        For(k, 0, 32, 8, (
            LdsLoad((v,), "tile", tx * w + ty + k),
            Store("b", (bx * 32 + ty + k) * n + by * 32 + tx, (v,)),
        ), unroll=True),
    )
    return Kernel(f"transpose-lds.pad{padding}",
                  (Buffer("a", "f32", (n, n), "in"), Buffer("b", "f32", (n, n), "out")),
                  grid=tiles * tiles, block=256, body=body,
                  lds=(LdsArray("tile", "f32", (32, w), padding),), meta={"tile": "32x32", "padding": padding})


def dot_unrolled(n=N_ELEM, k_len=16, block=256):
    """out[i] = sum_k a[i*k_len + k] * w[k], an unrolled loop with an fma chain."""
    i, k, acc, a, w = Var("i", "i32"), Var("k", "i32"), Var("acc"), Var("a"), Var("w")
    rows = n // k_len
    body = (
        Assign(i, block_id() * block + thread_id()),
        Assign(acc, f32(0.0)),
        For(k, 0, k_len, 1, (
            Load((a,), "a", i * k_len + k),
            Load((w,), "w", k),
            Assign(acc, fma(a, w, acc)),
        ), unroll=True),
        Store("out", i, (acc,)),
    )
    return Kernel("dot_unrolled", (Buffer("a", "f32", (rows, k_len), "in"), Buffer("w", "f32", (k_len,), "in"),
                                   Buffer("out", "f32", (rows,), "out")),
                  grid=rows // block, block=block, body=body, meta={"unroll": True})


def half_io(n=N_ELEM, block=256):
    """f16 in/out with widths 4, 2 and 1: y = x * rsqrt(1 + x*x), accumulated in f32;
    z and w2 come from a second input read as pairs."""
    i = Var("i", "i32")
    xs = [Var(f"h{k}") for k in range(4)]
    body = (
        Assign(i, (block_id() * block + thread_id()) * 4),
        Load(tuple(xs), "x", i),
        Store("y", i, tuple(x * rsqrt(fma(x, x, f32(1.0))) for x in xs)),
        Load(tuple(xs[:2]), "u", i // 2),
        Store("z", i // 2, (xs[0] + xs[1],)),
        Store("w2", i // 2, (xs[0], cast(i, "f32"))),
    )
    return Kernel("half_io", (Buffer("x", "f16", (n,), "in"), Buffer("u", "f16", (n // 2 + 2,), "in"),
                              Buffer("y", "f16", (n,), "out"),
                              Buffer("z", "f16", (n // 2,), "out"), Buffer("w2", "f16", (n // 2 + 2,), "out")),
                  grid=n // (4 * block), block=block, body=body)


def softmax_row(cols=256, rows=32):
    """Row softmax with one wave per row: max and sum reductions, exp, select."""
    row, j, v, m, s, e, mx, sm = (Var("row", "i32"), Var("j", "i32"), Var("v"), Var("m"),
                                  Var("s"), Var("e"), Var("mx"), Var("sm"))
    body = (
        Assign(row, block_id()),
        Assign(m, f32(float("-inf"))),
        For(j, lane(), cols, 64, (Load((v,), "x", row * cols + j), Assign(m, maximum(m, v)))),
        WaveReduce(mx, m, "max"),
        Assign(s, f32(0.0)),
        For(j, lane(), cols, 64, (Load((v,), "x", row * cols + j), Assign(s, s + exp(v - mx)))),
        WaveReduce(sm, s, "sum"),
        For(j, lane(), cols, 64, (
            Load((v,), "x", row * cols + j),
            Assign(e, exp(v - mx) / sm),
            Store("y", row * cols + j, (select(e > f32(0.0), e, f32(0.0)),)),
        )),
    )
    return Kernel("softmax", (Buffer("x", "f32", (rows, cols), "in"), Buffer("y", "f32", (rows, cols), "out")),
                  grid=rows, block=64, body=body)


def shuffle_down_sum(n=N_ELEM):
    """A manual tree with __shfl_down; lane 0 of each wave writes its wave's sum."""
    v, o = Var("v"), Var("o")
    body = [Load((v,), "x", block_id() * 256 + thread_id())]
    for off in (32, 16, 8, 4, 2, 1):
        body += [Shuffle(o, v, "down", off), Assign(v, v + o)]
    body += [If(lane().eq(0), (Store("out", block_id() * 4 + wave_id(), (v,)),))]
    return Kernel("my-kernel.0", (Buffer("x", "f32", (n,), "in"), Buffer("out", "f32", (n // 64,), "out")),
                  grid=n // 256, block=256, body=tuple(body))


def keyword_names():
    """Names that are C keywords or clash after sanitising."""
    f, g, idx = Var("float"), Var("int"), Var("thread_id", "i32")
    body = (
        Assign(idx, block_id() * 64 + thread_id()),
        Load((f,), "int", idx),
        Assign(g, f * f),
        Store("float", idx, (g,)),
        Store("my.out", idx, (f,)),
        Store("my-out", idx, (g + f,)),
    )
    return Kernel("float", (Buffer("int", "f32", (256,), "in"), Buffer("float", "f32", (256,), "out"),
                            Buffer("my.out", "f32", (256,), "out"), Buffer("my-out", "f32", (256,), "out")),
                  grid=4, block=64, body=body)


def all_kernels():
    return [elementwise_f4(), row_sum(), transpose_lds(), transpose_lds(padding=0), dot_unrolled(),
            half_io(), softmax_row(), shuffle_down_sum(), keyword_names()]
