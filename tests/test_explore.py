"""The explorer (`wavefuse explore`, driven with Textual's pilot), its view-model, its
screens against snapshots, `--serve`'s bad input, and the missing-extra message.

Snapshots are the screen as text at 80x24 (tests/snapshots/explore_*.txt); regenerate
them with WAVEFUSE_UPDATE_SNAPSHOTS=1 after an intended change, and read the diff. Every
session here uses an in-memory tuning store and the small layernorm model (2 dispatches
in the conservative plan, so there is a second dispatch to select).
"""
import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest

from compiler import cli
from compiler.cli import views
from compiler.cli.explore.session import STAGES, Session
from compiler.ir.models import load_model

SNAPSHOTS = Path(__file__).parent / "snapshots"


def check_snapshot(name: str, text: str):
    path = SNAPSHOTS / name
    if os.environ.get("WAVEFUSE_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; create it with WAVEFUSE_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), f"screen changed; diff against {path}"


def new_session(**kw) -> Session:
    return Session(load_model("layernorm"), "layernorm", mode="conservative", budget=4,
                   no_cache=True, **kw)


# ----------------------------------------------------------------------------- view-model
def test_session_panes_come_from_the_view_builders():
    s = new_session()
    assert s.names == ["d0_reduce_mean_0", "d1_reduce_mean_3"]
    seen = []
    p = s.panes("d1_reduce_mean_3", lambda i, label: seen.append(label))
    assert seen == list(STAGES)
    # the same rows as `wavefuse view candidates` builds
    assert views.candidates_data(p.tuned).rows == views.candidates_data(s.tuned(p.name)).rows
    ops = set(s.dispatch(p.name).ops)
    assert p.decisions and all(r.producer in ops or r.consumer in ops for r in p.decisions)
    assert p.decisions == [
        r for r in views.explain_data(s.plan) if r.producer in ops or r.consumer in ops]
    # the worst global access is the one `view coalescing` picks
    inst, _ = views.worst_coalesced(p.kernel, s.arch, sim_result=p.sim)
    assert p.coalescing.inst == inst
    assert p.coalescing.data.coalescing_pct == p.coalescing.pattern["coalescing_pct"]
    assert p.sim.trace and p.source.line_counters
    assert s.panes(p.name) is p          # kept: a second look costs nothing


def test_session_pins_arch_and_access_selection():
    s = new_session()
    name = s.names[0]
    base = s.panes(name)
    s.pin(name, "vector", 1)
    pinned = s.panes(name)
    assert pinned is not base and pinned.tuned.best.knobs["vector"] == 1
    assert all(c.knobs["vector"] == 1 for c in pinned.tuned.candidates)
    s.unpin(name)
    assert s.panes(name) is base
    s.set_arch("gfx90a")
    other = s.panes(name)
    assert other.arch.name == "gfx90a" and other is not base
    order = [i for i, _ in other.coalescing.insts]
    first = other.coalescing.inst
    nxt = s.select_access(other, "global")
    assert nxt.inst == order[(order.index(first) + 1) % len(order)]
    assert nxt.data.inst == nxt.inst


def test_session_scores_land_in_the_tuning_database(tmp_path, monkeypatch):
    from compiler.tuning import tunedb
    db = tmp_path / "tune.sqlite3"
    s = Session(load_model("layernorm"), "layernorm", mode="conservative", budget=3,
                cache=str(db))
    name = s.names[0]
    s.pin(name, "vector", 1)
    p = s.panes(name)
    store = tunedb.TuneDB(db)
    try:
        assert store.info()["scores"]["rows"] >= len(p.tuned.candidates) > 0
    finally:
        store.close()
    # a second session on the same database scores nothing: every candidate is a hit
    again = Session(load_model("layernorm"), "layernorm", mode="conservative", budget=3,
                    cache=str(db))
    again.pin(name, "vector", 1)
    calls = []
    import compiler.tuning.search as search
    real = search.runner.run_jobs

    def counting(fn, jobs, **kw):
        calls.append(len(jobs))
        return real(fn, jobs, **kw)
    monkeypatch.setattr(search.runner, "run_jobs", counting)
    assert again.tuned(name).best.knobs == p.tuned.best.knobs
    # nothing is scored again: the search is replayed from the database (no round at all)
    assert not any(calls)


# ----------------------------------------------------------------------------- the app
textual = pytest.importorskip("textual", reason="the explorer needs textual "
                                                "(pip install 'wavefuse[explore]')")
from compiler.cli.explore.app import ExploreApp, screen_text  # noqa: E402


async def _until(pilot, pred, timeout=600.0):
    """Lets the app run until ``pred()`` holds (a worker finishing), or fails. Generous:
    a worker may be compiling gpusim's engine for a new arch on a loaded machine."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "timed out waiting for the explorer"
        await pilot.pause(0.05)


def test_pilot_select_each_pane_sort_zoom_pin_arch_help_quit():
    async def drive():
        app = ExploreApp(new_session())
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: app.panes is not None)
            assert app.panes.name == "d0_reduce_mean_0"
            # select the second dispatch in the plan tree
            tree = app.query_one("#plan")
            tree.focus()
            node = next(n for n in tree.root.children if n.data == "d1_reduce_mean_3")
            tree.move_cursor(node)
            await pilot.press("enter")
            await _until(pilot, lambda: app.panes.name == "d1_reduce_mean_3")
            # every pane shows its part
            tabs = app.query_one("#tabs")
            expect = {"1": "fusion decisions", "2": "scored schedules", "3": "wave timeline",
                      "4": "coalescing", "5": "emitted HIP"}
            for key, text in expect.items():
                await pilot.press(key)
                await pilot.pause(0.05)
                assert tabs.active == dict(zip("12345", ("decisions", "candidates", "timeline",
                                                          "memory", "source")))[key]
                assert text in screen_text(app), key
            # candidates: sort by the next column, then by a header click (twice: reversed)
            await pilot.press("2")
            await pilot.press("s")
            assert app.sort_key == "roofline"   # the column after "time us"
            table = app.query_one("#candidates-table")
            col = table.ordered_columns[3]       # coal %
            table.post_message(table.HeaderSelected(table, col.key, 3, col.label))
            await pilot.pause(0.05)
            assert app.sort_key == "coalescing"
            coal = [float(str(table.get_row_at(i)[3])) for i in range(table.row_count)]
            assert coal == sorted(coal, reverse=True)   # the view's order: best first
            # timeline: zoom in halves the window, scrolling moves it
            await pilot.press("3")
            (s0, e0), last = app._timeline_window()
            await pilot.press("plus")
            (s1, e1), _ = app._timeline_window()
            assert e1 - s1 == pytest.approx((e0 - s0) / 2)
            await pilot.press("full_stop")
            (s2, e2), _ = app._timeline_window()
            assert s2 > s1 and e2 - s2 == pytest.approx(e1 - s1)
            # memory: next global access
            first = app.panes.coalescing.inst
            await pilot.press("g")
            if len(app.panes.coalescing.insts) > 1:
                assert app.panes.coalescing.inst != first
            # pin a knob: re-simulated in the background, then shown
            await pilot.press("p")
            for ch in "vector=1":
                await pilot.press(ch)
            await pilot.press("enter")
            await _until(pilot, lambda: app.panes.pins == {"vector": 1})
            assert app.panes.tuned.best.knobs["vector"] == 1
            assert "pinned vector=1" in screen_text(app)
            # a pin no candidate has: one red line, the pin removed
            await pilot.press("p")
            for ch in "vector=3":
                await pilot.press(ch)
            await pilot.press("enter")
            await _until(pilot, lambda: not app.busy)
            assert app.session.pins["d1_reduce_mean_3"] == {"vector": 1}   # the shown one
            assert "vector=3" in str(app.query_one("#status").render())
            # enter on a candidate row pins its schedule: the panes now show that kernel
            await pilot.press("u")
            await _until(pilot, lambda: not app.panes.pins)
            await pilot.press("2")
            table = app.query_one("#candidates-table")
            table.focus()
            rows = app._candidates_data().rows
            loser = next(r for r in rows if not r.winner)
            table.move_cursor(row=table.get_row_index(str(loser.rank)))
            await pilot.press("enter")
            await _until(pilot, lambda: app.panes.pins == loser.knobs)
            assert app.panes.tuned.best.knobs == loser.knobs
            await pilot.press("u")
            await _until(pilot, lambda: not app.panes.pins)
            # the arch, then help, then quit
            await pilot.press("a")
            await _until(pilot, lambda: app.panes.arch.name == "gfx1100")
            await pilot.press("question_mark")
            await pilot.pause(0.05)
            assert "wavefuse explore: keys" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("q")
        assert app.return_code in (0, None)

    asyncio.run(drive())


def test_pilot_snapshots_at_80x24():
    async def drive():
        app = ExploreApp(new_session())
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: app.panes is not None)
            await pilot.pause(0.1)
            check_snapshot("explore_decisions.txt", screen_text(app))
            await pilot.press("2")
            await pilot.pause(0.1)
            check_snapshot("explore_candidates.txt", screen_text(app))
            await pilot.press("3")
            await pilot.pause(0.1)
            check_snapshot("explore_timeline.txt", screen_text(app))

    asyncio.run(drive())


def test_small_terminal_is_said_in_the_status_line():
    async def drive():
        app = ExploreApp(new_session())
        async with app.run_test(size=(60, 20)) as pilot:
            await pilot.pause(0.05)
            text = app.query_one("#status").render()
            assert "60x20" in str(text) and "80x24" in str(text)

    asyncio.run(drive())


# ----------------------------------------------------------------------------- command line
def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_model_is_one_line(capsys):
    assert cli.main(["explore", "no_such_model"]) == 2
    assert "unknown model" in _one_line(capsys)


def test_no_terminal_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    assert cli.main(["explore", "layernorm", "--no-cache"]) == 2
    assert "interactive terminal" in _one_line(capsys)


def test_terminal_too_small_is_one_line(capsys, monkeypatch):
    from compiler.cli.commands import explore
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    monkeypatch.setattr(explore.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(explore.sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(explore.shutil, "get_terminal_size",
                        lambda *a, **k: os.terminal_size((70, 20)))
    assert cli.main(["explore", "layernorm", "--no-cache"]) == 2
    assert "70x20" in _one_line(capsys)


def test_missing_textual_names_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "textual", None)    # import textual -> ImportError
    assert cli.main(["explore", "layernorm"]) == 2
    assert "pip install 'wavefuse[explore]'" in _one_line(capsys)


def test_port_in_use_is_one_line(capsys):
    pytest.importorskip("textual_serve")
    with socket.socket() as s:
        s.bind(("localhost", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cli.main(["explore", "layernorm", "--serve", "--port", str(port)]) == 2
    assert f"port {port}" in _one_line(capsys)


def test_serve_runs_this_command_without_serve():
    from compiler.cli.commands.explore import serve_command
    args = cli.build_parser().parse_args(["explore", "mlp:tokens=64", "--serve", "--port", "9",
                                          "--arch", "gfx90a", "--dim", "batch=2",
                                          "--no-cache"])
    cmd = serve_command(args)
    assert "--serve" not in cmd and "--port" not in cmd
    assert cmd.endswith("explore mlp:tokens=64 --arch gfx90a --mode aggressive --budget 8 "
                        "--seed 0 --dim batch=2 --no-cache")


def test_bad_port_is_usage_error(capsys):
    assert cli.main(["explore", "layernorm", "--serve", "--port", "70000"]) == 2
    assert "TCP port" in _one_line(capsys)
