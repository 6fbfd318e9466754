"""Turning IR names into valid, unique C identifiers and file names.

IR names come from graph nodes and users ("my-kernel.0", "float", "x"), so they can be
anything. HIP needs identifiers that are not keywords, not HIP built-ins (``threadIdx``,
``warpSize``, ``float4``, ``expf`` ...) and not reserved (leading ``__`` or ``_X``).
A ``Namer`` hands out names inside one scope and never gives the same one twice.
"""
from __future__ import annotations

import re

#: C++ keywords and alternative tokens (C++20), plus C's.
CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not
not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
restrict return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void
volatile wchar_t while xor xor_eq _Bool _Complex _Imaginary main
""".split())

#: names the emitted code or the HIP/CUDA headers define; a user name must not shadow them.
HIP_RESERVED = frozenset("""
threadIdx blockIdx blockDim gridDim warpSize dim3 size_t ptrdiff_t int8_t int16_t int32_t
int64_t uint8_t uint16_t uint32_t uint64_t half float2 float3 float4 int2 int3 int4 uint2
uint4 make_float2 make_float4 make_int2 make_int4 expf logf sqrtf rsqrtf tanhf erff fmaf
fmaxf fminf fabsf powf exp log sqrt tanh erf fma fmax fmin fabs pow min max abs printf
malloc free memcpy memset assert hipLaunchKernelGGL hipMalloc hipFree hipMemcpy
__syncthreads __shfl_xor __shfl_down __half __half2 NULL std errno stdin stdout stderr
wf_half4 EOF FILE
""".split())

_RESERVED = CXX_KEYWORDS | HIP_RESERVED
_BAD = re.compile(r"[^A-Za-z0-9_]+")


def c_identifier(name: str) -> str:
    """A valid, non-reserved C identifier close to ``name`` (not yet unique)."""
    s = _BAD.sub("_", str(name)).strip("_")
    s = re.sub(r"__+", "_", s)
    if not s:
        s = "v"
    if s[0].isdigit():
        s = "n" + s
    if s in _RESERVED:
        s = s + "_"
    return s


class Namer:
    """Allocates unique identifiers in one scope; ``taken`` seeds names already in use."""

    def __init__(self, taken=()):
        self._used = {t.lower() for t in taken}  # lower-case: file names on macOS/Windows

    def fresh(self, name: str) -> str:
        base = c_identifier(name)
        cand, k = base, 2
        while cand.lower() in self._used or cand in _RESERVED:
            cand = f"{base}{k}" if base.endswith("_") else f"{base}_{k}"
            k += 1
        self._used.add(cand.lower())
        return cand
