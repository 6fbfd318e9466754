"""Fusion plans remembered in the tuning database, so a warm ``tune`` forms no plan.

Why: ``tune`` forms up to four plans of a model (aggressive, separate contractions, split
attention, conservative); on BERT-base each takes about half a second of rule matching,
which was most of a warm run once every score was cached (issue 26: a warm tune within
3 s). A plan is a pure function of the graph's structure and of the fusion sources, so it
is stored under

- ``plan|<fusion sources hash>|<graph structure hash>|<options>`` in the ``spaces`` table
  (no schema change);
- the graph structure: every op's name, kind, inputs, type and attributes, with constants
  by shape and dtype, their values hashed only where a rule can read them: scalars,
  integer and bool tensors, tensors of at most ``VALUE_ELEMENTS`` elements, and the causal
  flag of a mask (``compiler.ir.attention_pattern.is_causal_constant``, which the attention
  rule reads). A weight's bytes never decide a fusion (the horizontal rule concatenates
  them, and is re-run on a hit), so two exports with other random weights share a plan,
  and hashing BERT-base's 435 MB of weights (0.3 s) is not needed;
- the fusion sources: ``compiler.fusion`` and everything it imports (``tunedb.source_closure``),
  so an edited rule forms plans afresh.

The plan is stored as tagged JSON (its four dataclasses and tuples kept apart from lists)
and read back equal to the one ``fuse`` forms (``tests/test_plancache.py``); a plan holding
anything else is not stored.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref

import numpy as np

from compiler.fusion import fuse, horizontal
from compiler.fusion.plan import Decision, Dispatch, EpilogueInput, FusionPlan, IterationSpace
from compiler.ir.attention_pattern import is_causal_constant
from compiler.ir.graph import FLOAT_DTYPES, Graph
from compiler.tuning import tunedb

#: constants of at most this many elements enter the key by value (scalars, small masks,
#: index tables); larger float ones by shape, dtype and the causal flag
VALUE_ELEMENTS = 4096
TABLE = "spaces"
_CLASSES = {c.__name__: c for c in (Dispatch, Decision, EpilogueInput, IterationSpace)}
_VERSION: dict = {}


class _Uncacheable(Exception):
    pass


def fusion_version() -> str:
    """A hash of the fusion sources and what they import."""
    if "v" not in _VERSION:
        root = tunedb._ROOT / "compiler" / "fusion"
        names = ["compiler.fusion"] + [f"compiler.fusion.{p.stem}" for p in root.glob("*.py")]
        _VERSION["v"] = tunedb._digest(tunedb.source_closure(names))
    return _VERSION["v"]


def _constant(op) -> list:
    value = op.attrs.get("value")
    if not isinstance(value, np.ndarray):
        return [tunedb._canon(value)]
    if value.size <= VALUE_ELEMENTS or op.type.dtype not in FLOAT_DTYPES:
        return [tunedb._canon(value)]
    return [list(value.shape), str(value.dtype), "causal" if is_causal_constant(op) else ""]


def structure_fingerprint(graph: Graph) -> str:
    """The graph as fusion sees it (module docstring): names, kinds, edges, types,
    attributes, and the constant values a rule can read."""
    body = []
    for op in graph.ops:
        attrs = dict(op.attrs)
        entry = [op.name, op.kind, list(op.inputs), tunedb._type(op.type)]
        if op.kind == "constant":
            attrs.pop("value", None)
            entry.append(_constant(op))
        entry.append(tunedb._canon(attrs))
        body.append(entry)
    text = json.dumps([body, list(graph.outputs)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _encode(x):
    if isinstance(x, np.generic):
        x = x.item()   # a numpy scalar in a decision's cost: its value, as JSON keeps it
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if type(x).__name__ in _CLASSES and type(x) is _CLASSES[type(x).__name__]:
        return {"__dc": type(x).__name__, "f": {k: _encode(v) for k, v in vars(x).items()}}
    if type(x) is tuple:
        return {"__t": [_encode(v) for v in x]}
    if type(x) is list:
        return [_encode(v) for v in x]
    if type(x) is dict and all(type(k) is str for k in x):
        return {"__d": {k: _encode(v) for k, v in x.items()}}
    raise _Uncacheable(type(x).__name__)


def _decode(x):
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        if "__t" in x:
            return tuple(_decode(v) for v in x["__t"])
        if "__d" in x:
            return {k: _decode(v) for k, v in x["__d"].items()}
        cls = _CLASSES[x["__dc"]]
        obj = cls.__new__(cls)
        for k, v in x["f"].items():
            object.__setattr__(obj, k, _decode(v))
        return obj
    return x


_REWRITTEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _rewritten(graph: Graph, structure: str) -> Graph:
    """``horizontal.rewrite(graph)``'s graph, once per graph object and structure (the
    aggressive and split-attention plans both start from it; each rewrite concatenates
    the weights)."""
    known = _REWRITTEN.get(graph)
    if known is None or known[0] != structure:
        known = _REWRITTEN[graph] = (structure, horizontal.rewrite(graph)[0])
    return known[1]


def fused(graph: Graph, store=None, fingerprint: str | None = None, **options) -> FusionPlan:
    """``fuse(graph, **options)``, read from ``store`` when it holds this plan, else
    formed and written there. ``fingerprint``: the graph's ``structure_fingerprint`` when
    the caller has it (``tune`` forms four plans of one graph)."""
    if store is None:
        return fuse(graph, **options)
    structure = fingerprint or structure_fingerprint(graph)
    key = f"plan|{fusion_version()}|{structure}|{json.dumps(options, sort_keys=True)}"
    row = store.get_many(TABLE, [key]).get(key)
    if row is not None:
        try:
            dispatches, decisions = _decode(row["dispatches"]), _decode(row["decisions"])
            mode, nbytes, count = row["mode"], row["bytes_unfused"], row["num_dispatches_unfused"]
        except (KeyError, TypeError, AttributeError):
            row = None   # a row this version cannot read (hand-edited): formed again below
        else:
            g = _rewritten(graph, structure) if options.get("horizontal_gemms") else graph
            return FusionPlan(g, dispatches, decisions, mode, nbytes, count)
    plan = fuse(graph, **options)
    try:
        row = {"dispatches": _encode(plan.dispatches), "decisions": _encode(plan.decisions),
               "mode": plan.mode, "bytes_unfused": plan.bytes_unfused,
               "num_dispatches_unfused": plan.num_dispatches_unfused}
    except _Uncacheable:
        return plan
    store.put_many(TABLE, {key: row}, fusion_version())
    return plan


__all__ = ["fused", "structure_fingerprint", "fusion_version", "VALUE_ELEMENTS"]
