"""Comparing computed values with a reference, NaN- and Inf-aware.

Weights or inputs holding NaN or Inf are legitimate (an ONNX model may carry them), and
the same NaN must not count as a mismatch: a value matches when both are NaN, when both
are the same infinity, or when both are finite and |ours - theirs| <= tol * (1 + |theirs|)
(+ a per-element ``allowance``: verify adds the rounding-error scale of compiler.ir.errorbound
for deep graphs, whose long contractions outgrow any constant).
Every comparison of simulated or fused results with numpy (tune's check of the chosen
kernels, verify, export's refusal) goes through ``compare`` so they agree on this rule.
"""
from __future__ import annotations

import numpy as np

#: The one tolerance table: what a comparison checks -> dtype -> tol (relative, see above).
#: "plan": the fused plan run by numpy against the unfused reference (the same float ops
#: regrouped: only summation order differs). "simulated": a simulated kernel against the
#: reference (the kernel also reorders reductions across lanes and uses the engine's
#: transcendental functions, so it gets 10x the plan's slack in f32 and 2x in f16).
TOLERANCE = {"plan": {"f32": 1e-4, "f16": 1e-2, "bf16": 8e-2, "i32": 0.0, "bool": 0.0},
             "simulated": {"f32": 1e-3, "f16": 2e-2, "bf16": 1.6e-1, "i32": 0.0, "i8": 0.0,
                           "u8": 0.0}}  # i8/u8: byte buffers of i32 tensors
# integers/bools: exact; bf16 (u = 2^-8, 8x f16's) scales f16's figures by 8


def tolerance(check: str, dtype: str) -> float:
    return TOLERANCE[check][dtype]


def compare(ours, theirs, tol: float, allowance=0.0) -> tuple[bool, float]:
    """(match, max abs error over the finite pairs; inf when the special values differ)."""
    a = np.asarray(ours, np.float64)
    b = np.asarray(theirs, np.float64)
    if a.size != b.size:
        return False, float("inf")
    a, b = a.reshape(-1), b.reshape(-1)
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore"):
        same_special = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    if not np.all(finite | same_special):
        return False, float("inf")
    err = np.abs(a[finite] - b[finite])
    max_err = float(err.max()) if err.size else 0.0
    extra = np.asarray(allowance, np.float64).reshape(-1)[finite] \
        if np.ndim(allowance) else float(allowance)
    return bool(np.all(err <= tol * (1.0 + np.abs(b[finite])) + extra)), max_err
