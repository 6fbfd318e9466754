"""Teaching views' data: what one wave's memory instruction touches.

``access_pattern`` runs the one workgroup ``block`` alone (so earlier statements give
their real values), records each active lane's byte address at the first execution of
statement ``inst_index`` by wave ``wave``, and derives from those addresses, with plain
numpy and independently of the engine, the cache lines (global) or the banks and phase
groups (LDS) and the resulting counts.
"""
from __future__ import annotations

import numpy as np

from gpusim.errors import KernelError
from gpusim.hw import DEFAULT_ARCH, get_arch
from gpusim.occupancy import occupancy
from gpusim.program import LdsLoad, LdsStore, Load, Store
from gpusim.sim import _Launch, _program
from gpusim.validate import validate


def lds_conflict_cycles(addrs: np.ndarray, nbytes: int, groups, banks: int = 32) -> tuple:
    """(conflict cycles, per-group max multiplicity) for lanes' LDS byte addresses.

    ``addrs`` has one entry per lane, -1 for inactive lanes. Within each phase group the
    distinct dwords are binned by bank; the group costs (max per bank - 1) conflict cycles.
    """
    total, per_group = 0, []
    for lanes in groups:
        dwords = set()
        for l in lanes:
            if l < len(addrs) and addrs[l] >= 0:
                a = int(addrs[l])
                dwords.update(range(a // 4, (a + nbytes - 1) // 4 + 1))
        counts = np.bincount(np.array([d % banks for d in dwords], dtype=np.int64), minlength=banks) \
            if dwords else np.zeros(banks, np.int64)
        m = int(counts.max())
        per_group.append(m)
        total += max(0, m - 1)
    return total, per_group


def access_pattern(kernel, arch=DEFAULT_ARCH, inst_index: int = 0, inputs=None, scalars=None,
                   block: int = 0, wave: int = 0) -> dict:
    """Per-lane addresses and what they cost for statement ``inst_index`` (walk order)."""
    arch = get_arch(arch)
    validate(kernel, arch, scalars)
    occ = occupancy(kernel, arch)
    prog = _program(kernel, arch)
    if not (0 <= inst_index < len(prog.statements)):
        raise KernelError(f"{kernel.name}: no statement {inst_index}; valid indices are 0..{len(prog.statements) - 1}")
    s = prog.statements[inst_index]
    if not isinstance(s, (Load, Store, LdsLoad, LdsStore)):
        raise KernelError(f"{kernel.name}: statement {inst_index} is a {type(s).__name__}, not a global or LDS "
                          f"access; pick a Load/Store/LdsLoad/LdsStore index")
    if not (0 <= block < kernel.grid) or not (0 <= wave < occ.waves_per_workgroup):
        raise KernelError(f"{kernel.name}: block {block} / wave {wave} outside the launch "
                          f"({kernel.grid} blocks of {occ.waves_per_workgroup} waves)")
    launch = _Launch(kernel, arch, prog, inputs, scalars, occ)
    pc = prog.stmt_main[inst_index]
    raw = launch.run(True, False, 1, 0, probe=(pc, block, wave))
    W = arch.wave_size
    probe = raw["probe"]
    if probe[W, 0] == 0:
        return dict(statement=s, executed=False, lanes=[])
    active = probe[:W, 2] == 1
    addrs = np.where(active, probe[:W, 0], -1)
    nbytes = int(probe[np.argmax(active), 1]) if active.any() else 0
    out = dict(statement=s, executed=True, active=active, byte_addresses=addrs, bytes_per_lane=nbytes)
    if isinstance(s, (Load, Store)):
        L = arch.l1_line_bytes
        lane_lines = [sorted({int(a) // L, (int(a) + nbytes - 1) // L}) if a >= 0 else [] for a in addrs]
        lines = sorted({x for ll in lane_lines for x in ll})
        tcp = quads = 0
        for q in range(W // 4):
            ql = {x for l in range(4 * q, 4 * q + 4) for x in lane_lines[l]}
            if any(active[4 * q:4 * q + 4]):
                quads += 1
                tcp += len(ql)
        out.update(kind="global", line_bytes=L, lane_lines=lane_lines, cache_lines=lines,
                   requests=len(lines), tcp_accesses=tcp,
                   coalescing_pct=min(100.0, max(25.0, 100.0 * quads / tcp)) if tcp else 100.0)
    else:
        groups = arch.lds_groups(nbytes, isinstance(s, LdsStore))
        banks = [sorted({(d % arch.lds_banks) for d in range(a // 4, (a + nbytes - 1) // 4 + 1)})
                 if a >= 0 else [] for a in addrs]
        group_of = np.zeros(W, np.int64)
        for gi, lanes in enumerate(groups):
            group_of[list(lanes)] = gi
        conflicts, per_group = lds_conflict_cycles(addrs, nbytes, groups, arch.lds_banks)
        out.update(kind="lds", lane_banks=banks, phase_group=group_of, phase_groups=groups,
                   group_max_multiplicity=per_group, conflict_cycles=conflicts,
                   idx_cycles=len(groups) + conflicts, requests=1)
    return out
