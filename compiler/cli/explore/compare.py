"""Two runs side by side: which dispatches changed, their times, counters and schedules,
and the totals split into launches and kernel time.

A run is the object ``wavefuse tune --json`` prints (``TuneResult.to_json``); runs made
here (``wavefuse compare --model``) are turned into the same object first, so a saved run
and a fresh one compare alike. Dispatches are matched by name (a dispatch's name is its
index and root op, so two plans of one model share the names of the dispatches they
agree on); when both runs list a dispatch's ops and they differ, the pair is "regrouped",
not compared knob by knob; unmatched ones are listed as only in A or only in B.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

from compiler.cli.views.common import fmt_knobs
from compiler.ir.graph import GraphError

#: counters compared, in display order, with their short names
COUNTERS = (("coalescing_pct", "coal %"), ("lds_bank_conflict_rate_pct", "LDS %"),
            ("occupancy_waves_per_simd", "waves"), ("hbm_bytes", "HBM B"),
            ("valu_insts", "VALU"), ("vmem_insts", "VMEM"), ("lds_insts", "LDS insts"))
REQUIRED = ("model", "arch", "total_time_us", "num_dispatches", "launch_overhead_us",
            "dispatches")


@dataclass
class DispatchDiff:
    name: str
    status: str                      # same | changed | regrouped | only A | only B
    time_a: float | None
    time_b: float | None
    schedule_a: dict | None
    schedule_b: dict | None
    knobs_changed: dict = field(default_factory=dict)     # knob -> [a, b]
    counters: dict = field(default_factory=dict)          # counter -> [a, b], those that differ
    ops: list = field(default_factory=list)               # [ops in A, ops in B] when regrouped

    @property
    def delta_us(self) -> float | None:
        if self.time_a is None or self.time_b is None:
            return None
        return self.time_b - self.time_a


@dataclass
class Totals:
    total_us: float
    launches_us: float
    kernel_us: float
    dispatches: int


@dataclass
class CompareData:
    label_a: str
    label_b: str
    a: Totals
    b: Totals
    rows: list
    notes: list = field(default_factory=list)

    @property
    def changed(self) -> list:
        return [r for r in self.rows if r.status != "same"]

    def to_json(self) -> dict:
        return {"a": {"label": self.label_a, **asdict(self.a)},
                "b": {"label": self.label_b, **asdict(self.b)},
                "delta": {k: getattr(self.b, k) - getattr(self.a, k)
                          for k in ("total_us", "launches_us", "kernel_us", "dispatches")},
                "dispatches": [{**asdict(r), "delta_us": r.delta_us} for r in self.rows],
                "notes": self.notes,
                "time_unit": "simulated microseconds (gpusim model, not measured)"}


def check_run(run, label: str) -> dict:
    """``run`` if it has the fields of a ``tune --json`` object, else one clear error."""
    if not isinstance(run, dict):
        raise GraphError(f"{label}: not a `wavefuse tune --json` output (not a JSON object)")
    missing = [k for k in REQUIRED if k not in run]
    if missing:
        raise GraphError(f"{label}: not a `wavefuse tune --json` output (no "
                         f"{', '.join(missing)})")
    for d in run["dispatches"]:
        if not isinstance(d, dict) or not {"name", "time_us", "schedule"} <= set(d):
            raise GraphError(f"{label}: a dispatch entry lacks name, time_us or schedule")
    return run


def totals(run: dict) -> Totals:
    """The total and its split: every dispatch pays one launch overhead (``time_us``
    includes it, as ``tune``'s table does); the rest is kernel time."""
    launches = run["num_dispatches"] * run["launch_overhead_us"]
    return Totals(run["total_time_us"], launches, run["total_time_us"] - launches,
                  run["num_dispatches"])


def _close(x, y) -> bool:
    if x is None or y is None:
        return x is y
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


def compare_data(a: dict, b: dict, label_a: str = "A", label_b: str = "B") -> CompareData:
    check_run(a, label_a)
    check_run(b, label_b)
    da = {d["name"]: d for d in a["dispatches"]}
    db = {d["name"]: d for d in b["dispatches"]}
    rows = []
    for name in list(da) + [n for n in db if n not in da]:
        x, y = da.get(name), db.get(name)
        if x is None or y is None:
            rows.append(DispatchDiff(name, "only A" if y is None else "only B",
                                     x and x["time_us"], y and y["time_us"],
                                     x and x["schedule"], y and y["schedule"]))
            continue
        if "ops" in x and "ops" in y and list(x["ops"]) != list(y["ops"]):
            # one name, two different groups of ops (e.g. two plans): not one dispatch
            rows.append(DispatchDiff(name, "regrouped", x["time_us"], y["time_us"],
                                     x["schedule"], y["schedule"],
                                     ops=[list(x["ops"]), list(y["ops"])]))
            continue
        knobs = {k: [x["schedule"].get(k), y["schedule"].get(k)]
                 for k in sorted(set(x["schedule"]) | set(y["schedule"]))
                 if x["schedule"].get(k) != y["schedule"].get(k)}
        ca, cb = x.get("counters") or {}, y.get("counters") or {}
        counters = {k: [ca.get(k), cb.get(k)] for k, _ in COUNTERS
                    if not _close(ca.get(k), cb.get(k))}
        same = not knobs and not counters and _close(x["time_us"], y["time_us"])
        rows.append(DispatchDiff(name, "same" if same else "changed", x["time_us"],
                                 y["time_us"], x["schedule"], y["schedule"], knobs, counters))
    notes = []
    for key in ("model", "arch", "mode"):
        if a.get(key) != b.get(key):
            notes.append(f"{key}: {a.get(key)} vs {b.get(key)}")
    return CompareData(label_a, label_b, totals(a), totals(b), rows, notes)


def _us(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def compare_view(d: CompareData):
    """Totals with their split, then one row per dispatch (changed ones first in bold),
    with the knobs and counters that differ."""
    head = Text(f"A = {d.label_a}\nB = {d.label_b}", style="bold")
    t = Table(title="total and its split", title_justify="left")
    for col, just in (("", "left"), ("A us", "right"), ("B us", "right"), ("B - A", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for what, ka in (("total", "total_us"), ("launches", "launches_us"),
                     ("kernel time", "kernel_us")):
        va, vb = getattr(d.a, ka), getattr(d.b, ka)
        t.add_row(what, f"{va:.2f}", f"{vb:.2f}", Text(f"{vb - va:+.2f}",
                                                       style="green" if vb < va else
                                                       ("red" if vb > va else "")))
    t.add_row("dispatches", str(d.a.dispatches), str(d.b.dispatches),
              f"{d.b.dispatches - d.a.dispatches:+d}")
    per = Table(title=f"{len(d.changed)} of {len(d.rows)} dispatches differ", title_justify="left")
    per.add_column("dispatch", overflow="fold")
    per.add_column("A us", justify="right", no_wrap=True)
    per.add_column("B us", justify="right", no_wrap=True)
    per.add_column("B/A", justify="right", no_wrap=True)
    per.add_column("what differs", overflow="fold", ratio=2)
    for r in sorted(d.rows, key=lambda r: r.status == "same"):
        ratio = "-" if r.delta_us is None or not r.time_a else f"{r.time_b / r.time_a:.2f}"
        if r.status in ("only A", "only B"):
            what = Text(f"{r.status}: {fmt_knobs(r.schedule_a or r.schedule_b)}", style="yellow")
        elif r.status == "regrouped":
            what = Text(f"other ops: A runs {len(r.ops[0])} ({', '.join(r.ops[0][:4])}"
                        f"{'...' if len(r.ops[0]) > 4 else ''}), B runs {len(r.ops[1])} "
                        f"({', '.join(r.ops[1][:4])}{'...' if len(r.ops[1]) > 4 else ''})",
                        style="yellow")
        elif r.status == "same":
            what = Text("same schedule and counters", style="dim")
        else:
            short = dict(COUNTERS)
            lines = []
            if r.knobs_changed:
                lines.append("schedule: " + ", ".join(f"{k} {va}->{vb}" for k, (va, vb)
                                                      in r.knobs_changed.items()))
            if r.counters:
                lines.append("counters: " + ", ".join(f"{short[k]} {_num(va)}->{_num(vb)}"
                                                      for k, (va, vb) in r.counters.items()))
            what = Text("\n".join(lines) or "time only")
        per.add_row(Text(r.name, style="bold" if r.status != "same" else ""), _us(r.time_a),
                    _us(r.time_b), ratio, what)
    foot = [Text(f"runs differ in {', '.join(d.notes)}", style="dim")] if d.notes else []
    foot.append(Text("times are gpusim predictions; each dispatch pays one launch overhead, "
                     "the rest is kernel time", style="dim"))
    return Group(head, t, per, *foot)
