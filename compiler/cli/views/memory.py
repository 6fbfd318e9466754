"""Memory views of one wave's instruction: which cache lines a global access touches
(coalescing) and which LDS banks an LDS access hits (bank conflicts).

Both read ``gpusim.access_pattern``: the per-lane byte addresses of one execution of one
statement by one wave. The coalescing map counts unique lines exactly as gpusim's address
unit does; the bank map re-derives, per phase group, how many distinct dwords fall on
each of the 32 banks (same-address lanes broadcast, so they count once), and keeps
gpusim's own conflict count beside it so a disagreement would be visible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text

import gpusim
from gpusim.program import LdsLoad, LdsStore, Load, Store, walk

from compiler.cli.views.common import ViewError

TOUCH, MISS = "█", "·"


def stmt_label(stmt) -> str:
    """A short description of a memory statement: kind, array and vector width."""
    if isinstance(stmt, Load):
        return f"global load {stmt.buffer} x{len(stmt.dsts)}"
    if isinstance(stmt, Store):
        return f"global store {stmt.buffer} x{len(stmt.values)}"
    if isinstance(stmt, LdsLoad):
        return f"LDS load {stmt.array} x{len(stmt.dsts)}"
    if isinstance(stmt, LdsStore):
        return f"LDS store {stmt.array} x{len(stmt.values)}"
    return type(stmt).__name__


def memory_insts(kernel, space: str) -> list:
    """Walk-order statement indices of the global ("global") or LDS ("lds") accesses."""
    types = (Load, Store) if space == "global" else (LdsLoad, LdsStore)
    return [i for i, s in enumerate(walk(kernel.body)) if isinstance(s, types)]


def _check_inst(kernel, inst, space):
    valid = memory_insts(kernel, space)
    if not valid:
        raise ViewError(f"kernel {kernel.name} has no {'global memory' if space == 'global' else 'LDS'} "
                        f"instruction")
    if inst is not None and inst not in valid:
        stmts = list(walk(kernel.body))
        listed = ", ".join(f"{i} ({stmt_label(stmts[i])})" for i in valid)
        raise ViewError(f"no {space} instruction {inst} in kernel {kernel.name}; valid: {listed}")
    return valid


def _ranked(kernel, arch, space, key, sim_result, inputs):
    """Memory statements of ``space``, worst first by ``key`` of gpusim's per-instruction
    record (one timing simulation, instead of probing every statement)."""
    valid = _check_inst(kernel, None, space)
    if sim_result is None:
        sim_result = gpusim.simulate(kernel, arch, inputs, functional=False)
    recs = {r["index"]: r for r in sim_result.per_inst}
    score = {i: key(recs[i]) if i in recs and recs[i]["executions"] else float("-inf")
             for i in valid}
    return sorted(valid, key=lambda i: (-score[i], i))


def _first_executed(kernel, arch, order, inputs, what):
    for i in order:
        p = gpusim.access_pattern(kernel, arch, i, inputs)
        if p["executed"]:
            return i, p
    raise ViewError(f"kernel {kernel.name}: wave 0 of block 0 executes no {what}")


def worst_coalesced(kernel, arch, inputs=None, sim_result=None) -> tuple[int, dict]:
    """(statement index, its access pattern) of the global access with the most TCP
    accesses per execution — for a full wave that is the lowest coalescing %."""
    order = _ranked(kernel, arch, "global", lambda r: r["tcp_accesses"] / r["executions"],
                    sim_result, inputs)
    return _first_executed(kernel, arch, order, inputs, "global access")


def most_conflicted(kernel, arch, inputs=None, sim_result=None) -> tuple[int, dict]:
    """(statement index, access pattern) of the LDS access with the most bank-conflict
    cycles per execution; the first executed one when none conflicts."""
    order = _ranked(kernel, arch, "lds", lambda r: r["conflict_cycles"] / r["executions"],
                    sim_result, inputs)
    return _first_executed(kernel, arch, order, inputs, "LDS access")


def pattern_for(kernel, arch, inst, space, inputs=None, block=0, wave=0,
                sim_result=None) -> tuple[int, dict]:
    """The access pattern of ``inst`` (validated), or of the worst one when None."""
    _check_inst(kernel, inst, space)
    if inst is None:
        return (worst_coalesced if space == "global" else most_conflicted)(
            kernel, arch, inputs, sim_result)
    return inst, gpusim.access_pattern(kernel, arch, inst, inputs, block=block, wave=wave)


# ------------------------------------------------------------------------- coalescing
@dataclass
class CoalescingData:
    inst: int
    label: str
    line_bytes: int
    bytes_per_lane: int
    lines: list              # absolute cache-line numbers, ascending
    touched: np.ndarray      # bool [len(lines), lanes]
    requests: int            # unique lines: requests to the L1 (gpusim's count)
    tcp_accesses: int        # per-quad line accesses (rocprof TCP_TOTAL_ACCESSES)
    coalescing_pct: float
    active_lanes: int


def coalescing_data(pattern: dict, inst: int = -1) -> CoalescingData:
    """Lanes x cache lines from a global ``access_pattern`` result."""
    if pattern.get("kind") != "global":
        raise ViewError("coalescing needs the pattern of a global load or store")
    lanes = len(pattern["lane_lines"])
    lines = list(pattern["cache_lines"])
    row = {x: i for i, x in enumerate(lines)}
    touched = np.zeros((len(lines), lanes), bool)
    for lane, ll in enumerate(pattern["lane_lines"]):
        for x in ll:
            touched[row[x], lane] = True
    return CoalescingData(inst, stmt_label(pattern["statement"]), pattern["line_bytes"],
                          pattern["bytes_per_lane"], lines, touched, pattern["requests"],
                          pattern["tcp_accesses"], pattern["coalescing_pct"],
                          int(np.count_nonzero(pattern["active"])))


class CoalescingView:
    """Rows: cache lines (offset from the first); columns: lanes, split into halves
    when the terminal is narrow."""

    def __init__(self, data: CoalescingData, max_lines: int = 32):
        self.d, self.max_lines = data, max_lines

    def __rich_console__(self, console, options):
        d = self.d
        lanes = d.touched.shape[1]
        pct_style = "green" if d.coalescing_pct >= 99 else ("yellow" if d.coalescing_pct >= 50 else "red")
        head = Text(f"statement {d.inst}: {d.label}, {d.bytes_per_lane} B per lane, "
                    f"{d.active_lanes} active lanes\n", style="bold")
        head.append(f"{d.requests} requests ({d.line_bytes} B lines), {d.tcp_accesses} TCP "
                    f"accesses, coalescing ")
        head.append(f"{d.coalescing_pct:.0f}%", style=pct_style)
        yield head
        label_w = 14
        per = lanes if options.max_width >= label_w + lanes + lanes // 16 + 1 else lanes // 2
        base = d.lines[0] if d.lines else 0
        for lo in range(0, lanes, per):
            hi = min(lanes, lo + per)
            hdr = Text("line / lane".ljust(label_w), style="dim", no_wrap=True)
            for lane in range(lo, hi):
                if lane % 16 == 0 and lane != lo:
                    hdr.append(" ")
                hdr.append(str(lane)[-1] if lane % 8 else "|", style="dim")
            hdr.append(f"  lanes {lo}-{hi - 1}", style="dim")
            yield hdr
            for r, line in enumerate(d.lines[:self.max_lines]):
                t = Text(f"+{(line - base) * d.line_bytes:<#{label_w - 2}x} ", no_wrap=True)
                for lane in range(lo, hi):
                    if lane % 16 == 0 and lane != lo:
                        t.append(" ")
                    on = d.touched[r, lane]
                    t.append(TOUCH if on else MISS, style="cyan" if on else "bright_black")
                n = int(d.touched[r, lo:hi].sum())
                t.append(f" {n}", style="dim")
                yield t
            if len(d.lines) > self.max_lines:
                yield Text(f"... {len(d.lines) - self.max_lines} more lines", style="dim")
        yield Text(f"rows: cache lines by byte offset from the first one touched (line {base}); {TOUCH} = lane reads/writes "
                   f"in that line; right column: lanes per line", style="dim")


def coalescing_view(pattern: dict, inst: int = -1, max_lines: int = 32):
    """Renderable heatmap of a global ``gpusim.access_pattern`` result."""
    return CoalescingView(coalescing_data(pattern, inst), max_lines)


# ------------------------------------------------------------------------- LDS banks
@dataclass
class BankGroup:
    lanes: list              # lanes of this phase group, in the hardware's order
    hits: np.ndarray         # bool [len(lanes), banks]: lane touches bank
    degree: np.ndarray       # int [banks]: distinct dwords per bank (broadcast counts once)

    @property
    def max_degree(self) -> int:
        return int(self.degree.max()) if self.degree.size else 0

    @property
    def conflict_cycles(self) -> int:
        return max(0, self.max_degree - 1)


@dataclass
class BanksData:
    inst: int
    label: str
    banks: int
    bytes_per_lane: int
    groups: list             # BankGroup per phase group
    conflict_cycles: int     # sum over groups (derived here)
    gpusim_conflict_cycles: int

    @property
    def degrees(self) -> list:
        return [g.max_degree for g in self.groups]


def banks_data(pattern: dict, inst: int = -1, banks: int = 32) -> BanksData:
    """Per phase group: lanes x banks touched and the conflict degree of each bank."""
    if pattern.get("kind") != "lds":
        raise ViewError("the bank map needs the pattern of an LDS load or store")
    addrs = np.asarray(pattern["byte_addresses"])
    nb = pattern["bytes_per_lane"]
    groups = []
    for lanes in pattern["phase_groups"]:
        lanes = list(lanes)
        hits = np.zeros((len(lanes), banks), bool)
        dwords = set()
        for k, lane in enumerate(lanes):
            if lane < len(addrs) and addrs[lane] >= 0:
                mine = range(int(addrs[lane]) // 4, (int(addrs[lane]) + nb - 1) // 4 + 1)
                dwords.update(mine)
                hits[k, [d % banks for d in mine]] = True
        degree = np.bincount(np.array([d % banks for d in dwords], np.int64), minlength=banks)
        groups.append(BankGroup(lanes, hits, degree))
    return BanksData(inst, stmt_label(pattern["statement"]), banks, nb, groups,
                     sum(g.conflict_cycles for g in groups), int(pattern["conflict_cycles"]))


def _lane_ranges(lanes) -> str:
    out, run = [], [lanes[0]]
    for x in lanes[1:]:
        if x == run[-1] + 1:
            run.append(x)
        else:
            out.append(run)
            run = [x]
    out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


class BanksView:
    """Per phase group: a lanes x banks grid and a degree row (red where > 1)."""

    def __init__(self, data: BanksData, show_lanes: bool = True):
        self.d, self.show_lanes = data, show_lanes

    def __rich_console__(self, console, options):
        d = self.d
        cell = 2 if options.max_width >= 10 + 2 * d.banks else 1
        head = Text(f"statement {d.inst}: {d.label}, {d.bytes_per_lane} B per lane, "
                    f"{len(d.groups)} phase groups; conflict cycles {d.conflict_cycles}",
                    style="bold")
        if d.gpusim_conflict_cycles != d.conflict_cycles:
            head.append(f" (gpusim says {d.gpusim_conflict_cycles})", style="red")
        yield head
        bank_hdr = Text(f"{'bank':<9}", style="dim", no_wrap=True)
        for b in range(d.banks):
            bank_hdr.append((str(b // 10) if b % 10 == 0 and b else " ").ljust(cell), style="dim")
        bank_hdr.append("\n" + " " * 9)
        for b in range(d.banks):
            bank_hdr.append(str(b % 10).ljust(cell), style="dim")
        for gi, g in enumerate(d.groups):
            style = "red" if g.conflict_cycles else "green"
            t = Text(f"group {gi}: lanes {_lane_ranges(g.lanes)}: max degree ", no_wrap=False)
            t.append(str(g.max_degree), style=style)
            t.append(f", {g.conflict_cycles} conflict cycles")
            yield t
            if self.show_lanes:
                yield bank_hdr
                idle = [lane for k, lane in enumerate(g.lanes) if not g.hits[k].any()]
                for k, lane in enumerate(g.lanes):
                    if lane in idle:
                        continue
                    row = Text(f"lane {lane:<4}", style="dim", no_wrap=True)
                    for b in range(d.banks):
                        on = g.hits[k, b]
                        row.append((TOUCH if on else MISS).ljust(cell),
                                   style="cyan" if on else "bright_black")
                    yield row
                if idle:
                    yield Text(f"lanes {_lane_ranges(idle)}: inactive or no access", style="dim")
            deg = Text(f"{'degree':<9}", style="bold", no_wrap=True)
            for b in range(d.banks):
                n = int(g.degree[b])
                mark = MISS if n == 0 else (str(n) if n < 10 ** cell else "+")
                deg.append(mark.ljust(cell),
                           style="bold red" if n > 1 else ("green" if n else "bright_black"))
            yield deg
            if g.max_degree >= 10 ** cell:
                hot = [b for b in range(d.banks) if g.degree[b] >= 10 ** cell]
                yield Text("+: " + ", ".join(f"bank {b} degree {int(g.degree[b])}" for b in hot),
                           style="red")
        yield Text("degree: distinct dwords on the bank in the group (same address broadcasts); "
                   "a group costs max degree - 1 conflict cycles", style="dim")


def banks_view(pattern: dict, inst: int = -1, show_lanes: bool = True):
    """Renderable bank map of an LDS ``gpusim.access_pattern`` result."""
    return BanksView(banks_data(pattern, inst), show_lanes)
