"""The model zoo: every model builds, validates and evaluates; specs parse or fail clearly."""
import numpy as np
import pytest

from compiler.ir.graph import GraphError
from compiler.ir.models import MODELS, ModelError, load_model, parse_spec
from compiler.ir.reference import evaluate, random_inputs

SMALL = {"conv_add_relu": "conv_add_relu:c=64,k=32", "conv_add_relu_mismatch":
         "conv_add_relu_mismatch:c=64,k=32", "encoder_layer":
         "encoder_layer:seq=16,hidden=64,heads=4,ffn=128"}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_builds_and_evaluates(name):
    g = load_model(SMALL.get(name, name))
    out = evaluate(g, random_inputs(g, 0))
    assert out and all(np.all(np.isfinite(v)) for v in out.values())
    for o, v in out.items():
        assert v.shape == g.op(o).type.shape


def test_defaults_are_reported_and_params_change_shapes():
    assert MODELS["layernorm"].params == {"rows": 64, "cols": 256, "dtype": "f32"}
    g = load_model("layernorm:rows=8,cols=32")
    assert g.op("x").type.shape == (8, 32)
    assert load_model("softmax:dtype=f16").op("x").type.dtype == "f16"


def test_model_values_match_formulas():
    g = load_model("softmax:rows=4,cols=16")
    x = random_inputs(g, 3)["x"]
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(evaluate(g, {"x": x})[g.outputs[0]], e / e.sum(-1, keepdims=True),
                               rtol=1e-5)
    g = load_model("attention:heads=2,seq=8,dim=4")
    ins = random_inputs(g, 1)
    s = ins["q"] @ ins["k"].transpose(0, 2, 1) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(evaluate(g, ins)[g.outputs[0]],
                               (p / p.sum(-1, keepdims=True)) @ ins["v"], rtol=1e-5)


def test_conv_models_differ_only_in_residual_layout():
    a, b = load_model(SMALL["conv_add_relu"]), load_model(SMALL["conv_add_relu_mismatch"])
    assert a.op("residual").type.layout is None
    assert b.op("residual").type.layout == (0, 3, 1, 2)
    assert a.op("residual").type.shape == b.op("residual").type.shape == (1, 7, 7, 32)


@pytest.mark.parametrize("spec,pattern", [
    ("nosuch", "unknown model 'nosuch'.*softmax"),
    ("layernorm:rowz=3", "no parameter 'rowz'.*rows=64, cols=256"),
    ("layernorm:rows=-3", "rows='-3' is not a valid positive integer"),
    ("layernorm:rows=abc", "not a valid positive integer"),
    ("layernorm:rows", "parameter 'rows' has no value; write rows=64"),
    ("layernorm:rows=8,rows=16", "parameter 'rows' is given twice"),
    ("softmax:dtype=f64", "f64"),
    ("encoder_layer:hidden=100,heads=12", "multiple of heads"),
    ("conv_add_relu:h=1,w=1,c=4,k=4", None),
])
def test_bad_specs(spec, pattern):
    if pattern is None:
        assert load_model(spec).op("x").type.shape == (1, 1, 1, 4)
        return
    with pytest.raises(GraphError, match=pattern):
        load_model(spec)


def test_parse_spec_types_values():
    assert parse_spec("mlp:tokens=4, hidden=8") == ("mlp", {"tokens": 4, "hidden": 8})
    with pytest.raises(ModelError):
        parse_spec("")
