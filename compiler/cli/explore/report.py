"""The HTML report of a tuned model: one self-contained file (inline CSS and SVG, no
script, no network) to mail to a colleague or hand in.

Its numbers come from the objects ``wavefuse tune --json`` prints (``TuneResult.to_json``)
and its pictures are the renderables of ``wavefuse view`` (plan, candidates, timeline,
coalescing, banks) recorded by rich and exported as SVG, through the explorer's
``Session``; the roofline chart is drawn here, from the same ``DispatchTune`` figures the
tune table divides (bytes, flops, predicted time). Rich's SVG asks the web for the Fira
Code font; those ``@font-face`` rules are removed so that the file never reaches out (the
browser's monospace font is used instead).
"""
from __future__ import annotations

import html
import io
import math
import re
from datetime import datetime, timezone

from rich.console import Console

from compiler import __version__
from compiler.cli import views
from compiler.cli.explore.session import Session
from compiler.cli.views.common import fmt_bytes, fmt_knobs

_FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}\s*", re.S)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)


def offline_svg(svg: str) -> str:
    """Rich's (or Textual's) SVG without its web-font rules and generator comment."""
    return _COMMENT.sub("", _FONT_FACE.sub("", svg))


def svg_of(renderable, width: int = 110, title: str = "") -> str:
    """A rich renderable recorded at ``width`` columns, as offline SVG."""
    con = Console(record=True, width=width, file=io.StringIO(), highlight=False,
                  color_system="truecolor", force_terminal=True)
    con.print(renderable)
    return offline_svg(con.export_svg(title=title))


# ----------------------------------------------------------------------------- roofline
def roofline_data(result) -> dict:
    """Roofs of ``result.arch`` and one point per dispatch: arithmetic intensity (flops per
    boundary byte) and achieved rate (flops per predicted kernel time, the launch overhead
    taken out, since a roof is a rate of the kernel itself)."""
    arch = result.arch
    peak = arch.peak_fp32_flops_per_clk_per_cu * arch.num_cus * arch.clock_ghz * 1e9
    roofs = {"peak_flops_per_s": peak,
             "hbm_bytes_per_s": arch.stream_bytes_per_s(1 << 40)}
    small = arch.stream_bytes_per_s(1 << 20)
    if abs(small - roofs["hbm_bytes_per_s"]) > 1e-6 * small:
        roofs["mall_bytes_per_s"] = small
    points = []
    for d in result.dispatches:
        kernel_us = max(d.best.time_us - result.launch_overhead_us, 1e-9)
        if d.bytes <= 0 or d.flops <= 0:
            continue
        points.append({"name": d.name, "intensity": d.flops / d.bytes,
                       "flops_per_s": d.flops / (kernel_us * 1e-6), "kernel_us": kernel_us})
    return {"arch": arch.name, "roofs": roofs, "points": points}


