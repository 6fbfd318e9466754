"""Search view: how the staged search found a dispatch's winner.

Two pictures of one ``DispatchTune``'s search record (``compiler.tuning.staged``): the
convergence (every simulation in order, its stage, its simulated time and the best so far,
as a bar) and the analytic rank of each simulated point against its simulated time (a
text scatter with the Spearman correlation of the two), so a reader sees whether the
ranking put the good points first and which stage found the winner. Times are gpusim's
simulated predictions; the analytic estimate is only an ordering.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from compiler.cli.views.common import ViewError, fmt_knobs
from compiler.tuning.rank import spearman

STAGE_STYLE = {"rank": "cyan", "explore": "magenta", "refine": "green", "evolve": "yellow",
               "always": "white", "random": "blue", "every point": "white"}


@dataclass
class SearchRow:
    n: int                  # simulation number, 1-based
    stage: str
    analytic_rank: int | None   # 1 = best estimate among the legal points (exact where
    #                             the search looked, lower bounds elsewhere: rank.Ranking)
    time_us: float | None
    best_us: float | None
    knobs: dict
    improved: bool


@dataclass
class SearchData:
    dispatch: str
    kind: str
    strategy: str
    legal: int
    ranked: int
    simulated: int
    winner_stage: str
    rows: list
    spearman: float         # analytic rank vs simulated time over the simulated points


def search_data(tuned) -> SearchData:
    s = tuned.search
    if not s or not s.get("convergence"):
        raise ViewError(f"dispatch {tuned.name} has no search record")
    rows, last = [], None
    for n, c in enumerate(s["convergence"], 1):
        improved = c["best_us"] is not None and (last is None or c["best_us"] < last)
        last = c["best_us"] if c["best_us"] is not None else last
        r = c.get("analytic_rank")
        rows.append(SearchRow(n, c["stage"], None if r is None else r + 1, c["time_us"],
                              c["best_us"], c.get("knobs", {}), improved))
    pairs = [(r.analytic_rank, r.time_us) for r in rows
             if r.analytic_rank is not None and r.time_us is not None]
    rho = spearman(*zip(*pairs)) if len(pairs) >= 3 else float("nan")
    return SearchData(tuned.name, tuned.kind, s["strategy"], s["legal"], s["ranked"],
                      s["simulated"], s["winner_stage"], rows, rho)


class SearchView:
    def __init__(self, data: SearchData, height: int = 10):
        self.data, self.height = data, height

    def __rich_console__(self, console, options):
        d = self.data
        yield Text(f"dispatch {d.dispatch} ({d.kind}): {d.strategy} search, {d.ranked} of "
                   f"{d.legal} legal points ranked analytically, {d.simulated} simulated; "
                   f"winner found by {d.winner_stage or '-'}", style="bold")
        t = Table(title="convergence: best so far against simulations", title_justify="left")
        for col, just in (("#", "right"), ("stage", "left"), ("est. rank", "right"),
                          ("time us", "right"), ("best so far", "left")):
            t.add_column(col, justify=just, no_wrap=col != "best so far")
        ok = [r.best_us for r in d.rows if r.best_us is not None]
        top = max(ok) if ok else 1.0
        span = max(8, min(40, options.max_width - 48))
        for r in d.rows:
            bar = Text()
            if r.best_us is not None:
                bar.append("█" * max(1, round(span * r.best_us / top)),
                           style=STAGE_STYLE.get(r.stage, "white"))
                bar.append(f" {r.best_us:.2f}" + (" <" if r.improved else ""))
            t.add_row(str(r.n), Text(r.stage, style=STAGE_STYLE.get(r.stage, "white")),
                      "-" if r.analytic_rank is None else str(r.analytic_rank),
                      "failed" if r.time_us is None else f"{r.time_us:.2f}", bar)
        yield t
        yield Text("bars: best simulated time so far, coloured by the stage of the point "
                   "just simulated; < marks an improvement", style="dim")
        yield scatter(d, self.height, options.max_width)
        if d.rows:
            win = min((r for r in d.rows if r.time_us is not None),
                      key=lambda r: r.time_us, default=None)
            if win is not None:
                yield Text(f"winner ({win.stage}, simulation {win.n}): {fmt_knobs(win.knobs)}")
        yield Text("times are simulated predictions (gpusim), not measurements", style="dim")


def scatter(d: SearchData, height: int, width: int) -> Text:
    """Analytic rank (x) against simulated time (y, fastest at the bottom)."""
    pts = [(r.analytic_rank, r.time_us, r.stage) for r in d.rows
           if r.analytic_rank is not None and r.time_us is not None]
    out = Text("analytic rank (x) against simulated time (y)", style="bold")
    if len(pts) < 2:
        return out + Text(": no ranked points simulated (random or every-point search)\n")
    rho = "n/a" if math.isnan(d.spearman) else f"{d.spearman:.2f}"
    out.append(f", Spearman {rho} over {len(pts)} points\n")
    cols = max(20, min(60, width - 14))
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    grid = [[None] * cols for _ in range(height)]
    for x, y, st in pts:
        c = 0 if x1 == x0 else round((x - x0) / (x1 - x0) * (cols - 1))
        r = 0 if y1 == y0 else round((y - y0) / (y1 - y0) * (height - 1))
        grid[height - 1 - r][c] = st
    for i, row in enumerate(grid):
        label = y1 - (y1 - y0) * i / max(1, height - 1)
        out.append(f"{label:>9.2f} |")
        for cell in row:
            out.append("●" if cell else " ", style=STAGE_STYLE.get(cell, "white"))
        out.append("\n")
    out.append(" " * 10 + "+" + "-" * cols + "\n")
    out.append(" " * 11 + f"rank {x0}" + " " * max(1, cols - 12 - len(str(x1))) +
               f"rank {x1}\n", style="dim")
    return out


def search_view(tuned, height: int = 10):
    """Renderable for a ``compiler.tuning.search.DispatchTune`` with a search record."""
    return SearchView(search_data(tuned), height)
