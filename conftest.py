"""Test-wide settings: gpusim's JIT runs with Numba's bounds checks on (issue 4), so an
out-of-range index inside the interpreter fails loudly instead of reading garbage. Set
NUMBA_BOUNDSCHECK=0 in the environment to time the suite without them."""
import os

os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
