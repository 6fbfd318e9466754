"""The fusion core every rule uses: groups of ops (future dispatches), pairing their
parallel spaces, the cycle check, committing a merge and recording the decision.

A group has a *root* (its contraction, else a reduction, else its largest elementwise op;
see :class:`RootKind`) and a *parallel space*: the root's parallel loops longer than one.
For every member op, ``pmap`` says which of the member's loops runs along each parallel
loop of the group (None: the member does not vary along it, i.e. it is recomputed there).
Everything a member does outside the parallel space is a serial loop inside one parallel
point.

Merging two groups is legal when the indexing maps on every edge between them (or, for
siblings, from their shared input) put the same parallel point on both sides: that is the
"compare indexing maps" test of IREE's dispatch formation. This file holds only that
shared mechanism. What a rule adds to it lives in the rule's own file, under its prose:
each rule module may define ``condition(st, attempt)`` (checked before the spaces are
paired) and ``space_condition(st, attempt, pairing)`` (checked after); the package lists
them in order in ``passes.CONDITIONS`` and ``passes.SPACE_CONDITIONS``.

Bookkeeping is incremental so fusion stays near-linear in the graph size: each group keeps
the edges that leave it, op counts of its roots and non-elementwise members, the groups
sorted by root position, and the condensed dispatch graph is updated by contracting the
merged pair instead of being rebuilt (``tools/bench_fuse.py`` measures it).
"""
from __future__ import annotations

import bisect
import copy
import enum
import math
from collections.abc import MutableMapping
from dataclasses import dataclass, field

import networkx as nx

from compiler.ir.graph import Graph, live_ops
from compiler.fusion.plan import Decision, SimpleDispatch
from compiler.schedule import CHECKS, contraction
from compiler.fusion import indexing as ix
from compiler.fusion.layout import group_writes_view


class RootKind(enum.IntEnum):
    """Which op leads a dispatch; a merged group keeps the root of the higher kind."""
    ELEMENTWISE = 1
    REDUCTION = 2
    CONTRACTION = 3

    @classmethod
    def of(cls, op) -> "RootKind":
        return (cls.CONTRACTION if op.is_contraction else cls.REDUCTION if op.is_reduction
                else cls.ELEMENTWISE)


@dataclass
class Edge:
    """Consumer ``dst`` reads producer ``src`` through operand ``k`` (views crossed)."""
    src: str
    dst: str
    k: int
    views: tuple
    links: dict           # producer loop -> consumer loop
    opaque: bool
    idx: int = 0          # position in FusionState.edges (keeps every listing in that order)


@dataclass
class Group:
    id: int
    root: str
    ops: set
    pmap: dict            # op -> tuple over the parallel space: member loop or None
    psizes: tuple         # extent of each parallel loop of the group
    out: list = field(default_factory=list)   # edges leaving the group, in edge order
    n_roots: int = 0      # members that are reductions or contractions
    n_other: int = 0      # members that are not elementwise
    n_heavy: int = 0      # members that are neither elementwise nor injective
    closed: str = ""      # the rule that closed the group to further merges (attention)

    def kind(self, graph: Graph) -> RootKind:
        return RootKind.of(graph.op(self.root))


class _Owners(MutableMapping):
    """op -> id of the group holding it, stored as the group object so a merge that keeps
    the larger side's containers relabels only the smaller side's ops."""

    def __init__(self, state: "FusionState"):
        self._st, self._grp = state, {}

    def __getitem__(self, op):
        return self._grp[op].id

    def __setitem__(self, op, gid):
        self._grp[op] = self._st.groups[gid]

    def __delitem__(self, op):
        del self._grp[op]

    def __iter__(self):
        return iter(self._grp)

    def __len__(self):
        return len(self._grp)


