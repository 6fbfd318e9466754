"""The tuning database: keys, reuse, concurrency and damaged files (compiler.tuning.tunedb)."""
from __future__ import annotations

import json
import multiprocessing
import shutil
import sqlite3

import pytest

from gpusim.hw import GFX942
from compiler.ir import builders
from compiler.tuning import search, tunedb
from compiler.ir.builders import softmax
from compiler.cli import main
from compiler.ir.graph import Graph
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.tuning.search import tune, tune_dispatches


def _two_softmaxes(rows=64, cols=256, second_cols=None) -> Graph:
    g = Graph("two_softmaxes")
    a = g.input("a", (rows, cols))
    b = g.input("b", (rows, second_cols or cols))
    g.output(softmax(g, a), softmax(g, b))
    return g


@pytest.fixture
def counted(monkeypatch):
    """Counts the candidates actually lowered and simulated."""
    calls = []
    real = search.score

    def score(graph, dispatch, knobs, arch, vgprs=None):
        calls.append((dispatch.name, dict(knobs)))
        return real(graph, dispatch, knobs, arch, vgprs)

    monkeypatch.setattr(search, "score", score)
    return calls


def test_identical_dispatches_share_a_fingerprint_and_are_scored_once(counted):
    g = _two_softmaxes()
    ds = fuse(g).dispatches
    assert len(ds) == 2
    fps = {tunedb.dispatch_fingerprint(g, d) for d in ds}
    assert len(fps) == 1
    tuned = tune_dispatches(g, ds, GFX942, budget=4)
    assert len(counted) == 4 and {name for name, _ in counted} == {ds[0].name}
    assert tuned[0].best.knobs == tuned[1].best.knobs
    assert tuned[0].kernel is not tuned[1].kernel  # each dispatch lowers its own winner


def test_fingerprint_sees_shapes_dtypes_layouts_and_constants():
    base = _two_softmaxes()
    other = _two_softmaxes(second_cols=128)
    d0, d1 = fuse(base).dispatches, fuse(other).dispatches
    assert tunedb.dispatch_fingerprint(base, d0[1]) != tunedb.dispatch_fingerprint(other, d1[1])
    f16 = load_model("softmax:dtype=f16")
    f32 = load_model("softmax")
    assert tunedb.dispatch_fingerprint(f16, fuse(f16).dispatches[0]) != \
        tunedb.dispatch_fingerprint(f32, fuse(f32).dispatches[0])
    a, b = load_model("conv_add_relu:c=64,k=32"), load_model("conv_add_relu_mismatch:c=64,k=32")
    assert tunedb.dispatch_fingerprint(a, fuse(a).dispatches[0]) != \
        tunedb.dispatch_fingerprint(b, fuse(b).dispatches[0])


def _linear(w, b, ids=None) -> Graph:
    g = Graph("lin")
    x = g.input("x", (16, 8))
    y = g.add(g.matmul(x, g.constant(w, "w")), g.constant(b, "b"))
    g.output(y if ids is None else g.gather(y, g.constant(ids, "ids"), axis=0))
    return g


def test_float_weights_enter_the_fingerprint_by_shape_not_by_value():
    """Layers that differ only in their weights are one tuning job (BERT-base's 12
    layers); scalars and integer constants (inlined, or deciding addresses) still count."""
    import numpy as np
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((8, 32)).astype(np.float32), np.ones(32, np.float32)

    def fp(g):
        return {tunedb.dispatch_fingerprint(g, d) for d in fuse(g).dispatches}
    assert fp(_linear(w, b)) == fp(_linear(2 * w, -b))
    assert fp(_linear(w, b[:1])) != fp(_linear(w, -b[:1]))              # a scalar
    ids = np.arange(4, dtype=np.int32)
    assert fp(_linear(w, b, ids)) != fp(_linear(w, b, ids[::-1].copy()))  # indices
    from compiler.frontends.onnx import load_onnx
    from pathlib import Path
    g = load_onnx(Path(__file__).parent / "data" / "bert_2layer.onnx")
    ds = fuse(g).dispatches
    assert len({tunedb.dispatch_fingerprint(g, d) for d in ds}) < len(ds) // 2 + 2


