"""Runs a Markdown lesson: its ```python blocks, in order, in one namespace.

A lesson is ``tutorials/NN_name.md``. Every fenced block whose info string is ``python``
runs; ``python no-run`` blocks are shown to the reader but skipped (sketches, code that
would take too long); any other fence (``console``, ``text``) is prose. A block that
raises stops the lesson with a :class:`LessonError` naming the file, the block number
(1-based, counting runnable blocks) and its first line in the file.

``tutorials/conftest.py`` turns each lesson into one pytest item with :func:`run_lesson`;
``python tutorials/lesson_runner.py tutorials/01_coalescing.md`` runs one by hand and
prints what the lesson prints.
"""
from __future__ import annotations

import os
import re
import sys
import traceback
from dataclasses import dataclass

FENCE = re.compile(r"^(`{3,})(.*)$")
HERE = os.path.dirname(os.path.abspath(__file__))


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
    if HERE not in sys.path:
        sys.path.insert(0, HERE)  # lessons import tutorials/exercises.py
    ns = namespace if namespace is not None else {"__name__": "lesson"}
    name = os.path.relpath(path)
    for b in parse_blocks(text):
        code = compile("\n" * (b.line - 1) + b.code, path, "exec")  # tracebacks show file lines
        try:
            exec(code, ns)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its place
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__.tb_next))
            raise LessonError(f"{name}: block {b.number} (line {b.line}) failed: "
                              f"{type(e).__name__}: {e}\n{tb}") from e
    return ns


def lesson_paths() -> list[str]:
    """Every lesson file, in lesson order."""
    return sorted(os.path.join(HERE, f) for f in os.listdir(HERE)
                  if re.match(r"^\d\d[a-z]?_.*\.md$", f))


if __name__ == "__main__":
    for p in sys.argv[1:] or lesson_paths():
        run_lesson(p)
        print(f"ok: {p}")
