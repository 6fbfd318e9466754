"""Writes the bfloat16 and int8/uint8 quantized fixtures of tests/data/dtypes/ (issue 28,
item 2).

Built with onnx.helper, no torch: the quantized graphs are the patterns quantizers write
(onnxruntime's quantize_static in QDQ and QOperator formats, quantize_dynamic's
DynamicQuantizeLinear + MatMulInteger); the bfloat16 ones what a bf16 export of an MLP
and of an attention score block holds (bf16 weights, inputs and outputs). Small sizes,
weights drawn from a seeded rng. Run from the repository root:

    python tools/export_dtype_models.py [OUT_DIR]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
RNG = np.random.default_rng(0)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="wavefuse tools/export_dtype_models.py")
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def qdq_matmul():
    """QDQ format: x -> Q/DQ -> MatMul(DQ(int8 weight, per-channel)) + bias -> Q/DQ."""
    M, K, N = 16, 64, 48
    w = RNG.integers(-127, 128, (K, N)).astype(np.int8)
    w_scale = (RNG.uniform(0.5, 1.5, N) / 64).astype(np.float32)
    bias = RNG.uniform(-0.5, 0.5, N).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["yb"]),
        helper.make_node("QuantizeLinear", ["yb", "y_scale", "y_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"]),
    ]
    inits = [_init("x_scale", np.float32(1 / 127)), _init("x_zp", np.uint8(128)),
             _init("w", w), _init("w_scale", w_scale), _init("bias", bias),
             _init("y_scale", np.float32(0.05)), _init("y_zp", np.int8(0))]
    return _model("qdq_matmul", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], inits)


def matmul_integer():
    """MatMulInteger: uint8 activations with a zero point, int8 weights with a
    per-column zero point, int32 result."""
    M, K, N = 32, 64, 48
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])]
    inits = [_init("b", RNG.integers(-128, 128, (K, N)).astype(np.int8)),
             _init("a_zp", np.uint8(131)),
             _init("b_zp", RNG.integers(-3, 4, N).astype(np.int8))]
    return _model("matmul_integer", nodes,
                  [helper.make_tensor_value_info("a", TensorProto.UINT8, [M, K])],
                  [helper.make_tensor_value_info("y", TensorProto.INT32, [M, N])], inits)


def qlinear_matmul():
    """QOperator format: QuantizeLinear -> QLinearMatMul (uint8 x int8 -> uint8) ->
    DequantizeLinear, float in and out."""
    M, K, N = 16, 64, 32
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "a_scale", "a_zp"], ["a"]),
        helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp",
                                           "y_scale", "y_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"]),
    ]
    inits = [_init("a_scale", np.float32(1 / 127)), _init("a_zp", np.uint8(128)),
             _init("b", RNG.integers(-127, 128, (K, N)).astype(np.int8)),
             _init("b_scale", np.float32(1 / 64)), _init("b_zp", np.int8(0)),
             _init("y_scale", np.float32(0.02)), _init("y_zp", np.uint8(120))]
    return _model("qlinear_matmul", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], inits)


def dynamic_matmul():
    """quantize_dynamic's pattern: DynamicQuantizeLinear on the activations,
    MatMulInteger with a uint8 weight, the int32 result scaled back to float."""
    M, K, N = 16, 64, 32
    b_scale = np.float32(1 / 50)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"]),
        helper.make_node("MatMulInteger", ["xq", "b", "xzp", "b_zp"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "b_scale"], ["s"]),
        helper.make_node("Mul", ["accf", "s"], ["y"]),
    ]
    inits = [_init("b", RNG.integers(0, 256, (K, N)).astype(np.uint8)),
             _init("b_zp", np.uint8(128)), _init("b_scale", b_scale)]
    return _model("dynamic_matmul", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], inits)


def qlinear_conv():
    """QLinearConv 3x3 (uint8 input, int8 per-channel weights, int32 bias, uint8 out)."""
    C, O, H = 8, 16, 10
    w_scale = (RNG.uniform(0.5, 1.5, O) / 100).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp",
                                         "y_scale", "y_zp", "bias"], ["yq"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"]),
    ]
    inits = [_init("x_scale", np.float32(1 / 127)), _init("x_zp", np.uint8(128)),
             _init("w", RNG.integers(-127, 128, (O, C, 3, 3)).astype(np.int8)),
             _init("w_scale", w_scale), _init("w_zp", np.zeros(O, np.int8)),
             _init("y_scale", np.float32(0.02)), _init("y_zp", np.uint8(128)),
             _init("bias", RNG.integers(-500, 500, O).astype(np.int32))]
    return _model("qlinear_conv", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, O, H, H])],
                  inits)


def conv_integer():
    """ConvInteger 3x3 stride 2: uint8 input with a zero point, uint8 filter."""
    C, O, H = 8, 16, 9
    nodes = [helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"],
                              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    inits = [_init("w", RNG.integers(0, 256, (O, C, 3, 3)).astype(np.uint8)),
             _init("x_zp", np.uint8(100)), _init("w_zp", np.uint8(128))]
    return _model("conv_integer", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, C, H, H])],
                  [helper.make_tensor_value_info("y", TensorProto.INT32, [1, O, 5, 5])],
                  inits)


def bf16_mlp():
    """bfloat16 MatMul + bias + Gelu-free MLP (Relu), bf16 in and out."""
    M, K, N = 16, 64, 48
    w = RNG.standard_normal((K, N)).astype(np.float32) / 8
    b = RNG.standard_normal(N).astype(np.float32) / 4
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["y"])]
    inits = [helper.make_tensor("w", TensorProto.BFLOAT16, w.shape, w.reshape(-1)),
             helper.make_tensor("b", TensorProto.BFLOAT16, b.shape, b)]
    return _model("bf16_mlp", nodes,
                  [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [M, K])],
                  [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [M, N])], inits)


def bf16_softmax():
    """Scaled scores and a softmax in bfloat16, with the f32 upcast LLM exports insert
    around the softmax (Cast to FLOAT and back)."""
    S, D = 32, 64
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Cast", ["ss"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Softmax", ["sf"], ["pf"], axis=-1),
             helper.make_node("Cast", ["pf"], ["y"], to=TensorProto.BFLOAT16)]
    inits = [helper.make_tensor("scale", TensorProto.BFLOAT16, [], [0.125])]
    return _model("bf16_softmax", nodes,
                  [helper.make_tensor_value_info("q", TensorProto.BFLOAT16, [S, D]),
                   helper.make_tensor_value_info("kt", TensorProto.BFLOAT16, [D, S])],
                  [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [S, S])], inits)


MODELS = {"qdq_matmul": qdq_matmul, "matmul_integer": matmul_integer,
          "qlinear_matmul": qlinear_matmul, "dynamic_matmul": dynamic_matmul,
          "qlinear_conv": qlinear_conv, "conv_integer": conv_integer,
          "bf16_mlp": bf16_mlp, "bf16_softmax": bf16_softmax}


def main(argv=None) -> int:
    out = (argv or sys.argv[1:] or ["tests/data/dtypes"])[0]
    os.makedirs(out, exist_ok=True)
    for name, build in MODELS.items():
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(build(), path)
        print(f"{path}: {os.path.getsize(path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
