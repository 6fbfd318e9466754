"""tools/model_tables.py: bad input in one line, and the tables from saved step results
(the tune runs themselves are measured by the tool, never in a test)."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "model_tables", os.path.join(HERE, "..", "tools", "model_tables.py"))
model_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model_tables)


def _tune_json(total, mode="aggressive", times=(10.0, 30.0), roofs=(5.0, 3.0)):
    return {"mode": mode, "total_time_us": total, "roofline_time_us": 4.0, "launch": "stream",
            "plan_choice": {"predicted_us": {mode: total}},
            "dispatches": [{"name": f"d{i}", "kind": "contraction", "time_us": t,
                            "roofline_us": r, "schedule": {}, "kernels": 1 + i,
                            "verified": True}
                           for i, (t, r) in enumerate(zip(times, roofs))]}


def test_summary_sums_rooflines_and_ranks_the_worst_dispatches():
    s = model_tables.summary(_tune_json(47.0))
    assert s["roofline_sum_us"] == 8.0 and s["x_roofline_sum"] == pytest.approx(5.88, 0.01)
    assert [w["name"] for w in s["worst"]] == ["d1", "d0"] and s["worst"][0]["x_roofline"] == 10
    assert s["dispatches"] == 2 and s["kernels"] == 3 and not s["mismatches"]


def test_tables_show_the_move_between_budgets_and_the_before():
    step = {"rc": 0, "wall_s": 100.0, "cpu_s": 50.0, "load_avg_1min": 2.0}
    results = {"resnet50": {"steps": {
        "cold": {**step, "summary": model_tables.summary(_tune_json(100.0))},
        "x4": {**step, "summary": model_tables.summary(_tune_json(98.0))},
        "verify": {**step, "rc": 1}}}}
    text = model_tables.tables(results)
    assert "-2.0%" in text and "1385.7" in text and "FAIL" in text and "100 / 50" in text
    results["resnet50"]["steps"]["cold"]["rc"] = None
    results["resnet50"]["steps"]["warm"] = step
    assert "cold timed out" in model_tables.tables(results)


@pytest.mark.parametrize("argv, says", [
    (["--time-box", "0"], "--time-box"),
    (["--dir", "/nonexistent-wavefuse", "resnet50"], "no such model file"),
    (["/nonexistent-wavefuse/x.onnx"], "no such model file"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys, tmp_path):
    assert model_tables.main(argv + ["--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert not os.listdir(tmp_path)


def test_print_reads_saved_results(capsys, tmp_path):
    out = tmp_path / "t.json"
    out.write_text(json.dumps({"bert_base": {"steps": {}}}))
    assert model_tables.main(["--print", "--out", str(out)]) == 0
    assert "BERT-base" in capsys.readouterr().out
