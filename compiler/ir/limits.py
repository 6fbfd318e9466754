"""Resource limits, checked before anything large is allocated.

A model's size is only known once its parameters (or its ONNX input shapes) are read, and
an absurd one (``layernorm:rows=1000000000000``) would otherwise end in a MemoryError deep
in a lowering table, or quietly take tens of GB. So every command that computes on a
model first estimates the memory it will hold and refuses, in one line giving both
numbers, when the estimate passes the limit: 8 GiB unless ``--max-memory SIZE`` (or the
``WAVEFUSE_MAX_MEMORY`` environment variable) says otherwise.

The estimate is a model of where wavefuse keeps tensors, not a measurement. For a
command that computes the whole reference (``verify``, ``tune --check-all``, ``run``):
- the numpy reference keeps every value of the graph (verify and the search compare each
  dispatch's outputs with it) in float64 work arrays as well as in its dtype, gpusim
  holds the buffers of the dispatch it runs and their memory images: 5 times the bytes
  of all tensors;
- the lowering builds offset tables of one int64 per element of a tensor it reads, plus a
  temporary of the same size: 16 bytes per element of the largest tensor.
Calibration (peak RSS of `/usr/bin/time -f %M wavefuse tune MODEL --budget 2 --json`,
minus 0.19 GB for the interpreter with numba, loaded machine, 2026-12-01):
softmax:rows=16384,cols=1024 took 1.44 GB (estimate 1.61 GB), layernorm at the same size
1.22 GB (estimate 2.28 GB); the estimate errs on the high side.

``tune`` without ``--check-all`` checks the rows a sample of workgroups wrote against a
reference computed for those rows only (``compiler.ir.partial``), and gpusim's memory is
touched only where a sampled workgroup reads or writes, except the checked output, which
is filled with a sentinel (4 bytes an element, f16 too, plus a 1-byte written mask and
numpy's temporaries). So its estimate is: the graph's inputs and constants (3 times: the
seeded inputs are drawn in float64), 6 bytes per element of the largest tensor, and the 16 bytes per
element of offset tables only when the graph has a reshape (the lowerings carry offset
tables in closed form, ``compiler.lower.affine``, except after a reshape strides cannot
express). Calibration (same method, 2026-12-01, loaded machine):
attention:heads=8,seq=4096,dim=64 --budget 8 peaked at 0.96 GB, 0.77 GB without the
interpreter (estimate 0.88 GB; the whole-reference estimate is 15.8 GB). SIMPLIFICATION: a sampled check that finds a mismatch is repeated against the
whole reference (to report the whole reference's verdict), which may need the whole
estimate above.
Built-in models' constant weights are checked against the same limit before they are
drawn (see ``compiler.ir.models``).
"""
from __future__ import annotations

import math
import os
import re

from compiler.ir.graph import GraphError

DEFAULT_MAX_MEMORY = 8 << 30
ENV_VAR = "WAVEFUSE_MAX_MEMORY"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40,
          "tb": 10**12, "tib": 1 << 40}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}


class ResourceError(GraphError):
    """A model too large for the memory limit, or a limit that cannot be read."""


def parse_size(text: str, what: str = "--max-memory") -> int:
    """``"16G"``, ``"512MiB"``, ``"2e9"`` or ``"1000000"`` -> bytes (K/M/G/T are binary)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text), re.I | re.A)
    if not m or m.group(2).lower() not in _UNITS:
        raise ResourceError(f"{what} {text!r}: expected a size such as 8G, 512M or 16GiB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 1 << 20:
        raise ResourceError(f"{what} {text!r}: give at least 1M")
    return int(value)


def max_memory(given: str | int | None = None) -> int:
    """The limit in bytes: ``given`` (the option), else the environment, else 8 GiB."""
    if isinstance(given, int):
        return given
    if given is not None:
        return parse_size(given)
    env = os.environ.get(ENV_VAR)
    if env:
        return parse_size(env, ENV_VAR)
    return DEFAULT_MAX_MEMORY


def human(nbytes: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} B"


def tensor_bytes(shape, dtype: str) -> int:
    return math.prod(int(s) for s in shape) * _ITEMSIZE.get(dtype, 4)


def working_set_bytes(graph, whole: bool = True) -> int:
    """The estimated peak memory of computing ``graph`` (see the module docstring):
    ``whole`` for the whole reference, else for ``tune``'s sampled check."""
    total, largest, leaves = 0, 0, 0
    for op in graph.ops:
        n = math.prod(int(s) for s in op.type.shape)
        nbytes = n * _ITEMSIZE.get(op.type.dtype, 4)
        total += nbytes
        largest = max(largest, n)
        if op.kind in ("input", "constant"):
            leaves += nbytes
    if whole:
        return 5 * total + 16 * largest
    tables = 16 * largest if any(op.kind == "reshape" for op in graph.ops) else 0
    return 3 * leaves + 6 * largest + tables


def check_allocation(nbytes: int, limit: int, what: str) -> None:
    """Raises ResourceError when ``nbytes`` for ``what`` passes ``limit``."""
    if nbytes > limit:
        raise ResourceError(f"{what} needs about {human(nbytes)}, over the memory limit of "
                            f"{human(limit)}; use smaller sizes or raise the limit with "
                            f"--max-memory (e.g. --max-memory {_suggest(nbytes)})")


def check_graph(graph, limit: int, name: str, whole: bool = True) -> None:
    """Refuses a model whose estimated working set passes ``limit``, before any allocation
    (``whole``: the command computes the whole reference, see ``working_set_bytes``)."""
    biggest = max(graph.ops, key=lambda op: math.prod(op.type.shape), default=None)
    shape = "x".join(str(s) for s in biggest.type.shape) if biggest is not None else "-"
    check_allocation(working_set_bytes(graph, whole), limit,
                     f"model {name} (largest tensor {biggest.name if biggest else '-'}: "
                     f"{shape})")


def _suggest(nbytes: int) -> str:
    gib = max(1, math.ceil(nbytes * 1.25 / (1 << 30)))
    return f"{gib}G"
