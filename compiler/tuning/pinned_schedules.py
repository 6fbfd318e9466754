"""Schedules whose simulated occupancy the real compiler honours (``export --pin-occupancy``).

The rule: a kernel exported with ``--pin-occupancy`` carries ``amdgpu_waves_per_eu(W)``, W
the residency the simulator timed it at (``codegen_hip.pins``). Where hipcc cannot fit
that occupancy without spilling, the simulator's VGPR estimate was below what LLVM can
allocate, so the time it predicted for that schedule is one the hardware would not see.
Such a dispatch takes instead the fastest of its other scored candidates whose pin hipcc
does fit (after the candidate's values are checked against numpy again), so every pinned
kernel of the export runs at the residency its prediction assumed. When none of the next
``TRIES`` candidates fits, the winner stays and is emitted unpinned, as before, with the
reason in its sidecar. Without hipcc nothing can be confirmed and nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass

from codegen_hip.check import hipcc_path
from codegen_hip.emit import emit_kernel
from codegen_hip.pins import verify_pins
from codegen_hip.simfacts import pinned_waves
from gpusim.hw import Arch
from gpusim.program import kernels_of

from compiler.tuning.search import lower, verify_dispatches

#: how many of a dispatch's next-fastest candidates are compiled pinned, in one batch
TRIES = 6


@dataclass
class Rescheduled:
    """A dispatch that changed schedule so that its pin holds."""
    name: str
    old_knobs: dict
    new_knobs: dict
    old_us: float
    new_us: float
    reason: str          # why hipcc did not fit the winner's pin

    def to_json(self) -> dict:
        return {"dispatch": self.name, "from": self.old_knobs, "to": self.new_knobs,
                "from_us": self.old_us, "to_us": self.new_us, "why": self.reason}


def _pinned_sources(lowered, arch: Arch, name: str) -> dict:
    """{compile name: (pinned source, waves)} of each kernel of a lowered dispatch that
    carries a pin: ``name`` for its first kernel, ``name`` + ``s<j>`` for kernel j of a
    sequence (split-K, flash-decoding); a dispatch fits when all of them do."""
    out = {}
    for j, k in enumerate(kernels_of(lowered)):
        w = pinned_waves(k, arch)
        if w is not None:
            n = name if j == 0 else f"{name}s{j}"
            out[n] = (emit_kernel(k, arch, c_name=n, waves_per_eu=w), w)
    return out


def honour_pins(graph, result, arch: Arch, seed: int = 0,
                compiled: dict | None = None) -> list[Rescheduled]:
    """Swaps, in ``result`` (a ``TuneResult``), each dispatch whose winner's pin hipcc
    cannot fit for the fastest other candidate whose pin it fits; returns the swaps.
    ``compiled`` collects hipcc's results (``pins.verify_pins``) for the export to reuse."""
    if hipcc_path() is None:
        return []
    names = {}
    winners = {}
    for i, d in enumerate(result.dispatches):
        srcs = _pinned_sources(d.kernel, arch, f"k{i}")
        winners.update(srcs)
        names.update({c: i for c in srcs})
    verdicts = verify_pins(winners, arch, compiled=compiled)
    dropped = {}
    for c, v in verdicts.items():
        if not v.kept and not v.unverified:
            dropped.setdefault(names[c], v.reason)
    if not dropped:
        return []
    trials, kernels = {}, {}
    for i in dropped:
        d = result.dispatches[i]
        others = [s for s in d.candidates
                  if s.time_us is not None and s.knobs != d.best.knobs][:TRIES]
        for j, s in enumerate(others):
            try:
                k = lower(graph, d.dispatch, s.knobs, arch)
            except Exception:  # noqa: BLE001 - it was lowered once to be scored; skip it
                continue
            srcs = _pinned_sources(k, arch, f"k{i}_{j}")
            if srcs:
                trials.update(srcs)
                kernels[f"k{i}_{j}"] = (i, s, k, tuple(srcs))
    fits = verify_pins(trials, arch, compiled=compiled)
    swaps = []
    for i, reason in sorted(dropped.items()):
        d = result.dispatches[i]
        for c in sorted((c for c in kernels if kernels[c][0] == i),
                        key=lambda c: kernels[c][1].time_us):
            if not all(fits[n].kept for n in kernels[c][3]):
                continue
            _, s, k, _ = kernels[c]
            old = (d.best, d.__dict__.get("_kernel"), d.verified, d.max_error, d.check)
            d.best, d.__dict__["_kernel"] = s, k   # the lowering of s's knobs: cacheable
            d.verified = None
            verify_dispatches(graph, [d], arch, seed)
            if not d.verified:   # values differ from numpy: keep the winner
                d.best, d.__dict__["_kernel"], d.verified, d.max_error, d.check = old
                continue
            swaps.append(Rescheduled(d.name, dict(old[0].knobs), dict(s.knobs),
                                     float(old[0].time_us), float(s.time_us), reason))
            result.total_time_us += float(s.time_us) - float(old[0].time_us)
            break
    return swaps
