"""The search: choices by predicted time, pins, budgets, determinism, verification, and
the norm/softmax fusion story answered with numbers on every architecture."""
from __future__ import annotations

import dataclasses
import json

import pytest

from gpusim.hw import GFX1100, GFX90A, GFX942
from compiler.cli import main
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.tuning.search import (SearchError, tune, tune_dispatches, unfused_dispatches, verify_dispatches)
from gpusim import program

ARCHES = ("gfx90a", "gfx942", "gfx1100")


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("model", ["softmax:rows=512,cols=512", "layernorm:rows=512,cols=512"])
def test_fused_norms_predicted_faster_on_every_arch(model, arch):
    r = tune(load_model(model), arch, budget=8, seed=0)
    assert len(r.dispatches) == 1 and r.mode == "aggressive"
    assert r.total_time_us < r.unfused_time_us
    g = r.gain_split()
    # launches saved are exactly (dispatches saved) x overhead; the rest is kernel time
    assert g["launch_us"] == pytest.approx((r.unfused_dispatches - 1) * r.launch_overhead_us)
    assert g["kernel_us"] == pytest.approx(g["total_us"] - g["launch_us"])
    assert g["kernel_us"] > 0, "fewer bytes must also mean less kernel time"
    assert all(d.verified for d in r.dispatches)
    assert r.plan_choice["chosen"] == "aggressive"
    # the conservative plan is tuned, or pruned because its lower bound cannot beat it
    conservative = r.plan_choice["predicted_us"].get(
        "conservative", r.plan_choice["lower_bound_us"]["conservative"])
    assert r.plan_choice["predicted_us"]["aggressive"] < conservative


def _chain(rows, cols):
    g = Graph("chain")
    x = g.input("x", (rows, cols))
    b = g.input("b", (cols,))
    g.output(g.relu(g.mul(g.add(x, b), 0.5)))
    return g


@pytest.mark.parametrize("graph", [
    lambda: load_model("softmax:rows=4096,cols=1024"),
    lambda: load_model("layernorm:rows=4096,cols=1024"),
    lambda: _chain(4096, 1024),
], ids=["softmax", "layernorm", "elementwise_chain"])
def test_memory_bound_dispatches_within_1p5x_of_roofline(graph):
    r = tune(graph(), "gfx942", budget=16, seed=0, baseline=False, verify=False)
    assert len(r.dispatches) == 1
    d = r.dispatches[0]
    assert d.best.time_us <= 1.5 * d.roofline_us, (d.best.knobs, d.best.time_us, d.roofline_us)


def test_same_arguments_same_result_and_workers_agree():
    g = load_model("softmax:rows=256,cols=512")
    a = tune(g, "gfx942", budget=6, seed=3, baseline=False, verify=False)
    b = tune(g, "gfx942", budget=6, seed=3, baseline=False, verify=False, workers=2)
    assert [d.best.knobs for d in a.dispatches] == [d.best.knobs for d in b.dispatches]
    assert [c.time_us for c in a.dispatches[0].candidates] == \
        [c.time_us for c in b.dispatches[0].candidates]


def test_budget_caps_candidates_and_seed_changes_sample():
    g = load_model("layernorm")
    plan = fuse(g)
    a = tune_dispatches(g, plan.dispatches, GFX942, budget=5, seed=1)
    b = tune_dispatches(g, plan.dispatches, GFX942, budget=5, seed=2)
    assert len(a[0].candidates) <= 5
    assert {json.dumps(c.knobs, sort_keys=True) for c in a[0].candidates} != \
        {json.dumps(c.knobs, sort_keys=True) for c in b[0].candidates}


def test_fix_pins_a_knob_and_rejects_unknown_values():
    g = load_model("layernorm")
    plan = fuse(g)
    t = tune_dispatches(g, plan.dispatches, GFX942, fixed={"vector": 2, "mapping": "wave"})
    assert all(c.knobs["vector"] == 2 and c.knobs["mapping"] == "wave"
               for c in t[0].candidates)
    with pytest.raises(SearchError, match="values it has"):
        tune_dispatches(g, plan.dispatches, GFX942, fixed={"vector": 8})
    with pytest.raises(SearchError, match="no dispatch of this model has that knob"):
        tune_dispatches(g, plan.dispatches, GFX942, fixed={"swizle": "none"})


def _zero_stores(stmts):
    out = []
    for s in stmts:
        if isinstance(s, program.Store):
            s = program.Store(s.buffer, s.index, tuple(program.f32(0.0) for _ in s.values))
        elif isinstance(s, program.For):
            s = dataclasses.replace(s, body=_zero_stores(s.body))
        elif isinstance(s, program.If):
            s = dataclasses.replace(s, then=_zero_stores(s.then), orelse=_zero_stores(s.orelse))
        out.append(s)
    return tuple(out)


