"""Runs a Markdown lesson, or turns it into a Jupyter notebook.

A lesson is ``tutorials/NN_name.md``. Every fenced block whose info string is ``python``
runs; ``python no-run`` blocks are shown to the reader but skipped (a starting point to
edit, a sketch); any other fence (``console``, ``text``) is prose. A block that raises
stops the lesson with a :class:`LessonError` naming the file, the block number (1-based,
counting runnable blocks) and its first line in the file.

Run one lesson and see what it prints, from any folder::

    python -m compiler.lessons.runner tutorials/01_coalescing.md

Write every lesson as a notebook (needs ``pip install 'wavefuse[notebooks]'``)::

    python -m compiler.lessons.runner --notebooks OUT_DIR tutorials/*.md

The notebook is the lesson as jupytext reads Markdown: prose cells and one code cell per
runnable block; a ``no-run`` block stays a Markdown cell, so running the whole notebook
runs exactly what :func:`run_lesson` runs.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from dataclasses import dataclass

FENCE = re.compile(r"^(`{3,})(.*)$")
LESSON_NAME = re.compile(r"^\d\d[a-z]?_.*\.md$")


@dataclass
class Block:
    """One runnable code block: its 1-based number and the line its code starts on."""
    number: int
    line: int
    code: str


class LessonError(Exception):
    """A lesson block failed; the message says which file, block and line."""


def parse_blocks(text: str) -> list[Block]:
    """The runnable ```python blocks of a Markdown text, in order."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip().split()
        start, body = i + 2, []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise LessonError(f"unclosed ``` fence opened at line {start - 1}")
        i += 1
        if info and info[0] == "python" and "no-run" not in info[1:]:
            blocks.append(Block(len(blocks) + 1, start, "\n".join(body) + "\n"))
    return blocks


def run_lesson(path: str, namespace: dict | None = None) -> dict:
    """Executes every runnable block of the lesson at ``path``; returns the namespace."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    ns = namespace if namespace is not None else {"__name__": "lesson"}
    name = os.path.basename(path)
    for b in parse_blocks(text):
        code = compile("\n" * (b.line - 1) + b.code, path, "exec")  # tracebacks show file lines
        try:
            exec(code, ns)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its place
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
            raise LessonError(f"{name}: block {b.number} (line {b.line}) failed: "
                              f"{type(e).__name__}: {e}\n{tb}") from e
    return ns


def lesson_paths(folder: str) -> list[str]:
    """Every lesson file of ``folder``, in lesson order."""
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if LESSON_NAME.match(f))


def to_notebook(path: str):
    """The lesson as an ``nbformat`` notebook (jupytext's Markdown reader), with its
    ``no-run`` blocks turned back into Markdown so that they are shown, not run."""
    import jupytext
    import nbformat

    nb = jupytext.read(path, fmt="md")
    cells = []
    for cell in nb.cells:
        meta = cell.metadata
        if cell.cell_type == "code" and "no-run" in str(meta.get("incorrectly_encoded_metadata", "")):
            cells.append(nbformat.v4.new_markdown_cell(
                "Not run (edit it into your own answer):\n\n```python\n" + cell.source + "\n```"))
            continue
        meta.pop("incorrectly_encoded_metadata", None)
        cells.append(cell)
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata.pop("jupytext", None)
    return nb


def write_notebook(path: str, out_dir: str) -> str:
    """Writes ``out_dir/<lesson>.ipynb`` and returns its path."""
    import nbformat

    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, os.path.basename(path)[:-3] + ".ipynb")
    nbformat.write(to_notebook(path), out)
    return out


def execute_notebook(nb_path: str, cwd: str, timeout: int = 900, env: dict | None = None) -> None:
    """Runs every cell of the notebook in a fresh ``python3`` kernel started in ``cwd``
    (with environment ``env``, else this process's); a failing cell raises
    :class:`LessonError` with the cell's source and the error."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": cwd}})
    try:
        client.execute(**({"env": env} if env is not None else {}))
    except CellExecutionError as e:
        raise LessonError(f"{os.path.basename(nb_path)}: {e}") from e


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compiler.lessons.runner",
                                 description="Run wavefuse lessons (Markdown) or write them as notebooks.")
    ap.add_argument("lessons", nargs="+", help="lesson files, e.g. tutorials/01_coalescing.md")
    ap.add_argument("--notebooks", metavar="DIR", help="write each lesson as DIR/NAME.ipynb instead")
    args = ap.parse_args(argv)
    for p in args.lessons:
        if not os.path.isfile(p):
            print(f"wavefuse lessons: error: no lesson file {p}", file=sys.stderr)
            return 2
    for p in args.lessons:
        if args.notebooks:
            print(write_notebook(p, args.notebooks))
            continue
        try:
            run_lesson(p)
        except LessonError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"ok: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
