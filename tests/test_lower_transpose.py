"""Permute dispatches: naive walks vs the LDS-tiled lowering (compiler.lower.transpose)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gpusim
from compiler.ir import models
from compiler.ir.graph import Graph
from compiler.lower import LoweringError, lower
from compiler.schedule import schedule_space
from gpusim.hw import GFX942
from compiler.lower.common import memory_image
from compiler.lower.transpose import staging_plan
from compiler.fusion import fuse
from compiler.ir.reference import evaluate, random_inputs


def run(g, knobs, arch="gfx942"):
    d = fuse(g).dispatches[0]
    k = lower(g, d, knobs, arch)
    x = random_inputs(g)
    res = gpusim.simulate(k, arch=arch, inputs={n: memory_image(g, n, v) for n, v in x.items()})
    return k, res, evaluate(g, x)


def lds_knobs(tile=32, workgroup=256, pad=1):
    return {"transpose": "lds", "tile": tile, "workgroup": workgroup, "lds_pad": pad}


def channel_major_to_nhwc(n=2, c=40, h=5, w=7):
    """An NCHW-stored tensor plus an NHWC one, added: the classic layout change."""
    g = Graph("nchw_add")
    a = g.input("a", (n, h, w, c), layout=(0, 3, 1, 2))
    b = g.input("b", (n, h, w, c))
    g.output(g.relu(g.add(a, b)))
    return g


def permute3d(a=6, b=40, c=36):
    g = Graph("permute3d")
    x = g.input("x", (a, b, c), dtype="f16")
    g.output(g.mul(g.transpose(x, (2, 0, 1)), 2.0))
    return g


CASES = [lambda: models.transpose_add(rows=70, cols=45), channel_major_to_nhwc, permute3d]


@pytest.mark.parametrize("make", CASES)
@pytest.mark.parametrize("tile,workgroup,pad", [(32, 256, 0), (32, 1024, 1), (64, 512, 1)])
def test_tiled_permute_equals_numpy(make, tile, workgroup, pad):
    g = make()
    k, res, ref = run(g, lds_knobs(tile, workgroup, pad))
    out = g.outputs[0]
    np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-3, atol=1e-3)
    assert k.meta["staged_input"] in ("x", "a")


def test_staging_plan_finds_the_disagreeing_dims():
    g = models.transpose_add(rows=64, cols=96)
    staged, d_i, d_o, shape = staging_plan(g, fuse(g).dispatches[0])
    # out[i, j] = x[j, i] + y[i, j]: x is contiguous along the output's dim 0
    assert (staged, d_i, d_o, shape) == ("x", 0, 1, (96, 64))
    g = models.softmax()
    assert isinstance(staging_plan(g, fuse(g).dispatches[0]), str)  # nothing to stage
    g = Graph("bias_rows")  # a per-row value broadcast along the output's rows is no permute
    g.output(g.sub(g.input("x", (64, 48)), g.input("m", (64, 1))))
    assert isinstance(staging_plan(g, fuse(g).dispatches[0]), str)


def test_space_offers_tiles_only_for_permutes():
    g = models.transpose_add(rows=256, cols=256)
    space = schedule_space(g, fuse(g).dispatches[0], GFX942)
    kinds = {c.knobs["transpose"] for c in space}
    assert kinds == {"none", "lds"}
    assert all(c.legal for c in space if c.knobs["transpose"] == "lds")
    g = models.transpose_add(rows=32, cols=24)
    illegal = [c for c in schedule_space(g, fuse(g).dispatches[0], GFX942)
               if not c.legal and c.knobs["transpose"] == "lds"]
    assert illegal and all(c.knobs["tile"] == 64 and "larger than the permuted dims" in c.reason
                           for c in illegal)
    g = Graph("plain")
    g.output(g.relu(g.input("x", (64, 64))))
    assert all("transpose" not in c.knobs for c in schedule_space(g, fuse(g).dispatches[0], GFX942))


def test_tiled_reads_and_writes_coalesced_and_padding_removes_conflicts():
    """Naive (output order): x is read one line per lane. Tiled: both sides 100%; the
    column read of an unpadded 32-wide tile puts a half-wave on one bank (31 conflict
    cycles per half-wave), one pad word spreads it over all 32 banks."""
    g = models.transpose_add(rows=256, cols=256)
    d = fuse(g).dispatches[0]
    naive = gpusim.simulate(lower(g, d, {"workgroup": 256, "vector": 1, "elems": 1,
                                         "order": "output", "transpose": "none"}),
                            functional=False)
    flat = gpusim.simulate(lower(g, d, lds_knobs(pad=0)), functional=False)
    padded = gpusim.simulate(lower(g, d, lds_knobs(pad=1)), functional=False)
    assert naive.counters["coalescing_pct"] < 60
    assert flat.counters["coalescing_pct"] == padded.counters["coalescing_pct"] == 100
    reads = 256 * 256 // 64  # wave64 tile reads, one element per lane
    assert flat.counters["lds_bank_conflict_cycles"] == reads * 62
    assert padded.counters["lds_bank_conflict_cycles"] == 0
    assert padded.time_us < naive.time_us


def test_search_picks_the_tile_for_a_large_permute():
    from compiler.tuning.search import tune
    g = models.transpose_add(rows=1024, cols=1024)
    report = tune(g, "gfx942", budget=None)
    best = report.dispatches[0]
    assert best.best.knobs["transpose"] == "lds"
    assert best.best.knobs["lds_pad"] == 1 or best.best.time_us <= min(
        c.time_us for c in best.candidates if c.knobs.get("lds_pad") == 1)


def test_bad_tile_knobs_are_clear_errors():
    g = models.transpose_add(rows=64, cols=64)
    d = fuse(g).dispatches[0]
    with pytest.raises(LoweringError, match="multiple of tile"):
        lower(g, d, lds_knobs(32, 48))
    with pytest.raises(LoweringError, match="tile=48"):
        lower(g, d, lds_knobs(48, 256))
    g = Graph("plain")
    g.output(g.relu(g.input("x", (64, 64))))
    with pytest.raises(LoweringError, match="use transpose=none"):
        lower(g, fuse(g).dispatches[0], lds_knobs())


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(2, 80), cols=st.integers(2, 80),
       tile=st.sampled_from([32, 64]), pad=st.sampled_from([0, 1]))
def test_tiled_transpose_property(rows, cols, tile, pad):
    g = models.transpose_add(rows=rows, cols=cols)
    _, res, ref = run(g, lds_knobs(tile, 256 if tile == 32 else 512, pad))
    out = g.outputs[0]
    np.testing.assert_allclose(res.outputs[out], ref[out], rtol=1e-5, atol=1e-5)