def roofline_svg(data: dict, width: int = 640, height: int = 360) -> str:
    """Log-log roofline: flop/s against flops per byte; roofs as lines, dispatches as dots."""
    pad_l, pad_r, pad_t, pad_b = 70, 20, 20, 50
    roofs, pts = data["roofs"], data["points"]
    peak = roofs["peak_flops_per_s"]
    bws = [(k, v) for k, v in roofs.items() if k.endswith("bytes_per_s")]
    xs = [p["intensity"] for p in pts] + [peak / v for _, v in bws]
    ys = [p["flops_per_s"] for p in pts] + [peak]
    x0 = 10 ** math.floor(math.log10(min(xs) / 4))
    x1 = 10 ** math.ceil(math.log10(max(xs) * 4))
    y0 = 10 ** math.floor(math.log10(min(ys) / 4))
    y1 = 10 ** math.ceil(math.log10(peak * 2))

    def px(x):
        return pad_l + (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) \
            * (width - pad_l - pad_r)

    def py(y):
        return height - pad_b - (math.log10(y) - math.log10(y0)) / \
            (math.log10(y1) - math.log10(y0)) * (height - pad_t - pad_b)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="roofline" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="roofline chart of {html.escape(data["arch"])}">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for e in range(int(math.log10(x0)), int(math.log10(x1)) + 1):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{pad_t}" x2="{x:.1f}" y2="{height - pad_b}" '
                   f'stroke="#ddd"/><text x="{x:.1f}" y="{height - pad_b + 16}" '
                   f'text-anchor="middle" font-size="11">1e{e}</text>')
    for e in range(int(math.log10(y0)), int(math.log10(y1)) + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{pad_l}" y1="{y:.1f}" x2="{width - pad_r}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{pad_l - 6}" y="{y + 4:.1f}" text-anchor="end" '
                   f'font-size="11">1e{e}</text>')
    out.append(f'<text x="{(pad_l + width - pad_r) / 2}" y="{height - 12}" text-anchor="middle" '
               f'font-size="12">arithmetic intensity (flops per boundary byte)</text>')
    out.append(f'<text x="14" y="{(pad_t + height - pad_b) / 2}" text-anchor="middle" '
               f'font-size="12" transform="rotate(-90 14 {(pad_t + height - pad_b) / 2})">'
               f'flop/s (predicted kernel time)</text>')
    colours = {"hbm_bytes_per_s": "#1f77b4", "mall_bytes_per_s": "#2ca02c"}
    for k, bw in bws:
        knee = peak / bw
        pts_line = [(x0, bw * x0), (knee, peak)]
        out.append(f'<polyline fill="none" stroke="{colours.get(k, "#555")}" stroke-width="2" '
                   f'points="{" ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in pts_line)}"/>')
        label = "HBM" if k.startswith("hbm") else "MALL"
        dy = -6 if label == "MALL" or len(bws) == 1 else 14
        out.append(f'<text x="{px(x0) + 4:.1f}" y="{py(bw * x0) + dy:.1f}" font-size="11" '
                   f'fill="{colours.get(k, "#555")}">{label} {bw / 1e12:.2f} TB/s</text>')
    kmin = min(peak / bw for _, bw in bws)
    out.append(f'<line x1="{px(kmin):.1f}" y1="{py(peak):.1f}" x2="{px(x1):.1f}" '
               f'y2="{py(peak):.1f}" stroke="#d62728" stroke-width="2"/>'
               f'<text x="{px(x1) - 4:.1f}" y="{py(peak) - 6:.1f}" text-anchor="end" '
               f'font-size="11" fill="#d62728">FP32 vector peak {peak / 1e12:.1f} TFLOP/s</text>')
    for i, p in enumerate(pts):
        x, y = px(p["intensity"]), py(p["flops_per_s"])
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#ff7f0e">'
                   f'<title>{html.escape(p["name"])}: {p["intensity"]:.3g} flop/B, '
                   f'{p["flops_per_s"] / 1e9:.3g} GFLOP/s</title></circle>'
                   f'<text x="{x + 6:.1f}" y="{y + 4:.1f}" font-size="10">{i}</text>')
    out.append("</svg>")
    return "".join(out)


