"""Hardware descriptions, one frozen ``Arch`` per GPU, selected by name (``--arch gfx942``).

The simulator loop lives in ``gpusim.engine``; this package only holds numbers and where
they come from (see each ``Arch.sources``).
"""
from gpusim.errors import KernelError
from gpusim.hw.arch import Arch
from gpusim.hw.gfx90a import GFX90A
from gpusim.hw.gfx942 import GFX942
from gpusim.hw.gfx1100 import GFX1100

#: the architecture every command and function uses when none is named (MI300X).
DEFAULT_ARCH = "gfx942"
#: every known architecture by its LLVM target name.
ARCHES = {a.name: a for a in (GFX90A, GFX942, GFX1100)}
#: friendly aliases for the product names.
ALIASES = {"mi250x": "gfx90a", "mi300x": "gfx942", "gfx940": "gfx942",
           "rx7900xtx": "gfx1100"}


def get_arch(name) -> Arch:
    """The ``Arch`` called ``name`` (an ``Arch`` passes through unchanged)."""
    if isinstance(name, Arch):
        return name
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key not in ARCHES:
        raise KernelError(f"unknown arch {name!r}; known arches: {', '.join(sorted(ARCHES))}")
    return ARCHES[key]


__all__ = ["Arch", "ARCHES", "DEFAULT_ARCH", "get_arch", "GFX90A", "GFX942", "GFX1100"]
