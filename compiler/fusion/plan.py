"""FusionPlan: the dispatches a graph runs as, and why each fusion did or did not happen.

A *dispatch* is one kernel launch. Tensors that cross dispatch boundaries go through
global memory; everything inside a dispatch stays in registers or LDS. So the plan alone
says how many launches a model costs and the minimum bytes it must move, before any
schedule is chosen: ``bytes_unfused`` (every primitive op its own dispatch, views free)
against ``bytes_fused`` (each dispatch reads its inputs once and writes its outputs once).

``execute_plan`` runs a plan dispatch by dispatch with the reference interpreter and
passes *only* boundary tensors between dispatches, so a dispatch that forgets an output
or an input fails loudly instead of borrowing the unfused graph's values.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
from rich.table import Table
from rich.tree import Tree

from compiler.ir.graph import (Graph, TensorType, is_compute, is_identity_view, live_ops, writes_view_in_place)
from compiler.ir.reference import evaluate

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan",
           "bright_magenta", "bright_green", "bright_yellow", "bright_blue", "bright_red")


@dataclass(frozen=True)
class IterationSpace:
    """The root's loops: parallel extents (spread over workgroups) and reduction extents
    (serial inside one parallel point), e.g. rows x cols for a row reduction."""
    parallel: tuple
    reduction: tuple = ()

    def __str__(self):
        p = "x".join(map(str, self.parallel)) or "1"
        return f"parallel {p}" + (f", reduction {'x'.join(map(str, self.reduction))}"
                                  if self.reduction else "")


@dataclass(frozen=True)
class EpilogueInput:
    """A tensor the fused epilogue of a contraction reads besides the root's operands.
    ``layout_matches_output``: its memory order agrees with the root output's row-major
    order — the condition under which swizzling the output through LDS *before* the
    epilogue (rocMLIR) also makes this read coalesced."""
    tensor: str
    read_by: str
    layout: tuple
    layout_matches_output: bool


@dataclass
class Dispatch:
    name: str
    root: str
    ops: list                  # op names in topological order (views included)
    kind: str                  # elementwise | reduction | contraction | transpose | copy
    inputs: list               # tensors read from global memory
    outputs: list              # tensors written to global memory
    iteration: IterationSpace
    epilogue_inputs: list = field(default_factory=list)
    recomputed: list = field(default_factory=list)   # ops also computed elsewhere

    def to_dict(self) -> dict:
        return {"name": self.name, "root": self.root, "ops": list(self.ops),
                "inputs": list(self.inputs), "outputs": list(self.outputs)}


@dataclass
class Decision:
    """One fuse / not-fuse verdict of a rule on a producer -> consumer pair (or a pair
    of siblings). ``cost`` is filled later by the simulator-driven search."""
    rule: str
    producer: str
    consumer: str
    fused: bool
    reason: str
    cost: dict | None = None

    def to_dict(self) -> dict:
        d = {"rule": self.rule, "producer": self.producer, "consumer": self.consumer,
             "fused": self.fused, "reason": self.reason}
        if self.cost is not None:
            d["cost"] = self.cost
        return d


def tensor_type(graph: Graph, name: str) -> TensorType:
    return graph.op(name).type


@dataclass
class SimpleDispatch:
    """A dispatch of the unfused baseline: one compute op (views are its index maps)."""
    name: str
    root: str
    ops: list
    inputs: list
    outputs: list
    copy: bool = False       # a view output no compute op can write: copied on its own


def _source(graph: Graph, n: str) -> str:
    while graph.op(n).is_view:
        n = graph.op(n).inputs[0]
    return n


def unfused_dispatches(graph: Graph) -> list[SimpleDispatch]:
    """The unfused baseline, the one both ``fuse`` (traffic) and ``tune`` (time) use: every
    live non-view op is its own dispatch, reading each distinct tensor behind its operands
    (views are index maps) and writing its result; dead ops get none. A view that is a
    graph output is written by its producer's dispatch, or copied by a dispatch of its
    own when the producer cannot write it (a leaf, or a GEMM under a moving view)."""
    live = live_ops(graph)
    out, by_root = [], {}
    for name in graph.topo_order():
        op = graph.op(name)
        if not is_compute(op) or name not in live:
            continue
        ops, inputs = [], []

        def collect(t):
            o = graph.op(t)
            if o.is_view and t != name:
                if t not in ops:
                    collect(o.inputs[0])
                    ops.append(t)
            elif t != name and t not in inputs:
                inputs.append(t)

        for i in op.inputs:
            collect(i)
        ops.append(name)
        by_root[name] = SimpleDispatch(f"{op.kind}_{len(out)}", name, ops, inputs, [name])
        out.append(by_root[name])
    for o in graph.outputs:
        if not graph.op(o).is_view:
            continue
        n, chain = graph.view_chain(o)
        src = graph.op(n)
        # a copy dispatch when no compute op can write it: after an input or constant,
        # or after a matmul/conv (a GEMM writes its own tile layout, see multi_result)
        # or when the producer's elementwise walk does not cover it (a slice, or a
        # broadcast that repeats it)
        if not is_compute(src) or (src.is_contraction and
                                   not all(is_identity_view(graph.op(v), graph) for v in chain)) \
                or (not (src.is_contraction or src.is_reduction)
                    and not writes_view_in_place(graph, n, o)):
            out.append(SimpleDispatch(f"{graph.op(o).kind}_{len(out)}", o, chain[::-1], [n],
                                      [o], copy=True))
        else:
            d = by_root[n]
            d.ops.extend(v for v in chain[::-1] if v not in d.ops)
            d.outputs.append(o)
    return out


def unfused_traffic(graph: Graph) -> tuple[int, int]:
    """(bytes, dispatches) of :func:`unfused_dispatches`: each reads its boundary inputs
    and writes its outputs once."""
    ds = unfused_dispatches(graph)
    total = sum(graph.tensor_bytes(t) for d in ds for t in d.inputs + d.outputs)
    return total, len(ds)


@dataclass
class FusionPlan:
    graph: Graph
    dispatches: list
    decisions: list
    mode: str                  # "aggressive" | "conservative"
    bytes_unfused: int = 0
    num_dispatches_unfused: int = 0

    def __post_init__(self):
        if not self.bytes_unfused:
            self.bytes_unfused, self.num_dispatches_unfused = unfused_traffic(self.graph)

    @property
    def num_dispatches(self) -> int:
        return len(self.dispatches)

    def dispatch_bytes(self, d: Dispatch) -> int:
        return sum(self.graph.tensor_bytes(t) for t in d.inputs + d.outputs)

    @property
    def bytes_fused(self) -> int:
        return sum(self.dispatch_bytes(d) for d in self.dispatches)

    def dispatch_of(self, op: str) -> list[Dispatch]:
        return [d for d in self.dispatches if op in d.ops]

    def subgraph(self, d: Dispatch) -> Graph:
        """The dispatch alone as a graph: boundary inputs become graph inputs (constants
        stay constants), its outputs are the graph's outputs."""
        g = self.graph
        sub = Graph(f"{g.name}.{d.name}")
        for t in d.inputs:
            op = g.op(t)
            if op.kind == "constant":
                sub.add_op("constant", (), op.attrs, op.type, name=t)
            else:
                sub.add_op("input", (), {}, op.type, name=t)
        for n in d.ops:
            op = g.op(n)
            sub.add_op(op.kind, op.inputs, op.attrs, op.type, name=n)
        for t in list(d.inputs) + list(d.ops):
            if g.byte_storage(t):
                sub.set_byte_storage(t, g.byte_storage(t))
        sub.output(*d.outputs)
        return sub

    def to_dict(self) -> dict:
        return {"model": self.graph.name, "mode": self.mode,
                "num_dispatches": self.num_dispatches,
                "num_dispatches_unfused": self.num_dispatches_unfused,
                "dispatches": [d.to_dict() for d in self.dispatches],
                "bytes_unfused": self.bytes_unfused, "bytes_fused": self.bytes_fused,
                "decisions": [x.to_dict() for x in self.decisions]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def execute_plan(plan: FusionPlan, inputs: dict) -> dict:
    """Runs the plan dispatch by dispatch; only boundary tensors survive between them."""
    g = plan.graph
    memory = {}
    for n in g.topo_order():
        op = g.op(n)
        if op.kind == "input":
            memory[n] = np.asarray(inputs[n])
        elif op.kind == "constant":
            memory[n] = op.attrs["value"]
    for d in plan.dispatches:
        sub = plan.subgraph(d)
        feed = {t: memory[t] for t in d.inputs if g.op(t).kind != "constant"}
        memory.update(evaluate(sub, feed))
    return {o: memory[o] for o in g.outputs}


def max_error(a: dict, b: dict) -> float:
    err = 0.0
    for k in a:
        x = np.asarray(a[k], np.float64)
        y = np.asarray(b[k], np.float64)
        same = (x == y) | (np.isnan(x) & np.isnan(y))   # inf == inf counts as equal
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(x - y))
        diff = np.where(np.isnan(diff), np.inf, diff)
        err = max(err, float(diff.max(initial=0.0)))
    return err


