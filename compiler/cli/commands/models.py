"""`wavefuse models`: the built-in model zoo with default parameters and shapes."""
from __future__ import annotations

from rich.table import Table

from compiler.ir.models import MODELS
from compiler.cli.commands import common


def models_data() -> list[dict]:
    rows = []
    for name, info in MODELS.items():
        g = info.build()
        rows.append({"name": name, "description": info.doc, "params": info.params,
                     "inputs": {i: str(g.op(i).type) for i in g.inputs},
                     "outputs": {o: str(g.op(o).type) for o in g.outputs},
                     "primitive_ops": sum(op.kind not in ("input", "constant")
                                          for op in g.ops)})
    return rows


def run(args) -> int:
    rows = models_data()
    if args.json:
        common.emit_json({"models": rows})
        return 0
    table = Table(title="Built-in models (NAME:key=value,... changes a parameter)")
    table.add_column("model", style="bold cyan", no_wrap=True)
    table.add_column("parameters (defaults)")
    table.add_column("inputs")
    table.add_column("ops", justify="right")
    table.add_column("description")
    for r in rows:
        table.add_row(r["name"], ", ".join(f"{k}={v}" for k, v in r["params"].items()),
                      "\n".join(f"{k}: {v}" for k, v in r["inputs"].items()),
                      str(r["primitive_ops"]), r["description"])
    common.console().print(table)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("models", help="list the built-in models and their defaults")
    common.add_json(p)
    p.set_defaults(func=run)
