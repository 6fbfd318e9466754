"""Plan and explain views: which ops run in which dispatch, what crosses the boundaries,
and why each fusion happened or not.

The plan tree itself is ``compiler.fusion.plan.render_plan`` (the one ``wavefuse fuse`` prints);
this module collects what it draws into a renderable so tutorials can embed it, and adds
the plain data the tests check. The explain table adds the search's cost numbers
(``Decision.cost``) that ``wavefuse fuse --explain`` does not show.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

from compiler.fusion.plan import FusionPlan, render_plan, tensor_type
from compiler.cli.views.common import dispatch_colour


@dataclass
class TensorRow:
    name: str
    type: str
    nbytes: int


@dataclass
class DispatchRow:
    name: str
    colour: str
    kind: str
    ops: list
    reads: list          # TensorRow, boundary inputs
    writes: list         # TensorRow, boundary outputs
    nbytes: int          # reads + writes


@dataclass
class PlanData:
    model: str
    mode: str
    dispatches: list
    op_dispatch: dict    # op name -> dispatch names it runs in (several when recomputed)
    bytes_unfused: int
    bytes_fused: int
    num_dispatches_unfused: int

    @property
    def bytes_saved(self) -> int:
        return self.bytes_unfused - self.bytes_fused


def plan_data(plan: FusionPlan) -> PlanData:
    """The plan as plain rows: dispatch, colour, ops, boundary tensors with sizes."""
    g = plan.graph

    def rows(names):
        return [TensorRow(t, str(tensor_type(g, t)), tensor_type(g, t).nbytes) for t in names]

    ds, where = [], {}
    for i, d in enumerate(plan.dispatches):
        ds.append(DispatchRow(d.name, dispatch_colour(i), d.kind, list(d.ops), rows(d.inputs),
                              rows(d.outputs), plan.dispatch_bytes(d)))
        for op in d.ops:
            where.setdefault(op, []).append(d.name)
    return PlanData(g.name, plan.mode, ds, where, plan.bytes_unfused, plan.bytes_fused,
                    plan.num_dispatches_unfused)


class _Collect:
    """Stands in for a Console so a print-style renderer's output becomes a Group."""

    def __init__(self):
        self.items = []

    def print(self, *objs, **_):
        self.items.extend(Text.from_markup(o) if isinstance(o, str) else o for o in objs)


def plan_view(plan: FusionPlan):
    """The plan tree and traffic table of ``wavefuse fuse``, plus a one-line op strip
    that shows, in graph order, which dispatch each op landed in."""
    data = plan_data(plan)
    strip = Text("graph order: ")
    colour = {d.name: d.colour for d in data.dispatches}
    first = True
    for n in plan.graph.topo_order():
        if n not in data.op_dispatch:
            continue
        if not first:
            strip.append(" ")
        first = False
        ds = data.op_dispatch[n]
        strip.append(n, style=colour[ds[0]])
        strip.append("[" + ",".join(str(_index(data, x)) for x in ds) + "]", style="dim")
    col = _Collect()
    render_plan(plan, col)
    return Group(*col.items, strip)


def _index(data: PlanData, name: str) -> int:
    return next(i for i, d in enumerate(data.dispatches) if d.name == name)


@dataclass
class ExplainRow:
    rule: str
    producer: str
    consumer: str
    fused: bool
    reason: str
    cost: dict = field(default_factory=dict)


def explain_data(plan: FusionPlan) -> list:
    return [ExplainRow(d.rule, d.producer, d.consumer, d.fused, d.reason, dict(d.cost or {}))
            for d in plan.decisions]


def _fmt_cost(cost: dict) -> str:
    return "\n".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in cost.items())


def explain_view(plan: FusionPlan, cost_hint: str = "run with --tune"):
    """Every decision with its reason; a cost column when the search decided any. The
    one renderer of the decisions table (``fuse --explain`` and ``view`` both print it)."""
    return explain_rows_view(explain_data(plan), f"{plan.graph.name}: fusion decisions "
                             f"({plan.mode})", cost_hint)


def explain_rows_view(rows: list, title: str, cost_hint: str = "run with --tune"):
    """The decisions table of some ``ExplainRow``s (the explorer shows one dispatch's)."""
    has_cost = any(r.cost for r in rows)
    t = Table(title=title, show_lines=False)
    t.add_column("rule", overflow="fold")
    t.add_column("producer -> consumer", overflow="fold")
    t.add_column("fused", no_wrap=True)
    t.add_column("reason", overflow="fold", ratio=3)
    if has_cost:
        t.add_column("cost (simulated)", overflow="fold")
    for r in rows:
        cells = [r.rule, f"{r.producer} -> {r.consumer}",
                 Text("yes", "green") if r.fused else Text("no", "red"), r.reason]
        if has_cost:
            cells.append(_fmt_cost(r.cost))
        t.add_row(*cells)
    n_fused = sum(r.fused for r in rows)
    summary = Text(f"{len(rows)} decisions: {n_fused} fused, {len(rows) - n_fused} kept apart"
                   + ("" if has_cost else f"; no simulator costs ({cost_hint})"), style="dim")
    return Group(t, summary)
