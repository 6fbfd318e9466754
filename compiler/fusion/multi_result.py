"""Multi-result dispatches, and turning the final groups into dispatches.

A dispatch writes every tensor it computes that something outside it needs: a graph
output, or a value another dispatch reads. Writing several results from one dispatch is
what lets the other rules fuse without duplicating work: a softmax dispatch can also
hand its row maximum to a later consumer, and two sibling reductions write both their
results. Every dispatch that writes more than one tensor gets a decision saying who reads
each one.

This file also finishes the plan: views are placed as index maps (the elementwise rule),
each dispatch gets its boundary inputs, its root's iteration space and, for contractions, the layout
facts of its epilogue inputs (the epilogue rule); dispatches are ordered topologically on the
condensed graph, which must be acyclic.
"""
from __future__ import annotations

import networkx as nx

from compiler.ir.graph import Graph
from compiler.fusion.plan import Decision, Dispatch, EpilogueInput, FusionPlan, IterationSpace
from compiler.fusion import epilogue, indexing as ix
from compiler.fusion.layout import group_writes_view
from compiler.fusion.elementwise import place_views
from compiler.fusion.core import FusionState

NAME = "multi_result"


def _iteration(g: Graph, root: str) -> IterationSpace:
    op = g.op(root)
    if op.is_view:
        return IterationSpace(op.type.shape)
    dom = ix.domain(op, g)
    return IterationSpace(tuple(s for s, k in dom if k == "parallel"),
                          tuple(s for s, k in dom if k == "reduction"))


def build_plan(state: FusionState) -> FusionPlan:
    g = state.graph
    order = state.order
    members = {gid: set(grp.ops) for gid, grp in state.groups.items()}
    roots = {gid: grp.root for gid, grp in state.groups.items()}
    materialise = place_views(state, members)
    writer = {}
    copies = []
    copy_of = {}   # (tensor behind the views, output shape) -> the copy dispatch
    for out, (gid, chain) in materialise.items():
        if gid is not None and not group_writes_view(g, roots[gid], members[gid], chain):
            # a GEMM writes its tile in its own layout or through a one-to-one view of
            # it (layout propagation); a slice or a merging reshape of it that is a graph
            # output is copied by another dispatch
            gid = None
        if gid is None:
            # one copy dispatch per tensor and shape: two graph outputs that are views
            # of one tensor with one shape share its read (never more work than unfused)
            key = (g.op(chain[-1]).inputs[0], g.op(out).type.shape)
            gid = copy_of.get(key)
            if gid is None:
                gid = copy_of[key] = max(list(members) + [-1]) + 1
                members[gid] = set()
                roots[gid] = chain[0]
                copies.append(gid)
        members[gid].update(chain)
        writer[out] = gid
    for n, gid in state.owner.items():
        writer.setdefault(n, gid)

    inputs = {}
    for gid, ops in members.items():
        seen = []
        for n in sorted(ops, key=order.__getitem__):
            for i in g.op(n).inputs:
                if i not in ops and i not in seen:
                    seen.append(i)
        inputs[gid] = seen
    readers = {}
    for gid, ins in inputs.items():
        for t in ins:
            readers.setdefault(t, []).append(gid)
    outputs = {}
    for gid, ops in members.items():
        outs = [n for n in sorted(ops, key=order.__getitem__)
                if writer.get(n) == gid and (n in g.outputs or readers.get(n))]
        outputs[gid] = outs

    dg = nx.DiGraph()
    dg.add_nodes_from(members)
    for t, rs in readers.items():
        if t in writer:
            for r in rs:
                if r != writer[t]:
                    dg.add_edge(writer[t], r)
    if not nx.is_directed_acyclic_graph(dg):
        raise AssertionError(f"fusion of {g.name!r} produced a cycle between dispatches: "
                             f"{nx.find_cycle(dg)}")
    first = {gid: min(order[n] for n in ops) for gid, ops in members.items()}
    seq = list(nx.lexicographical_topological_sort(dg, key=first.__getitem__))

    dispatches, decisions, names = [], [], {}
    for i, gid in enumerate(seq):
        names[gid] = f"d{i}_{roots[gid]}"
    for gid in seq:
        ops = sorted(members[gid], key=order.__getitem__)
        root = roots[gid]
        rop = g.op(root)
        if gid in copies:
            kind = "transpose" if any(g.op(n).kind == "transpose" for n in ops) else "copy"
        elif gid in state.groups and state.groups[gid].closed == "attention":
            kind = "attention"
        else:
            kind = ("contraction" if rop.is_contraction else
                    "reduction" if rop.is_reduction else "elementwise")
        epi = []
        if kind == "contraction":
            for t, by, lay, ok in epilogue.layout_facts(state, state.groups[gid], members[gid]):
                epi.append(EpilogueInput(t, by, tuple(lay), ok))
        for e in epi:
            decisions.append(Decision(
                "epilogue", e.tensor, names[gid], True,
                f"epilogue input read by {e.read_by}, memory order {list(e.layout)}: " +
                ("matches the output's row-major layout, so an output swizzle placed "
                 "before the epilogue also makes this read coalesced" if
                 e.layout_matches_output else
                 "does not match the output's layout: an output swizzle before the "
                 "epilogue leaves this read uncoalesced and may regress")))
        rec = [n for n in ops if gid in state.recomputed.get(n, ())]
        it = _iteration(g, root)
        if kind == "attention":   # parallel over (batch, heads, query rows), keys serial
            it = IterationSpace(g.op(root).type.shape[:-1],
                                (g.op(g.op(root).inputs[0]).type.shape[-1],))
        d = Dispatch(names[gid], root, ops, kind, inputs[gid], outputs[gid], it, epi, rec)
        dispatches.append(d)
        if len(d.outputs) > 1:
            why = []
            for t in d.outputs:
                who = [names[r] for r in readers.get(t, []) if r != gid]
                why.append(f"{t} ({'graph output' if t in g.outputs else ''}"
                           f"{', ' if t in g.outputs and who else ''}"
                           f"{'read by ' + ', '.join(who) if who else ''})")
            decisions.append(Decision(NAME, d.name, ", ".join(d.outputs), True,
                                      f"writes {len(d.outputs)} results: " + "; ".join(why)))
        if gid in copies:
            decisions.append(Decision("elementwise", ops[0], d.name, False,
                                      "a view that is a graph output and that no dispatch "
                                      "computing its tensor can write (a view of an input "
                                      "or constant; a slice or merging reshape of a "
                                      "contraction result; a slice or repeating broadcast "
                                      "an elementwise walk does not cover): it needs a "
                                      "copy dispatch to exist in memory"))
    for n in g.topo_order():
        if g.op(n).is_view:
            where = [names[gid] for gid in seq if n in members[gid]]
            if len(where) > 1:
                decisions.append(Decision("elementwise", n, ", ".join(where), True,
                                          "view duplicated as an index map into each "
                                          "dispatch that reads through it"))
    edge_dec = dict(state.decisions)
    for e in state.edges:
        if (e.src, e.dst) in edge_dec:
            continue
        same = any(e.src in members[gid] and e.dst in members[gid] for gid in members)
        edge_dec[(e.src, e.dst)] = Decision(
            "none", e.src, e.dst, same,
            "in the same dispatch through other fusions" if same else
            f"no rule fuses a {g.op(e.src).kind} producer into this {g.op(e.dst).kind}")
    ordered = sorted(edge_dec.values(), key=lambda d: (order.get(d.producer, -1),
                                                       order.get(d.consumer, -1)))
    return FusionPlan(g, dispatches, ordered + decisions,
                      "aggressive" if state.aggressive else "conservative")
