"""Terminal views: the data behind each view against gpusim and hand-derived counts, the
`wavefuse view` command line, and a few fixed-width snapshot renders.

Snapshots live in tests/snapshots/; regenerate with WAVEFUSE_UPDATE_SNAPSHOTS=1 after an
intended change of presentation, and read the diff.
"""
import io
import os
import time
from pathlib import Path

import pytest
from rich.console import Console

import gpusim
from compiler import cli
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.fusion.plan import Decision
from compiler.tuning.search import tune_dispatches
from compiler.cli.views import (SORT_KEYS, ViewError, banks_data, banks_view, candidates_data, candidates_view, coalescing_data, coalescing_view, explain_data, explain_view, most_conflicted, plan_data, plan_view, source_data, source_view, timeline_data, timeline_view, worst_coalesced)
from gpusim.hw import get_arch
from gpusim.program import (Barrier, Buffer, Kernel, LdsArray, LdsLoad, LdsStore, Load, Store,
                            Var, thread_id)

SNAPSHOTS = Path(__file__).parent / "snapshots"
ARCH = "gfx942"


def transpose_kernel(pad: int) -> Kernel:
    """One wave moves a 32x32 f32 tile through LDS: lane t writes row t//32, column t%32
    (a row: consecutive banks), then reads column t//32 of row t%32 (stride 32 + pad
    dwords). Unpadded, the 32 lanes of a ds_read_b32 phase all hit bank 0 (degree 32,
    31 conflict cycles per phase, 62 in all); with +1 padding every lane has its own bank."""
    s = 32 + pad
    v, w = Var("v"), Var("w")
    t = thread_id()
    body = (Load((v,), "x", t),
            LdsStore("tile", (t // 32) * s + t % 32, (v,)),
            Barrier(),
            LdsLoad((w,), "tile", (t % 32) * s + t // 32),
            Store("y", t, (w,)))
    return Kernel(f"transpose_pad{pad}", (Buffer("x", "f32", (64,)), Buffer("y", "f32", (64,), "out")),
                  grid=1, block=64, body=body, lds=(LdsArray("tile", "f32", (32, s), pad),))


def strided_kernel() -> Kernel:
    """Statement 1 reads with a 32-element stride (one 128 B line per lane on gfx942),
    statement 2 stores contiguously (64 x 4 B = two lines)."""
    v = Var("v")
    t = thread_id()
    body = (Load((v,), "x", t * 32), Store("y", t, (v,)))
    k = Kernel("strided", (Buffer("x", "f32", (64 * 32,)), Buffer("y", "f32", (64,), "out")),
               grid=1, block=64, body=body)
    return k


def render(renderable, width=100, color_system=None) -> str:
    con = Console(width=width, color_system=color_system, force_terminal=True, record=True,
                  file=io.StringIO(), legacy_windows=False, highlight=False)
    con.print(renderable)
    return con.export_text(styles=color_system is not None)


def check_snapshot(name: str, text: str):
    path = SNAPSHOTS / name
    if os.environ.get("WAVEFUSE_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; create it with WAVEFUSE_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), f"render changed; diff against {path}"


@pytest.fixture(scope="module")
def softmax_tuned():
    g = load_model("softmax")
    plan = fuse(g)
    return g, plan, tune_dispatches(g, plan.dispatches, get_arch(ARCH), budget=6)[0]


# ----------------------------------------------------------------------------- banks
def test_banks_unpadded_transpose_read_is_fully_conflicted():
    k = transpose_kernel(0)
    d = banks_data(gpusim.access_pattern(k, ARCH, 3), 3)
    assert d.degrees == [32, 32]
    assert d.conflict_cycles == 62 == d.gpusim_conflict_cycles
    for col, g in enumerate(d.groups):   # lanes 32-63 read column 1: bank 1
        assert g.degree[col] == 32 and g.degree.sum() == 32
        assert g.hits[:, col].all() and g.hits.sum() == 32


def test_banks_padded_transpose_read_has_no_conflict():
    k = transpose_kernel(1)
    d = banks_data(gpusim.access_pattern(k, ARCH, 3), 3)
    assert d.degrees == [1, 1]
    assert d.conflict_cycles == 0 == d.gpusim_conflict_cycles
    assert (d.groups[0].degree == 1).all()   # lane r of the phase lands on bank r


def test_banks_row_write_and_default_instruction():
    k = transpose_kernel(0)
    write = banks_data(gpusim.access_pattern(k, ARCH, 1), 1)
    assert write.degrees == [1, 1] and write.conflict_cycles == 0
    inst, pat = most_conflicted(k, ARCH)
    assert inst == 3 and pat["conflict_cycles"] == 62


def test_banks_matches_gpusim_for_b64_groups():
    """Vector LDS reads use four groups of 16 lanes; the derived degrees must agree."""
    v = (Var("a"), Var("b"))
    t = thread_id()
    k = Kernel("b64", (Buffer("y", "f32", (128,), "out"),), grid=1, block=64,
               body=(LdsLoad(v, "tile", t * 8), Store("y", t * 2, v)),
               lds=(LdsArray("tile", "f32", (512,)),))
    d = banks_data(gpusim.access_pattern(k, ARCH, 0), 0)
    assert len(d.groups) == 4
    assert d.conflict_cycles == d.gpusim_conflict_cycles
    # stride 8 dwords, 2 dwords per lane: 16 lanes cover 32 dword-pairs on 8 banks -> degree 4
    assert d.degrees == [4, 4, 4, 4]


# ----------------------------------------------------------------------------- coalescing
def test_coalescing_counts_equal_gpusim():
    k = strided_kernel()
    pat = gpusim.access_pattern(k, ARCH, 0)
    d = coalescing_data(pat, 0)
    assert d.requests == pat["requests"] == 64 == len(d.lines)
    assert d.touched.any(axis=1).all() and (d.touched.sum(axis=0) == 1).all()
    assert d.coalescing_pct == pat["coalescing_pct"] == 25.0
    good = coalescing_data(gpusim.access_pattern(k, ARCH, 1), 1)
    assert good.requests == 2 and good.coalescing_pct == 100.0
    assert good.touched.sum(axis=1).tolist() == [32, 32]


def test_worst_coalesced_is_the_default():
    inst, pat = worst_coalesced(strided_kernel(), ARCH)
    assert inst == 0 and pat["requests"] == 64


def test_coalescing_narrow_render_splits_lanes():
    d = coalescing_view(gpusim.access_pattern(strided_kernel(), ARCH, 1), 1)
    wide, narrow = render(d, 100), render(d, 60)
    assert "lanes 0-63" in wide
    assert "lanes 0-31" in narrow and "lanes 32-63" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 60


# ----------------------------------------------------------------------------- timeline
def test_timeline_buckets_cover_the_trace_exactly():
    res = gpusim.simulate(transpose_kernel(0), ARCH, trace=True)
    d = timeline_data(res, buckets=50)
    span = d.end - d.start
    assert d.end == max(e["end"] for e in res.trace)
    assert d.end <= res.bounds["cu"] + 1e-9
    assert d.buckets == 50 and abs(d.bucket_cycles * 50 - span) < 1e-9
    for row in d.rows:
        assert abs(row.busy_cycles + d.idle_cycles(row) - span) < 1e-6
        assert row.busy_cycles <= span + 1e-6
    for kind in {e["kind"] for e in res.trace}:
        want = sum(e["end"] - e["start"] for e in res.trace if e["kind"] == kind)
        got = sum(r.cycles.get(kind, 0.0) for r in d.rows)
        assert abs(want - got) < 1e-6, kind
    assert {(r.cu, r.simd, r.wave) for r in d.rows} == \
        {(e["cu"], e["simd"], e["wave"]) for e in res.trace}


def test_timeline_zoom_window_and_errors():
    res = gpusim.simulate(transpose_kernel(0), ARCH, trace=True)
    first = min(res.trace, key=lambda e: e["start"])
    d = timeline_data(res, first["start"], first["end"], buckets=4)
    assert any(r.cells == [first["kind"]] * 4 for r in d.rows)
    with pytest.raises(ViewError):
        timeline_data(res, 100, 50)
    res.trace = None
    with pytest.raises(ViewError, match="trace=True"):
        timeline_data(res)


# ----------------------------------------------------------------------------- plan, explain
def test_plan_data_bytes_and_dispatch_of_every_op():
    g = load_model("layernorm")
    plan = fuse(g, aggressive=False)
    d = plan_data(plan)
    assert len(d.dispatches) == plan.num_dispatches == 2
    assert sum(x.nbytes for x in d.dispatches) == d.bytes_fused == plan.bytes_fused
    assert d.bytes_saved == plan.bytes_unfused - plan.bytes_fused > 0
    for x in d.dispatches:
        assert x.nbytes == sum(t.nbytes for t in x.reads + x.writes)
    assert set(d.op_dispatch) == {n for x in plan.dispatches for n in x.ops}
    assert len({x.colour for x in d.dispatches}) == 2


def test_explain_shows_costs_of_search_decisions():
    plan = fuse(load_model("softmax"))
    plan.decisions.append(Decision("search", "aggressive", "conservative", True,
                                   "aggressive plan predicted fastest",
                                   {"aggressive_us": 4.25, "conservative_us": 7.5}))
    rows = explain_data(plan)
    assert rows[-1].cost == {"aggressive_us": 4.25, "conservative_us": 7.5}
    text = render(explain_view(plan))
    assert "aggressive_us=4.25" in text and "conservative_us=7.5" in text
    assert len(rows) == len(plan.decisions)


# ----------------------------------------------------------------------------- candidates
def test_candidates_sorted_by_every_key(softmax_tuned):
    _, _, tuned = softmax_tuned
    for key, (field, desc) in SORT_KEYS.items():
        d = candidates_data(tuned, key)
        vals = [getattr(r, field) for r in d.rows]
        assert vals == sorted(vals, reverse=desc), key
        assert d.winner.knobs == tuned.best.knobs and d.winner.rank == 1
    d = candidates_data(tuned)
    assert [r.time_us for r in d.rows] == sorted(s.time_us for s in tuned.candidates if s.ok)
    assert d.num_illegal == len(tuned.illegal)
    assert all(abs(r.roofline_ratio * tuned.roofline_us - r.time_us) < 1e-9 for r in d.rows)
    with pytest.raises(ViewError, match="valid: time"):
        candidates_data(tuned, "speed")


def test_candidates_render_marks_winner_and_degrades(softmax_tuned):
    _, _, tuned = softmax_tuned
    wide = render(candidates_view(tuned), 100)
    assert "* winner" in wide and "x roof" in wide and "predicted time" in wide
    narrow = render(candidates_view(tuned), 60)
    assert "x roof" not in narrow and max(len(x) for x in narrow.splitlines()) <= 60
    header = next(x for x in narrow.splitlines() if "schedule " in x and "us" in x)
    assert "occupancy" in header and "LDS%" in header   # squeezed, not cropped
    assert "*1" in narrow


# ----------------------------------------------------------------------------- source
def test_source_lines_carry_their_statements_counters():
    k = transpose_kernel(0)
    res = gpusim.simulate(k, ARCH)
    d = source_data(k, res, ARCH)
    assert d.mapped
    lines = d.source.splitlines()
    recs = {r["index"]: r for r in res.per_inst}
    assert "x[" in lines[d.statement_line[0] - 1]
    assert "tile[" in lines[d.statement_line[3] - 1] and "y[" in lines[d.statement_line[4] - 1]
    assert "__syncthreads" in lines[d.statement_line[2] - 1]
    read = d.line_counters[d.statement_line[3]]
    assert read["conflict_cycles"] == recs[3]["conflict_cycles"] > 0
    assert read["executions"] == recs[3]["executions"]
    total = sum(c["stall_cycles"] for c in d.line_counters.values())
    assert abs(total - sum(r["stall_cycles"] for r in res.per_inst)) < 1e-6


def test_source_view_renders_margin_at_width(softmax_tuned):
    _, _, tuned = softmax_tuned
    res = gpusim.simulate(tuned.kernel, ARCH, functional=False)
    text = render(source_view(tuned.kernel, res, ARCH), 100)
    assert "exec" in text and "stall" in text and "__global__" in text
    assert max(len(x) for x in text.splitlines()) <= 100


# ----------------------------------------------------------------------------- snapshots
def test_snapshot_plan_layernorm_conservative():
    check_snapshot("plan_layernorm_conservative.txt",
                   render(plan_view(fuse(load_model("layernorm"), aggressive=False))))


def test_snapshot_banks_transpose():
    k = transpose_kernel(0)
    check_snapshot("banks_transpose_pad0.txt",
                   render(banks_view(gpusim.access_pattern(k, ARCH, 3), 3, show_lanes=False)))


def test_snapshot_timeline_transpose():
    res = gpusim.simulate(transpose_kernel(1), ARCH, trace=True)
    check_snapshot("timeline_transpose_pad1.txt", render(timeline_view(res, buckets=80)))


def test_every_view_renders_within_its_width(softmax_tuned):
    """Each view renders to non-empty text no wider than the console (render time is not
    asserted here: these machines are shared; speed is for benchmarks, not unit tests)."""
    g, plan, tuned = softmax_tuned
    res = gpusim.simulate(tuned.kernel, ARCH, functional=False, trace=True)
    k = transpose_kernel(0)
    for view in (plan_view(plan), candidates_view(tuned), timeline_view(res),
                 banks_view(gpusim.access_pattern(k, ARCH, 3), 3),
                 source_view(tuned.kernel, res, ARCH)):
        text = render(view)
        assert text.strip(), type(view).__name__
        assert max(len(line) for line in text.splitlines()) <= 100, type(view).__name__


# ----------------------------------------------------------------------------- CLI
def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", ["plan", "explain", "candidates", "timeline", "coalescing",
                                  "banks", "source"])
def test_cli_every_view(capsys, kind):
    # the banks view needs a dispatch whose best schedule uses LDS: a transpose stages
    # through it at every budget (softmax's best point at budget 2 may reduce in a wave)
    model = "transpose_add" if kind == "banks" else "softmax"
    code, out, err = run(capsys, "view", kind, model, "--budget", "2",
                         "--width", "100")
    assert code == 0, err
    assert out.strip() and max(len(x) for x in out.splitlines()) <= 100


def test_cli_svg_and_narrow_no_color(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    svg = tmp_path / "t.svg"
    code, out, err = run(capsys, "view", "timeline", "softmax", "--budget", "2",
                         "--width", "60", "--svg", str(svg))
    assert code == 0, err
    assert svg.read_text().lstrip().startswith("<svg")
    assert "\x1b[" not in out and max(len(x) for x in out.splitlines()) <= 60


def test_cli_user_errors_list_valid_choices(capsys):
    code, _, err = run(capsys, "view", "candidates", "softmax", "--dispatch", "nope")
    assert code == 2 and "valid: d0_reduce_max_0" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "view", "coalescing", "softmax", "--budget", "2",
                       "--inst", "999")
    assert code == 2 and "valid: " in err and "global load x" in err
    code, _, err = run(capsys, "view", "candidates", "softmax", "--sort", "speed")
    assert code == 2 and "valid: time" in err
    code, _, err = run(capsys, "view", "plan", "softmax", "--arch", "gfx1")
    assert code == 2 and "gfx942" in err


def test_cli_explain_tune_shows_search_costs(capsys):
    code, out, err = run(capsys, "view", "explain", "softmax", "--tune", "--budget", "2",
                         "--width", "100")
    assert code == 0, err
    # the conservative plan tuned, or pruned by its lower bound (the decision says which)
    assert "aggressive_us=" in out and ("conservative_us=" in out or
                                        "conservative_bound_us=" in out)
