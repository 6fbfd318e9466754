"""`wavefuse report`: the HTML is well formed (every tag closed), self-contained (no URL
it would fetch), carries the numbers of `tune --json`, opens in headless Chromium; a path
that cannot be written is one line and leaves nothing behind. And `wavefuse compare` on
two saved runs (tests/data/compare, made with `wavefuse tune layernorm --budget 4 --mode
conservative --json`, the second with `--arch gfx90a --fix vector=1`, the third with
`--mode aggressive`).
"""
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from compiler import cli
from compiler.cli.explore.compare import compare_data, totals

DATA = Path(__file__).parent / "data" / "compare"
VOID = {"meta", "br", "img", "hr", "input", "link", "area", "base", "col", "wbr", "source"}
# SVG children written self-closed (<rect .../>) are closed by the parser's startendtag
URL_ATTRS = {"src", "href", "xlink:href", "action", "poster", "data"}


class Checker(HTMLParser):
    """Every element closed in order; every URL-valued attribute local (a fragment)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.tags, self.urls = [], [], {}, []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self._attrs(attrs)
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self._attrs(attrs)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> at {self.getpos()} closes {self.stack[-1:]}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.urls += re.findall(r"url\(\s*['\"]?(?!#)([^'\")]+)", data)
        self.urls += re.findall(r"@import\s+['\"]?([^'\";]+)", data)

    def _attrs(self, attrs):
        for k, v in attrs:
            if k in URL_ATTRS and v and not v.startswith("#"):
                self.urls.append(v)
            if k == "style" and v:
                self.handle_data(v)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "layernorm.html"
    code = cli.main(["report", "layernorm", "--mode", "conservative", "--budget", "4",
                     "--no-cache", "-o", str(out)])
    assert code == 0
    return out, out.read_text()


def test_report_is_well_formed_and_self_contained(report):
    _, text = report
    c = Checker()
    c.feed(text)
    c.close()
    assert not c.errors, c.errors[:5]
    assert not c.stack, f"unclosed: {c.stack[:5]}"
    assert not c.urls, f"the report would fetch {c.urls[:5]}"
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    # plan, roofline, and per dispatch (2) candidates, timeline, coalescing, banks
    assert c.tags["svg"] >= 1 + 1 + 2 * 3
    assert "fonts.googleapis" not in text and "cdnjs" not in text


def test_report_numbers_are_tunes(report, capsys):
    _, text = report
    assert cli.main(["tune", "layernorm", "--mode", "conservative", "--budget", "4",
                     "--no-cache", "--json"]) in (0, 1)
    run = json.loads(capsys.readouterr().out)
    assert f"{run['total_time_us']:.2f} us" in text
    for d in run["dispatches"]:
        assert f"<td>{d['name']}</td>" in text
        assert f"<td class=\"num\">{d['time_us']:.2f}</td>" in text
    assert "gpusim prediction" in text


def test_report_unwritable_path_is_one_line_and_writes_nothing(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "r.html"
    assert cli.main(["report", "layernorm", "--no-cache", "-o", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert cli.main(["report", "layernorm", "--no-cache", "-o", str(tmp_path)]) == 2
    assert "give a file name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_report_failure_midway_keeps_the_old_file(tmp_path, monkeypatch, capsys):
    from compiler.cli.explore import report as report_mod
    target = tmp_path / "r.html"
    target.write_text("old report")

    def broken(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(report_mod, "report_html", lambda *a, **k: "x" * 10)
    monkeypatch.setattr("os.replace", broken)
    assert cli.main(["report", "layernorm", "--budget", "2", "--no-cache", "-o",
                     str(target)]) == 2
    assert "No space left" in capsys.readouterr().err
    assert target.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]   # no temporary left


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (Debian: apt-get "
                                                "install chromium); the report's screenshot "
                                                "check needs a headless browser")
def test_report_opens_in_headless_chromium(report, tmp_path):
    path, _ = report
    base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(base + ["--dump-dom", path.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert "wavefuse report: layernorm" in dom.stdout
    assert dom.stdout.count("<svg") >= 8
    png = tmp_path / "report.png"
    subprocess.run(base + [f"--screenshot={png}", "--window-size=1200,1600", path.as_uri()],
                   capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000   # drawn, not blank


def test_roofline_points_are_flops_over_kernel_time():
    from compiler.cli.explore.report import roofline_data, roofline_svg
    from compiler.ir.models import load_model
    from compiler.tuning.search import tune
    r = tune(load_model("layernorm"), "gfx942", budget=2, mode="conservative",
             baseline=False, verify=False)
    data = roofline_data(r)
    assert [p["name"] for p in data["points"]] == [d.name for d in r.dispatches]
    for p, d in zip(data["points"], r.dispatches):
        assert p["intensity"] == d.flops / d.bytes
        kernel_s = (d.best.time_us - r.launch_overhead_us) * 1e-6
        assert p["flops_per_s"] == pytest.approx(d.flops / kernel_s)
        # below both roofs: a prediction never beats the bound it is compared with
        bw = r.arch.stream_bytes_per_s(d.bytes)
        assert p["flops_per_s"] <= min(data["roofs"]["peak_flops_per_s"],
                                       bw * p["intensity"]) * 1.0001
    svg = roofline_svg(data)
    c = Checker()
    c.feed(svg)
    assert not c.errors and not c.stack and c.tags["circle"] == len(data["points"])


# ----------------------------------------------------------------------------- compare
def load(name):
    return json.loads((DATA / name).read_text())


def test_compare_two_saved_runs():
    a, b = load("layernorm_gfx942.json"), load("layernorm_gfx90a_vector1.json")
    d = compare_data(a, b, "942", "90a")
    assert [r.name for r in d.rows] == [x["name"] for x in a["dispatches"]]
    assert {r.status for r in d.rows} == {"changed"}
    for r, x, y in zip(d.rows, a["dispatches"], b["dispatches"]):
        assert (r.time_a, r.time_b) == (x["time_us"], y["time_us"])
        assert r.knobs_changed.get("vector", [None, 1])[1] == 1
        assert all(x["schedule"][k] == va and y["schedule"][k] == vb
                   for k, (va, vb) in r.knobs_changed.items())
    ta = totals(a)
    assert ta.launches_us == a["num_dispatches"] * a["launch_overhead_us"]
    assert ta.kernel_us + ta.launches_us == pytest.approx(a["total_time_us"])
    assert d.notes == ["arch: gfx942 vs gfx90a"]
    same = compare_data(a, a)
    assert {r.status for r in same.rows} == {"same"} and not same.changed


def test_compare_regrouped_and_only_one_side():
    d = compare_data(load("layernorm_aggressive.json"), load("layernorm_gfx942.json"))
    status = {r.name: r.status for r in d.rows}
    assert status == {"d0_reduce_mean_0": "regrouped", "d1_reduce_mean_3": "only B"}
    assert d.b.dispatches - d.a.dispatches == 1


def test_compare_cli_text_and_json(capsys):
    a, b = str(DATA / "layernorm_gfx942.json"), str(DATA / "layernorm_gfx90a_vector1.json")
    assert cli.main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "kernel time" in out and "launches" in out and "vector 2->1" in out
    assert cli.main(["compare", a, b, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["delta"]["total_us"] == pytest.approx(js["b"]["total_us"] - js["a"]["total_us"])
    assert len(js["dispatches"]) == 2


@pytest.mark.parametrize("argv, says", [
    (["compare", str(DATA / "layernorm_gfx942.json")], "give two"),
    (["compare", str(DATA / "layernorm_gfx942.json"), "README.md"], "not JSON"),
    (["compare", str(DATA / "layernorm_gfx942.json"), "/no/such.json"], "No such file"),
    (["compare", "--model", "layernorm"], "same options"),
    (["compare", str(DATA / "layernorm_gfx942.json")] * 1 + [str(DATA / "layernorm_gfx942.json"),
                                                           "--arch-b", "gfx90a"], "--model only"),
])
def test_compare_bad_input_is_one_line(argv, says, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_compare_not_a_tune_run(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text('{"model": "m"}')
    assert cli.main(["compare", str(p), str(p)]) == 2
    assert "not a `wavefuse tune --json` output" in capsys.readouterr().err


def test_compare_model_under_two_modes(capsys):
    assert cli.main(["compare", "--model", "layernorm", "--mode-a", "aggressive", "--mode-b",
                     "conservative", "--budget", "2", "--no-cache", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["a"]["dispatches"] == 1 and js["b"]["dispatches"] == 2
    assert js["a"]["label"] == "gfx942 aggressive"
