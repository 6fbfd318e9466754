"""No fusion that loses (``compiler.tuning.fusion_guard``): a fused dispatch whose best
schedule is predicted slower than its conservative parts is split into them, with both
numbers in its decision, and the plan stays valid and verified."""
from gpusim.hw import GFX942

from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan, max_error
from compiler.ir import builders
from compiler.ir.graph import Graph
from compiler.ir.reference import evaluate, random_inputs
from compiler.tuning import fusion_guard
from compiler.tuning.search import tune, tune_dispatches


def _norm_over_split_axes():
    """A layer norm over axes 0 and 2: not one block of axes, so the aggressive plan's
    single dispatch has only the serial fallback (a thread per element, each reducing
    again), while the conservative plan's reduction and elementwise dispatches do not."""
    g = Graph("norm_split_axes")
    g.output(builders.layer_norm(g, g.input("x", (8, 32, 8)), axis=(0, 2)))
    return g


def test_a_losing_merge_is_refused_with_its_numbers():
    g = _norm_over_split_axes()
    r = tune(g, "gfx942", budget=2, baseline=False)
    (d,) = [d for d in r.plan.decisions if d.rule == "fusion_guard"]
    assert not d.fused and d.cost["merged_us"] > d.cost["parts_us"]
    assert f"{d.cost['merged_us']:.2f} us" in d.reason and f"{d.cost['parts_us']:.2f} us" in d.reason
    totals = r.plan_choice["predicted_us"]
    assert totals["aggressive"] <= totals["conservative"] + 1e-9
    assert len(r.dispatches) == d.cost["parts"] and all(t.verified for t in r.dispatches)
    assert len({t.kernel.name for t in r.dispatches}) == len(r.dispatches)
    inputs = random_inputs(g, 0)
    assert max_error(evaluate(g, inputs), execute_plan(r.plan, inputs)) == 0.0


def test_a_winning_merge_is_kept_with_its_numbers():
    g = Graph("ln")
    g.output(builders.layer_norm(g, g.input("x", (16, 128))))
    agg, con = fuse(g, aggressive=True), fuse(g, aggressive=False)
    ta = tune_dispatches(g, agg.dispatches, GFX942, budget=2)
    tc = tune_dispatches(g, con.dispatches, GFX942, budget=2)
    plan, tuned = fusion_guard.guard(agg, ta, con, tc)
    (d,) = [d for d in plan.decisions if d.rule == "fusion_guard"]
    assert d.fused == (ta[0].best.time_us <= sum(t.best.time_us for t in tc))
    if d.fused:
        assert [t.name for t in tuned] == [t.name for t in ta]
        assert d.reason.startswith("kept: fused")
