"""Source view: the emitted HIP with the simulator's per-statement counters in a margin,
the way profilers annotate source lines.

``codegen_hip.emit_kernel`` prints one IR statement as one or more lines but returns only
the text. To know which lines belong to which statement, the printer is run a second
time with its ``stmt`` method wrapped to note the line range each statement emits; that
body is then located in the full source. If the printer's internals change and the wrap
fails, the view falls back to matching: the counters are dropped and the source is shown
plain, with a note (a ``line_map`` output of ``emit_kernel`` would make this exact).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from codegen_hip import emit as hip_emit
from codegen_hip import emit_kernel
from gpusim.hw import DEFAULT_ARCH, Arch
from gpusim.program import For, If, walk

#: margin columns: (title, per_inst key, format)
MARGIN = (("exec", "executions"), ("stall", "stall_cycles"), ("confl", "conflict_cycles"),
          ("lines", "cache_lines"))


def statement_lines(kernel, c_name: str | None = None) -> tuple[list, dict]:
    """(body lines, {walk-order statement index: (first, last) body line}) as the HIP
    printer lays them out. Compound statements (for, if) map to their header line."""

    index = {id(s): i for i, s in enumerate(walk(kernel.body))}

    class Recording(hip_emit._Printer):
        def __init__(self, *a):
            super().__init__(*a)
            self.spans = {}

        def stmt(self, s, depth):
            first = len(self.lines)
            super().stmt(s, depth)
            last = len(self.lines) - 1
            if isinstance(s, (For, If)):
                header = next((k for k in range(first, last + 1)
                               if not self.lines[k].lstrip().startswith("#pragma")), first)
                last = header
            self.spans[index[id(s)]] = (first, last)

    printer = Recording(kernel, c_name or hip_emit.kernel_c_name(kernel))
    body = printer.kernel_source()
    # an entry of printer.lines may hold several text lines (the signature does)
    starts, n = [], 0
    for entry in printer.lines:
        starts.append(n)
        n += entry.count("\n") + 1
    spans = {si: (starts[a], starts[b]) for si, (a, b) in printer.spans.items()}
    return body.splitlines(), spans


@dataclass
class SourceData:
    kernel: str
    source: str
    line_counters: dict                 # 1-based source line -> {key: value}
    statement_line: dict = field(default_factory=dict)   # statement index -> 1-based line
    mapped: bool = True
    note: str = ""


def source_data(kernel, sim_result=None, arch: Arch | str = DEFAULT_ARCH) -> SourceData:
    """The HIP source and, when a SimResult is given, its per-line counters."""
    counters = None
    if sim_result is not None:
        c = sim_result.counters
        counters = {k: c[k] for k in ("coalescing_pct", "lds_bank_conflict_rate_pct",
                                      "occupancy_waves_per_simd") if k in c}
    src = emit_kernel(kernel, arch, counters=counters)
    try:
        body, spans = statement_lines(kernel)
    except Exception as e:  # noqa: BLE001 - the printer's internals are not an API
        return SourceData(kernel.name, src, {}, {}, False,
                          f"no statement-to-line map ({type(e).__name__}: {e}); counters omitted")
    text = "\n".join(body)
    at = src.find(text)
    if at < 0:
        return SourceData(kernel.name, src, {}, {}, False,
                          "emitted body differs from the recorded one; counters omitted")
    offset = src.count("\n", 0, at)
    stmt_line = {si: offset + first + 1 for si, (first, _) in spans.items()}
    per_line = {}
    if sim_result is not None:
        for rec in sim_result.per_inst:
            line = stmt_line.get(rec["index"])
            if line is None:
                continue
            slot = per_line.setdefault(line, {k: 0.0 for _, k in MARGIN})
            for _, k in MARGIN:
                slot[k] += float(rec.get(k, 0.0))
    return SourceData(kernel.name, src, per_line, stmt_line)


def _fmt(v: float) -> str:
    if v == 0:
        return ""
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suf}"
    return f"{v:.0f}" if v == int(v) else f"{v:.3g}"


class SourceView:
    """Margin of counters beside the syntax-highlighted source, line for line."""

    def __init__(self, data: SourceData, header: bool = False, theme: str = "ansi_dark"):
        self.d, self.header, self.theme = data, header, theme

    def __rich_console__(self, console, options):
        d = self.d
        lines = d.source.splitlines()
        first = 0
        if not self.header:   # skip the comment header and includes: they carry no counters
            first = next((i for i, l in enumerate(lines) if l.startswith('extern "C"')), 0)
        shown = "\n".join(lines[first:])
        narrow = options.max_width < 80
        cols = MARGIN[:2] if narrow else MARGIN
        margin = Text(no_wrap=True, overflow="crop")
        worst = max((c["stall_cycles"] for c in d.line_counters.values()), default=0.0)
        hdr = " ".join(f"{t:>6}" for t, _ in cols)
        for i in range(first, len(lines)):
            c = d.line_counters.get(i + 1)
            if c is None:
                margin.append(" " * len(hdr))
            else:
                for j, (_, k) in enumerate(cols):
                    hot = k == "stall_cycles" and worst > 0 and c[k] >= 0.5 * worst
                    hot = hot or (k == "conflict_cycles" and c[k] > 0)
                    margin.append(("" if j == 0 else " ") + f"{_fmt(c[k]):>6}",
                                  style="bold red" if hot else "cyan")
            margin.append("\n")
        margin.rstrip()
        title = Text(f"{d.kernel}: emitted HIP", style="bold")
        if d.line_counters:
            title.append(f"   margin: {hdr.strip()} (summed over the launch; simulated)",
                         style="dim")
        elif d.note:
            title.append(f"   {d.note}", style="yellow")
        yield title
        code = Syntax(shown, "cpp", theme=self.theme, line_numbers=True, start_line=first + 1,
                      word_wrap=False, background_color="default")
        if not d.line_counters:
            yield code
            return
        yield Text(hdr, style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="crop")
        grid.add_row(margin, code)
        yield grid


def source_view(kernel, sim_result=None, arch: Arch | str = DEFAULT_ARCH, header: bool = False):
    """Renderable HIP source of ``kernel`` with ``sim_result.per_inst`` in a margin."""
    return SourceView(source_data(kernel, sim_result, arch), header)
