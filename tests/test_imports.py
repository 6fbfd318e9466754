"""No import circles: the modules of gpusim, codegen_hip and compiler form layers.

Every module is parsed with ``ast`` and every import it holds counts, the ones inside
functions included (a function-level import only hides a circle until that function runs,
and makes the order modules load in depend on which function ran first). An edge goes
from a module to each module its imports run:

- ``import a.b.c`` / ``from a.b.c import name`` runs ``a.b.c`` and the ``__init__`` of
  every package on the way (``a``, ``a.b``), except the importer's own ancestors, which
  are already initialising when the importer runs;
- ``from a.b import c`` where ``c`` is a module (``a/b/c.py`` or ``a/b/c/``) also runs
  ``a.b.c``.

The graph must have no cycle, and the three packages stay layered: gpusim imports neither
codegen_hip nor compiler, codegen_hip never imports compiler.

``python tests/test_imports.py`` prints the graph's layers (docs/layout.md lists them).
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gpusim", "codegen_hip", "compiler")
#: what each package may not import (the layering: gpusim <- codegen_hip <- compiler)
FORBIDDEN = {"gpusim": ("codegen_hip", "compiler"), "codegen_hip": ("compiler",)}


def module_files() -> dict[str, Path]:
    """Module name -> source file for every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return name in files and files[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom, files: dict[str, Path]) -> str:
    """The absolute name a ``from`` import's module part means inside ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module, files):
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _runs(importer: str, target: str, files: dict[str, Path]) -> set[str]:
    """The modules of ours that importing ``target`` from ``importer`` runs: ``target``
    and the packages above it that are not the importer's ancestors (those are already
    running)."""
    parts = target.split(".")
    if parts[0] not in PACKAGES:
        return set()
    ancestors = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 1)}
    if _is_package(importer, files):
        ancestors.add(importer)
    out = set()
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name in files and name not in ancestors and name != importer:
            out.add(name)
    return out


def imports_of(module: str, path: Path, files: dict[str, Path]) -> set[str]:
    """Every module of ours that ``module``'s imports (at any depth of its code) run."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out |= _runs(module, alias.name, files)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node, files)
            out |= _runs(module, base, files)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in files:
                    out |= _runs(module, sub, files)
    return out


def import_graph() -> nx.DiGraph:
    files = module_files()
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for module, path in files.items():
        g.add_edges_from((module, target) for target in imports_of(module, path, files))
    return g


def layers(g: nx.DiGraph) -> list[list[str]]:
    """Modules by height: layer 0 imports none of ours, layer k imports only lower layers
    (the longest import chain below a module has k edges). Needs an acyclic graph."""
    height: dict[str, int] = {}
    for m in reversed(list(nx.topological_sort(g))):
        height[m] = 1 + max((height[t] for t in g.successors(m)), default=-1)
    out: list[list[str]] = [[] for _ in range(max(height.values(), default=-1) + 1)]
    for m, h in height.items():
        out[h].append(m)
    return [sorted(layer) for layer in out]


def test_the_graph_sees_function_level_and_relative_imports():
    """The parser itself: a nested relative import and a ``from pkg import submodule``
    both give edges (the test below would pass vacuously otherwise)."""
    g = import_graph()
    assert g.number_of_nodes() > 80 and g.number_of_edges() > 200
    assert g.has_edge("codegen_hip", "codegen_hip.emit")        # from .emit import ...
    assert g.has_edge("compiler.schedule", "compiler.schedule.rows")  # from pkg import sub
    assert g.has_edge("compiler.schedule", "compiler.lower")    # the package's __init__
    assert not g.has_edge("compiler.lower.attention", "compiler.lower")  # its own parent


def test_no_import_cycles():
    g = import_graph()
    tangles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    for c in tangles:  # each group of modules that reach each other, and a short circle
        cycle = min(nx.simple_cycles(g.subgraph(c)), key=len)
        print(f"{len(c)} modules: {', '.join(c)}\n  e.g. {' -> '.join(cycle + cycle[:1])}")
    assert not tangles, f"{len(tangles)} group(s) of modules import each other (printed above)"


def test_layering():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges
           for pkg, banned in FORBIDDEN.items()
           if a.split(".")[0] == pkg and b.split(".")[0] in banned]
    assert not bad, f"imports against the layering: {bad}"


if __name__ == "__main__":
    graph = import_graph()
    found = list(nx.simple_cycles(graph))
    if found:
        for c in found:
            print("cycle:", " -> ".join(c + c[:1]))
    else:
        import textwrap
        for k, layer in enumerate(layers(graph)):
            print(textwrap.fill(", ".join(layer), 90, initial_indent=f"{k:>2}: ",
                                subsequent_indent="    "))
