"""The reference's error function as a numba ufunc (``compiler.ir.ops.erf``): libm's double
``erf`` per element, as ``math.erf`` gives it, without a Python call per element."""
from __future__ import annotations

import math

import numba


@numba.vectorize(["float64(float64)"], cache=True)
def erf64(x):
    return math.erf(x)
