"""gpusim: an educational, cycle-approximate AMD GPU simulator and the kernel IR it runs.

Public API:
  simulate(kernel, arch="gfx942", inputs=None, scalars=None, *, functional=True,
           trace=False, jit=True, workgroups=None) -> SimResult
  Partial(index, values): an input buffer given at some elements only
  access_pattern(kernel, arch, inst_index, inputs=None, block=0, wave=0) -> dict
  validate(kernel, arch) ; estimate_vgprs(kernel, arch) ; occupancy(kernel, arch)
  hw.get_arch(name), hw.ARCHES ; KernelError
"""
from gpusim.errors import KernelError
from gpusim import hw
from gpusim.hw import ARCHES, get_arch
from gpusim.validate import validate
from gpusim.occupancy import estimate_vgprs, occupancy, Occupancy
from gpusim.sim import Partial, SimResult, simulate
from gpusim.patterns import access_pattern

__all__ = ["KernelError", "hw", "ARCHES", "get_arch", "validate", "estimate_vgprs",
           "occupancy", "Occupancy", "Partial", "SimResult", "simulate", "access_pattern"]
