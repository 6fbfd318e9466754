"""What every schedule kind shares: a candidate point of a space and the knob field."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class Candidate:
    knobs: dict
    legal: bool = True
    reason: str = ""
    #: a knob the user must pin (``--fix KNOB=VALUE``) before the search tries this point;
    #: for schedules the model cannot yet score as well as the rest (see the space's doc)
    opt_in: str = ""
    #: the space's always-lowerable point (scalar accesses, no LDS tricks): scored only
    #: when no other candidate could be lowered and simulated, so ``tune`` never gives up
    fallback: bool = False
    #: tried whatever the budget (another algorithm, e.g. a direct conv, is compared with
    #: the sampled tiles rather than sampled among them)
    always: bool = False

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.knobs.items())


def knob(default, meaning: str):
    """A knob field of a kind's ``Knobs``: its default and what it means."""
    return dataclasses.field(default=default, metadata={"meaning": meaning})
