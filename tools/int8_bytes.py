"""Bytes moved by int8 GEMMs and convs with 8-bit tensors stored as bytes against the
widened i32 storage of earlier rounds (issue 28, item 2), for docs/dtypes.md.

    python tools/int8_bytes.py [--arch gfx942,gfx90a] [--budget N] [--save-knobs F | --knobs F]

Each model (MatMulInteger of an int8 activation by int8 weights at BERT-base's attention
projection, and a 3x3 ConvInteger of int8 NCHW tensors) is tuned once per ``mma`` (fma,
mfma); ``--knobs F`` instead lowers the schedules a ``--save-knobs F`` run wrote (run
this script on another commit with them: the same tiles, that commit's storage). Each
schedule is lowered twice, with the graph's byte storage (int8 buffers; int8 MFMA tiles
are bytes in LDS either way) and with it cleared (every 8-bit tensor an i32 buffer), and
both kernels are simulated (gpusim, sampled timing mode as the search scores). Printed:
global bytes loaded/stored (``global_load_bytes``/``global_store_bytes``: bytes the lanes
asked for), HBM bytes read, the kernel's LDS bytes, and the simulated time (a gpusim
prediction, not a measurement).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gpusim  # noqa: E402
from compiler.frontends.onnx import from_model  # noqa: E402
from compiler.fusion import fuse  # noqa: E402
from compiler.lower import lower  # noqa: E402
from compiler.tuning.search import tune  # noqa: E402
from gpusim.program import kernels_of  # noqa: E402


def gemm_model(m: int, k: int, n: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.integers(-128, 128, (k, n)).astype(np.int8), "w")
    node = helper.make_node("MatMulInteger", ["a", "w"], ["y"])
    g = helper.make_graph([node], "int8_gemm",
                          [helper.make_tensor_value_info("a", TensorProto.INT8, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def conv_model(n: int, c: int, hw: int, f: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.integers(-128, 128, (f, c, 3, 3)).astype(np.int8), "w")
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "int8_conv",
                          [helper.make_tensor_value_info("x", TensorProto.INT8, [n, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [n, f, hw, hw])],
                          [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


MODELS = {"gemm 128x768x768": lambda: gemm_model(128, 768, 768),
          "conv 1x64x56x56, 64 3x3": lambda: conv_model(1, 64, 56, 64)}
COUNTERS = ("global_load_bytes", "global_store_bytes", "hbm_bytes_read")


def measure(graph, dispatch, knobs, arch) -> dict:
    out = dict.fromkeys(COUNTERS, 0.0)
    out.update(time_us=0.0, lds_bytes=0)
    for k in kernels_of(lower(graph, dispatch, knobs, arch)):
        r = gpusim.simulate(k, arch, functional=False, extrapolate_loops=True)
        for c in COUNTERS:
            out[c] += r.counters[c]
        out["time_us"] += r.time_us
        out["lds_bytes"] = max(out["lds_bytes"], k.lds_bytes)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx942,gfx90a")
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--save-knobs", help="write the tuned schedules to this JSON file")
    ap.add_argument("--knobs", help="lower these schedules (a --save-knobs file), no tuning")
    args = ap.parse_args(argv)
    given = json.loads(pathlib.Path(args.knobs).read_text()) if args.knobs else None
    saved_knobs = {}
    print("| model | arch | mma | tile | storage | global load B | global store B | HBM read B "
          "| LDS B | simulated us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make in MODELS.items():
        g = from_model(make())
        for arch in args.arch.split(","):
            for mma in ("fma", "mfma"):
                key = f"{name}|{arch}|{mma}"
                if given is not None:
                    dispatch = next(d for d in fuse(g).dispatches
                                    if g.op(d.root).kind in ("matmul", "conv2d"))
                    kn = given[key]
                else:
                    res = tune(g, arch, budget=args.budget, baseline=False, verify=False,
                               fixed={"mma": mma})
                    d = max((d for d in res.dispatches if d.best is not None),
                            key=lambda d: d.best.time_us)
                    dispatch, kn = d.dispatch, d.best.knobs
                saved_knobs[key] = kn
                tile = f"{kn['BM']}x{kn['BN']}x{kn['BK']} KW{kn.get('KW', 1)}"
                saved = dict(getattr(g, "byte_tensors", {}))
                rows = {"as stored": measure(g, dispatch, kn, arch)}
                g.byte_tensors = {}
                try:
                    rows["8-bit as i32"] = measure(g, dispatch, kn, arch)
                finally:
                    g.byte_tensors = saved
                for storage, r in rows.items():
                    print(f"| {name} | {arch} | {mma} | {tile} | {storage} | "
                          f"{r['global_load_bytes']:.0f} | {r['global_store_bytes']:.0f} | "
                          f"{r['hbm_bytes_read']:.0f} | {r['lds_bytes']} | "
                          f"{r['time_us']:.2f} |", flush=True)
    if args.save_knobs:
        pathlib.Path(args.save_knobs).write_text(json.dumps(saved_knobs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
