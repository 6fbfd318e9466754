"""Keep an occupancy pin only where the real compiler fits the kernel in it.

``write_project(..., pin_occupancy=True)`` would emit every kernel with
``amdgpu_waves_per_eu(W)``, W the waves per SIMD the simulator assumed. That fixes the
kernels whose VGPR estimate is achievable (hipcc then allocates within W's budget instead
of choosing fewer waves for latency), but where the estimate is below what LLVM fits
the pin turns a harmless difference into spills (README, "Whole models at full size",
note f). So before the project is written, ``verify_pins`` compiles each distinct pinned
source (kernels that differ only in the names they declare share one compile, as in
``check_dir``) with hipcc for the targets ``check`` compares (gfx90a and gfx940 for a
CDNA export; an RDNA export's own target), in parallel threads, and keeps the pin only
where every target allocates without scratch, without spilled VGPRs and at least at W
waves. The others are emitted unpinned (the compiler picks the occupancy) with the
reason and hipcc's figures in their header and sidecar (``pin_dropped``).

Without hipcc nothing can be verified: the pins are written as asked and the sidecar's
``pin_unverified`` says why (the CLI prints it as one warning). The verdict depends on
the installed compiler; that is why ``--pin-occupancy`` stays opt-in (README).
"""
from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import check as _check
from .simfacts import TARGET_ARCH, vgpr_occupancy

#: what ``wavefuse check`` compiles by default (its ``--arch``): a CDNA pin is held to both
CDNA_TARGETS = ("gfx90a", "gfx940")

NO_HIPCC = ("hipcc not found on PATH, so the pins were not compiled and may spill where "
            "the VGPR estimate is below what LLVM fits; install hipcc (Debian package "
            "'hipcc') and export again to keep only the pins it fits")


def pin_targets(arch) -> tuple[str, ...]:
    """hipcc targets that must confirm a pin for ``arch`` (an Arch): check's default pair
    for a wave64 (CDNA) export, the arch's own target otherwise (as hipcc names it)."""
    if arch.wave_size == 64:
        return CDNA_TARGETS
    real, _ = _check.check_arch(arch.name)
    return (real,) if real in TARGET_ARCH else ()


@dataclass
class PinVerdict:
    """One kernel's pin after verification: ``kept`` (hipcc fits it on ``targets``), or
    dropped with ``reason``; ``unverified`` says why nothing was compiled."""
    waves: int
    kept: bool
    targets: tuple = ()
    reason: str | None = None
    unverified: str | None = None
    figures: dict = field(default_factory=dict)   # target -> parse_asm facts (or rc/stderr)


def _problem(res: dict, waves: int, target: str) -> str | None:
    """Why the compile on ``target`` does not honour the pin at ``waves``, or None."""
    if res.get("rc") != 0:
        first = (res.get("stderr") or "").splitlines()[:1]
        return f"{target}: hipcc failed ({first[0] if first else 'no output'})"
    vg, spills, scratch = res.get("vgprs"), res.get("vgpr_spills") or 0, \
        res.get("scratch_bytes") or 0
    if scratch or spills:
        what = [f"{spills} VGPR{'s' if spills != 1 else ''} spilled"] if spills else []
        if scratch:
            what.append(f"{scratch} B scratch")
        return f"{target}: {vg} VGPRs + {', '.join(what)}"
    if vg is not None and vgpr_occupancy(vg, target) < waves:
        return (f"{target}: {vg} VGPRs allow only {vgpr_occupancy(vg, target)} waves/SIMD "
                f"(pin not honoured)")
    return None


