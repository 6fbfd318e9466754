"""Indexing maps of primitive ops: the facts every fusion rule compares (not a rule itself).

Each compute op gets an iteration *domain*, like a linalg.generic: one loop per dimension,
parallel or reduction. Each operand and the result are read or written through a map from
tensor dimensions to domain loops, like linalg's projected-permutation indexing maps:

- elementwise: domain = result shape; operands broadcast numpy-style (a size-1 or missing
  operand dimension is a broadcast, i.e. no loop indexes it);
- reduce_*: domain = operand shape, the reduced axes are reduction loops;
- matmul: domain = batch..., M, N (parallel), K (reduction);
- conv2d: domain = output dims (parallel), C/groups, kH, kW (reduction). Its data operand
  is read through a window, which is not a projection; only the batch loop is mapped.

- gather / pad / concat (injective): domain = result shape, all parallel; an operand
  dimension that the op copies unshifted is mapped to its loop, the gathered, padded or
  concatenated dimension is OPAQUE (its element is chosen, not projected), and gather's
  indices are read through the loops of the dimensions they produce.

Views (transpose, reshape, broadcast, slice) are maps between tensor dimensions, so a chain of
views between a producer and a consumer composes into one correspondence between the
producer's and the consumer's loops. A reshape that splits or merges dimensions has no
such correspondence: those dimensions are marked OPAQUE, and fusion across them is refused.

Size-1 dimensions carry no iteration, so they are never mapped: a keepdims reduction
result (rows, 1) and a broadcast operand (rows, 1) line up on the rows loop only.
"""
from __future__ import annotations

import math

from compiler.ir.graph import Graph, Op, is_compute  # noqa: F401  (is_compute: ix.is_compute)

OPAQUE = "opaque"


def domain(op: Op, graph: Graph) -> list[tuple[int, str]]:
    """The loops of ``op``: (extent, "parallel" | "reduction") per loop."""
    if op.is_elementwise or op.is_injective:
        return [(s, "parallel") for s in op.type.shape]
    if op.is_reduction:
        shape = graph.op(op.inputs[0]).type.shape
        axes = op.attrs["axes"]
        return [(s, "reduction" if i in axes else "parallel") for i, s in enumerate(shape)]
    if op.kind == "matmul":
        k = graph.op(op.inputs[0]).type.shape[-1]
        return [(s, "parallel") for s in op.type.shape] + [(k, "reduction")]
    if op.kind == "conv2d":
        w = graph.op(op.inputs[1]).type.shape
        fmt = op.attrs.get("data_format", "NCHW")
        red = (w[1], w[2], w[3]) if fmt == "NCHW" else (w[3], w[1], w[2])
        return [(s, "parallel") for s in op.type.shape] + [(s, "reduction") for s in red]
    raise ValueError(f"op {op.name!r} ({op.kind}) has no iteration domain")


def parallel_loops(op: Op, graph: Graph) -> list[int]:
    """Domain loops that are parallel and longer than one iteration."""
    return [i for i, (s, kind) in enumerate(domain(op, graph)) if kind == "parallel" and s > 1]


def result_map(op: Op, graph: Graph) -> list:
    """Per result dimension: the domain loop that writes it (None for size-1 dims)."""
    shape = op.type.shape
    if op.is_reduction:
        axes = op.attrs["axes"]
        in_rank = graph.op(op.inputs[0]).type.rank
        kept = [i for i in range(in_rank) if i not in axes]
        if op.attrs["keepdims"]:
            loops = list(range(in_rank))
        else:
            loops = kept if kept else [None]
        return [None if (l is None or s == 1 or (l in axes)) else l
                for l, s in zip(loops, shape)]
    return [i if s > 1 else None for i, s in enumerate(shape)]


