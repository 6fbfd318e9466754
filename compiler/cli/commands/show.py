"""`wavefuse show MODEL`: the graph's primitive ops in topological order."""
from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from compiler.ir.graph import Graph
from compiler.cli.commands import common

WIDE = 100  # columns needed for the table view

KIND_STYLE = {"input": "green", "constant": "dim", "reduce_sum": "magenta",
              "reduce_max": "magenta", "reduce_mean": "magenta", "reduce_min": "magenta",
              "reduce_prod": "magenta", "matmul": "bold red", "conv2d": "bold red"}


def _attrs_text(attrs: dict) -> str:
    def fmt(v):
        if isinstance(v, list):
            return ",".join(fmt(x) for x in v)
        return f"{v:.6g}" if isinstance(v, float) else str(v)
    return " ".join(f"{k}={fmt(v)}" for k, v in attrs.items())


def graph_table(graph: Graph) -> Table:
    """A rich table of the graph: one row per op with its result type and operands."""
    data = common.graph_dict(graph)
    outputs = set(graph.outputs)
    table = Table(box=box.SIMPLE_HEAD, caption="layout: memory order of the dimensions, "
                  "outermost first; - is row-major",
                  title=f"{graph.name}: {data['primitive_ops']} primitive ops, "
                        f"{len(data['inputs'])} inputs, {len(outputs)} outputs")
    table.add_column("#", justify="right", style="dim")
    table.add_column("node", style="bold", no_wrap=True)
    table.add_column("op", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("layout", no_wrap=True)
    table.add_column("operands", overflow="fold")
    table.add_column("attrs", overflow="fold")
    for i, op in enumerate(data["ops"]):
        name = op["name"] + (" -> out" if op["name"] in outputs else "")
        layout = "-" if op["layout"] == sorted(op["layout"]) else \
            "(" + ",".join(map(str, op["layout"])) + ")"
        table.add_row(str(i), name, Text(op["op"], style=KIND_STYLE.get(op["op"], "cyan")),
                      f"{op['dtype']}[{'x'.join(map(str, op['shape']))}]", layout,
                      ", ".join(op["inputs"]), _attrs_text(op["attrs"]))
    return table


def graph_lines(graph: Graph) -> Tree:
    """The same content as one wrapped line per op, for terminals too narrow for a table."""
    data = common.graph_dict(graph)
    outputs = set(graph.outputs)
    tree = Tree(Text(f"{graph.name}: {data['primitive_ops']} primitive ops", style="bold"))
    for i, op in enumerate(data["ops"]):
        line = Text(f"{i:>3} ", style="dim")
        line.append(op["name"], style="bold")
        line.append(f" {op['dtype']}[{'x'.join(map(str, op['shape']))}]")
        if op["layout"] != sorted(op["layout"]):
            line.append(f" layout=({','.join(map(str, op['layout']))})", style="yellow")
        line.append(" = ")
        line.append(op["op"], style=KIND_STYLE.get(op["op"], "cyan"))
        if op["inputs"]:
            line.append(f"({', '.join(op['inputs'])})")
        if op["attrs"]:
            line.append(" " + _attrs_text(op["attrs"]), style="dim")
        if op["name"] in outputs:
            line.append("  -> output", style="bold green")
        tree.add(line)
    return tree


def render_graph(graph: Graph, con) -> None:
    """A table on wide terminals, one line per op on narrow ones (nothing is cut off)."""
    con.print(graph_table(graph) if con.width >= WIDE else graph_lines(graph))


def run(args) -> int:
    graph = common.load(args, compute=False)
    if args.json:
        common.emit_json(common.graph_dict(graph))
        return 0
    render_graph(graph, common.console())
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("show", help="draw a model's graph of primitive ops")
    common.add_model(p)
    common.add_json(p)
    p.set_defaults(func=run)