def verify_pins(sources: dict, arch, *, estimates: dict | None = None,
                hipcc: str | None = None, jobs: int | None = None,
                compiled: dict | None = None) -> dict:
    """{c_name: PinVerdict} for ``sources`` ({c_name: (pinned source, W)}).

    Each distinct source (``check.source_key``) is compiled once per target of
    ``pin_targets(arch)``; ``estimates`` ({c_name: VGPRs}) only words the reasons. A
    kernel with no target to compile on, or a run without hipcc, keeps its pin
    unverified. The temporary files are removed, also on an exception (Ctrl-C), after
    the compiles already running finish; queued ones are cancelled. ``compiled`` ({(source
    key, target): facts}), when given, holds the compiles of an earlier call and receives
    this one's, so an export that chose its schedules by their pins
    (``compiler.tuning.pinned_schedules``) does not compile the same programs again.
    """
    estimates = estimates or {}
    hipcc = hipcc or _check.hipcc_path()
    targets = pin_targets(arch)
    if hipcc is None or not targets:
        why = NO_HIPCC if hipcc is None else (
            f"no hipcc target is known for {arch.name}'s register file, so the pins were "
            "not compiled")
        return {c: PinVerdict(w, True, unverified=why) for c, (_, w) in sources.items()}
    compiled = {} if compiled is None else compiled
    rep, first, key_of = {}, {}, {}
    for c, (src, w) in sources.items():
        key = _check.source_key(src, c)
        rep[c] = first.setdefault(key, c)
        key_of[rep[c]] = key
    with tempfile.TemporaryDirectory(prefix="wavefuse-pins-") as tmp:
        tmp = Path(tmp)

        def one(job):
            c, target = job
            hip = tmp / f"{c}.hip"
            asm = tmp / f"{c}.{target}.s"
            res = _check.compile_to_asm(hip, target, asm, hipcc)
            if res["rc"] == 0 and asm.exists():
                res.update(_check.parse_asm(asm.read_text()))
            return job, res

        jobs_list = [(c, t) for c in sorted(set(rep.values())) for t in targets
                     if (key_of[c], t) not in compiled]
        for c in {c for c, _ in jobs_list}:
            (tmp / f"{c}.hip").write_text(sources[c][0])
        pool = ThreadPoolExecutor(max_workers=jobs or min(32, os.cpu_count() or 4))
        try:
            for (c, t), res in pool.map(one, jobs_list):
                compiled[(key_of[c], t)] = res
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    done = {(c, t): compiled[(key_of[c], t)] for c in set(rep.values()) for t in targets}
    out = {}
    for c, (_, w) in sources.items():
        figures = {t: done[(rep[c], t)] for t in targets}
        problems = [p for t in targets if (p := _problem(figures[t], w, t))]
        reason = None
        if problems:
            est = estimates.get(c)
            reason = (f"hipcc does not fit amdgpu_waves_per_eu({w}): " + "; ".join(problems)
                      + (f" (VGPR estimate {est}, below what LLVM fits)" if est is not None
                         and not any("failed" in p for p in problems) else ""))
        out[c] = PinVerdict(w, not problems, targets, reason, figures={
            t: {k: f.get(k) for k in ("rc", "vgprs", "vgpr_spills", "scratch_bytes")}
            for t, f in figures.items()})
    return out


def pin_summary(out_dir) -> dict:
    """What an export's sidecars say about its pins: {"asked", "pinned", "dropped"
    ({c_name: reason}), "verified_on", "unverified"}; "asked" is False for an export
    written without ``pin_occupancy``."""
    import json
    asked, pinned, dropped, on, unverified = False, 0, {}, set(), None
    for p in sorted(Path(out_dir).glob("*.sim.json")):
        info = json.loads(p.read_text())
        if "pin_asked" not in info:    # written without pin_occupancy
            continue
        asked = True
        if info.get("pin_dropped"):
            dropped[info["c_name"]] = info["pin_dropped"]
        elif info.get("waves_per_eu"):
            pinned += 1
        on.update(info.get("pin_verified_on") or ())
        unverified = unverified or info.get("pin_unverified")
    return {"asked": asked, "pinned": pinned, "dropped": dropped,
            "verified_on": sorted(on), "unverified": unverified}