@dataclass
class Attempt:
    """One merge being tried: what a rule's condition looks at."""
    rule: str
    prod: Group
    cons: Group
    edges: list           # producer -> consumer edges (empty for siblings)
    sibling: bool
    other_uses_ok: bool   # the multi-use rule's recomputation: other readers get copies
    chained: bool = False  # both sides hold a root and one feeds the other

    def __post_init__(self):
        self.chained = not self.sibling and bool(self.prod.n_roots) and bool(self.cons.n_roots)

    def kinds(self, graph: Graph) -> tuple[RootKind, RootKind]:
        return self.prod.kind(graph), self.cons.kind(graph)


@dataclass
class Pairing:
    """The outcome of pairing two parallel spaces: the keeper keeps its root and space, the
    joiner joins it. ``keeper_partners``: each parallel loop of the keeper -> the joiner's
    loop it pairs with, "serial" or None."""
    keeper: Group
    joiner: Group
    keeper_partners: dict
    joiner_is_producer: bool | None   # None for siblings
    notes: list
    new_loops: int           # serial iterations per root row that the joiner adds


def _meets(dg: nx.DiGraph, starts: set, ends: set, skip=None) -> bool:
    """Is there a path from ``starts`` to ``ends``? Searches forward and backward in
    turn and stops as soon as either side runs out, so the cost is that of the smaller
    side (a long chain behind one end costs nothing). ``skip``: an edge not to use."""
    fwd, bwd = set(starts), set(ends)
    ff, bf = list(starts), list(ends)
    if fwd & bwd:
        return True
    while ff and bf:
        if len(fwd) <= len(bwd):   # grow the side that has seen less
            nxt = []
            for u in ff:
                for v in dg.successors(u):
                    if (u, v) == skip or v in fwd:
                        continue
                    if v in bwd:
                        return True
                    fwd.add(v)
                    nxt.append(v)
            ff = nxt
        else:
            nxt = []
            for v in bf:
                for u in dg.predecessors(v):
                    if (u, v) == skip or u in bwd:
                        continue
                    if u in fwd:
                        return True
                    bwd.add(u)
                    nxt.append(u)
            bf = nxt
    return False


