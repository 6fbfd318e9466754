"""Multi-use producers.

An elementwise producer (or a group of them) whose value several ops read fuses into a
dispatch only when *all* those readers already sit in that same dispatch: then the value
never needs to be written (softmax's ``exp`` read by both the sum and the division; layer
norm's ``x - mean`` read by the square and the normalisation). When the readers sit in
different dispatches, the producer stays a dispatch of its own and writes its value once.
That condition (``condition``) holds for every merge of an elementwise producer, whichever
rule tries it.

Exception, applied once at the very end (``recompute``): a pure elementwise chain whose
only inputs are graph inputs or constants may be *duplicated* into every reading
dispatch, when each copy is legal there and the duplicated reads cost no more bytes than
writing the value once and reading it everywhere. Every duplicate is recorded.
"""
from __future__ import annotations

import copy

from compiler.fusion import indexing as ix
from compiler.fusion.core import Attempt, FusionState, RootKind

NAME = "multi_use"


def condition(state: FusionState, attempt: Attempt) -> str | None:
    """An elementwise producer fuses only when all its readers land in one dispatch."""
    if attempt.sibling or attempt.other_uses_ok or attempt.prod.kind(state.graph) != RootKind.ELEMENTWISE:
        return None
    outside = sorted({state.groups[state.owner[e.dst]].root
                      for e in state.out_edges(attempt.prod) if e.dst not in attempt.cons.ops})
    if outside:
        return (f"the producer also feeds the dispatch(es) of "
                f"{', '.join(outside)}: a multi-use producer fuses only when "
                f"all its uses land in one dispatch")
    return None


def apply(state: FusionState) -> bool:
    for grp in state.sorted_groups():
        if not state.elementwise_only(grp):
            continue
        outs = state.out_edges(grp)
        users = {e.dst for e in outs}
        if len(users) < 2:
            continue
        targets = {state.owner[u] for u in users}
        if len(targets) == 1:
            ok, reason = state.try_merge(NAME, grp, state.groups[targets.pop()])
            if ok:
                return True
        else:
            reason = (f"read by {len(users)} ops in {len(targets)} different dispatches; "
                      f"stays a dispatch of its own unless recomputed")
        for e in outs:
            state.record(NAME, e.src, e.dst, False, reason)
    return False


def recompute(state: FusionState) -> None:
    """Duplicates cheap elementwise groups over graph inputs into all their readers."""
    g = state.graph
    for grp in state.sorted_groups():
        if grp.id not in state.groups or not state.elementwise_only(grp):
            continue
        if any(o in g.outputs for o in grp.ops):
            continue
        outs = state.out_edges(grp)
        targets = sorted({state.owner[e.dst] for e in outs})
        if len(targets) < 2:
            continue
        ext = {i for o in grp.ops for i in g.op(o).inputs if i not in grp.ops}
        srcs = set()
        for o in grp.ops:
            for k in range(len(g.op(o).inputs)):
                src, _, _, _ = ix.trace_operand(g, o, k)
                if src not in grp.ops:
                    srcs.add(src)
        if any(ix.is_compute(g.op(s)) for s in srcs) or not ext:
            continue
        in_bytes = sum(g.tensor_bytes(s) for s in srcs)
        written = {e.src for e in outs}
        out_bytes = sum(g.tensor_bytes(s) for s in written)
        before = in_bytes + out_bytes + len(targets) * out_bytes
        after = len(targets) * in_bytes
        if after > before:
            for e in outs:
                state.record(NAME, e.src, e.dst, False,
                          f"read by {len(targets)} dispatches; recomputing would read "
                          f"{after} B instead of {before} B")
            continue
        # each copy must be a legal merge on its own; undo everything if one is not
        saved = state.snapshot()
        ok_all, reason = True, ""
        for t in targets:
            clone = copy.deepcopy(grp)
            clone.id = max(state.groups) + 1
            state.add_group(clone)
            ok_all, reason = state.try_merge(NAME, clone, state.groups[t], other_uses_ok=True)
            if ok_all and t not in state.groups:
                ok_all, reason = False, "the copy would lead the reading dispatch"
            if not ok_all:
                break
        if not ok_all:
            state.restore(saved)
            for e in outs:
                state.record(NAME, e.src, e.dst, False, f"not recomputed: {reason}")
            continue
        del state.groups[grp.id]
        names = [state.groups[t].root for t in targets]
        for o in grp.ops:
            state.owner[o] = targets[0]
            state.recomputed[o] = list(targets)
        for e in outs:
            state.record(NAME, e.src, e.dst, True,
                      f"recomputed in the dispatches of {', '.join(names)}: elementwise "
                      f"over graph inputs only, {after} B of reads instead of {before} B")
