"""What every lowering shares: a dispatch's kernel arguments and its shape facts.

A dispatch (see ``compiler.fusion.plan``) is read through four attributes only: ``name``,
``root``, ``ops`` (node names in topological order), ``inputs`` (tensors read from global
memory) and ``outputs`` (tensors written to global memory). Its kernel takes one global
buffer per input (in that tensor's own layout: strides decide coalescing) followed by one
per output (row-major), named after the tensors so a harness can bind them by name.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from gpusim import program

from compiler.ir.graph import REDUCE, Graph, GraphError


class LoweringError(GraphError):
    """A schedule that cannot be lowered for this dispatch (the message says why)."""


def sanitize(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s if s and not s[0].isdigit() else f"k_{s}"


#: the kernel buffer dtype of each graph dtype. Simplification: a bool tensor is stored as
#: one i32 (0/1) per element in kernel memory, as gpusim has no byte-sized buffers; the
#: graph still counts it as 1 byte (what a real kernel would move).
BUFFER_DTYPE = {"f32": "f32", "f16": "f16", "bf16": "bf16", "i32": "i32", "bool": "i32"}
#: numpy dtype of a buffer's memory image
_IMAGE_DTYPE = {"f16": np.float16, "f32": np.float32, "bf16": np.float32, "i32": np.int32,
                "i8": np.int8, "u8": np.uint8}


def buffer_dtype(graph: Graph, tensor: str) -> str:
    """The kernel buffer dtype of a tensor: i8/u8 for an int8/uint8 tensor (an i32 graph
    value stored one byte per element, ``Graph.set_byte_storage``), else ``BUFFER_DTYPE``
    of its graph dtype."""
    return graph.byte_storage(tensor) or BUFFER_DTYPE[graph.op(tensor).type.dtype]


def buffers(graph: Graph, dispatch) -> tuple:
    """Kernel arguments: inputs in their layouts, then outputs row-major."""
    params = []
    for t in dispatch.inputs:
        op = graph.op(t)
        ty = op.type
        if op.kind == "constant" and ty.size == 1 and not any(
                graph.op(n).is_contraction and t in graph.op(n).inputs for n in dispatch.ops):
            continue  # inlined as an immediate by the ValueEmitter (GEMM operands are not)
        params.append(program.Buffer(t, buffer_dtype(graph, t), ty.shape, "in", ty.strides))
    for t in dispatch.outputs:
        ty = graph.op(t).type
        params.append(program.Buffer(t, buffer_dtype(graph, t), ty.shape, "out", None))
    return tuple(params)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def dispatch_kind(graph: Graph, dispatch) -> str:
    """attention (two matmuls and a softmax: the attention rule), contraction (a matmul/conv
    root), reduction, or elementwise (incl. pure copies)."""
    kinds = {graph.op(n).kind for n in dispatch.ops}
    if sum(graph.op(n).kind == "matmul" for n in dispatch.ops) >= 2 and "reduce_max" in kinds:
        return "attention"
    if kinds & {"matmul", "conv2d"}:
        return "contraction"
    if kinds & set(REDUCE):
        return "reduction"
    return "elementwise"


def memory_image(graph: Graph, tensor: str, value) -> np.ndarray:
    """The bytes a kernel buffer holds for a logical tensor value: the array permuted into
    the tensor's memory order (a row-major tensor is unchanged). gpusim and the exported
    harness both take buffers as flat memory, not as logical arrays."""
    t = graph.op(tensor).type
    arr = np.asarray(value).astype(_IMAGE_DTYPE[buffer_dtype(graph, tensor)], copy=False)
    return np.ascontiguousarray(np.transpose(arr, t.order)) if not t.is_row_major else \
        np.ascontiguousarray(arr)


def rewrite_blocks(body, run) -> tuple:
    """``body`` with ``run`` (a list of statements -> the rewritten list) applied to every
    straight-line block: the body's own statements and, recursively, each loop's body and
    each branch's arms (the IR passes that say what hipcc does within a basic block)."""
    out = []
    for s in run(list(body)):
        if isinstance(s, program.For):
            s = dataclasses.replace(s, body=rewrite_blocks(s.body, run))
        elif isinstance(s, program.If):
            s = dataclasses.replace(s, then=rewrite_blocks(s.then, run),
                                    orelse=rewrite_blocks(s.orelse, run))
        out.append(s)
    return tuple(out)


def split_at_last_load(stmts):
    """(prefix up to the last global Load, the rest): a block's loads, to issue them all
    before any use (one memory latency for many loads, as hipcc schedules them)."""
    last = max((i for i, x in enumerate(stmts) if isinstance(x, program.Load)), default=-1)
    return stmts[:last + 1], stmts[last + 1:]


def defined_registers(stmts):
    """Registers a block of statements writes (to zero them when the block is guarded)."""
    out = []
    for x in program.walk(stmts):
        if isinstance(x, program.Assign):
            out.append(x.dst)
        elif isinstance(x, (program.Load, program.LdsLoad)):
            out.extend(x.dsts)
    return out


def tail_share(arrivals: float, grid: float, cus: int | None) -> float:
    """The share of a last-arrival tail (split-K's and stream-K's fix-up, flash-decoding's
    combine) an analytic estimate charges each run of the code before it
    (``program.If.then_share``): one in ``arrivals`` runs takes it, but each CU with work
    runs at least one, and the CU that does is the one the kernel waits for (the tails
    come last): with one workgroup per CU the whole tail is on the timed path."""
    per_cu = max(1.0, grid / cus) if cus else 1.0
    return min(1.0, max(1.0 / max(arrivals, 1.0), 1.0 / per_cu))
