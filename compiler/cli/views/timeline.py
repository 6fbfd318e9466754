"""Wave timeline: a Gantt chart of what every wave of the timed CU did, cycle by cycle.

``gpusim.simulate(..., trace=True)`` records intervals (cu, simd, wave, start, end, kind)
for the timed CU 0. Here the window [start, end) is cut into equal buckets, one character
each; a bucket shows the kind that covered most of its cycles, or a blank when the wave
did nothing (not yet launched, finished, or ready but not picked by the scheduler).
Exact cycles per kind are kept per row, so the picture can be checked against numbers.
With sampling (``functional=False`` on a big grid) the trace covers only the workgroups
gpusim actually ran on CU 0, which the header states.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text

from compiler.cli.views.common import ViewError

#: kind -> (glyph, colour, legend). Glyphs differ so the chart reads without colour.
KINDS = {
    "valu": ("V", "green", "VALU"),
    "salu": ("s", "bright_black", "SALU"),
    "vmem": ("M", "blue", "VMEM issue"),
    "lds": ("L", "magenta", "LDS"),
    "barrier_wait": ("|", "yellow", "barrier wait"),
    "mem_stall": ("~", "red", "waiting on a load"),
    "mfma": ("X", "cyan", "MFMA issue"),
}
IDLE = "·"
LABEL_WIDTH = 16


@dataclass
class TimelineRow:
    cu: int
    simd: int
    wave: int
    cells: list          # kind (str) or None per bucket
    cycles: dict         # kind -> cycles inside the window

    @property
    def label(self) -> str:
        return f"CU{self.cu} S{self.simd} w{self.wave}"

    @property
    def busy_cycles(self) -> float:
        return sum(self.cycles.values())


@dataclass
class TimelineData:
    kernel: str
    start: float
    end: float
    bucket_cycles: float
    rows: list
    total_cycles: float      # the launch's simulated CU time (gpusim bounds["cu"])
    events: int

    @property
    def buckets(self) -> int:
        return len(self.rows[0].cells) if self.rows else 0

    def idle_cycles(self, row: TimelineRow) -> float:
        return (self.end - self.start) - row.busy_cycles


def _coverage(starts, ends, edges):
    """Cycles covered by the intervals before each edge (overlaps counted once per
    interval): the integral of a step function, evaluated with np.interp."""
    pts = np.concatenate([starts, ends])
    slope = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.argsort(pts, kind="stable")
    pts, slope = pts[order], np.cumsum(slope[order])
    area = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(pts))])
    return np.interp(edges, pts, area, left=0.0, right=area[-1])


def timeline_data(sim_result, start: float | None = None, end: float | None = None,
                  buckets: int = 80) -> TimelineData:
    """Buckets of the trace of ``sim_result`` in the window [start, end) cycles."""
    trace = sim_result.trace
    if trace is None:
        raise ViewError("the simulation has no trace; run gpusim.simulate(..., trace=True)")
    if not trace:
        raise ViewError(f"{sim_result.kernel}: the trace is empty (no wave ran on CU 0)")
    arr = np.array([(e["cu"], e["simd"], e["wave"], e["start"], e["end"],
                     list(KINDS).index(e["kind"])) for e in trace], np.float64)
    last = float(arr[:, 4].max())
    start = 0.0 if start is None else float(start)
    end = last if end is None else float(end)
    if not (0 <= start < end):
        raise ViewError(f"empty window --from {start:g} --to {end:g}; the trace spans "
                        f"0..{last:g} cycles")
    buckets = max(1, int(buckets))
    edges = np.linspace(start, end, buckets + 1)
    keys = sorted({(int(c), int(s), int(w)) for c, s, w in arr[:, :3]})
    rows = []
    for cu, simd, wave in keys:
        mine = arr[(arr[:, 0] == cu) & (arr[:, 1] == simd) & (arr[:, 2] == wave)]
        per_kind = np.zeros((len(KINDS), buckets))
        cycles = {}
        for ki, kind in enumerate(KINDS):
            ev = mine[mine[:, 5] == ki]
            if not len(ev):
                continue
            cov = _coverage(ev[:, 3], ev[:, 4], edges)
            per_kind[ki] = np.diff(cov)
            if cov[-1] - cov[0] > 0:
                cycles[kind] = float(cov[-1] - cov[0])
        best = per_kind.argmax(axis=0)
        busy = per_kind.max(axis=0) > 0
        names = list(KINDS)
        rows.append(TimelineRow(cu, simd, wave,
                                [names[b] if on else None for b, on in zip(best, busy)], cycles))
    total = float(getattr(sim_result, "bounds", {}).get("cu", last))
    return TimelineData(sim_result.kernel, start, end, (end - start) / buckets, rows, total,
                        len(trace))


class TimelineView:
    """Legend, axis and one Gantt line per wave; buckets fill the available width."""

    def __init__(self, sim_result, start=None, end=None, buckets=None, max_rows=48):
        self.sim, self.start, self.end = sim_result, start, end
        self.buckets, self.max_rows = buckets, max_rows

    def __rich_console__(self, console, options):
        n = self.buckets or max(10, options.max_width - LABEL_WIDTH - 1)
        d = timeline_data(self.sim, self.start, self.end, n)
        yield Text(f"{d.kernel}: wave timeline of CU 0, cycles {d.start:g}..{d.end:g} "
                   f"({d.bucket_cycles:.3g} cycles per column; {d.events} trace events; "
                   f"simulated CU time {d.total_cycles:.0f} cycles)", style="bold")
        yield legend({k for r in d.rows for k in r.cycles})
        yield axis(d)
        for r in d.rows[:self.max_rows]:
            line = Text(f"{r.label:<{LABEL_WIDTH}}", style="dim", no_wrap=True)
            for kind in r.cells:
                if kind is None:
                    line.append(IDLE, style="bright_black")
                else:
                    glyph, colour, _ = KINDS[kind]
                    line.append(glyph, style=colour)
            yield line
        if len(d.rows) > self.max_rows:
            yield Text(f"... {len(d.rows) - self.max_rows} more waves", style="dim")
        yield timeline_summary(d)


def legend(present=None) -> Text:
    """The glyphs; MFMA only when the kernel issues any (``present``: kinds seen)."""
    out = Text("legend: ", no_wrap=False)
    for kind, (glyph, colour, name) in KINDS.items():
        if kind == "mfma" and (present is None or kind not in present):
            continue
        out.append(glyph, style=colour)
        out.append(f" {name}  ")
    out.append(IDLE, style="bright_black")
    out.append(" idle / not picked")
    return out


def axis(d: TimelineData) -> Text:
    """Cycle labels at the start, middle and end of the window."""
    n = d.buckets
    left, mid, right = f"{d.start:g}", f"{(d.start + d.end) / 2:.0f}", f"{d.end:g}"
    line = [" "] * n
    for pos, s in ((0, left), (max(0, n // 2 - len(mid) // 2), mid), (max(0, n - len(right)), right)):
        if pos + len(s) <= n and all(c == " " for c in line[pos:pos + len(s)]):
            line[pos:pos + len(s)] = s
    return Text(f"{'cycle':<{LABEL_WIDTH}}" + "".join(line), style="dim", no_wrap=True)


def timeline_view(sim_result, start: float | None = None, end: float | None = None,
                  buckets: int | None = None, max_rows: int = 48):
    """Renderable Gantt of ``sim_result.trace``; ``buckets`` defaults to the width."""
    return TimelineView(sim_result, start, end, buckets, max_rows)


def timeline_summary(d: TimelineData) -> Text:
    """Cycles per kind summed over waves: the numbers behind the picture."""
    tot = {}
    for r in d.rows:
        for k, v in r.cycles.items():
            tot[k] = tot.get(k, 0.0) + v
    line = Text("cycles over all waves: ")
    for k, v in tot.items():
        line.append(f"{KINDS[k][2]} {v:.0f}  ", style=KINDS[k][1])
    return line
