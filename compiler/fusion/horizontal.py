"""Horizontal fusion of sibling contractions: one wider GEMM for GEMMs that share an input.

The Q, K and V projections of a transformer layer, or the gate and up projections of a
SwiGLU MLP, are matmuls that read the same activation ``A`` with different constant
weights. No producer-consumer rule joins them (neither reads the other), so they stay
separate dispatches that each stream ``A`` and each launch. This rule concatenates their
weights along N into one constant and computes ``A @ [W_1 | W_2 | ...]`` once; each
original result becomes a ``slice`` view of the wide result (keeping its name), so its
consumers read it through an index map, as they read a head reshape. When every sibling
adds a constant bias over its columns (and nothing else reads the bare product), the
biases are concatenated too and the add stays the wide GEMM's epilogue. This is the QKV
concatenation of TensorRT and TorchInductor and IREE's horizontal contraction fusion,
done as a graph rewrite so that the existing contraction lowering runs it unchanged: one
launch, ``A`` read once, a GEMM with N summed (more workgroups for a skinny GEMM).

Condition (``condition``): at least two matmuls read the same tensor as their left
operand directly, each right operand a rank-2 constant with the same K and dtype; the
concatenated N stays within ``MAX_N`` columns. Limits: weights that are graph inputs (not
constants) are left alone (concatenating them would be a copy each run); batched right
operands and convolutions are not grouped. The rewrite applies in aggressive mode only,
and the search scores the plan with it against the same plan without it (``tune``'s
``separate-contractions`` mode): a wider GEMM is not always faster than its parts.
"""
from __future__ import annotations

import numpy as np

from compiler.ir.graph import Graph
from compiler.fusion.plan import Decision

NAME = "horizontal"

#: the widest concatenated N the rule forms (a SwiGLU's gate+up at 2 x 11008 fits)
MAX_N = 32768


def condition(graph: Graph, members: list) -> str | None:
    """Why the matmuls ``members`` (sharing their left operand) cannot be one GEMM, or
    None when they can."""
    if len(members) < 2:
        return "a single contraction reads it"
    ws = [graph.op(graph.op(m).inputs[1]) for m in members]
    for m, w in zip(members, ws):
        if w.kind != "constant":
            return f"{m}'s weight {w.name} is not a constant (concatenating it costs a copy)"
        if w.type.rank != 2:
            return f"{m}'s weight {w.name} has rank {w.type.rank}, not 2"
    if len({w.type.shape[0] for w in ws}) != 1 or len({w.type.dtype for w in ws}) != 1:
        return "the weights differ in K or dtype"
    n = sum(w.type.shape[1] for w in ws)
    if n > MAX_N:
        return f"concatenated N {n} exceeds {MAX_N}"
    return None


def _bias_of(graph: Graph, m: str):
    """The constant bias add that is ``m``'s only user (a per-column vector), or None."""
    users = graph.users(m)
    if len(users) != 1 or m in graph.outputs:
        return None
    add = graph.op(users[0])
    if add.kind != "add" or m not in add.inputs or add.inputs[0] == add.inputs[1]:
        return None
    b = graph.op(add.inputs[1] if add.inputs[0] == m else add.inputs[0])
    n = graph.op(m).type.shape[-1]
    if b.kind != "constant" or b.type.size != n or b.type.shape[-1] != n or \
            add.type.shape != graph.op(m).type.shape:
        return None
    return add.name, b


def groups(graph: Graph) -> tuple[list, list]:
    """(groups of sibling matmul names that may be one GEMM, decisions refusing others)."""
    found, refused = [], []
    for t in graph.topo_order():
        mats = [u for u in graph.users(t) if graph.op(u).kind == "matmul"
                and graph.op(u).inputs[0] == t and graph.op(u).inputs[1] != t]
        if len(mats) < 2:
            continue
        why = condition(graph, mats)
        if why is None:
            found.append(mats)
        else:
            refused.append(Decision(NAME, t, ", ".join(mats), False,
                                    f"siblings reading {t}: {why}"))
    return found, refused


def rewrite(graph: Graph) -> tuple[Graph, list]:
    """The graph with each group of sibling matmuls replaced by one wide GEMM and slice
    views carrying the original names, and the decisions (one per group). The graph is
    returned unchanged (the same object) when no group qualifies."""
    found, decisions = groups(graph)
    if not found:
        return graph, decisions
    new = Graph(graph.name)
    new.meta = dict(graph.meta)
    new.byte_tensors = dict(graph.byte_tensors)  # names kept; the replaced ones unused
    replaced = {}   # original op -> the group it belongs to
    for mats in found:
        for m in mats:
            replaced[m] = mats
    done, skip = set(), set()
    plans = {}
    for mats in found:
        biases = [_bias_of(graph, m) for m in mats]
        with_bias = all(b is not None for b in biases)
        plans[tuple(mats)] = (biases, with_bias)
        gone = set(mats) | ({b[0] for b in biases} if with_bias else set())
        skip |= gone - set(mats)
        leaves = [graph.op(m).inputs[1] for m in mats] + \
            ([b[1].name for b in biases] if with_bias else [])
        # the separate weights (and biases) go when nothing else reads them
        skip |= {w for w in leaves if set(graph.users(w)) <= gone and w not in graph.outputs}
    for name in graph.topo_order():
        if name in skip:
            continue
        op = graph.op(name)
        mats = replaced.get(name)
        if mats is None:
            new.add_op(op.kind, op.inputs, op.attrs, op.type, name=name)
            continue
        key = tuple(mats)
        if key in done:
            continue
        done.add(key)
        biases, with_bias = plans[key]
        ws = [graph.op(graph.op(m).inputs[1]) for m in mats]
        widths = [w.type.shape[1] for w in ws]
        a = graph.op(mats[0]).inputs[0]
        wide_w = new.constant(np.concatenate([w.attrs["value"] for w in ws], axis=1),
                              name=new._fresh(f"{mats[0]}_hcat_w"), dtype=ws[0].type.dtype)
        stored = {graph.byte_storage(graph.op(m).inputs[1]) for m in mats}
        if len(stored) == 1 and None not in stored:  # int8 weights stay bytes
            new.set_byte_storage(wide_w.name, stored.pop())
        wide = new.matmul(a, wide_w, name=new._fresh(f"{mats[0]}_hcat"))
        if with_bias:
            bvals = [b.attrs["value"].reshape(-1) for _, b in biases]
            wide_b = new.constant(np.concatenate(bvals), name=new._fresh(f"{mats[0]}_hcat_b"),
                                  dtype=biases[0][1].type.dtype)
            wide = new.add(wide, wide_b, name=new._fresh(f"{mats[0]}_hcat_bias"))
        shape = new.op(wide.name).type.shape
        lo = 0
        for m, n, b in zip(mats, widths, biases):
            target = b[0] if with_bias else m
            new.slice(wide, (0,) * (len(shape) - 1) + (lo,), (1,) * len(shape),
                      shape[:-1] + (n,), name=target)
            lo += n
        decisions.append(Decision(
            NAME, a, ", ".join(mats), True,
            f"{len(mats)} matmuls read {a}: one GEMM with N = {' + '.join(map(str, widths))} "
            f"= {sum(widths)} (weights concatenated{', biases too' if with_bias else ''}); "
            f"each result is a slice view of it"))
    new.output(*graph.outputs)
    return new, decisions