def operand_map(op: Op, k: int, graph: Graph) -> list:
    """Per dimension of operand ``k``: the domain loop that indexes it, or None."""
    shape = graph.op(op.inputs[k]).type.shape
    if op.is_elementwise:
        out = op.type.shape
        off = len(out) - len(shape)
        return [i + off if s > 1 and s == out[i + off] else None for i, s in enumerate(shape)]
    if op.is_reduction:
        return [i if s > 1 else None for i, s in enumerate(shape)]
    if op.is_injective:
        return _injective_operand_map(op, k, shape)
    if op.kind == "matmul":
        out = op.type.shape
        nb = len(out) - 2
        kloop = len(out)
        rank = len(shape)
        res = []
        for i, s in enumerate(shape[:-2]):
            j = nb - (rank - 2) + i
            res.append(j if s > 1 and s == out[j] else None)
        if k == 0:
            tail = [nb, kloop]
        else:
            tail = [kloop, nb + 1]
        res += [t if s > 1 else None for t, s in zip(tail, shape[-2:])]
        return res
    if op.kind == "conv2d":
        fmt = op.attrs.get("data_format", "NCHW")
        if k == 0:
            # window reads: only the batch dimension is a projection of the loops
            return [0 if shape[0] > 1 else None] + [OPAQUE if s > 1 else None
                                                    for s in shape[1:]]
        cdim = 1 if fmt == "NCHW" else 3
        return [cdim if shape[0] > 1 else None] + [OPAQUE if s > 1 else None
                                                   for s in shape[1:]]
    raise ValueError(f"op {op.name!r} ({op.kind}) has no operand maps")


def _injective_operand_map(op: Op, k: int, shape: tuple) -> list:
    out = op.type.shape
    if op.kind == "pad":
        return [None if s == 1 else d if op.attrs["pads"][d] == (0, 0) else OPAQUE
                for d, s in enumerate(shape)]
    if op.kind == "concat":
        axis = op.attrs["axis"]
        return [None if s == 1 else OPAQUE if d == axis else d for d, s in enumerate(shape)]
    axis = op.attrs["axis"]  # gather
    if k == 1:
        return [axis + j if s > 1 else None for j, s in enumerate(shape)]
    extra = len(out) - len(shape)  # the indices' rank minus one
    return [None if s == 1 else OPAQUE if d == axis else d if d < axis else d + extra
            for d, s in enumerate(shape)]


def view_map(view: Op, graph: Graph) -> list:
    """Per output dimension of a view: the input dimension it is (None: broadcast/size 1;
    OPAQUE: a split or merged dimension of a reshape)."""
    src = graph.op(view.inputs[0]).type.shape
    out = view.type.shape
    if view.kind == "transpose":
        return [p if out[i] > 1 else None for i, p in enumerate(view.attrs["perm"])]
    if view.kind == "broadcast":
        off = len(out) - len(src)
        return [i - off if i >= off and src[i - off] == s and s > 1 else None
                for i, s in enumerate(out)]
    if view.kind == "slice":
        # a dimension read whole and in order is the same dimension; a window is not a
        # projection of the consumer's loop (it is shifted or strided)
        return [None if s == 1 else i if (start, step, s) == (0, 1, src[i]) else OPAQUE
                for i, (start, step, s) in enumerate(zip(view.attrs["starts"],
                                                    view.attrs["steps"], out))]
    if view.kind == "reshape":
        # Same extent and same number of elements before it in row-major order means
        # same stride, hence the same dimension.
        starts = {}
        for i, s in enumerate(src):
            if s > 1:
                starts[(math.prod(src[:i]), s)] = i
        res = []
        for j, s in enumerate(out):
            if s == 1:
                res.append(None)
            else:
                res.append(starts.get((math.prod(out[:j]), s), OPAQUE))
        return res
    raise ValueError(f"op {view.name!r} is not a view")


def trace_operand(graph: Graph, consumer: str, k: int):
    """Follows operand ``k`` of ``consumer`` back through views to the tensor it reads.

    Returns (source, views, links, opaque): the non-view op (or input/constant) whose
    tensor is read, the view ops crossed (consumer side first), {source tensor dim:
    consumer loop} and whether some dimension went through a non-projected map."""
    op = graph.op(consumer)
    cur = {}
    opaque = False
    for j, loop in enumerate(operand_map(op, k, graph)):
        if loop == OPAQUE:
            opaque = True
        elif loop is not None:
            cur[j] = loop
    name = op.inputs[k]
    views = []
    while graph.op(name).is_view:
        v = graph.op(name)
        views.append(name)
        vm = view_map(v, graph)
        nxt = {}
        for j, loop in cur.items():
            i = vm[j]
            if i == OPAQUE:
                opaque = True
            elif i is not None:
                nxt[i] = loop
        cur = nxt
        name = v.inputs[0]
    shape = graph.op(name).type.shape
    if any(s > 1 and d not in cur for d, s in enumerate(shape)):
        opaque = True
    return name, views, cur, opaque


def loop_links(graph: Graph, producer: str, tensor_links: dict) -> dict:
    """{producer loop: consumer loop} from {producer result dim: consumer loop}."""
    rm = result_map(graph.op(producer), graph)
    return {rm[d]: loop for d, loop in tensor_links.items() if rm[d] is not None}
