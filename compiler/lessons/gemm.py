"""Lesson 7's kernels: one GEMM, C = A @ B, written five ways, from naive to matrix cores.

The steps share one size (``M x N x K`` = 2048 x 2048 x 512, f32: big enough to give
every one of MI300X's 304 CUs work at the larger tiles) so their counters compare. The
naive kernel and the LDS-tiled one are hand-written IR (``naive_matmul`` here,
``gpusim.microbench.tiled_matmul``); the register micro-tiles and the MFMA blocks come
from the compiler's contraction lowering with fixed knobs, the same kernels ``wavefuse
tune`` scores. ``compiler.lessons.figures`` draws the roofline of these steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import gpusim
from gpusim import microbench as mb
from gpusim.program import Assign, Buffer, For, Kernel, Load, Store, Var, block_id, f32, fma, i32, thread_id

M, N, K = 2048, 2048, 512
ARCH = "gfx942"

#: the contraction knobs every lowered step shares: K staged 16 deep through LDS, no
#: split of K across waves, one pad element per LDS row, 16-byte global loads
BASE = dict(mma="fma", BK=16, KW=1, lds_pad=4, vec_a=4, vec_b=4, swizzle="none")


def naive_matmul(m: int = M, n: int = N, k: int = K, block: int = 256) -> Kernel:
    """One thread per element of C: it walks row ``row`` of A and column ``col`` of B
    straight from global memory, one multiply-add per pair of loads."""
    t, row, col, kk = (Var(x, "i32") for x in ("t", "row", "col", "kk"))
    a, b, acc = Var("a"), Var("b"), Var("acc")
    body = (Assign(t, block_id() * block + thread_id()),
            Assign(row, t // n), Assign(col, t % n), Assign(acc, f32(0.0)),
            For(kk, i32(0), i32(k), 1, (Load((a,), "A", row * k + kk),
                                        Load((b,), "B", kk * n + col),
                                        Assign(acc, fma(a, b, acc)))),
            Store("C", t, (acc,)))
    return Kernel("naive_matmul", (Buffer("A", "f32", (m, k)), Buffer("B", "f32", (k, n)),
                                   Buffer("C", "f32", (m, n), "out")),
                  grid=m * n // block, block=block, body=body)


def gemm_graph(m: int = M, n: int = N, k: int = K):
    """The graph of a bare GEMM: two inputs, one matmul."""
    from compiler.ir.graph import Graph

    g = Graph("gemm")
    g.output(g.matmul(g.input("a", (m, k)), g.input("b", (k, n))))
    return g


def lowered(knobs: dict, m: int = M, n: int = N, k: int = K, arch: str = ARCH) -> Kernel:
    """The compiler's GEMM kernel for ``BASE`` updated with ``knobs``."""
    from compiler.fusion import fuse
    from compiler.lower import lower

    g = gemm_graph(m, n, k)
    [d] = fuse(g).dispatches
    return lower(g, d, {**BASE, **knobs}, gpusim.get_arch(arch))


@dataclass
class Step:
    """One kernel of the lesson and what the simulator says of it."""
    name: str
    kernel: Kernel
    result: object  # gpusim.SimResult (timing mode)

    @property
    def flops(self) -> float:
        return 2.0 * M * N * K

    @property
    def l2_bytes(self) -> float:
        """Bytes the CUs fetch from the L2: the cache lines their loads miss in the vector
        L1 (the roofline's x). Reuse in LDS and registers is what makes this small."""
        line = gpusim.get_arch(ARCH).l1_line_bytes
        return float(self.result.counters["global_load_lines"]) * line

    @property
    def intensity(self) -> float:
        """FLOP per byte fetched from the L2."""
        return self.flops / self.l2_bytes

    @property
    def tflops(self) -> float:
        return self.flops / (self.result.time_us_without_launch * 1e-6) / 1e12


def simulate(kernel: Kernel, arch: str = ARCH):
    """Timing-mode simulation of CU 0's sample, the K loop extrapolated from three cuts
    (``gpusim.steady``), as the search does."""
    return gpusim.simulate(kernel, arch, functional=False, extrapolate_loops=True)


#: the lesson's five steps: (name, how the kernel is built)
STEPS = (
    ("naive", lambda: naive_matmul()),
    ("LDS tiles 16x16", lambda: mb.tiled_matmul(M, N, K, 16)),
    ("micro-tiles 64x64, 4x4", lambda: lowered(dict(BM=64, BN=64, TM=4, TN=4))),
    ("micro-tiles 128x128, 8x8", lambda: lowered(dict(BM=128, BN=128, TM=8, TN=8))),
    ("MFMA 64x64, 32x32 blocks", lambda: lowered(dict(mma="mfma", BM=64, BN=64, TM=32, TN=32))),
)


def run_steps(names=None) -> list[Step]:
    """Builds and simulates the steps (all, or those named)."""
    out = []
    for name, build in STEPS:
        if names is None or name in names:
            k = build()
            out.append(Step(name, k, simulate(k)))
    return out