@dataclass
class FusionState:
    graph: Graph
    aggressive: bool
    conditions: tuple = ()        # rule conditions before pairing, in order
    space_conditions: tuple = ()  # rule conditions after pairing, in order
    #: rules that can pair two spaces joined by a non-projected map (a reshape splitting
    #: or merging dims), each proving the merge exact by its own means: (state, attempt) ->
    #: Pairing, a reason string, or None when the rule does not apply
    reindexers: tuple = ()
    groups: dict = field(default_factory=dict)    # id -> Group
    owner: MutableMapping = None                  # op -> group id
    decisions: dict = field(default_factory=dict)  # (producer, consumer) -> Decision
    recomputed: dict = field(default_factory=dict)  # op -> [group ids]
    edges: list = field(default_factory=list)
    #: answers of pure functions of the graph and group members, kept by the rule that
    #: asks (key: its name and the members): the rule loop restarts after every merge and
    #: re-asks the same questions about groups that have not changed
    memo: dict = field(default_factory=dict)
    #: (compute op, graph output, views from the output down to the op) for every graph
    #: output a dispatch computes, directly (no views) or through views
    graph_outputs: list = field(default_factory=list)

    @classmethod
    def start(cls, graph: Graph, aggressive: bool, conditions=(),
              space_conditions=(), reindexers=()) -> "FusionState":
        """Every compute op in its own group: the unfused plan."""
        state = cls(graph, aggressive, tuple(conditions), tuple(space_conditions),
                 tuple(reindexers))
        state.owner = _Owners(state)
        order = graph.topo_order()
        state.order = {n: i for i, n in enumerate(order)}
        live = live_ops(graph)
        for n in order:
            op = graph.op(n)
            if not ix.is_compute(op) or n not in live:
                continue
            loops = ix.parallel_loops(op, graph)
            dom = ix.domain(op, graph)
            gid = len(state.groups)
            kind = RootKind.of(op)
            state.groups[gid] = Group(gid, n, {n}, {n: tuple(loops)},
                                   tuple(dom[l][0] for l in loops),
                                   n_roots=int(kind > RootKind.ELEMENTWISE),
                                   n_other=int(not op.is_elementwise),
                                   n_heavy=int(not (op.is_elementwise or op.is_injective)))
            state.owner[n] = gid
            for k in range(len(op.inputs)):
                src, views, tlinks, opaque = ix.trace_operand(graph, n, k)
                if ix.is_compute(graph.op(src)):
                    state.edges.append(Edge(src, n, k, tuple(views),
                                         ix.loop_links(graph, src, tlinks), opaque,
                                         len(state.edges)))
        for e in state.edges:
            state.group_of(e.src).out.append(e)
        state._sorted = sorted((state.order[g.root], g.id) for g in state.groups.values())
        state._dg = state._build_condensed()
        for o in dict.fromkeys(graph.outputs):
            chain, n = [], o
            while graph.op(n).is_view:
                chain.append(n)
                n = graph.op(n).inputs[0]
            if ix.is_compute(graph.op(n)):
                state.graph_outputs.append((n, o, tuple(chain)))
        return state

    # ------------------------------------------------------------------ queries
    def group_of(self, op: str) -> Group:
        return self.groups[self.owner[op]]

    def out_edges(self, g: Group) -> list[Edge]:
        return [e for e in g.out if e.dst not in g.ops]

    def between(self, a: Group, b: Group) -> list[Edge]:
        return [e for e in a.out if e.dst in b.ops]

    def elementwise_only(self, g: Group) -> bool:
        return g.n_other == 0

    def injective_only(self, g: Group) -> bool:
        """Elementwise and injective (gather/pad/concat) ops only: one cheap value per
        output element, like IREE's "elementwise or injective" producers."""
        return g.n_heavy == 0

    def sorted_groups(self, reverse=False):
        """The groups in the order of their roots (a snapshot: safe to merge while
        iterating, a rule returns after its first merge anyway)."""
        keys = self._sorted[::-1] if reverse else list(self._sorted)
        return (self.groups[gid] for _, gid in keys if gid in self.groups)

    def sole_user(self, grp: Group):
        """The one op reading ``grp``'s results, or None when there are several."""
        users = {e.dst for e in self.out_edges(grp)}
        return next(iter(users)) if len(users) == 1 else None

    def _build_condensed(self) -> nx.DiGraph:
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

    def condensed(self) -> nx.DiGraph:
        return self._dg if self._dg is not None else self._build_condensed()

    # ------------------------------------------------------------------ snapshots
    def snapshot(self):
        """Everything a tentative series of merges may change (the multi-use rule's
        recomputation undoes all copies when one is illegal). Incremental bookkeeping of
        the condensed graph stops here: copies put one op in several groups."""
        self._dg = None
        return copy.deepcopy(self.groups), dict(self.owner), dict(self.decisions)

    def restore(self, saved) -> None:
        groups, owner, decisions = saved
        self.groups, self.decisions = groups, decisions
        self.owner = _Owners(self)
        for op, gid in owner.items():
            self.owner[op] = gid
        self._sorted = sorted((self.order[g.root], g.id) for g in groups.values())

    def add_group(self, grp: Group) -> None:
        """A new group (a copy made for recomputation) and its ops' ownership."""
        self.groups[grp.id] = grp
        for o in grp.ops:
            self.owner[o] = grp.id
        bisect.insort(self._sorted, (self.order[grp.root], grp.id))

    # ------------------------------------------------------------------ decisions
    def record(self, rule: str, producer: str, consumer: str, fused: bool, reason: str):
        self.decisions[(producer, consumer)] = Decision(rule, producer, consumer, fused, reason)

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

    # ------------------------------------------------------------------ pairing spaces
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

    def pair(self, attempt: Attempt, links) -> Pairing | str:
        """Chooses the root side (the keeper) and checks that every parallel loop of either side has
        a partner (or may be recomputed / run serially); a reason string when not."""
        g = self.graph
        prod, cons = attempt.prod, attempt.cons
        rel = self._relation(prod, cons, links)
        if isinstance(rel, str):
            return rel
        producer_partners, consumer_partners = rel
        pr, cr = attempt.kinds(g)
        if pr > cr or (pr == cr and pr > RootKind.ELEMENTWISE):
            keeper, joiner, joiner_is_producer = prod, cons, False
            keeper_partners, joiner_partners = producer_partners, consumer_partners
        elif pr == cr == RootKind.ELEMENTWISE and math.prod(prod.psizes) > math.prod(cons.psizes):
            keeper, joiner, joiner_is_producer = prod, cons, False
            keeper_partners, joiner_partners = producer_partners, consumer_partners
        else:
            keeper, joiner, joiner_is_producer = cons, prod, True
            keeper_partners, joiner_partners = consumer_partners, producer_partners
        if attempt.sibling:
            joiner_is_producer = None
        notes = []
        r_kind = g.op(keeper.root).kind
        for kr in range(len(keeper.psizes)):
            v = keeper_partners.get(kr)
            if v == "serial":
                return (f"parallel loop {kr} of {keeper.root} (extent {keeper.psizes[kr]}) is a "
                        f"serial/reduction loop on the other side")
            if v is None:
                if joiner_is_producer and self.elementwise_only(joiner):
                    notes.append(f"recomputed along loop {kr} (extent {keeper.psizes[kr]}, "
                                 f"broadcast)")
                else:
                    return (f"{joiner.root}'s side does not vary along parallel loop {kr} "
                            f"of {keeper.root}: it would run redundantly per point")
        new_loops = 1
        for ko in range(len(joiner.psizes)):
            v = joiner_partners.get(ko)
            if isinstance(v, int):
                continue
            if joiner_is_producer is None or keeper.kind(g) == RootKind.CONTRACTION:
                return (f"parallel spaces differ: loop {ko} (extent {joiner.psizes[ko]}) of "
                        f"{joiner.root} has no partner in {keeper.root}'s parallel space")
            if joiner.kind(g) == RootKind.REDUCTION:
                return (f"the two roots {keeper.root} and {joiner.root} have different parallel "
                        f"spaces")
            if v == "serial":
                notes.append(f"{joiner.root}'s loop {ko} (extent {joiner.psizes[ko]}) runs as the "
                             f"serial loop {keeper.root} already has")
                continue
            if joiner_is_producer:
                return f"{joiner.root}'s loop {ko} has no partner in {keeper.root}"
            if keeper.kind(g) == RootKind.ELEMENTWISE:
                return f"{joiner.root} iterates loop {ko} that {keeper.root} does not have"
            new_loops *= joiner.psizes[ko]
            notes.append(f"{joiner.root}'s loop {ko} (extent {joiner.psizes[ko]}) becomes a serial "
                         f"loop per {r_kind} row (parallelism lowered)")
        return Pairing(keeper, joiner, keeper_partners, joiner_is_producer, notes, new_loops)

    # ------------------------------------------------------------------ the cycle check
    def creates_cycle(self, prod: Group, cons: Group) -> bool:
        """A path between the two other than their direct edge, through a third dispatch."""
        dg = self.condensed()
        first = {s for s in dg.successors(prod.id) if s != cons.id}
        return bool(first and _meets(dg, first, {cons.id}, skip=(prod.id, cons.id))) or \
            _meets(dg, {cons.id}, {prod.id})

    # ------------------------------------------------------------------ legality
    def would_be_dispatch(self, p: Pairing, with_ops: bool) -> SimpleDispatch:
        """The dispatch ``p``'s merge would form, as the plan will build it: its root, and
        as outputs every member some other dispatch reads or that is (or a view of which
        is) a graph output. Ops (views included) and inputs only when ``with_ops``: they
        cost the group's size, the outputs only the edges leaving it (a 3000-op chain
        merges 3000 times)."""
        g, keeper, joiner = self.graph, p.keeper, p.joiner

        def inside(n):
            return n in keeper.ops or n in joiner.ops

        outs = {e.src for e in keeper.out + joiner.out if not inside(e.dst)}
        views = []
        # the members matter only to a contraction's tile (its one-to-one views)
        members = (keeper.ops | joiner.ops) if g.op(keeper.root).is_contraction else keeper.ops
        for src, o, chain in self.graph_outputs:
            if not inside(src):
                continue
            if not chain:
                outs.add(o)
            elif group_writes_view(g, keeper.root, members, list(chain)):
                outs.add(o)
                views.extend(chain)
        ops, inputs = [], []
        if with_ops:
            found = set(keeper.ops) | set(joiner.ops) | set(views)
            for n in list(found):
                op = g.op(n)
                if not op.is_view:
                    for k in range(len(op.inputs)):
                        found.update(ix.trace_operand(g, n, k)[1])
            ops = sorted(found, key=self.order.__getitem__)
            for n in ops:
                for i in g.op(n).inputs:
                    if i not in found and i not in inputs:
                        inputs.append(i)
        return SimpleDispatch(f"{keeper.root}+{joiner.root}", keeper.root, ops, inputs,
                              sorted(outs, key=self.order.__getitem__))

    def schedule_reason(self, p: Pairing) -> str:
        """Why the merged dispatch would have no legal schedule ('' when it has one): the
        structural check its kind's schedule space starts with (``compiler.schedule``'s
        ``check``; past it every space but attention's, which fusion forms only by
        ``absorb``, holds a fallback point legal on every arch). Issue 16: a dispatch
        whose outputs shared no iteration space used to be formed and fail in ``tune``."""
        kind = max(p.keeper.kind(self.graph), p.joiner.kind(self.graph))
        if kind == RootKind.CONTRACTION:
            # what an epilogue merge can change: the outputs (the GEMM's operands stay
            # its own, fusion never reaches them); a few index maps, no tables
            return contraction.check_outputs(self.graph,
                                             self.would_be_dispatch(p, with_ops=True))
        d = self.would_be_dispatch(p, with_ops=False)   # their checks read root, outputs
        name = "reduction" if kind == RootKind.REDUCTION else "elementwise"
        return CHECKS[name](self.graph, d) if d.outputs else ""

    # ------------------------------------------------------------------ the merge
    def try_merge(self, rule: str, prod: Group, cons: Group, *, sibling_links=None,
                  record_edges=None, other_uses_ok=False):
        """Merges ``prod`` into ``cons`` (or siblings) when legal; returns (ok, reason).

        Order: the edges must be projections, then each rule's ``condition``, then the
        pairing of the parallel spaces and each rule's ``space_condition``, then the
        cycle check, then the merged dispatch must have a legal schedule
        (:meth:`schedule_reason`); only then is the merge committed and recorded."""
        edges = self.between(prod, cons)
        sibling = sibling_links is not None
        if not sibling and not edges:
            return False, "no tensor flows between the two dispatches"
        if sibling and (edges or self.between(cons, prod)):
            return False, ("one reads the other's result: they are producer and consumer, "
                           "not siblings")
        attempt = Attempt(rule, prod, cons, edges, sibling, other_uses_ok)
        p = None
        for e in edges:
            if e.opaque:
                via = f" through {', '.join(e.views)}" if e.views else ""
                why = (f"{e.dst} reads {e.src}{via} with a map that is not a "
                       f"projection of its loops (a reshape that splits/merges "
                       f"dims, or a convolution window)")
                for rx in self.reindexers:
                    p = rx(self, attempt)
                    if p is not None:
                        break
                if p is None:
                    return False, why
                if isinstance(p, str):
                    return False, f"{why}; {p}"
                break
        for cond in self.conditions:
            reason = cond(self, attempt)
            if reason:
                return False, reason
        links = sibling_links if sibling else [(e.src, e.dst, e.links) for e in edges]
        if p is None:
            p = self.pair(attempt, links)
        if isinstance(p, str):
            return False, p
        for cond in self.space_conditions:
            reason = cond(self, attempt, p)
            if reason:
                return False, reason
        if self.creates_cycle(prod, cons):
            return False, ("fusing would create a cycle between dispatches (a path leaves "
                           "one and re-enters the other through a third dispatch)")
        why = self.schedule_reason(p)
        if why:
            return False, f"the merged dispatch would have no legal schedule: {why}"
        self._commit(p)
        space = "x".join(map(str, p.keeper.psizes)) or "1"
        head = (f"{'siblings' if sibling else 'chained roots' if attempt.chained else 'fused'}"
                f" over {p.keeper.root}'s parallel space ({space})")
        reason = "; ".join([head] + p.notes)
        for e in (record_edges if record_edges is not None else edges):
            pair = (e.src, e.dst) if isinstance(e, Edge) else e
            self.record(rule, pair[0], pair[1], True, reason)
        return True, reason

    def absorb(self, keep: Group, other: Group) -> None:
        """``other``'s ops join ``keep`` without pairing the spaces: for a rule that proved
        the merge legal by its own condition (the attention rule); the members keep no
        parallel loop of ``keep``'s space (their loops become the kernel's own)."""
        self._commit(Pairing(keep, other, {}, True, [], 0))

    def _commit(self, p: Pairing) -> None:
        """The joiner's members join the keeper, re-expressed over its parallel space. When
        the pairing is the identity and the joiner is the larger side, the joiner's
        containers are kept (relabelled as the keeper)
        so a long chain costs per merge the size of the small side only."""
        keeper, joiner = p.keeper, p.joiner
        o_id, o_key = joiner.id, (self.order[joiner.root], joiner.id)
        inv = [p.keeper_partners.get(kr) if isinstance(p.keeper_partners.get(kr), int) else None
               for kr in range(len(keeper.psizes))]
        identity = (len(joiner.psizes) == len(keeper.psizes)
                    and inv == list(range(len(keeper.psizes))))
        out = sorted(keeper.out + joiner.out, key=lambda e: e.idx)
        n_roots, n_other = keeper.n_roots + joiner.n_roots, keeper.n_other + joiner.n_other
        n_heavy = keeper.n_heavy + joiner.n_heavy
        if identity and len(joiner.ops) > len(keeper.ops) and isinstance(self.owner, _Owners):
            keep, small = joiner, keeper
            keep.pmap.update(keeper.pmap)
            keep.ops |= keeper.ops
            keep.id, keep.root, keep.psizes = keeper.id, keeper.root, keeper.psizes
        else:
            keep, small = keeper, joiner
            for o in joiner.ops:
                pm = joiner.pmap[o]
                keeper.pmap[o] = tuple(pm[i] if i is not None else None for i in inv)
            keeper.ops |= joiner.ops
        keep.out = [e for e in out if e.dst not in keep.ops]
        keep.n_roots, keep.n_other, keep.n_heavy = n_roots, n_other, n_heavy
        del self.groups[o_id]
        self.groups[keeper.id] = keep
        for o in small.ops:
            self.owner[o] = keeper.id
        i = bisect.bisect_left(self._sorted, o_key)
        if i < len(self._sorted) and self._sorted[i] == o_key:
            del self._sorted[i]
        if self._dg is not None:
            dg = self._dg
            for u in list(dg.predecessors(o_id)):
                if u != keeper.id:
                    dg.add_edge(u, keeper.id)
            for v in list(dg.successors(o_id)):
                if v != keeper.id:
                    dg.add_edge(keeper.id, v)
            dg.remove_node(o_id)
