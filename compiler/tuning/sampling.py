"""Checking a kernel's values on a sample of its workgroups.

Simulating every workgroup functionally costs as much as the whole problem (a 4096-token
attention is 134 M score elements), while a wrong kernel is almost always wrong in every
tile, or at the edges of the grid where the guards are. So the search checks a fixed
sample: the first and last two workgroups (edge tiles), ``SPREAD`` evenly spaced ones and
``RANDOM`` seeded random ones, each run on its own CU by gpusim, and compares only the
output elements those workgroups wrote with the numpy reference for those rows only
(``compiler.ir.partial``: the reference's rows are pushed back through the graph, so the
score matrix of a 4096-token attention is never computed whole; the kernel's inputs are
given at the rows its sample reads, ``gpusim.Partial``). A kernel that reads an
intermediate tensor first runs its sample once on zero inputs to learn which rows it
writes. Of identical dispatches (identical layers: one fingerprint, one schedule, so one
program) only the first instance is run (``one_instance_per_kernel``).
``tune --check-all`` and ``verify --check-all`` run and compare every workgroup of every
dispatch against the whole reference instead.

Which elements were written is read from the outputs: every output buffer starts filled
with a sentinel (a NaN with a payload no arithmetic produces, or an unlikely integer),
and an element still holding its exact bit pattern was not written. SIMPLIFICATION: a
kernel that computes that exact bit pattern is taken as not having written the element.
A sample in which no workgroup writes anything falls back to the whole check. An output
over ``WHOLE_FILL_BYTES`` is filled (and read back) only over the elements the sampled
workgroups can store to, by the interval analysis of their store indices
(``gpusim.analysis.store_ranges``, a superset): filling a 512 MiB score tensor cost more
than simulating the sample that writes 1/1000 of it. The rest stays zero and unread.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpusim import Partial
from gpusim.analysis import store_ranges
from gpusim.program import DTYPE_BYTES

EDGE = 2
SPREAD = 12
RANDOM = 8
SENTINEL_F32 = np.array([0x7FE5A5A5], np.uint32).view(np.float32)[0]  # a NaN payload
SENTINEL_F16 = np.array([0x7E5A], np.uint16).view(np.float16)[0]      # a NaN payload
#: bf16 memory is float32 holding bf16 values: a NaN whose low 16 bits are zero, so a
#: bf16 buffer can hold it
SENTINEL_BF16 = np.array([0x7FDA0000], np.uint32).view(np.float32)[0]
SENTINEL_I32 = np.int32(-0x5A5A5A5B)
#: byte buffers (i8/u8) hold any of their 256 values: the sentinel is the byte 0xA5, and a
#: kernel that writes that very value leaves the element looking unwritten (SIMPLIFICATION:
#: such elements are not compared; the rest are, exactly)
SENTINEL_I8 = np.int32(-0x5B)
SENTINEL_U8 = np.int32(0xA5)
WHOLE_FILL_BYTES = 16 << 20  # smaller outputs are filled whole (cheaper than the analysis)


def sample_workgroups(grid: int, seed: int = 0) -> list[int]:
    """The checked workgroups: all of them when the grid is small."""
    if grid <= 2 * EDGE + SPREAD + RANDOM:
        return list(range(grid))
    chosen = set(range(EDGE)) | set(range(grid - EDGE, grid))
    chosen |= {int(x) for x in np.linspace(0, grid - 1, SPREAD).round()}
    rng = np.random.default_rng(seed)
    rest = [w for w in rng.choice(grid, size=min(grid, RANDOM * 2), replace=False)
            if int(w) not in chosen]
    chosen |= {int(w) for w in rest[:RANDOM]}
    return sorted(chosen)


#: how ``DispatchTune.check`` of a dispatch not run (the same kernel as an earlier one) opens
SHARED_PREFIX = "not run: the same kernel as"


def one_instance_per_kernel(kernels: list) -> dict:
    """{index: index of the first instance} for every dispatch whose kernel (its dispatch
    fingerprint and knobs; None: never shared) an earlier dispatch already runs.

    A fingerprint holds everything the lowering reads (weights by shape and dtype), so two
    dispatches with one fingerprint and one schedule run one program on different data: the
    12 identical layers of BERT-base are 12 runs of each layer kernel. A program that is
    wrong is wrong for any data that reaches its wrong path; the first instance gets the
    data of the shallowest layer, whose reference rows cost least to compute.
    SIMPLIFICATION: a bug that only data of a deeper layer reaches (an overflow, a NaN
    path) is found by ``--check-all`` only."""
    first: dict = {}
    out = {}
    for i, k in enumerate(kernels):
        if k is None:
            continue
        j = first.setdefault(k, i)
        if j != i:
            out[i] = j
    return out


def sentinel_like(dtype: str, shape) -> np.ndarray:
    """The sentinel as a flat read-only view of one value (no memory per element; gpusim
    copies it into its buffer)."""
    fill = {"f32": SENTINEL_F32, "f16": SENTINEL_F16, "bf16": SENTINEL_BF16,
            "i32": SENTINEL_I32, "i8": SENTINEL_I8, "u8": SENTINEL_U8}[dtype]
    return np.broadcast_to(np.array(fill), (int(np.prod(shape)),))


_BITS = {"f16": (np.float16, np.uint16, SENTINEL_F16), "i32": (np.int32, np.int32, SENTINEL_I32),
         "bf16": (np.float32, np.uint32, SENTINEL_BF16),
         "f32": (np.float32, np.uint32, SENTINEL_F32),
         "i8": (np.int32, np.int32, SENTINEL_I8), "u8": (np.int32, np.int32, SENTINEL_U8)}


def written(arr: np.ndarray, dtype: str) -> np.ndarray:
    """Mask of the elements that no longer hold the sentinel's exact bits."""
    kind, bits, fill = _BITS[dtype]
    a = np.ascontiguousarray(np.asarray(arr).astype(kind, copy=False))
    return a.view(bits) != np.array(fill, kind).view(bits)