def test_verification_reports_a_wrong_kernel():
    g = load_model("softmax")
    tuned = tune_dispatches(g, fuse(g).dispatches, GFX942, budget=2)
    verify_dispatches(g, tuned, GFX942)
    assert tuned[0].verified
    k = tuned[0].kernel
    tuned[0].kernel = dataclasses.replace(k, body=_zero_stores(k.body))
    verify_dispatches(g, tuned, GFX942)
    assert tuned[0].verified is False and tuned[0].max_error > 0.001


def test_unfused_baseline_is_one_dispatch_per_non_view_op():
    g = load_model("attention")
    ds = unfused_dispatches(g)
    kinds = [g.op(d.root).kind for d in ds]
    assert "transpose" not in kinds  # the K transpose folds into QK^T's index map
    assert len(ds) == sum(1 for n in g.topo_order()
                          if g.op(n).kind not in ("input", "constant") and not g.op(n).is_view)


def test_tune_cli_json(capsys):
    assert main(["tune", "softmax", "--budget", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"model", "arch", "total_time_us", "unfused_time_us", "roofline_time_us",
                        "dispatches"}
    d = out["dispatches"][0]
    assert set(d) >= {"name", "schedule", "time_us", "counters", "candidates"}
    assert set(d["counters"]) == {"coalescing_pct", "lds_bank_conflict_cycles",
                                  "lds_bank_conflict_rate_pct", "hbm_bytes",
                                  "occupancy_waves_per_simd", "valu_insts", "vmem_insts",
                                  "lds_insts"}


def test_tune_cli_bad_pin_is_a_one_line_error(capsys):
    assert main(["tune", "softmax", "--fix", "vector=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wavefuse: error:") and len(err.strip().splitlines()) == 1


def test_mfma_tiles_are_default_candidates_on_cdna_except_the_opt_in_ones():
    """The MFMA tiles whose VGPR estimate meets check's rule are searched by default on
    CDNA; the MFMA_OPT_IN tiles only with ``--fix mma=mfma``; RDNA gets FMA tiles only."""
    from compiler.schedule import schedule_space
    from compiler.schedule.contraction import MFMA_OPT_IN
    from compiler.tuning.search import select_candidates

    def tile(c):
        k = c.knobs
        return (k["BM"], k["BN"], k["BK"], k["TM"], k["TN"], k["KW"])

    g = load_model("conv_add_relu:c=256,k=64")
    plan = fuse(g)
    d = plan.dispatches[0]
    for arch in (GFX942, GFX90A):   # gfx940 is an alias of gfx942
        default, _ = select_candidates(schedule_space(g, d, arch), {}, None, 0, d.name)
        mfma = {tile(c) for c in default if c.knobs["mma"] == "mfma"}
        assert mfma and not mfma & MFMA_OPT_IN, arch.name
        pinned, _ = select_candidates(schedule_space(g, d, arch), {"mma": "mfma"}, None, 0,
                                      d.name)
        assert {c.knobs["mma"] for c in pinned} == {"mfma"}
        assert {tile(c) for c in pinned} == mfma | MFMA_OPT_IN, arch.name
    rdna, _ = select_candidates(schedule_space(g, d, GFX1100), {}, None, 0, d.name)
    assert {c.knobs["mma"] for c in rdna} == {"fma"}
    pinned = tune_dispatches(g, plan.dispatches, GFX942, budget=4, fixed={"mma": "mfma"})
    assert {c.knobs["mma"] for c in pinned[0].candidates} == {"mfma"}
    verify_dispatches(g, pinned, GFX942)
    assert pinned[0].verified
    with pytest.raises(SearchError, match="every candidate with the pinned knobs is illegal"):
        tune_dispatches(g, plan.dispatches, GFX1100, fixed={"mma": "mfma"})


def test_one_unfused_baseline_for_fuse_and_tune():
    """A dead op gets no dispatch in either baseline: fuse's traffic and tune's time count
    the same unfused dispatches (they once disagreed, 1 against 3)."""
    g = Graph("dead")
    x = g.input("x", (64, 256))
    g.exp(g.neg(x))          # dead: no output depends on it
    g.output(g.relu(x))
    plan = fuse(g)
    assert plan.num_dispatches_unfused == len(unfused_dispatches(g)) == 1
    r = tune(g, "gfx942", budget=1, mode="aggressive", verify=False)
    assert r.unfused_dispatches == plan.num_dispatches_unfused == 1


def test_unfused_baseline_writes_a_view_output_from_its_producer():
    g = Graph("view_out")
    x = g.input("x", (64, 256))
    g.output(g.transpose(g.exp(x), (1, 0)))
    ds = unfused_dispatches(g)
    assert len(ds) == fuse(g).num_dispatches_unfused == 1
    assert ds[0].outputs[-1] == g.outputs[0]
