"""ConvTranspose (VAE and segmentation decoders, GAN generators) imports as the convolution
whose gradient it is: zeros inserted between the input's elements, padded, convolved at
stride 1 by the flipped, per-group transposed filter. Checked against a direct numpy
scatter written from the ONNX definition (every case, grouped ones included), against
onnx's ReferenceEvaluator where its grouped path is sound (group 1), fused plans against
the unfused graph, and the simulated kernels through ``wavefuse verify``."""
import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from compiler.frontends.onnx import from_model
from compiler.fusion import fuse
from compiler.fusion.plan import execute_plan
from compiler.ir import numerics
from compiler.ir.graph import ShapeError
from compiler.ir.reference import evaluate


def scatter_conv_transpose(x, w, b, strides, pads, dil, out_pad, group):
    """y[o*s - pb + k*d] += x[i] * w[i, o, k] per spatial dim, channels per group."""
    n, cin = x.shape[:2]
    nsp = x.ndim - 2
    cin_g, cout_g = cin // group, w.shape[1]
    kernel = w.shape[2:]
    out = [strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1
           - pads[i] - pads[i + nsp] for i in range(nsp)]
    y = np.zeros((n, cout_g * group, *out), np.float64)
    for gi in range(group):
        for c in range(cin_g):
            ci = gi * cin_g + c
            for pos in np.ndindex(*x.shape[2:]):
                for k in np.ndindex(*kernel):
                    at = [pos[i] * strides[i] - pads[i] + k[i] * dil[i] for i in range(nsp)]
                    if all(0 <= at[i] < out[i] for i in range(nsp)):
                        idx = (slice(None), slice(gi * cout_g, (gi + 1) * cout_g), *at)
                        y[idx] += x[(slice(None), ci, *pos)][:, None] * w[(ci, slice(None), *k)]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nsp)
    return y.astype(np.float32)


def _model(x_shape, w, b=None, weights_as_input=False, out_shape=None, **attrs):
    inits = [] if weights_as_input else [onnx.numpy_helper.from_array(w, "w")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    if weights_as_input:
        ins.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape))
    names = ["x", "w"]
    if b is not None:
        inits.append(onnx.numpy_helper.from_array(b, "b"))
        names.append("b")
    node = helper.make_node("ConvTranspose", names, ["y"], **attrs)
    g = helper.make_graph([node], "t", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _ours(model, feeds):
    g = from_model(model, "t")
    inputs = {g.meta["onnx_inputs"][k]: v for k, v in feeds.items()}
    return g, inputs, evaluate(g, inputs)[g.meta["onnx_outputs"]["y"]]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_conv_transpose_matches_the_definition(data):
    nsp = data.draw(st.sampled_from([1, 2]), "nsp")
    group = data.draw(st.sampled_from([1, 2]), "group")
    cin = group * data.draw(st.integers(1, 2), "cin_g")
    cout_g = data.draw(st.integers(1, 3), "cout_g")
    spatial = tuple(data.draw(st.integers(1, 5)) for _ in range(nsp))
    kernel = tuple(data.draw(st.integers(1, 4)) for _ in range(nsp))
    strides = tuple(data.draw(st.integers(1, 3)) for _ in range(nsp))
    dil = tuple(data.draw(st.integers(1, 2)) for _ in range(nsp))
    out_pad = tuple(data.draw(st.integers(0, s - 1)) for s in strides)
    pads = tuple(data.draw(st.integers(0, 2)) for _ in range(2 * nsp))
    out = [strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1
           - pads[i] - pads[i + nsp] for i in range(nsp)]
    rng = np.random.default_rng(data.draw(st.integers(0, 99), "seed"))
    x = rng.standard_normal((1, cin) + spatial).astype(np.float32)
    w = rng.standard_normal((cin, cout_g) + kernel).astype(np.float32)
    b = rng.standard_normal(cout_g * group).astype(np.float32) if data.draw(st.booleans()) else None
    as_input = data.draw(st.booleans(), "weights as input")
    m = _model(x.shape, w, b, as_input, (1, cout_g * group, *[max(o, 1) for o in out]),
               strides=strides, pads=pads, dilations=dil,
               output_padding=out_pad, group=group)
    feeds = {"x": x, **({"w": w} if as_input else {})}
    if min(out) < 1:
        with pytest.raises(ShapeError):
            from_model(m, "t")
        return
    _, _, got = _ours(m, feeds)
    want = scatter_conv_transpose(x, w, b, strides, pads, dil, out_pad, group)
    assert got.shape == want.shape
    ok, err = numerics.compare(got, want, 1e-4)
    assert ok, err
    if group == 1:
        ref = ReferenceEvaluator(m).run(None, feeds)[0]
        assert numerics.compare(got, ref, 1e-4)[0]


@pytest.mark.parametrize("attrs", [
    {"strides": [3, 2], "output_shape": [10, 8]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"strides": [2, 2], "auto_pad": "VALID"},
])
def test_output_shape_and_auto_pad_match_onnx(attrs):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    w = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    m = _model(x.shape, w, out_shape=ReferenceEvaluator(_model(x.shape, w, out_shape=(1, 2, 1, 1), **attrs)).run(None, {"x": x})[0].shape, **attrs)
    _, _, got = _ours(m, {"x": x})
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert got.shape == ref.shape and numerics.compare(got, ref, 1e-5)[0]


def test_an_infinity_stays_an_infinity():
    """The inserted zeros are data movement, not a multiply by a 0/1 mask (inf * 0 = NaN)."""
    x = np.array([[[[np.inf, 1.0], [2.0, 3.0]]]], np.float32)
    w = np.ones((1, 1, 1, 1), np.float32)
    _, _, got = _ours(_model(x.shape, w, out_shape=(1, 1, 3, 3), strides=[2, 2]), {"x": x})
    assert got[0, 0, 0, 0] == np.inf and not np.isnan(got).any()


def test_a_decoder_upsampling_fuses_and_simulates(tmp_path):
    """A VAE-decoder-style upsampling (stride 2, 4x4 filter, pads 1, bias, ReLU): fused
    plans equal the unfused graph, and `wavefuse verify` passes on the simulated kernels."""
    from compiler import cli
    rng = np.random.default_rng(5)
    x_shape = (1, 8, 6, 6)
    w = (rng.standard_normal((8, 4, 4, 4)) * 0.2).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g_ = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2],
                          pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["t"], ["y"])], "dec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, 12, 12))],
        initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(g_, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.standard_normal(x_shape).astype(np.float32)
    g, inputs, got = _ours(model, {"x": x})
    want = np.maximum(scatter_conv_transpose(x, w, b, (2, 2), (1, 1, 1, 1), (1, 1), (0, 0), 1), 0)
    assert numerics.compare(got, want, 1e-4)[0]
    ref = evaluate(g, inputs)
    for aggressive in (True, False):
        fused = execute_plan(fuse(g, aggressive=aggressive), inputs)
        for o in ref:
            assert numerics.compare(fused[o], ref[o], 1e-5)[0]
    path = tmp_path / "dec.onnx"
    onnx.save(model, path)
    assert cli.main(["verify", str(path)]) == 0


def test_a_filter_that_does_not_fit_is_refused_in_one_line():
    w = np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(ShapeError) as e:
        from_model(_model((1, 4, 5, 5), w, out_shape=(1, 2, 7, 7)), "t")
    assert "\n" not in str(e.value) and "C_in, C_out/group" in str(e.value)