class Fill(NamedTuple):
    """What a sampled run gets for its outputs: ``inputs`` (buffer name -> the sentinel
    whole, or a ``Partial`` of it) and ``ranges`` (buffer name -> merged (first, last)
    element ranges the sentinel covers, or None for the whole buffer)."""
    inputs: dict
    ranges: dict


def _merged(ranges) -> list:
    out: list = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def sentinel_outputs(kernel, wgs, wave_size: int) -> Fill:
    """The sentinel for every output buffer of ``kernel``, over the elements workgroups
    ``wgs`` can store to when the buffer is large and their store ranges are known."""
    outs = [b for b in kernel.buffers if b.intent == "out"]
    per_wg = None
    inputs, ranges = {}, {}
    for b in outs:
        found = None
        if b.size * DTYPE_BYTES[b.dtype] > WHOLE_FILL_BYTES:
            if per_wg is None:
                per_wg = [store_ranges(kernel, wave_size, int(w)) for w in wgs]
            rs = [r[b.name] for r in per_wg if b.name in r]
            if rs and all(r is not None and 0 <= r[0] <= r[1] < b.size for r in rs):
                found = _merged(rs)
        ranges[b.name] = found
        if found is None:
            inputs[b.name] = sentinel_like(b.dtype, b.shape)
            continue
        index = np.concatenate([np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in found])
        inputs[b.name] = Partial(index, sentinel_like(b.dtype, (index.size,)))
    return Fill(inputs, ranges)


def written_offsets(arr, dtype: str, ranges) -> np.ndarray:
    """Flat offsets of the elements of ``arr`` no longer holding the sentinel, looked for
    in ``ranges`` only (None: everywhere)."""
    flat = np.asarray(arr).reshape(-1)
    if ranges is None:
        return np.flatnonzero(written(flat, dtype))
    parts = [lo + np.flatnonzero(written(flat[lo:hi + 1], dtype)) for lo, hi in ranges]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
