"""``export --pin-occupancy``: a dispatch whose winner's pin hipcc cannot fit takes its
fastest other candidate whose pin it fits (``compiler.tuning.pinned_schedules``).

hipcc is replaced here by a fake that spills every winner and fits every other
candidate, so the rule is tested on its own; the real-compiler evidence is ResNet-50's
export (docs/models.md, note f: 10 dispatches move, check exits 0)."""
from __future__ import annotations

import re

from codegen_hip import check as check_mod
from compiler.tuning import pinned_schedules as ps
from compiler.ir.models import load_model
from compiler.tuning.search import tune
from gpusim.hw import get_arch


def _fake_hipcc(monkeypatch, spill_if):
    """compile_to_asm replaced: ``spill_if(c_name)`` decides whether the kernel spills."""
    def fake(src, arch, asm_path, hipcc=None, timeout=180):
        spills = 4 if spill_if(src.stem) else 0
        asm_path.write_text(f"    .vgpr_count: 60\n    .vgpr_spill_count: {spills}\n"
                            f"    .private_segment_fixed_size: {16 * spills}\n")
        return {"rc": 0, "stderr": "", "compile_s": 0.0, "command": "fake"}
    monkeypatch.setattr(check_mod, "compile_to_asm", fake)
    monkeypatch.setattr(ps, "hipcc_path", lambda: "/fake/hipcc")
    monkeypatch.setattr(check_mod, "hipcc_path", lambda: "/fake/hipcc")


def test_a_winner_hipcc_cannot_pin_gives_way_to_the_fastest_candidate_it_can(monkeypatch):
    arch = get_arch("gfx942")
    graph = load_model("mlp")
    result = tune(graph, arch, budget=4, seed=0, baseline=False)
    before = {d.name: (dict(d.best.knobs), d.best.time_us,
                       [s for s in d.candidates if s.time_us is not None
                        and s.knobs != d.best.knobs]) for d in result.dispatches}
    total = result.total_time_us
    _fake_hipcc(monkeypatch, lambda name: re.fullmatch(r"k\d+", name) is not None)
    swaps = ps.honour_pins(graph, result, arch)
    movable = [n for n, (_, _, others) in before.items() if others]
    assert movable and sorted(w.name for w in swaps) == sorted(movable)
    for w in swaps:
        knobs, t, others = before[w.name]
        d = next(d for d in result.dispatches if d.name == w.name)
        assert w.old_knobs == knobs and w.old_us == t
        assert w.new_knobs == others[0].knobs == d.best.knobs   # the fastest other one
        assert w.new_us >= w.old_us and "spilled" in w.reason
        assert d.verified                                       # values checked again
        assert d.kernel is not None
    assert abs(result.total_time_us - (total + sum(w.new_us - w.old_us for w in swaps))) < 1e-6


def test_nothing_moves_when_every_winner_fits_or_hipcc_is_missing(monkeypatch):
    arch = get_arch("gfx942")
    graph = load_model("mlp")
    result = tune(graph, arch, budget=4, seed=0, baseline=False)
    chosen = [dict(d.best.knobs) for d in result.dispatches]
    _fake_hipcc(monkeypatch, lambda name: False)
    assert ps.honour_pins(graph, result, arch) == []
    monkeypatch.setattr(ps, "hipcc_path", lambda: None)
    assert ps.honour_pins(graph, result, arch) == []
    assert [dict(d.best.knobs) for d in result.dispatches] == chosen
