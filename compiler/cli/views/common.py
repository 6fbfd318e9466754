"""Shared pieces of the terminal views: the user-error type, number formats, colours.

Every view is a pair: a builder that turns simulator / compiler results into a plain
dataclass (what the tests check) and a renderer that turns that dataclass into a rich
renderable (what people look at). Renderers never compute facts of their own, so a
snapshot can only change when the presentation changes.
"""
from __future__ import annotations

from compiler.ir.graph import GraphError
from compiler.fusion.plan import COLOURS


class ViewError(GraphError):
    """A view asked for something that does not exist (a dispatch, an instruction); the
    message lists the valid choices. A GraphError so the CLI reports it in one line."""


def fmt_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1."""
    n = float(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def fmt_knobs(knobs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


def dispatch_colour(i: int) -> str:
    """The colour of dispatch ``i``: the same palette as ``wavefuse fuse``."""
    return COLOURS[i % len(COLOURS)]


def choose(what: str, name, valid: list):
    """``name`` if it is one of ``valid``, else a ViewError naming every valid choice."""
    if name in valid:
        return name
    listed = ", ".join(str(v) for v in valid) or "none"
    raise ViewError(f"no {what} {name!r}; valid: {listed}")