# ----------------------------------------------------------------------------- views
def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render_plan(plan: FusionPlan, console) -> None:
    """Rich tree: dispatches (a colour each) with their ops and boundary tensors, then
    the traffic unfused vs fused."""

    g = plan.graph
    tree = Tree(f"[bold]{g.name}[/] — {plan.mode} fusion: "
                f"{plan.num_dispatches} dispatch(es), {plan.num_dispatches_unfused} unfused")
    for i, d in enumerate(plan.dispatches):
        c = COLOURS[i % len(COLOURS)]
        node = tree.add(f"[bold {c}]{d.name}[/] [{c}]{d.kind}[/] root={d.root} "
                        f"({d.iteration}) — {_fmt_bytes(plan.dispatch_bytes(d))}")
        ins = node.add("[dim]reads[/]")
        for t in d.inputs:
            ins.add(f"{t}: {tensor_type(g, t)} ({_fmt_bytes(tensor_type(g, t).nbytes)})")
        ops = node.add("[dim]ops[/]")
        for n in d.ops:
            op = g.op(n)
            mark = " [yellow](recomputed)[/]" if n in d.recomputed else ""
            ops.add(f"[{c}]{n}[/] = {op.kind}({', '.join(op.inputs)}) -> {op.type}{mark}")
        outs = node.add("[dim]writes[/]")
        for t in d.outputs:
            outs.add(f"{t}: {tensor_type(g, t)} ({_fmt_bytes(tensor_type(g, t).nbytes)})")
        for e in d.epilogue_inputs:
            node.add(f"epilogue input {e.tensor} (read by {e.read_by}), layout "
                     f"{list(e.layout)}: "
                     + ("[green]matches the output layout[/]" if e.layout_matches_output
                        else "[red]does not match the output layout[/]"))
    console.print(tree)
    t = Table(title="global-memory traffic")
    t.add_column("")
    t.add_column("dispatches", justify="right")
    t.add_column("bytes", justify="right")
    t.add_row("unfused", str(plan.num_dispatches_unfused), _fmt_bytes(plan.bytes_unfused))
    t.add_row("fused", str(plan.num_dispatches), _fmt_bytes(plan.bytes_fused))
    saved = plan.bytes_unfused - plan.bytes_fused
    pct = 100.0 * saved / plan.bytes_unfused if plan.bytes_unfused else 0.0
    t.add_row("saved", str(plan.num_dispatches_unfused - plan.num_dispatches),
              f"{_fmt_bytes(saved)} ({pct:.0f}%)")
    console.print(t)
