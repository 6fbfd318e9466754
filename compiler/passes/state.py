"""The fusion state every rule edits: groups of ops (future dispatches) and the legality
check they all share (not a rule itself).

A group has a *root* (its contraction, else a reduction, else its largest elementwise op)
and a *parallel space*: the root's parallel loops longer than one. For every member op,
``pmap`` says which of the member's loops runs along each parallel loop of the group
(None: the member does not vary along it, i.e. it is recomputed there). Everything a
member does outside the parallel space is a serial loop inside one parallel point.

Merging two groups is legal when the indexing maps on every edge between them (or, for
siblings, from their shared input) put the same parallel point on both sides: that is the
"compare indexing maps" test of IREE's dispatch formation. The rules decide *which* pairs
to try and in what order; ``try_merge`` decides whether the pair may fuse and why not,
including the check that no cycle appears between dispatches (on the condensed graph).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from ..graph import Graph
from ..plan import Decision
from . import indexing as ix


def live_ops(graph: Graph) -> set:
    """Ops some graph output depends on; the rest is dead code and gets no dispatch."""
    live = set(graph.outputs)
    for o in graph.outputs:
        live |= nx.ancestors(graph.g, o)
    return live


@dataclass
class Group:
    id: int
    root: str
    ops: set
    pmap: dict            # op -> tuple over the parallel space: member loop or None
    psizes: tuple         # extent of each parallel loop of the group

    def roots(self, graph: Graph) -> list[str]:
        return [o for o in self.ops
                if graph.op(o).is_reduction or graph.op(o).is_contraction]

    def rank(self, graph: Graph) -> int:
        return ix.root_rank(graph.op(self.root))


@dataclass
class Edge:
    """Consumer ``dst`` reads producer ``src`` through operand ``k`` (views crossed)."""
    src: str
    dst: str
    k: int
    views: tuple
    links: dict           # producer loop -> consumer loop
    opaque: bool


@dataclass
class FusionState:
    graph: Graph
    aggressive: bool
    groups: dict = field(default_factory=dict)    # id -> Group
    owner: dict = field(default_factory=dict)     # op -> group id
    decisions: dict = field(default_factory=dict)  # (producer, consumer) -> Decision
    recomputed: dict = field(default_factory=dict)  # op -> [group ids]
    edges: list = field(default_factory=list)

    @classmethod
    def start(cls, graph: Graph, aggressive: bool) -> "FusionState":
        """Every compute op in its own group: the unfused plan."""
        st = cls(graph, aggressive)
        order = graph.topo_order()
        st.order = {n: i for i, n in enumerate(order)}
        live = live_ops(graph)
        for n in order:
            op = graph.op(n)
            if not ix.is_compute(op) or n not in live:
                continue
            loops = ix.parallel_loops(op, graph)
            dom = ix.domain(op, graph)
            gid = len(st.groups)
            st.groups[gid] = Group(gid, n, {n}, {n: tuple(loops)},
                                   tuple(dom[l][0] for l in loops))
            st.owner[n] = gid
            for k in range(len(op.inputs)):
                src, views, tlinks, opaque = ix.trace_operand(graph, n, k)
                if ix.is_compute(graph.op(src)):
                    st.edges.append(Edge(src, n, k, tuple(views),
                                         ix.loop_links(graph, src, tlinks), opaque))
        return st

    # ------------------------------------------------------------------ queries
    def group_of(self, op: str) -> Group:
        return self.groups[self.owner[op]]

    def out_edges(self, g: Group) -> list[Edge]:
        return [e for e in self.edges if e.src in g.ops and e.dst not in g.ops]

    def in_edges(self, g: Group) -> list[Edge]:
        return [e for e in self.edges if e.dst in g.ops and e.src not in g.ops]

    def between(self, a: Group, b: Group) -> list[Edge]:
        return [e for e in self.edges if e.src in a.ops and e.dst in b.ops]

    def elementwise_only(self, g: Group) -> bool:
        return all(self.graph.op(o).is_elementwise for o in g.ops)

    def sorted_groups(self, reverse=False) -> list[Group]:
        return sorted(self.groups.values(), key=lambda g: self.order[g.root], reverse=reverse)

    def condensed(self) -> nx.DiGraph:
        """The dispatch-level graph: one node per group, an edge per tensor crossing."""
        dg = nx.DiGraph()
        dg.add_nodes_from(self.groups)
        into = {}
        for e in self.edges:
            into.setdefault(e.dst, []).append(e.src)
        for gid, grp in self.groups.items():
            for o in grp.ops:      # a recomputed op may sit in several groups
                for src in into.get(o, ()):
                    if src not in grp.ops:
                        dg.add_edge(self.owner[src], gid)
        return dg

    # ------------------------------------------------------------------ decisions
    def record(self, rule: str, producer: str, consumer: str, fused: bool, reason: str):
        self.decisions[(producer, consumer)] = Decision(rule, producer, consumer, fused, reason)

    # ------------------------------------------------------------------ legality
    def _relation(self, a: Group, b: Group, links):
        """Pairs the parallel loops of a and b through (a op, b op, {a loop: b loop}).

        Returns (rel_a, rel_b) or a reason string. rel_a[ka] is a b-index, "serial"
        (a b member runs it as a serial loop) or absent; rel_b likewise ("bcast": the
        a side does not vary along it)."""
        rel_a, rel_b = {}, {}

        def put(rel, k, v, who):
            # "bcast" only says this edge's producer is constant along k; any other
            # fact about k wins over it.
            old = rel.get(k)
            if old is None or old == "bcast":
                rel[k] = v
                return None
            if v != "bcast" and old != v:
                return (f"parallel loop {k} of {who} meets two different loops of the other "
                        f"side (the consumer reads the value at another parallel point)")
            return None

        for x_op, y_op, lk in links:
            inv = {v: u for u, v in lk.items()}
            pa, pb = a.pmap[x_op], b.pmap[y_op]
            for ka, x in enumerate(pa):
                if x is None:
                    continue
                y = lk.get(x)
                if y is None:
                    return f"{x_op}'s parallel loop {x} does not reach {y_op}"
                v = pb.index(y) if y in pb else "serial"
                err = put(rel_a, ka, v, f"{x_op}'s dispatch")
                if err:
                    return err
            for kb, y in enumerate(pb):
                if y is None:
                    continue
                x = inv.get(y)
                v = "bcast" if x is None else pa.index(x) if x in pa else "serial"
                err = put(rel_b, kb, v, f"{y_op}'s dispatch")
                if err:
                    return err
        for ka, v in rel_a.items():
            if isinstance(v, int) and rel_b.get(v, ka) != ka:
                return "the parallel loops of the two sides do not pair one-to-one"
        return rel_a, rel_b

    def _misplaced_epilogue_output(self, gemm: Group, other: Group, pmap: dict):
        """Why a tensor the merged epilogue writes would land at the wrong place, or None.

        The contraction lowering evaluates every epilogue output at the accumulator's own
        index (output element (i, j) is computed from accumulator (i, j)). A result of the
        root's shape read through a transpose (square matmul -> transpose -> neg) pairs
        its dim 0 with the root's dim 1: same shape, different element, so the shape test
        alone passes it. Every result that leaves the dispatch must therefore run each
        parallel loop of the root along the *same* dimension as the root does."""
        g = self.graph
        root = g.op(gemm.root)
        ploops = ix.parallel_loops(root, g)
        root_dim = {l: d for d, l in enumerate(ix.result_map(root, g)) if l is not None}
        members = other.ops | gemm.ops
        for n in sorted(other.ops, key=self.order.__getitem__):
            op = g.op(n)
            if op.is_view or not self._leaves(n, members):
                continue
            rmap = ix.result_map(op, g)
            for kr, loop in enumerate(pmap[n]):
                if loop is None or loop not in rmap:
                    continue
                want, got = root_dim[ploops[kr]], rmap.index(loop)
                if want != got:
                    return (f"{n} holds the contraction's dim {want} along its dim {got} "
                            f"(a transpose between {gemm.root} and {n}): the epilogue writes "
                            f"each result at its accumulator's own index")
        return None

    def _leaves(self, n: str, members: set) -> bool:
        """Whether ``n``'s value is needed outside ``members``: a graph output, or read
        (directly or through a chain of views) by an op outside them."""
        g, todo, seen = self.graph, [n], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in g.outputs:
                return True
            for u in g.users(t):
                if g.op(u).is_view:
                    todo.append(u)
                elif u not in members:
                    return True
        return False

    def sole_user(self, grp: Group):
        """The one op reading ``grp``'s results, or None when there are several."""
        users = {e.dst for e in self.out_edges(grp)}
        return next(iter(users)) if len(users) == 1 else None

    def merge_or_record(self, rule: str, prod: Group, cons: Group) -> bool:
        """Tries the merge; on refusal records the reason on every edge between them."""
        ok, reason = self.try_merge(rule, prod, cons)
        if not ok:
            for e in self.out_edges(prod):
                if e.dst in cons.ops:
                    self.record(rule, e.src, e.dst, False, reason)
        return ok

    def fuse_into_consumers(self, rule: str, prod: Group) -> bool:
        """Merges ``prod`` with the first consumer group that accepts it (in graph order),
        recording why each one before it refused."""
        outs = self.out_edges(prod)
        for gid in sorted({self.owner[e.dst] for e in outs},
                          key=lambda i: self.order[self.groups[i].root]):
            if self.merge_or_record(rule, prod, self.groups[gid]):
                return True
        return False

    def try_merge(self, rule: str, prod: Group, cons: Group, *, sibling_links=None,
                  record_edges=None, other_uses_ok=False):
        """Merges ``prod`` into ``cons`` (or siblings) when legal; returns (ok, reason).

        The merged group keeps the root of higher rank (contraction > reduction >
        elementwise; the larger parallel space among elementwise groups)."""
        g = self.graph
        edges = self.between(prod, cons)
        if sibling_links is None and not edges:
            return False, "no tensor flows between the two dispatches"
        if sibling_links is not None and (edges or self.between(cons, prod)):
            return False, ("one reads the other's result: they are producer and consumer, "
                           "not siblings")
        for e in edges:
            if e.opaque:
                via = f" through {', '.join(e.views)}" if e.views else ""
                return False, (f"{e.dst} reads {e.src}{via} with a map that is not a "
                               f"projection of its loops (a reshape that splits/merges "
                               f"dims, or a convolution window)")
            if g.op(e.dst).is_contraction:
                return False, (f"{e.src} is an operand of the contraction {e.dst}: "
                               f"contractions read their operands from memory (producer "
                               f"fusion into a GEMM/conv tile is not done, as in IREE)")
        pr, cr = prod.rank(g), cons.rank(g)
        if pr == 3 and cr == 3:
            return False, "two contractions never share a dispatch"
        if 3 in (pr, cr) and 2 in (pr, cr):
            return False, ("a reduction and a contraction do not share a dispatch: the "
                           "epilogue runs once per output element of the contraction tile")
        if pr == 3 and not self.elementwise_only(cons):
            return False, "only elementwise ops join a contraction epilogue"
        if 3 in (pr, cr):
            # the GEMM writes tile by tile in its own shape: every tensor of the epilogue
            # that leaves the dispatch must have that shape
            gemm, other = (prod, cons) if pr == 3 else (cons, prod)
            shape = g.op(gemm.root).type.shape
            for n in sorted(other.ops, key=self.order.__getitem__):
                t = g.op(n).type
                if t.shape == shape or g.op(n).is_view:
                    continue
                if t.size == math.prod(shape):
                    return False, (f"{n} holds the contraction's elements in shape {t.shape}, "
                                   f"not {shape}: the epilogue writes the result tile in "
                                   f"the contraction's own shape")
                if n in g.outputs or any(u not in other.ops | gemm.ops for u in g.users(n)):
                    return False, (f"{n} (shape {t.shape}) is also needed outside the "
                                   f"epilogue, and the GEMM writes only tensors of its own "
                                   f"shape {shape}")
        chained = sibling_links is None and prod.roots(g) and cons.roots(g)
        if chained and not self.aggressive:
            return False, ("conservative mode keeps one root per dispatch: "
                           f"{prod.root} does not fuse with the consumer root {cons.root} "
                           f"(IREE's default; --aggressive lifts it)")
        if sibling_links is None and pr == 1 and not other_uses_ok:
            outside = sorted({self.groups[self.owner[e.dst]].root
                              for e in self.out_edges(prod) if e.dst not in cons.ops})
            if outside:
                return False, (f"the producer also feeds the dispatch(es) of "
                               f"{', '.join(outside)}: a multi-use producer fuses only when "
                               f"all its uses land in one dispatch")
        links = sibling_links if sibling_links is not None else [
            (e.src, e.dst, e.links) for e in edges]
        rel = self._relation(prod, cons, links)
        if isinstance(rel, str):
            return False, rel
        rel_p, rel_c = rel
        # choose the root side R and the other side O
        if pr > cr or (pr == cr and pr > 1):
            R, O, rel_R, rel_O, o_is_prod = prod, cons, rel_p, rel_c, False
        elif pr == cr == 1 and math.prod(prod.psizes) > math.prod(cons.psizes):
            R, O, rel_R, rel_O, o_is_prod = prod, cons, rel_p, rel_c, False
        else:
            R, O, rel_R, rel_O, o_is_prod = cons, prod, rel_c, rel_p, True
        if sibling_links is not None:
            o_is_prod = None
        notes = []
        r_kind = g.op(R.root).kind
        # every parallel loop of the root side
        for kr in range(len(R.psizes)):
            v = rel_R.get(kr)
            if v == "serial":
                return False, (f"parallel loop {kr} of {R.root} (extent {R.psizes[kr]}) is a "
                               f"serial/reduction loop on the other side")
            if v is None:
                if o_is_prod and self.elementwise_only(O):
                    notes.append(f"recomputed along loop {kr} (extent {R.psizes[kr]}, "
                                 f"broadcast)")
                else:
                    return False, (f"{O.root}'s side does not vary along parallel loop {kr} "
                                   f"of {R.root}: it would run redundantly per point")
        new_loops = 1
        for ko in range(len(O.psizes)):
            v = rel_O.get(ko)
            if isinstance(v, int):
                continue
            if o_is_prod is None or R.rank(g) == 3:
                return False, (f"parallel spaces differ: loop {ko} (extent {O.psizes[ko]}) of "
                               f"{O.root} has no partner in {R.root}'s parallel space")
            if O.rank(g) == 2:
                return False, (f"the two roots {R.root} and {O.root} have different parallel "
                               f"spaces")
            if v == "serial":
                notes.append(f"{O.root}'s loop {ko} (extent {O.psizes[ko]}) runs as the "
                             f"serial loop {R.root} already has")
                continue
            if o_is_prod:
                return False, (f"{O.root}'s loop {ko} has no partner in {R.root}")
            if R.rank(g) == 1:
                return False, (f"{O.root} iterates loop {ko} that {R.root} does not have")
            new_loops *= O.psizes[ko]
            notes.append(f"{O.root}'s loop {ko} (extent {O.psizes[ko]}) becomes a serial "
                         f"loop per {r_kind} row (parallelism lowered)")
        if new_loops > 1 and not self.aggressive:
            rext = math.prod(s for s, kind in ix.domain(g.op(R.root), g)
                             if kind == "reduction")
            if new_loops > rext:
                return False, (f"conservative mode: the consumer would add {new_loops} serial "
                               f"iterations per row, more than the {rext} the root walks")
        # cycle check on the condensed graph
        dg = self.condensed()
        if dg.has_edge(prod.id, cons.id):
            dg.remove_edge(prod.id, cons.id)
        if nx.has_path(dg, prod.id, cons.id) or nx.has_path(dg, cons.id, prod.id):
            return False, ("fusing would create a cycle between dispatches (a path leaves "
                           "one and re-enters the other through a third dispatch)")
        # re-express O's members over R's parallel space
        inv = {}
        for kr in range(len(R.psizes)):
            v = rel_R.get(kr)
            inv[kr] = v if isinstance(v, int) else None
        new_pmap = {o: tuple(O.pmap[o][inv[kr]] if inv[kr] is not None else None
                             for kr in range(len(R.psizes))) for o in O.ops}
        if R.rank(g) == 3:
            why = self._misplaced_epilogue_output(R, O, new_pmap)
            if why:
                return False, why
        # commit
        R.pmap.update(new_pmap)
        R.ops |= O.ops
        for o in O.ops:
            self.owner[o] = R.id
        del self.groups[O.id]
        space = "x".join(map(str, R.psizes)) or "1"
        head = (f"{'siblings' if sibling_links is not None else 'chained roots' if chained else 'fused'}"
                f" over {R.root}'s parallel space ({space})")
        reason = "; ".join([head] + notes)
        for e in (record_edges if record_edges is not None else edges):
            pair = (e.src, e.dst) if isinstance(e, Edge) else e
            self.record(rule, pair[0], pair[1], True, reason)
        return True, reason
