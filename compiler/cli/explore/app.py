"""`wavefuse explore`: the Textual application.

Left, the plan tree (dispatches, their ops and boundary tensors); right, tabs for the
selected dispatch: its fusion decisions and winning schedule, its scored candidates (a
table sortable by any column), the winner's wave timeline (scroll and zoom), the
coalescing and LDS bank maps of the selected access, and the HIP source with per-line
counters. The panes draw the same rich renderables as ``wavefuse view`` (the candidates
table is a Textual DataTable over the same ``candidates_data`` rows, so it can sort).

Scoring and tracing run in a worker thread (``Session.panes``), with a progress bar and
the stage in the status line; switching the arch (``a``) or pinning a knob (``p``)
re-simulates the dispatch there, the UI stays live, and the tuning database keeps every
score. All times are simulated predictions (gpusim), which the status line says.
"""
from __future__ import annotations

import argparse
import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import (DataTable, Footer, Input, Label, ProgressBar, Static, TabbedContent,
                             TabPane, Tree)

from gpusim.hw import ARCHES

from compiler.cli import views
from compiler.cli.commands import common
from compiler.cli.explore.session import STAGES, Session
from compiler.cli.views.common import fmt_bytes, fmt_knobs
from compiler.cli.views.source import SourceView
from compiler.ir.graph import GraphError

MIN_SIZE = (80, 24)

#: (tab id, title) in key order 1..5
TABS = (("decisions", "Decisions"), ("candidates", "Candidates"), ("timeline", "Timeline"),
        ("memory", "Memory"), ("source", "Source"))

#: candidates table: (column key, header, CandidateRow field, SORT_KEYS key or None)
COLUMNS = (("rank", "#", "rank", "time"), ("time", "time us", "time_us", "time"), ("roofline", "x roof", "roofline_ratio", "roofline"),
           ("coalescing", "coal %", "coalescing_pct", "coalescing"),
           ("conflicts", "LDS %", "conflict_rate_pct", "conflicts"),
           ("occupancy", "waves", "occupancy", "occupancy"), ("limiter", "limiter", "limiter", None),
           ("bytes", "HBM", "hbm_bytes", "bytes"), ("schedule", "schedule", None, None))

HELP = (("1..5", "show a pane: decisions, candidates, timeline, memory, source"),
        ("up/down, enter", "move in the plan tree; enter selects a dispatch"),
        ("tab", "move the focus (tree, tabs, table)"),
        ("a", "next arch (re-simulates the dispatch in the background)"),
        ("p", "pin a knob of this dispatch, e.g. vector=4 (re-simulates)"),
        ("u", "remove this dispatch's pins"),
        ("s", "candidates: sort by the next column (or click a header)"),
        ("enter", "candidates: pin every knob of the row (it becomes the schedule)"),
        ("+ / -", "timeline: zoom in / out"),
        ("< / >", "timeline: scroll the window left / right"),
        ("g / b", "memory: next global access (coalescing) / next LDS access (banks)"),
        ("?", "this help"), ("q", "quit"))


class HelpScreen(ModalScreen):
    """The keys, in a box; any key closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 76; height: auto; border: round $accent; padding: 0 1;
                          background: $surface; }
    """

    def compose(self) -> ComposeResult:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold cyan", no_wrap=True)
        t.add_column()
        for key, what in HELP:
            t.add_row(key, what)
        yield Static(Group(Text("wavefuse explore: keys", style="bold"), t,
                           Text("times are gpusim predictions, not measurements; any key "
                                "closes this", style="dim")))

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss()


