"""What the simulator assumed about a kernel, as plain data (the ``<kernel>.sim.json`` sidecar).

``check_dir`` compares the compiler's ISA against these facts, so an exported directory can
be checked later without the compiler package or the IR: the vector width of every global
and LDS access, the LDS bytes, the estimated VGPRs and the occupancy they give.

VGPR-limited occupancy (waves per SIMD) follows LLVM's AMDGPUBaseInfo.cpp (HARDWARE.md S9):
min(max waves, VGPRs per SIMD lane / roundup(vgprs, granule)).
"""
from __future__ import annotations

from gpusim.analysis import Uniformity
from gpusim.errors import KernelError
from gpusim.hw import DEFAULT_ARCH, GFX90A, GFX942, GFX1100, Arch, get_arch
from gpusim.occupancy import estimate_vgprs, occupancy
from gpusim.program import DTYPE_BYTES, Kernel, LdsLoad, LdsStore, Load, Store, walk

SIM_FORMAT = "wavefuse.sim/1"

#: LLVM target -> the modelled Arch whose register file it has (the MI300 targets gfx940,
#: gfx941 and gfx942 share one, S9).
TARGET_ARCH = {"gfx90a": GFX90A, "gfx940": GFX942, "gfx941": GFX942, "gfx942": GFX942,
               "gfx1100": GFX1100}


def vgpr_waves(vgprs: int, arch: Arch) -> int:
    """Waves per SIMD that ``vgprs`` registers per lane allow on ``arch`` (its VGPRs per
    SIMD lane, allocation granule and wave slots, each with its source in the Arch)."""
    vgprs = max(int(vgprs), 1)
    alloc = -(-vgprs // arch.vgpr_granule) * arch.vgpr_granule
    return max(0, min(arch.wave_slots_per_simd, arch.vgprs_per_lane // alloc))


def vgpr_occupancy(vgprs: int, target: str) -> int:
    """``vgpr_waves`` for an LLVM target named by hipcc (``check``'s targets); a target
    whose register file is not known is an error, never another arch's numbers."""
    if target not in TARGET_ARCH:
        raise KernelError(f"unknown arch {target!r} for the VGPR file; known targets: "
                          f"{', '.join(TARGET_ARCH)}")
    return vgpr_waves(vgprs, TARGET_ARCH[target])


def pinned_waves(kernel: Kernel, arch: Arch | str = DEFAULT_ARCH,
                 vgprs: int | None = None) -> int | None:
    """The ``amdgpu_waves_per_eu`` an emitted kernel carries: the waves per SIMD of the
    residency the simulator assumed (``Occupancy.waves_per_eu``, from ``vgprs`` or gpusim's
    estimate), or None when the simulator has none to pin (a workgroup it finds too large
    for a CU, an estimate that failed)."""
    try:
        return occupancy(kernel, get_arch(arch), vgprs=vgprs).waves_per_eu
    except Exception:  # noqa: BLE001 - no residency to pin; the kernel is emitted unpinned
        return None


def memory_accesses(kernel: Kernel) -> list[dict]:
    """Every global and LDS access of the kernel in program order, with its width; a
    global load also says whether its address is wave-uniform (``gpusim.analysis``):
    hipcc may read such a load through the scalar cache (``s_load``)."""
    out = []
    uniform = Uniformity(kernel.body)
    for s in walk(kernel.body):
        if isinstance(s, (Load, Store)):
            space, name, mem = "global", s.buffer, kernel.buffer(s.buffer)
        elif isinstance(s, (LdsLoad, LdsStore)):
            space, name, mem = "lds", s.array, kernel.lds_array(s.array)
        else:
            continue
        load = isinstance(s, (Load, LdsLoad))
        width = len(s.dsts) if load else len(s.values)
        out.append({"space": space, "op": "load" if load else "store", "name": name,
                    "dtype": mem.dtype, "width": width,
                    "bytes": width * DTYPE_BYTES[mem.dtype]})
        if space == "global" and load:
            out[-1]["uniform"] = bool(uniform.is_uniform(s.index))
    return out


def _gpusim_vgprs(kernel: Kernel, arch: Arch):
    """(gpusim's VGPR estimate, where it came from), or (None, why not)."""
    try:
        return int(estimate_vgprs(kernel, arch)), "gpusim.estimate_vgprs"
    except Exception as e:  # an estimate that fails must not stop an export: the sidecar says why
        return None, f"gpusim.estimate_vgprs failed: {type(e).__name__}: {e}"


def sim_info(kernel: Kernel, arch: Arch | str = DEFAULT_ARCH, *, c_name: str | None = None,
             counters: dict | None = None, estimated_vgprs: int | None = None,
             pin: bool = False) -> dict:
    """The sidecar contents for one kernel (``arch``: a name is resolved here, the
    package's entry point).

    ``estimated_vgprs`` overrides gpusim's estimate (e.g. from a SimResult's ``.vgprs``);
    ``counters`` are the simulator's predicted counters, kept for the record.
    ``pin``: the source is emitted with ``amdgpu_waves_per_eu`` (``pinned_waves``); the
    sidecar's ``waves_per_eu`` says at what, so ``check`` can hold hipcc to it. The
    exporter then verifies the pin with hipcc and adds ``pin_asked``, ``pin_verified_on``,
    ``pin_dropped`` (``waves_per_eu`` becomes None), ``pin_unverified`` and
    ``pin_figures`` (``codegen_hip.pins``).
    """
    arch = get_arch(arch)
    if estimated_vgprs is None:
        estimated_vgprs, source = _gpusim_vgprs(kernel, arch)
    else:
        source = "given by the caller (simulation result)"
    info = {
        "format": SIM_FORMAT,
        "kernel": kernel.name,
        "c_name": c_name,
        "arch": arch.name,
        "grid": int(kernel.grid),
        "block": int(kernel.block),
        "accesses": memory_accesses(kernel),
        "lds_bytes": int(kernel.lds_bytes),
        "estimated_vgprs": estimated_vgprs,
        "vgpr_source": source,
        "occupancy_waves_per_simd": (vgpr_waves(estimated_vgprs, arch)
                                     if estimated_vgprs is not None else None),
        # the amdgpu_waves_per_eu the emitted source carries (None: emitted unpinned)
        "waves_per_eu": (pinned_waves(kernel, arch, estimated_vgprs)
                         if pin and estimated_vgprs is not None else None),
        "counters": {k: (float(v) if isinstance(v, float) else v)
                     for k, v in (counters or {}).items()
                     if isinstance(v, (int, float, str, bool))},
    }
    return info
