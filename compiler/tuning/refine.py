"""Refinement: the points near the best one simulated so far, for the staged search.

Why: the analytic ranking (``compiler.tuning.rank``) puts good points near the top but
not always first; the simulated best's neighbours (one or two knobs moved one step) and
the crosses of the two best points are where a better point most likely is (the local
search of tinygrad's BEAM and the mutation/crossover of Ansor's evolutionary search).

Generic over the knobs: a knob whose values are all numbers is *ordered* (a step moves to
the next smaller or larger value the space has); any other knob is *categorical* (a step
moves to any other value). A knob a point lacks (e.g. the MFMA knobs of a VALU point) has
the value None; moving it is a step too. Nothing here names a knob, so a knob another
change adds to a schedule space is refined the same way.
"""
from __future__ import annotations

import json


def _key(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True, default=str)


def knob_orders(points: list) -> dict:
    """knob -> its values in the space, sorted (numbers numerically), and whether ordered."""
    values: dict = {}
    for p in points:
        for k, v in p.items():
            values.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    out = {}
    for k, vs in values.items():
        decoded = [json.loads(v) for v in vs]
        ordered = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in decoded)
        decoded.sort(key=(lambda v: v) if ordered else (lambda v: json.dumps(v, default=str)))
        out[k] = (decoded, ordered)
    return out


def distance(a: dict, b: dict, orders: dict) -> int | None:
    """How many single-knob steps apart ``a`` and ``b`` are, when each differing knob is
    one step apart (None otherwise: not a neighbour at any distance)."""
    steps = 0
    for k in set(a) | set(b):
        va, vb = a.get(k), b.get(k)
        if va == vb:
            continue
        values, ordered = orders.get(k, ([], False))
        if ordered and va is not None and vb is not None:
            try:
                if abs(values.index(va) - values.index(vb)) != 1:
                    return None
            except ValueError:
                return None
        steps += 1
    return steps


def neighbours(best: dict, pool: list, orders: dict, max_steps: int = 2) -> list:
    """Indices into ``pool`` (knob dicts) of the points 1..max_steps steps from ``best``,
    nearest first (pool order within a distance)."""
    found = []
    for i, p in enumerate(pool):
        d = distance(best, p, orders)
        if d is not None and 0 < d <= max_steps:
            found.append((d, i))
    return [i for _, i in sorted(found)]


def crosses(a: dict, b: dict, pool: list) -> list:
    """Indices into ``pool`` of the points that take every knob from ``a`` or from ``b``
    (the children of a crossover of the two), excluding ``a`` and ``b`` themselves."""
    out = []
    for i, p in enumerate(pool):
        if p == a or p == b:
            continue
        if all(p.get(k) in (a.get(k), b.get(k)) for k in set(a) | set(b) | set(p)):
            out.append(i)
    return out
