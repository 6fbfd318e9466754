"""Fusion plans remembered in the tuning database (compiler/tuning/plancache.py): a plan
read back equals the one ``fuse`` forms, a warm ``tune`` forms none, and what a rule
can read (shapes, small constants, a causal mask) changes the key."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.fusion import fuse
from compiler.fusion.plan import Decision
from compiler.ir.builders import softmax
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.tuning import plancache, tunedb
from compiler.tuning.search import tune

DATA = Path(__file__).parent / "data"
#: the option sets ``tune`` forms plans with (its four modes)
OPTIONS = ({"aggressive": True, "attention": True, "horizontal_gemms": True},
           {"aggressive": True, "attention": True, "horizontal_gemms": False},
           {"aggressive": True, "attention": False, "horizontal_gemms": True},
           {"aggressive": False, "attention": True, "horizontal_gemms": False})


def _same(a, b):
    assert a.dispatches == b.dispatches
    assert a.decisions == b.decisions
    assert (a.mode, a.bytes_unfused, a.num_dispatches_unfused) == \
        (b.mode, b.bytes_unfused, b.num_dispatches_unfused)
    assert [(o.name, o.kind, o.inputs, o.type) for o in a.graph.ops] == \
        [(o.name, o.kind, o.inputs, o.type) for o in b.graph.ops]


@pytest.mark.parametrize("source", ["bert_2layer.onnx", "gpt2_2block.onnx",
                                    "resnet_tiny.onnx", "llama_block.onnx"])
def test_a_plan_read_back_equals_the_one_fuse_forms(tmp_path, source):
    g = load_model(str(DATA / source))
    store = tunedb.TuneDB(tmp_path / "t.db")
    for opts in OPTIONS:
        formed = plancache.fused(g, store, **opts)
        _same(formed, fuse(g, **opts))
    store.close()
    again = tunedb.TuneDB(tmp_path / "t.db")   # a new process: JSON rows only
    for opts in OPTIONS:
        _same(plancache.fused(g, again, **opts), fuse(g, **opts))
    again.close()


def test_a_warm_tune_forms_no_plan(tmp_path, monkeypatch):
    g = Graph("softmax_then_scale")   # aggressive and conservative plans differ
    a = g.input("a", (64, 256))
    g.output(softmax(g, a) * 2.0)
    store = tunedb.TuneDB(tmp_path / "t.db")
    kw = dict(budget=1, strategy="random", store=store, baseline=False, verify=False)
    first = tune(g, **kw)
    monkeypatch.setattr(plancache, "fuse",
                        lambda *a, **k: pytest.fail("a plan was formed again"))
    second = tune(g, **kw)
    assert second.plan_choice == first.plan_choice
    assert [(t.name, t.best.knobs, t.best.time_us) for t in second.dispatches] == \
        [(t.name, t.best.knobs, t.best.time_us) for t in first.dispatches]
    assert [d.to_dict() for d in second.plan.decisions] == \
        [d.to_dict() for d in first.plan.decisions]


def _scores(mask: np.ndarray, rows: int = 8) -> Graph:
    g = Graph("masked")
    s = g.input("s", (rows, rows))
    m = g.constant(mask.astype(np.float32), name="mask")
    g.output(g.exp(s + m))
    return g


def test_the_key_sees_shapes_small_constants_and_a_causal_mask_not_weights():
    rows = 80   # 6400 elements: above VALUE_ELEMENTS, so a float mask enters by flag
    causal = np.triu(np.full((rows, rows), -1e9), 1)
    other = np.random.default_rng(0).standard_normal((rows, rows))
    key = plancache.structure_fingerprint
    assert key(_scores(causal, rows)) != key(_scores(other, rows))
    assert key(_scores(other, rows)) == key(_scores(other * 2, rows))   # weights by shape
    small = np.zeros((4, 4))
    assert key(_scores(small, 4)) != key(_scores(small + 1, 4))         # small: by value
    assert key(_scores(other, rows)) != key(_scores(other[:64, :64], 64))


def test_a_plan_it_cannot_encode_is_formed_and_not_stored(monkeypatch):
    g = load_model(str(DATA / "gpt2_block.onnx"))
    real = plancache.fuse

    def odd(*a, **k):
        plan = real(*a, **k)
        plan.decisions.append(Decision("x", "a", "b", False, "odd", {"set": {1, 2}}))
        return plan
    monkeypatch.setattr(plancache, "fuse", odd)
    store = tunedb.MemoryStore()
    plan = plancache.fused(g, store, aggressive=True)
    assert plan.decisions[-1].reason == "odd"
    assert not store.get_many(plancache.TABLE, [k for k in
                                                store._rows.get(plancache.TABLE, {})])


def test_a_row_it_cannot_read_is_formed_again():
    g = load_model(str(DATA / "gpt2_block.onnx"))
    store = tunedb.MemoryStore()
    plancache.fused(g, store, aggressive=True)
    for key in store._rows[plancache.TABLE]:
        store._rows[plancache.TABLE][key] = {"dispatches": [{"__dc": "Unknown", "f": {}}]}
    _same(plancache.fused(g, store, aggressive=True), fuse(g, aggressive=True))
