"""Schedule spaces: the named knobs of each dispatch kind and their legal values.

A schedule is a plain ``dict`` of knob -> value (``{"workgroup": 256, "vector": 4}``), so
it prints, serialises and pins (``--fix vector=4``) without ceremony. Each space
enumerates candidates for one dispatch on one architecture and marks the illegal ones with
the reason (LDS over the limit, more than 1024 threads, misaligned vectors, too many
registers), so the candidate table can show why a point was never simulated.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Candidate:
    knobs: dict
    legal: bool = True
    reason: str = ""
    #: a knob the user must pin (``--fix KNOB=VALUE``) before the search tries this point;
    #: for schedules the model cannot yet score as well as the rest (see the space's doc)
    opt_in: str = ""
    #: the space's always-lowerable point (scalar loads, no swizzle): scored only when no
    #: other candidate could be lowered and simulated, so ``tune`` never gives up
    fallback: bool = False
    #: tried whatever the budget (another algorithm, e.g. a direct conv, is compared with
    #: the sampled tiles rather than sampled among them)
    always: bool = False

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.knobs.items())
