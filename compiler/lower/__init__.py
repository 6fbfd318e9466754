"""Lowering: (dispatch, schedule) -> gpusim.program.Kernel, and the schedule spaces.

One lowering per dispatch kind: attention (QK^T, softmax and PV in one kernel, online
softmax: ``attention.py``), contractions (matmul, conv as implicit GEMM, with their
fused epilogue), row reductions (softmax/norms with fused producers and consumers, or the
generic serial fallback) and elementwise/injective dispatches (including pure copies
such as a materialised transpose), naive or, for permutes, through an LDS tile. The
schedule spaces and the knobs of each kind are in ``compiler.schedule`` (which imports
this package, never the other way round).
"""
from __future__ import annotations

from gpusim.hw import DEFAULT_ARCH, Arch, get_arch

from compiler.lower.attention import lower_attention
from compiler.lower.common import LoweringError, dispatch_kind
from compiler.lower.contraction import lower_contraction
from compiler.lower.direct_conv import lower_direct_conv
from compiler.lower.elementwise import lower_elementwise
from compiler.lower.reduction import lower_generic, lower_rows
from compiler.lower.transpose import lower_transpose


def lower(graph, dispatch, schedule: dict, arch: Arch | str = DEFAULT_ARCH):
    """The kernel of one dispatch under one schedule. ``arch`` may be a name here (the
    Python API's entry point, resolved once); every kind's lowering takes the ``Arch``."""
    arch = get_arch(arch)
    kind = dispatch_kind(graph, dispatch)
    for n in dispatch.ops:  # simplification: integer reductions lower in reduction kernels
        op = graph.op(n)
        if op.type.dtype in ("i32", "bool") and (
                op.kind == "pow" or op.is_reduction and kind != "reduction"):
            raise LoweringError(f"node {n!r}: {op.kind} on {op.type.dtype} values is not "
                                f"lowered here (integer reductions lower in reduction "
                                f"dispatches, integer powers nowhere); cast to float first")
    if kind == "attention":
        return lower_attention(graph, dispatch, schedule, arch)
    if kind == "contraction":
        if schedule.get("lowering") == "direct":
            return lower_direct_conv(graph, dispatch, schedule, arch)
        return lower_contraction(graph, dispatch, schedule, arch)
    if kind == "reduction":
        if schedule.get("lowering") == "generic":
            return lower_generic(graph, dispatch, schedule, arch)
        return lower_rows(graph, dispatch, schedule, arch)
    if schedule.get("transpose", "none") == "lds":
        return lower_transpose(graph, dispatch, schedule, arch)
    return lower_elementwise(graph, dispatch, schedule, arch)


__all__ = ["lower", "LoweringError", "dispatch_kind"]