def test_second_tune_simulates_nothing_and_gives_the_same_result(tmp_path, counted):
    g = load_model("layernorm")
    db = tunedb.TuneDB(tmp_path / "t.sqlite3")
    first = tune(g, "gfx942", budget=3, store=db)
    n = len(counted)
    assert n > 0
    db.close()
    db = tunedb.TuneDB(tmp_path / "t.sqlite3")
    second = tune(g, "gfx942", budget=3, store=db)
    assert len(counted) == n
    assert json.dumps(first.to_json(), sort_keys=True) == \
        json.dumps(second.to_json(), sort_keys=True)
    info = db.info()
    assert info["scores"]["rows"] == info["scores"]["current"] > 0
    assert info["checks"]["rows"] >= 1


def test_model_version_follows_the_timing_sources(tmp_path, monkeypatch):
    root = tmp_path / "src"
    for pkg in ("gpusim", "compiler"):
        shutil.copytree(tunedb._ROOT / pkg, root / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(tunedb, "_ROOT", root)
    monkeypatch.setattr(tunedb, "_VERSION", {})
    names = {p.relative_to(root).as_posix() for p in tunedb.timing_sources()}
    assert {"gpusim/engine.py", "gpusim/engine_jit.py", "gpusim/sim.py",
            "gpusim/hw/gfx942.py", "gpusim/occupancy.py"} <= names
    before = tunedb.model_version()
    hw = root / "gpusim" / "hw" / "gfx942.py"
    hw.write_text(hw.read_text() + "\n# a changed hardware table\n")
    tunedb._VERSION.clear()
    after = tunedb.model_version()
    assert before != after and before.split("/")[1] == after.split("/")[1]
    lowering = root / "compiler" / "lower" / "reduction.py"
    lowering.write_text(lowering.read_text() + "\n# a changed lowering\n")
    tunedb._VERSION.clear()
    assert tunedb.model_version().split("/")[1] != after.split("/")[1]
    assert "gpusim/steady.py" in names  # the loop extrapolation the scores use
    lowered = tunedb.model_version()
    monkeypatch.setattr(tunedb, "SCORE_SIMULATE", {**tunedb.SCORE_SIMULATE,
                                                   "extrapolate_loops": False})
    tunedb._VERSION.clear()  # how the search simulates is part of the timing model
    assert tunedb.model_version().split("/")[0] != lowered.split("/")[0]


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("wavefuse: error:") and len(err.strip().splitlines()) == 1
    return err


@pytest.mark.parametrize("damage", ["garbage", "foreign", "bad_row"])
def test_a_damaged_database_is_a_one_line_error_naming_the_fix(tmp_path, capsys, damage):
    path = tmp_path / "tune.sqlite3"
    if damage == "garbage":
        path.write_bytes(b"SQLite format 3\0" + b"\x13" * 5000)
    elif damage == "foreign":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE notes (text TEXT)")
        con.commit()
        con.close()
    else:
        assert main(["tune", "softmax", "--budget", "2", "--no-baseline", "--cache",
                     str(path), "--json"]) == 0
        capsys.readouterr()
        con = sqlite3.connect(path)
        con.execute("UPDATE scores SET value = replace(value, '\"time_us\": ', "
                    "'\"time_us\": 1')")
        con.commit()
        con.close()
    err = _one_line_error(capsys, ["tune", "softmax", "--budget", "2", "--cache", str(path)])
    assert str(path) in err and "wavefuse cache clear" in err and "--no-cache" in err
    assert main(["tune", "softmax", "--budget", "2", "--no-baseline", "--no-cache",
                 "--cache", str(path), "--json"]) == 0
    capsys.readouterr()
    assert main(["cache", "clear", "--cache", str(path)]) == 0
    assert not path.exists()
    assert main(["tune", "softmax", "--budget", "2", "--no-baseline", "--cache", str(path),
                 "--json"]) == 0


def test_cache_info_and_clear_cli(tmp_path, capsys):
    path = tmp_path / "c.sqlite3"
    assert main(["cache", "info", "--cache", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exists"] is False
    assert main(["tune", "rmsnorm", "--budget", "2", "--cache", str(path), "--json"]) == 0
    capsys.readouterr()
    assert main(["cache", "info", "--cache", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["scores"]["current"] > 0 and info["model_version"] == tunedb.model_version()
    assert main(["cache", "clear", "--cache", str(path)]) == 0
    assert not path.exists()


def test_no_cache_writes_nothing(tmp_path, capsys):
    path = tmp_path / "never.sqlite3"
    assert main(["tune", "softmax", "--budget", "2", "--no-baseline", "--no-cache",
                 "--cache", str(path), "--json"]) == 0
    assert not path.exists()


def test_environment_variable_chooses_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(tunedb.ENV_VAR, str(tmp_path))
    assert tunedb.default_path() == tmp_path / tunedb.FILE_NAME
    monkeypatch.delenv(tunedb.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tunedb.default_path() == tmp_path / "xdg" / "wavefuse" / tunedb.FILE_NAME


def _writer(args):
    path, worker, n = args
    db = tunedb.TuneDB(path)
    try:
        for i in range(n):
            key = f"w{worker}-{i}"
            db.put_many("scores", {key: {"worker": worker, "i": i}}, "v")
            got = tunedb.TuneDB.get_many(db, "scores", [key, f"w{(worker + 1) % 4}-{i}"])
            assert got[key] == {"worker": worker, "i": i}
    finally:
        db.close()
    return n


def test_several_processes_write_at_once(tmp_path):
    path = str(tmp_path / "shared.sqlite3")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        assert pool.map(_writer, [(path, w, 60) for w in range(4)]) == [60] * 4
    db = tunedb.TuneDB(path)
    try:
        rows = db._conn.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
        mode = db._conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        db.close()
    assert rows == 240 and mode == "wal"


def test_a_causal_mask_enters_the_fingerprint_though_it_is_a_float_constant():
    """The attention lowering recognises a causal triangle by its values and skips key
    blocks, so a float mask of the same shape but other values is another tuning job."""
    import math

    import numpy as np

    def attention(mask):
        g = Graph("attn")
        q, k, v = (g.input(n, (2, 16, 16)) for n in "qkv")
        s = g.mul(g.matmul(q, g.transpose(k, (0, 2, 1))), 1.0 / math.sqrt(16))
        s = g.add(s, g.constant(mask.astype(np.float32), "mask"))
        g.output(g.matmul(builders.softmax(g, s), v))
        return g

    def fp(g):
        return {tunedb.dispatch_fingerprint(g, d) for d in fuse(g).dispatches}
    tri = np.where(np.arange(16)[None, :] > np.arange(16)[:, None], -1e4, 0.0)
    noise = np.random.default_rng(0).standard_normal((16, 16))
    assert fp(attention(tri)) == fp(attention(2 * tri))     # still causal: same program
    assert fp(attention(tri)) != fp(attention(noise))       # not causal: no skipping


def test_graph_fingerprint_hashes_large_constants_on_threads_as_it_would_alone():
    """The threaded hashes of large constants give the fingerprint the plain walk gives,
    and one changed weight value changes it (the check key's data identity)."""
    import hashlib
    import json

    import numpy as np
    from compiler.ir.graph import Graph

    def build(w):
        g = Graph("w")
        x = g.input("x", (4, 256))
        g.output(g.matmul(x, g.constant(w, name="w")) + 1.0)
        return g

    w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    g = build(w)
    body = [[op.name, op.kind, list(op.inputs), tunedb._type(op.type),
             tunedb._canon(dict(op.attrs))] for op in g.ops]
    plain = hashlib.sha256(json.dumps([body, list(g.outputs)], sort_keys=True,
                                      separators=(",", ":")).encode()).hexdigest()[:32]
    assert tunedb._large_array_hashes(g)[0]  # the weight (256 KB) is hashed on a thread
    assert tunedb.graph_fingerprint(g) == plain
    w2 = w.copy()
    w2[17, 3] += 1.0
    assert tunedb.graph_fingerprint(build(w2)) != plain

