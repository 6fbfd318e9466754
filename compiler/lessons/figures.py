"""The lessons' pictures, drawn as SVG from the simulator's own numbers.

``python -m compiler.lessons.figures docs/figures`` writes them; the lessons and
``docs/`` show the checked-in files, and ``tests/test_learner.py`` regenerates them and
fails when a checked-in picture no longer matches what the code draws. Every figure is
plain SVG text (no plotting library), so the output is byte-for-byte reproducible.

- ``roofline_gemm.svg``: lesson 7's five GEMM kernels on MI300X's roofline (simulated);
- ``gemm_tiles.svg``: one workgroup's tile of C, a thread's micro-tile, and the strips of
  A and B they read;
- ``mfma_32x32_layout.svg``: which lane and accumulator register hold each element of a
  ``v_mfma_f32_32x32x2f32`` result block;
- ``timeline_gather.svg``: lesson 3's latency-bound gather, the wave timeline of CU 0.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from html import escape

FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT} font-size="12">\n'
            f'<title>{escape(title)}</title>\n'
            f'<rect width="{width}" height="{height}" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def roofline_svg(points, peak_tflops: float, bytes_per_s: float, level: str,
                 title: str) -> str:
    """A log-log roofline: attainable TFLOP/s against arithmetic intensity (FLOP per byte
    moved to or from memory), with ``points`` as (label, intensity, tflops)."""
    W, H, L, R, T, B = 720, 440, 70, 230, 40, 50
    x0, x1 = 0.1, 10000.0   # FLOP/byte
    y0, y1 = 0.1, 1000.0    # TFLOP/s
    px = lambda v: L + (math.log10(v) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (W - L - R)
    py = lambda v: H - B - (math.log10(v) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * (H - T - B)
    body = [f'<text x="{W / 2 - 80:.0f}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>']
    for d in range(-1, 5):
        v = 10.0 ** d
        body.append(f'<line x1="{px(v):.1f}" y1="{T}" x2="{px(v):.1f}" y2="{H - B}" stroke="#ddd"/>')
        body.append(f'<text x="{px(v):.1f}" y="{H - B + 16}" text-anchor="middle">{v:g}</text>')
    for d in range(-1, 4):
        v = 10.0 ** d
        body.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" stroke="#ddd"/>')
        body.append(f'<text x="{L - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    body.append(f'<text x="{(L + W - R) / 2:.0f}" y="{H - 12}" text-anchor="middle">'
                f'arithmetic intensity: FLOP per byte of {escape(level)} traffic</text>')
    body.append(f'<text x="16" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 16 {(T + H - B) / 2:.0f})" '
                f'text-anchor="middle">TFLOP/s (simulated)</text>')
    ridge = peak_tflops * 1e12 / bytes_per_s
    tb = bytes_per_s / 1e12
    body.append(f'<polyline fill="none" stroke="#333" stroke-width="2" points="'
                f'{px(x0):.1f},{py(max(y0, tb * x0)):.1f} {px(ridge):.1f},{py(peak_tflops):.1f} '
                f'{px(x1):.1f},{py(peak_tflops):.1f}"/>')
    body.append(f'<text x="{px(ridge) + 6:.1f}" y="{py(peak_tflops) - 6:.1f}">'
                f'FP32 peak {peak_tflops:.0f} TFLOP/s</text>')
    body.append(f'<text x="{px(0.3):.1f}" y="{py(tb * 0.3) - 8:.1f}" '
                f'transform="rotate(-33 {px(0.3):.1f} {py(tb * 0.3) - 8:.1f})">'
                f'{escape(level)} {tb:.1f} TB/s</text>')
    colours = ["#d62728", "#ff7f0e", "#2ca02c", "#17becf", "#1f77b4", "#9467bd", "#8c564b"]
    for i, (label, ai, tf) in enumerate(points):
        c = colours[i % len(colours)]
        body.append(f'<circle cx="{px(ai):.1f}" cy="{py(tf):.1f}" r="6" fill="{c}"/>')
        body.append(f'<circle cx="{W - R + 20}" cy="{T + 14 + 22 * i}" r="6" fill="{c}"/>')
        body.append(f'<text x="{W - R + 32}" y="{T + 18 + 22 * i}">{escape(label)}</text>')
        body.append(f'<text x="{W - R + 32}" y="{T + 30 + 22 * i}" font-size="10" fill="#555">'
                    f'{ai:.1f} FLOP/B, {tf:.1f} TFLOP/s</text>')
    return _svg(W, H, body, title)


def tiles_svg(m: int = 256, n: int = 256, k: int = 128, bm: int = 64, bn: int = 64,
              tm: int = 4, tn: int = 4) -> str:
    """C (m x n) cut into BM x BN workgroup tiles; one tile's threads each own a TM x TN
    micro-tile; the tile reads a BM-row strip of A and a BN-column strip of B."""
    s = 1.0  # pixels per element
    ox, oy = 60 + k * s + 30, 60 + k * s + 30   # C's corner; A to its left, B above
    W, H = int(ox + n * s + 40), int(oy + m * s + 70)
    body = [f'<text x="20" y="24" font-size="14" font-weight="bold">C = A @ B: workgroup '
            f'tiles {bm}x{bn}, thread micro-tiles {tm}x{tn}</text>']
    # A (m x k) left of C, B (k x n) above C
    body.append(f'<rect x="{ox - 30 - k * s}" y="{oy}" width="{k * s}" height="{m * s}" fill="#f4f4f4" stroke="#888"/>')
    body.append(f'<text x="{ox - 30 - k * s / 2}" y="{oy + m * s + 18}" text-anchor="middle">A ({m} x {k})</text>')
    body.append(f'<rect x="{ox}" y="{oy - 30 - k * s}" width="{n * s}" height="{k * s}" fill="#f4f4f4" stroke="#888"/>')
    body.append(f'<text x="{ox + n * s + 8}" y="{oy - 30 - k * s / 2}">B ({k} x {n})</text>')
    body.append(f'<rect x="{ox}" y="{oy}" width="{n * s}" height="{m * s}" fill="#fafafa" stroke="#333"/>')
    for i in range(0, m + 1, bm):
        body.append(f'<line x1="{ox}" y1="{oy + i * s}" x2="{ox + n * s}" y2="{oy + i * s}" stroke="#999"/>')
    for j in range(0, n + 1, bn):
        body.append(f'<line x1="{ox + j * s}" y1="{oy}" x2="{ox + j * s}" y2="{oy + m * s}" stroke="#999"/>')
    ti, tj = 1, 2   # the highlighted workgroup's tile
    body.append(f'<rect x="{ox - 30 - k * s}" y="{oy + ti * bm * s}" width="{k * s}" height="{bm * s}" '
                f'fill="#1f77b4" fill-opacity="0.35"/>')
    body.append(f'<rect x="{ox + tj * bn * s}" y="{oy - 30 - k * s}" width="{bn * s}" height="{k * s}" '
                f'fill="#1f77b4" fill-opacity="0.35"/>')
    body.append(f'<rect x="{ox + tj * bn * s}" y="{oy + ti * bm * s}" width="{bn * s}" height="{bm * s}" '
                f'fill="#1f77b4" fill-opacity="0.35" stroke="#1f77b4" stroke-width="2"/>')
    for a in range(0, bm, tm):
        for b in range(0, bn, tn):
            if (a // tm + b // tn) % 2 == 0:
                body.append(f'<rect x="{ox + (tj * bn + b) * s}" y="{oy + (ti * bm + a) * s}" '
                            f'width="{tn * s}" height="{tm * s}" fill="#1f77b4" fill-opacity="0.45"/>')
    body.append(f'<rect x="{ox + tj * bn * s}" y="{oy + ti * bm * s}" width="{tn * s}" height="{tm * s}" '
                f'fill="#d62728"/>')
    note_y = oy + m * s + 22
    body.append(f'<text x="{ox}" y="{note_y}">blue: one workgroup\'s {bm}x{bn} tile of C and the '
                f'strips of A and B it reads</text>')
    body.append(f'<text x="{ox}" y="{note_y + 16}">checkerboard: its {bm * bn // (tm * tn)} threads\' '
                f'{tm}x{tn} micro-tiles; red: thread 0\'s</text>')
    return _svg(W, H, body, "GEMM tiles over C")


def mfma_layout_svg(shape: str = "32x32x2f32") -> str:
    """Each element of an MFMA result block, coloured by the lane that holds it and
    labelled with its accumulator register (``gpusim.program.mfma_acc_elem``)."""
    from gpusim.program import MFMA_SHAPES, mfma_acc_elem

    bm, bn, _, nacc, _ = MFMA_SHAPES[shape]
    c = 18
    ox, oy = 50, 60
    W, H = ox + bn * c + 30, oy + bm * c + 60
    owner = {}
    for lane in range(64):
        for r in range(nacc):
            owner[mfma_acc_elem(shape, lane, r)] = (lane, r)
    body = [f'<text x="20" y="24" font-size="14" font-weight="bold">v_mfma_f32_{shape}: '
            f'who holds C[row][col]</text>',
            f'<text x="20" y="42" font-size="11">colour: lane (0-31 blue, 32-63 orange, '
            f'lighter = higher lane); number: accumulator register r</text>']
    for (row, col), (lane, r) in sorted(owner.items()):
        hue = "31,119,180" if lane < 32 else "255,127,14"
        alpha = 0.25 + 0.65 * (lane % 32) / 31
        body.append(f'<rect x="{ox + col * c}" y="{oy + row * c}" width="{c}" height="{c}" '
                    f'fill="rgb({hue})" fill-opacity="{alpha:.2f}" stroke="white"/>')
        body.append(f'<text x="{ox + col * c + c / 2}" y="{oy + row * c + 13}" font-size="9" '
                    f'text-anchor="middle">{r}</text>')
    for col in range(0, bn, 8):
        body.append(f'<text x="{ox + col * c + c / 2}" y="{oy - 4}" font-size="9" text-anchor="middle">{col}</text>')
    for row in range(0, bm, 4):
        body.append(f'<text x="{ox - 4}" y="{oy + row * c + 13}" font-size="9" text-anchor="end">{row}</text>')
    body.append(f'<text x="{ox}" y="{oy + bm * c + 20}" font-size="11">column = lane % {bn}; '
                f'rows 8*(r//4) + 4*(lane//32) + r%4: lanes 32-63 hold the 4 rows after lanes 0-31\'s</text>')
    return _svg(W, H, body, f"MFMA {shape} accumulator layout")


def gemm_roofline() -> str:
    """Lesson 7's steps on gfx942's roofline: FLOP per byte the CUs fetch from the L2,
    against the L2's achievable read bandwidth (a hierarchical roofline's L2 level)."""
    import gpusim
    from compiler.lessons import gemm

    arch = gpusim.get_arch(gemm.ARCH)
    pts = [(s.name, s.intensity, s.tflops) for s in gemm.run_steps()]
    return roofline_svg(pts, arch.peak_fp32_tflops, arch.l2_read_bytes_per_clk * arch.clock_ghz * 1e9,
                        "L2 -> CU", f"GEMM {gemm.M}x{gemm.N}x{gemm.K} f32 on {arch.name} (simulated)")


#: timeline colours per trace kind (the terminal view's colours, as RGB)
TIMELINE_COLOURS = {"valu": "#2ca02c", "salu": "#7f7f7f", "vmem": "#1f77b4", "lds": "#e377c2",
                    "barrier_wait": "#bcbd22", "mem_stall": "#d62728", "mfma": "#17becf"}


def timeline_svg(data, title: str) -> str:
    """A wave timeline (``compiler.cli.views.timeline_data``) as SVG: one row per wave,
    one cell per bucket of cycles, coloured by what the wave did most in it."""
    from compiler.cli.views.timeline import KINDS

    L, T, cw, rh = 110, 50, 7, 14
    buckets = len(data.rows[0].cells) if data.rows else 0
    W, H = L + buckets * cw + 20, T + len(data.rows) * rh + 70
    body = [f'<text x="20" y="24" font-size="14" font-weight="bold">{escape(title)}</text>',
            f'<text x="{L}" y="{T - 8}" font-size="10">cycle {data.start:.0f}</text>',
            f'<text x="{L + buckets * cw}" y="{T - 8}" font-size="10" text-anchor="end">'
            f'{data.end:.0f}</text>']
    for i, row in enumerate(data.rows):
        y = T + i * rh
        body.append(f'<text x="{L - 6}" y="{y + 10}" font-size="10" text-anchor="end">'
                    f'{escape(row.label)}</text>')
        for j, kind in enumerate(row.cells):
            fill = TIMELINE_COLOURS.get(kind, "#f0f0f0")
            body.append(f'<rect x="{L + j * cw}" y="{y}" width="{cw}" height="{rh - 2}" fill="{fill}"/>')
    y = T + len(data.rows) * rh + 20
    x = L
    for kind, (_, _, name) in KINDS.items():
        body.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{TIMELINE_COLOURS[kind]}"/>')
        body.append(f'<text x="{x + 14}" y="{y}" font-size="10">{escape(name)}</text>')
        x += 14 + 7 * len(name) + 12
    tot = {}
    for row in data.rows:
        for k, v in row.cycles.items():
            tot[k] = tot.get(k, 0.0) + v
    summary = ", ".join(f"{KINDS[k][2]} {v:.0f}" for k, v in tot.items())
    body.append(f'<text x="{L}" y="{y + 22}" font-size="10">wave-cycles in the window: '
                f'{escape(summary)} (simulated)</text>')
    return _svg(W, H, body, title)


def timeline_gather() -> str:
    """Lesson 3's gather at one wave per SIMD: CU 0's waves waiting on loads."""
    import gpusim

    from compiler.cli.views import timeline_data
    from compiler.lessons.exercises import gather_serial

    res = gpusim.simulate(gather_serial(33), "gfx942", functional=False, trace=True)
    return timeline_svg(timeline_data(res, end=8000, buckets=80),
                        "lesson 3: a gather at one wave per SIMD, CU 0 (simulated)")


FIGURES = {
    "roofline_gemm.svg": gemm_roofline,
    "gemm_tiles.svg": tiles_svg,
    "mfma_32x32_layout.svg": mfma_layout_svg,
    "timeline_gather.svg": timeline_gather,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.lessons.figures",
                                 description="Draw the lessons' SVG figures.")
    ap.add_argument("out", help="folder to write into (the repository's docs/figures)")
    ap.add_argument("--only", action="append", choices=sorted(FIGURES), help="draw only this one")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in args.only or FIGURES:
        path = os.path.join(args.out, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(FIGURES[name]())
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
