"""Candidates view: every scored schedule of one dispatch, sortable, with the winner
marked, the illegal points counted by reason, and a bar chart of predicted times.

The numbers are gpusim's predictions in timing mode (``compiler.tuning.search.score``); the
ratio to roofline divides by the dispatch's bound (bytes over the achievable memory bandwidth or flops over
peak, plus one launch), so 1.0 would be a perfect kernel.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.table import Table
from rich.text import Text

from compiler.cli.views.common import ViewError, fmt_bytes, fmt_knobs

#: sort key -> (field of CandidateRow, descending?); ties break on predicted time.
SORT_KEYS = {
    "time": ("time_us", False),
    "roofline": ("roofline_ratio", False),
    "coalescing": ("coalescing_pct", True),
    "conflicts": ("conflict_rate_pct", False),
    "occupancy": ("occupancy", True),
    "bytes": ("hbm_bytes", False),
}


@dataclass
class CandidateRow:
    rank: int                # 1 = fastest predicted
    knobs: dict
    time_us: float
    roofline_ratio: float
    coalescing_pct: float
    conflict_rate_pct: float
    occupancy: float
    limiter: str
    hbm_bytes: float
    winner: bool


@dataclass
class CandidatesData:
    dispatch: str
    kind: str
    roofline_us: float
    nbytes: int
    sort: str
    rows: list                              # CandidateRow in the chosen order
    illegal: list = field(default_factory=list)   # (reason, count), most frequent first

    @property
    def winner(self) -> CandidateRow:
        return next(r for r in self.rows if r.winner)

    @property
    def shared_knobs(self) -> dict:
        """Knobs with one value in every row: printed once, not per row."""
        if len(self.rows) < 2:
            return {}
        first = self.rows[0].knobs
        return {k: v for k, v in first.items() if all(r.knobs.get(k) == v for r in self.rows)}

    @property
    def num_illegal(self) -> int:
        return sum(n for _, n in self.illegal)


def candidates_data(tuned, sort: str = "time") -> CandidatesData:
    """Rows of a ``DispatchTune`` (compiler.tuning.search) in ``sort`` order."""
    if sort not in SORT_KEYS:
        raise ViewError(f"no sort key {sort!r}; valid: {', '.join(SORT_KEYS)}")
    ok = sorted((s for s in tuned.candidates if s.ok), key=lambda s: s.time_us)
    roof = tuned.roofline_us or float("nan")
    rows = []
    for i, s in enumerate(ok):
        c = s.counters
        rows.append(CandidateRow(i + 1, dict(s.knobs), s.time_us, s.time_us / roof,
                                 float(c.get("coalescing_pct", 0.0)),
                                 float(c.get("lds_bank_conflict_rate_pct", 0.0)),
                                 float(c.get("occupancy_waves_per_simd", 0.0)),
                                 s.occupancy_limiter, float(c.get("hbm_bytes", 0.0)),
                                 s is tuned.best or (i == 0 and tuned.best not in ok)))
    key, desc = SORT_KEYS[sort]
    rows.sort(key=lambda r: ((-1 if desc else 1) * getattr(r, key), r.time_us))
    reasons = Counter(c.reason or "illegal" for c in tuned.illegal)
    reasons.update(s.error for s in tuned.candidates if not s.ok)
    return CandidatesData(tuned.name, tuned.kind, tuned.roofline_us, tuned.bytes, sort, rows,
                          sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))


class CandidatesView:
    """Table + illegal summary + bar chart; drops secondary columns below 80 columns."""

    def __init__(self, data: CandidatesData, limit: int = 20, bars: int = 12):
        self.data, self.limit, self.bars = data, limit, bars

    def __rich_console__(self, console, options):
        d = self.data
        narrow = options.max_width < 80
        wide = options.max_width >= 110
        title = (f"dispatch {d.dispatch} ({d.kind}): {len(d.rows)} scored schedules, "
                 f"sorted by {d.sort}")
        shared = d.shared_knobs
        winner = d.winner if d.rows else None
        base = {k: v for k, v in winner.knobs.items() if k not in shared} if winner else {}
        if winner is not None:
            # each row shows only where it differs from the winner, so a schedule takes
            # one or two lines at 80-100 columns instead of one line per knob
            yield Text(f"winner (*{winner.rank}): {fmt_knobs(base) or '-'}", style="bold green")
        if narrow:   # lighter box, fewer columns, short headers: fits 60 columns
            t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      padding=(0, 1))
        else:
            t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        t.add_column("#", justify="right", no_wrap=True)
        t.add_column("schedule" if narrow else "schedule (vs winner)", overflow="fold", ratio=1,
                     min_width=14 if narrow else 20)
        t.add_column("us" if narrow else "time us", justify="right", no_wrap=True)
        if not narrow:
            t.add_column("x roof", justify="right", no_wrap=True)
        t.add_column("coal%" if narrow else "coal %", justify="right", no_wrap=True)
        t.add_column("LDS%" if narrow else "LDS %", justify="right", no_wrap=True)
        t.add_column("occupancy", no_wrap=True)
        if wide:
            t.add_column("HBM", justify="right", no_wrap=True)
        for r in d.rows[:self.limit]:
            own = {k: v for k, v in r.knobs.items() if k not in shared}
            diff = {k: v for k, v in own.items() if base.get(k) != v}
            sched = "winner" if r.winner else (fmt_knobs(diff) or "same knobs")
            cells = [f"*{r.rank}" if r.winner else str(r.rank), sched, f"{r.time_us:.2f}"]
            if not narrow:
                cells.append(f"{r.roofline_ratio:.2f}")
            lim = SHORT_LIMITERS.get(r.limiter, r.limiter)
            cells += [f"{r.coalescing_pct:.0f}", f"{r.conflict_rate_pct:.1f}",
                      f"{r.occupancy:g} {lim}" if lim else f"{r.occupancy:g}"]
            if wide:
                cells.append(fmt_bytes(r.hbm_bytes))
            t.add_row(*cells, style="bold green" if r.winner else None)
        yield t
        if len(d.rows) > self.limit:
            yield Text(f"... {len(d.rows) - self.limit} more scored schedules", style="dim")
        if shared:
            yield Text(f"every schedule shown has {fmt_knobs(shared)}", style="dim")
        yield Text("coal %: coalescing; LDS %: bank conflict rate; occupancy: waves/SIMD, "
                   "limiter", style="dim")
        yield Text(f"* winner; roofline {d.roofline_us:.2f} us for {fmt_bytes(d.nbytes)} "
                   f"across the boundary; times are simulated", style="dim")
        if d.illegal:
            yield Text(f"{d.num_illegal} illegal or failed candidates, never scored:", style="yellow")
            for reason, n in d.illegal[:5]:
                yield Text(f"  {n:>4} x {reason}", overflow="ellipsis", no_wrap=True)
            if len(d.illegal) > 5:
                yield Text(f"  ... {len(d.illegal) - 5} more reasons", style="dim")
        yield bar_chart(d, self.bars, options.max_width)


#: occupancy limiters in a few letters, so the column stays narrow
SHORT_LIMITERS = {"wave slots": "slots", "VGPRs": "VGPRs", "LDS": "LDS",
                  "workgroups per CU (barriers)": "barriers"}


def bar_chart(d: CandidatesData, n: int, width: int) -> Text:
    """One line per schedule (in table order): rank, a bar, time. The bars start at the
    winner's time, not at zero: candidates within a few percent of each other would
    otherwise all draw the same length. Each bar is one cell plus its excess over the
    fastest time shown, scaled so the slowest fills the width; the caption says so."""
    rows = d.rows[:n]
    out = Text("predicted time: bars start at the fastest, so their length is the extra "
               "time\n", style="bold")
    if not rows:
        return out
    lo = min(r.time_us for r in rows)
    hi = max(r.time_us for r in rows)
    span = max(8, width - 30)
    for r in rows:
        extra = r.time_us - lo
        fill = 1 + (round((span - 1) * extra / (hi - lo)) if hi > lo else 0)
        out.append(f"{r.rank:>4} ", style="dim")
        out.append("█" * fill, style="green" if r.winner else "cyan")
        pct = f"+{100 * extra / lo:.0f}%" if lo > 0 and extra > 0 else "fastest"
        out.append(f" {r.time_us:.2f} us {pct}" + (" *" if r.winner else "") + "\n")
    out.rstrip()
    return out


def candidates_view(tuned, sort: str = "time", limit: int = 20, bars: int = 12):
    """Renderable for a ``compiler.tuning.search.DispatchTune``."""
    return CandidatesView(candidates_data(tuned, sort), limit, bars)
