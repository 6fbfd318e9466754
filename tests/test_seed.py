"""The rocMLIR seed as rocMLIR builds it (compiler.cli.seed): absolute time within 1.5x of the
measurement, the placement's direction, and the evidence that the epilogue is too small
to carry the measured gain."""
import pytest

from gpusim.hw import GFX942
from compiler.cli import seed


@pytest.fixture(scope="module")
def rows():
    return {(r.model, r.swizzle): r for r in seed.seed_rows(GFX942)}


def test_absolute_time_within_1_5x_of_the_measurement(rows):
    for swz in ("after_fusion", "before_fusion"):
        pred = rows[("conv_add_relu", swz)].kernel_us
        for pub in (seed.PUBLISHED[f"{swz}_us"], seed.PUBLISHED[f"{swz}_mean_us"]):
            assert 1 / 1.5 <= pred / pub <= 1.5, (swz, pred, pub)


def test_placement_direction_matching_and_mismatched(rows):
    t = {k: r.kernel_us for k, r in rows.items()}
    # the residual in the output's layout: swizzling before the fusion wins (the PR)
    assert t[("conv_add_relu", "before_fusion")] < t[("conv_add_relu", "after_fusion")]
    # channel-major residual: the swizzled order reads it worse (lower coalescing)
    assert rows[("conv_add_relu_mismatch", "before_fusion")].coalescing_pct < 100.0
    assert t[("conv_add_relu_mismatch", "none")] < t[("conv_add_relu_mismatch", "before_fusion")]
    g = seed.gains(list(rows.values()))
    assert 1.0 < g["conv_add_relu"] < 1.05  # far below the measured 1.10-1.17x (see below)


def test_epilogue_is_too_small_to_carry_the_measured_gain():
    tail = seed.epilogue_share("gfx942")
    assert 0 < tail < 0.05
    # even a free epilogue would gain less than the smallest measured gain
    assert 1 / (1 - tail) < min(seed.published_gains())


@pytest.mark.slow
def test_tune_command_prints_the_seed_case(capsys):
    """The CLI path of the seed question (a merge once left it calling a removed helper)."""
    import json

    from compiler import cli
    code = cli.main(["tune", "conv_add_relu", "--fix", "mma=mfma", "--fix",
                     "swizzle=before_fusion", "--budget", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "54.1" in json.dumps(json.loads(out))  # the published develop-branch time sits beside it
