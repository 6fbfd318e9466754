"""The lessons' exercise checks, GPU-Puzzles style.

Each ``check_...`` takes the learner's answer (a kernel builder, an index function, a
schedule, a graph builder), runs it on the simulator, and returns a :class:`Verdict`:
whether it is right, why not, and the simulated time it achieves. Times are gpusim's
predictions in simulated microseconds, not measurements. ``tests/test_tutorials.py``
proves that each check rejects a wrong answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import gpusim
from gpusim import program as P


@dataclass
class Verdict:
    """The outcome of a check: ``ok``, the reasons it failed, and what the simulator saw."""
    ok: bool
    problems: list = field(default_factory=list)
    time_us: float | None = None
    facts: dict = field(default_factory=dict)

    def __str__(self):
        t = f"{self.time_us:.3f} simulated us" if self.time_us is not None else "not timed"
        facts = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in self.facts.items())
        head = f"{'PASS' if self.ok else 'FAIL'} ({t}; {facts})"
        return head + "".join(f"\n  - {p}" for p in self.problems)

    def __bool__(self):
        return self.ok


def _verdict(problems, res=None, **facts) -> Verdict:
    return Verdict(not problems, problems, res.time_us if res is not None else None, facts)


# ------------------------------------------------------------------ lesson 1: coalescing
def check_vector_copy(build, n: int = 64 * 1024, arch: str = "gfx942") -> Verdict:
    """``build(n)`` returns a Kernel copying f32 buffer ``a`` to ``b`` (n elements).

    Right means: ``b == a``; the fewest wave load instructions (16 B per lane, n / 256
    of them); and the fewest cache lines (n * 4 / line size), i.e. 100 % coalescing.
    """
    try:
        k = build(n)
        a = np.arange(n, dtype=np.float32)
        res = gpusim.simulate(k, arch, inputs={"a": a})
    except (gpusim.KernelError, KeyError, TypeError, ValueError) as e:
        return Verdict(False, [f"the kernel does not run: {e}"])
    c = res.counters
    line = gpusim.get_arch(arch).l1_line_bytes
    problems = []
    if not np.array_equal(np.asarray(res.outputs["b"]).reshape(-1), a):
        problems.append("b != a: some element is copied to the wrong place or not at all")
    if c["global_load_requests"] > n // 256:
        problems.append(f"{c['global_load_requests']:.0f} wave load instructions; "
                        f"16 B per lane needs only {n // 256}")
    if c["global_load_lines"] > n * 4 // line:
        problems.append(f"{c['global_load_lines']:.0f} cache lines loaded; the data spans "
                        f"{n * 4 // line} lines of {line} B")
    return _verdict(problems, res, load_insts=c["global_load_requests"],
                    lines=c["global_load_lines"], coalescing_pct=c["coalescing_pct"])