class PinScreen(ModalScreen):
    """Asks for KNOB=VALUE (checked like ``--fix``); dismisses with (knob, value) or None."""

    DEFAULT_CSS = """
    PinScreen { align: center middle; }
    PinScreen > Vertical { width: 76; height: auto; border: round $accent; padding: 0 1;
                           background: $surface; }
    PinScreen Label { width: 100%; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, dispatch: str, knobs: dict):
        super().__init__()
        self.dispatch, self.knobs = dispatch, knobs

    def compose(self) -> ComposeResult:
        seen = "; ".join(f"{k}: {', '.join(str(v) for v in vs)}" for k, vs in self.knobs.items())
        with Vertical():
            yield Label(f"pin a knob of {self.dispatch} (KNOB=VALUE; escape cancels)")
            yield Label(Text(f"values among the scored candidates: {seen or 'none'}",
                             style="dim"))
            yield Input(placeholder="e.g. vector=4", id="pin-input")
            yield Label("", id="pin-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            knob, value = common.fix_value(event.value)
        except argparse.ArgumentTypeError as exc:
            self.query_one("#pin-error", Label).update(Text(str(exc), style="red"))
            return
        self.dismiss((knob, value))

    def action_cancel(self) -> None:
        self.dismiss(None)


class ExploreApp(App):
    """The explorer over a :class:`Session`."""

    TITLE = "wavefuse explore"
    CSS = """
    #main { height: 1fr; }
    #plan { width: 24; border-right: solid $primary; }
    #tabs { width: 1fr; }
    #status-bar { height: 1; }
    #status { width: 1fr; }
    #progress { width: 22; }
    #progress Bar { width: 12; }
    DataTable { height: 1fr; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("a", "next_arch", "arch"),
        Binding("p", "pin", "pin"),
        Binding("u", "unpin", "unpin", show=False),
        Binding("s", "sort", "sort", show=False),
        Binding("plus,equals_sign", "zoom(0.5)", "zoom", show=False),
        Binding("minus", "zoom(2.0)", "zoom out", show=False),
        Binding("less_than_sign,comma", "scroll_time(-0.25)", "earlier", show=False),
        Binding("greater_than_sign,full_stop", "scroll_time(0.25)", "later", show=False),
        Binding("g", "next_access('global')", "global", show=False),
        Binding("b", "next_access('lds')", "banks", show=False),
    ] + [Binding(str(i + 1), f"show_tab('{tid}')", title, show=False)
         for i, (tid, title) in enumerate(TABS)]

    def __init__(self, session: Session, dispatch: str | None = None):
        super().__init__()
        self.session = session
        self.selected = dispatch or (session.names[0] if session.names else None)
        self.panes = None                 # DispatchPanes on show
        self.window: dict = {}            # panes key -> (start, end) of the timeline
        self.sort_key, self.sort_reverse = "time", False
        self.busy = False
        self.too_small = None
        self.last_status = ""

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield Tree(self.session.model, id="plan")
            with TabbedContent(id="tabs", initial="decisions"):
                with TabPane(f"1 {TABS[0][1]}", id="decisions"):
                    with VerticalScroll():
                        yield Static(id="decisions-body")
                with TabPane(f"2 {TABS[1][1]}", id="candidates"):
                    yield Static(id="candidates-head")
                    yield DataTable(id="candidates-table", zebra_stripes=True,
                                    cursor_type="row")
                with TabPane(f"3 {TABS[2][1]}", id="timeline"):
                    with VerticalScroll():
                        yield Static(id="timeline-body")
                with TabPane(f"4 {TABS[3][1]}", id="memory"):
                    with VerticalScroll():
                        yield Static(id="memory-body")
                with TabPane(f"5 {TABS[4][1]}", id="source"):
                    with VerticalScroll():
                        yield Static(id="source-body")
        with Horizontal(id="status-bar"):
            yield Label("", id="status")
            yield ProgressBar(id="progress", show_eta=False)
        yield Footer()

    def on_mount(self) -> None:
        self._fill_tree()
        table = self.query_one("#candidates-table", DataTable)
        for key, header, _, _ in COLUMNS:
            table.add_column(header, key=key)
        self.query_one("#progress", ProgressBar).display = False
        self._check_size()
        if self.selected is not None:
            self.tune_everything()

    def _fill_tree(self) -> None:
        tree = self.query_one("#plan", Tree)
        data = self.session.plan_data()
        tree.root.set_label(Text(f"{data.model} ({data.mode}, {len(data.dispatches)} "
                                 f"dispatches)", style="bold"))
        tree.root.expand()
        for i, d in enumerate(data.dispatches):
            node = tree.root.add(Text.assemble((f"{i} ", "dim"), (d.name, d.colour)),
                                 data=d.name, expand=d.name == self.selected)
            ops = node.add(f"ops ({len(d.ops)})", data=d.name)
            for op in d.ops:
                ops.add_leaf(op, data=d.name)
            for what, rows in (("reads", d.reads), ("writes", d.writes)):
                group = node.add(f"{what} ({fmt_bytes(sum(r.nbytes for r in rows))})",
                                 data=d.name)
                for r in rows:
                    group.add_leaf(Text.assemble(r.name, (f" {r.type}", "dim")), data=d.name)

    def on_resize(self, event) -> None:
        self._check_size()

    def _check_size(self) -> None:
        """Below 80x24 the panes are cut; the status line says so until it grows again."""
        w, h = self.size
        small = w < MIN_SIZE[0] or h < MIN_SIZE[1]
        self.too_small = (Text(f"the terminal is {w}x{h}; the explorer needs "
                               f"{MIN_SIZE[0]}x{MIN_SIZE[1]}", style="bold red")
                          if small else None)
        self._status(self.last_status)

    # ------------------------------------------------------------------ status
    def _status(self, text) -> None:
        self.last_status = text
        self.query_one("#status", Label).update(self.too_small or text)

    def _ready_status(self) -> None:
        p = self.panes
        if p is None:
            return
        pins = f"; pinned {fmt_knobs(p.pins)}" if p.pins else ""
        self._status(Text.assemble((f"{p.name}", "bold"), f" on {p.arch.name}: ",
                                   (f"{p.tuned.best.time_us:.2f} us", "bold green"),
                                   f" predicted (simulated){pins}; ? help"))

    def _progress(self, total, done=0) -> None:
        bar = self.query_one("#progress", ProgressBar)
        bar.display = total is not None
        if total is not None:
            bar.update(total=total, progress=done)

    # ------------------------------------------------------------------ workers
    @work(thread=True, exclusive=True, group="sim")
    def tune_everything(self) -> None:
        """Scores every dispatch at start (one search, progress per dispatch), then
        shows the selected one."""
        app = self

        class Progress:   # the part of rich's Progress that tune_dispatches uses
            total = done = 0

            def add_task(self, description, total=None):
                self.total = total or 1
                app.call_from_thread(app._status, f"{description}...")
                app.call_from_thread(app._progress, self.total, 0)
                return 0

            def advance(self, task, n=1):
                self.done += n
                app.call_from_thread(app._progress, self.total, self.done)

        try:
            self.session.tune_all(progress=Progress())
        except GraphError as exc:
            self.call_from_thread(self._failed, str(exc))
            return
        self.call_from_thread(self.select, self.selected, True)

    @work(thread=True, exclusive=True, group="sim")
    def compute(self, name: str) -> None:
        key = self.session.key(name)

        def stage(i, label):
            self.call_from_thread(self._progress, len(STAGES), i)
            self.call_from_thread(self._status, f"{name} on {key[1]}: {label}...")

        try:
            panes = self.session.panes(name, stage)
        except GraphError as exc:   # a pin no candidate has, a kernel gpusim rejects
            self.call_from_thread(self._failed, str(exc), name)
            return
        self.call_from_thread(self._show, panes)

    def _failed(self, message: str, name: str | None = None) -> None:
        self.busy = False
        self._progress(None)
        self._status(Text(" ".join(message.split()), style="bold red"))
        if name is not None:
            # back to the pins of what is shown (the new pin is dropped; the message says why)
            shown = self.panes if self.panes is not None and self.panes.name == name else None
            self.session.unpin(name)
            for knob, value in (shown.pins if shown else {}).items():
                self.session.pin(name, knob, value)
            self.notify(f"{name}: the new pin is dropped", severity="warning")

    # ------------------------------------------------------------------ selection
    def select(self, name: str | None, force: bool = False) -> None:
        if name is None or (name == self.selected and not force and self.panes is not None
                            and self.panes.name == name
                            and self.session.cached(name) is self.panes):
            return
        self.selected = name
        cached = self.session.cached(name)
        if cached is not None:
            self._show(cached)
            return
        self.busy = True
        self.compute(name)

    @on(Tree.NodeSelected, "#plan")
    def _tree_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data is not None:
            self.select(event.node.data)

    def _show(self, panes) -> None:
        if panes.name != self.selected or self.session.key(panes.name) != \
                (panes.name, panes.arch.name, tuple(sorted(panes.pins.items()))):
            return    # a stale result: the selection, arch or pins changed meanwhile
        self.busy = False
        self.panes = panes
        self._progress(None)
        self._ready_status()
        self._draw_decisions()
        self._draw_candidates()
        self._draw_timeline()
        self._draw_memory()
        self._draw_source()

    # ------------------------------------------------------------------ panes
    def _draw_decisions(self) -> None:
        p = self.panes
        t = p.tuned
        win = Table.grid(padding=(0, 1))
        win.add_column(style="bold")
        win.add_column()
        win.add_row("dispatch", f"{p.name} ({t.kind}), {len(t.dispatch.ops)} ops")
        win.add_row("schedule", fmt_knobs(t.best.knobs))
        win.add_row("predicted", f"{t.best.time_us:.2f} us on {p.arch.name} (simulated), "
                                 f"roofline {t.roofline_us:.2f} us "
                                 f"(x{t.best.time_us / t.roofline_us:.2f})")
        c = t.best.counters
        win.add_row("counters", f"coalescing {c.get('coalescing_pct', 0):.0f}%, LDS conflicts "
                                f"{c.get('lds_bank_conflict_rate_pct', 0):.1f}%, "
                                f"{c.get('occupancy_waves_per_simd', 0):g} waves/SIMD "
                                f"({t.best.occupancy_limiter}), HBM "
                                f"{fmt_bytes(c.get('hbm_bytes', 0))}")
        win.add_row("searched", f"{len(t.candidates)} scored, {len(t.illegal)} illegal; "
                                f"pins: {fmt_knobs(p.pins) or 'none'}")
        rows = p.decisions
        body = [win, Text("")]
        if rows:
            body.append(views.explain_rows_view(rows, f"fusion decisions at {p.name}'s ops"))
        else:
            body.append(Text("no fusion decision involves this dispatch's ops", style="dim"))
        self.query_one("#decisions-body", Static).update(Group(*body))

    def _candidates_data(self):
        return views.candidates_data(self.panes.tuned, self.sort_key
                                     if self.sort_key in views.SORT_KEYS else "time")

    def _draw_candidates(self) -> None:
        d = self._candidates_data()
        table = self.query_one("#candidates-table", DataTable)
        table.clear()
        shared = d.shared_knobs
        rows = list(d.rows)
        col = next(c for c in COLUMNS if c[0] == self.sort_key)
        if col[3] is None:   # a text column: sorted here, ties by time
            rows.sort(key=lambda r: (self._cell_value(r, col[0], shared), r.time_us))
        if self.sort_reverse:
            rows.reverse()
        for r in rows:
            style = "bold green" if r.winner else ""
            own = {k: v for k, v in r.knobs.items() if k not in shared}
            cells = [f"*{r.rank}" if r.winner else str(r.rank), f"{r.time_us:.2f}",
                     f"{r.roofline_ratio:.2f}", f"{r.coalescing_pct:.0f}",
                     f"{r.conflict_rate_pct:.1f}", f"{r.occupancy:g}", r.limiter,
                     fmt_bytes(r.hbm_bytes), fmt_knobs(own) or "-"]
            table.add_row(*(Text(c, style=style, justify="left" if i >= 6 else "right")
                            for i, c in enumerate(cells)), key=str(r.rank))
        by = next(h for k, h, _, _ in COLUMNS if k == self.sort_key)
        head = Text(f"{len(d.rows)} scored schedules of {d.dispatch}, sorted by {by!r} "
                    f"({'the view' if col[3] else 'text'} order{', reversed' if self.sort_reverse else ''}); "
                    f"* winner; ", style="dim")
        if shared:
            head.append(f"all have {fmt_knobs(shared)}; ", style="dim")
        head.append(f"{d.num_illegal} illegal; simulated", style="dim")
        self.query_one("#candidates-head", Static).update(head)

    @staticmethod
    def _cell_value(r, key, shared):
        if key == "schedule":
            return fmt_knobs({k: v for k, v in r.knobs.items() if k not in shared})
        return r.limiter

    @on(DataTable.HeaderSelected, "#candidates-table")
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        if self.panes is not None:
            self._draw_candidates()

    @on(DataTable.RowSelected, "#candidates-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a candidate pins its every knob: it becomes the dispatch's schedule,
        and the timeline, memory and source panes show it."""
        if self.panes is None or self.busy:
            return
        rank = int(event.row_key.value)
        row = next(r for r in self._candidates_data().rows if r.rank == rank)
        if row.winner:
            return
        for knob, value in row.knobs.items():
            self.session.pin(self.selected, knob, value)
        self.notify(f"pinned candidate {rank}: re-simulating {self.selected}")
        self.select(self.selected, force=True)

    def action_sort(self) -> None:
        keys = [c[0] for c in COLUMNS]
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.sort_reverse = False
        if self.panes is not None:
            self._draw_candidates()

    def _timeline_window(self) -> tuple:
        p = self.panes
        last = max((e["end"] for e in p.sim.trace), default=1.0)
        return self.window.get(self.session.key(p.name), (0.0, float(last))), float(last)

    def _draw_timeline(self) -> None:
        p = self.panes
        body = self.query_one("#timeline-body", Static)
        if not p.sim.trace:
            body.update(Text(f"{p.sim.kernel}: the trace is empty (no wave ran on CU 0)"))
            return
        (start, end), _ = self._timeline_window()
        body.update(Group(views.timeline_view(p.sim, start, end),
                          Text("+/- zoom, </> scroll", style="dim")))

    def action_zoom(self, factor: float) -> None:
        if self.panes is None or not self.panes.sim.trace:
            return
        (start, end), last = self._timeline_window()
        mid, half = (start + end) / 2, max(8.0, (end - start) * factor / 2)
        half = min(half, last / 2)
        start = max(0.0, min(mid - half, last - 2 * half))
        self.window[self.session.key(self.panes.name)] = (start, start + 2 * half)
        self._draw_timeline()

    def action_scroll_time(self, fraction: float) -> None:
        if self.panes is None or not self.panes.sim.trace:
            return
        (start, end), last = self._timeline_window()
        width = end - start
        start = max(0.0, min(start + fraction * width, last - width))
        self.window[self.session.key(self.panes.name)] = (start, start + width)
        self._draw_timeline()

    def _draw_memory(self) -> None:
        p = self.panes
        parts = []
        for pane, title, view in ((p.coalescing, "coalescing (g: next global access)",
                                   views.coalescing_view),
                                  (p.banks, "LDS banks (b: next LDS access)", views.banks_view)):
            parts.append(Text(title, style="bold underline"))
            if pane.pattern is None:
                parts.append(Text(pane.note, style="dim"))
            else:
                which = ", ".join(f"[{i}]" if i == pane.inst else str(i) for i, _ in pane.insts)
                parts.append(Text(f"accesses: {which}", style="dim"))
                parts.append(view(pane.pattern, pane.inst))
            parts.append(Text(""))
        self.query_one("#memory-body", Static).update(Group(*parts))

    def action_next_access(self, space: str) -> None:
        if self.panes is None:
            return
        self.session.select_access(self.panes, space)
        self._draw_memory()
        self.action_show_tab("memory")

    def _draw_source(self) -> None:
        self.query_one("#source-body", Static).update(SourceView(self.panes.source))

    # ------------------------------------------------------------------ actions
    def action_show_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_next_arch(self) -> None:
        names = sorted(ARCHES)
        nxt = names[(names.index(self.session.arch.name) + 1) % len(names)]
        self.session.set_arch(nxt)
        self.notify(f"arch {nxt}: re-simulating {self.selected}")
        self.select(self.selected, force=True)

    def action_pin(self) -> None:
        if self.panes is None:
            return
        seen: dict = {}
        for s in self.panes.tuned.candidates:
            for k, v in s.knobs.items():
                if v not in seen.setdefault(k, []):
                    seen[k].append(v)

        def done(result):
            if result is None:
                return
            knob, value = result
            self.session.pin(self.selected, knob, value)
            self.notify(f"pinned {knob}={value}: re-simulating {self.selected}")
            self.select(self.selected, force=True)

        self.push_screen(PinScreen(self.selected, seen), done)

    def action_unpin(self) -> None:
        if self.selected is not None and self.session.pins.get(self.selected):
            self.session.unpin(self.selected)
            self.select(self.selected, force=True)


def screen_text(app: App) -> str:
    """The screen as plain text (what a snapshot test compares): the compositor's full
    frame printed on a recording console. ``_compositor`` is Textual's own, not an API;
    ``App.export_screenshot`` does the same for its SVG."""
    width, height = app.size
    con = Console(width=width, height=height, file=io.StringIO(), record=True,
                  color_system=None, legacy_windows=False, safe_box=False)
    con.print(app.screen._compositor.render_update(full=True,
                                                    screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in con.export_text().splitlines())