# ----------------------------------------------------------------------------- document
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: 0.9em; }
.fused { color: #080; } .apart { color: #b00; }
svg.rich-terminal, svg.roofline { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
details { margin: 1em 0; } summary { font-weight: bold; cursor: pointer; }
"""


def _e(x) -> str:
    return html.escape(str(x))


def _table(head: list | None, rows: list, num: set = frozenset()) -> str:
    out = ["<table>"]
    if head:
        out += ["<thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead>"]
    out.append("<tbody>")
    for r in rows:
        out.append("<tr>")
        for i, c in enumerate(r):
            out.append(f'<td class="num">{_e(c)}</td>' if i in num else f"<td>{_e(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def report_html(result, session: Session) -> str:
    """The report of a ``TuneResult`` whose dispatches ``session`` has adopted."""
    j = result.to_json()
    launches = j["num_dispatches"] * j["launch_overhead_us"]
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>wavefuse report: {_e(j['model'])} on {_e(j['arch'])}</title>",
             f"<style>{CSS}</style></head><body>",
             f"<h1>wavefuse report: {_e(j['model'])} on {_e(j['arch'])} ({_e(j['mode'])} plan)</h1>",
             f'<p class="note">Every time here is a gpusim prediction ({_e(j["time_unit"])}), '
             f"not a measurement. wavefuse {_e(__version__)}, written "
             f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; schedules sampled "
             f"with budget {_e(session.budget)} and seed {_e(session.seed)}; values not "
             f"checked here (<code>wavefuse tune</code> checks them).</p>",
             "<h2>Summary</h2>"]
    rows = [("total predicted", f"{j['total_time_us']:.2f} us"),
            ("of which launches", f"{launches:.2f} us ({j['num_dispatches']} x "
                                  f"{j['launch_overhead_us']} us)"),
            ("of which kernel time", f"{j['total_time_us'] - launches:.2f} us"),
            ("roofline bound", f"{j['roofline_time_us']:.2f} us ({j['roofline_basis']})"),
            ("predicted / roofline", f"{j['total_time_us'] / j['roofline_time_us']:.2f}")]
    if j["unfused_time_us"] is not None:
        g = j["gain"]
        rows += [("unfused baseline", f"{j['unfused_time_us']:.2f} us in "
                                      f"{j['unfused_dispatches']} dispatches"),
                 ("gain of fusion", f"{g['total_us']:.2f} us = {g['launch_us']:.2f} us launches "
                                    f"+ {g['kernel_us']:.2f} us kernel time")]
    rows.append(("plan choice", j["plan_choice"].get("reason", "")))
    parts.append(_table(None, rows))
    parts.append("<h2>Dispatches</h2>")
    drows = []
    for i, d in enumerate(j["dispatches"]):
        c = d["counters"]
        drows.append((i, d["name"], d["kind"], f"{d['time_us']:.2f}",
                      f"{d['time_us'] / d['roofline_us']:.2f}",
                      f"{c.get('coalescing_pct') or 0:.0f}",
                      f"{c.get('lds_bank_conflict_rate_pct') or 0:.1f}",
                      f"{c.get('occupancy_waves_per_simd') or 0:g} ({d['occupancy_limiter']})",
                      fmt_bytes(c.get("hbm_bytes") or 0), d["candidates"], d["illegal"],
                      fmt_knobs(d["schedule"])))
    parts.append(_table(["#", "dispatch", "kind", "time us", "x roofline", "coalescing %",
                         "LDS conflicts %", "waves/SIMD", "HBM", "scored", "illegal",
                         "schedule"], drows, num={0, 3, 4, 5, 6, 9, 10}))
    parts.append("<h2>Roofline</h2>")
    parts.append(roofline_svg(roofline_data(result)))
    parts.append('<p class="note">Dots: dispatches (numbered as above), flops over predicted '
                 "kernel time (launch overhead taken out) against flops per byte crossing the "
                 "dispatch boundary. Roofs: the arch's achievable (measured copy) bandwidths "
                 "and FP32 vector peak, as <code>tune</code>'s roofline uses them.</p>")
    parts.append("<h2>Plan</h2>")
    parts.append(svg_of(views.plan_view(result.plan), title="plan"))
    parts.append("<h2>Decisions</h2>")
    ex = views.explain_data(result.plan)
    parts.append(_table(["rule", "producer -> consumer", "fused", "reason", "cost (simulated)"],
                        [(r.rule, f"{r.producer} -> {r.consumer}", "yes" if r.fused else "no",
                          r.reason, " ".join(f"{k}={v:.3g}" if isinstance(v, float) else
                                             f"{k}={v}" for k, v in r.cost.items()))
                         for r in ex]))
    parts.append("<h2>Per dispatch</h2>")
    for i, name in enumerate(session.names):
        p = session.panes(name)
        parts.append(f"<details{' open' if i == 0 else ''}><summary>{i} {_e(name)}: "
                     f"{p.tuned.best.time_us:.2f} us, {_e(fmt_knobs(p.tuned.best.knobs))}"
                     f"</summary>")
        parts.append("<h3>Candidates</h3>")
        parts.append(svg_of(views.candidates_view(p.tuned), title=f"{name}: candidates"))
        parts.append("<h3>Wave timeline</h3>")
        if p.sim.trace:
            parts.append(svg_of(views.timeline_view(p.sim, max_rows=24), width=120,
                                title=f"{name}: timeline"))
        else:
            parts.append('<p class="note">the trace is empty (no wave ran on CU 0)</p>')
        for pane, what, view in ((p.coalescing, "Coalescing", views.coalescing_view),
                                 (p.banks, "LDS banks", views.banks_view)):
            parts.append(f"<h3>{what}</h3>")
            if pane.pattern is None:
                parts.append(f'<p class="note">{_e(pane.note)}</p>')
            else:
                parts.append(svg_of(view(pane.pattern, pane.inst), title=f"{name}: {what}"))
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
