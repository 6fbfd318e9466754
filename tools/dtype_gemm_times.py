"""Simulated times of int8 and bf16 GEMMs at BERT-base sizes, FMA tiles against MFMA tiles,
and of the dtype fixtures (tests/data/dtypes), for docs/dtypes.md (issue 28).

    python tools/dtype_gemm_times.py [--budget N] [--arch gfx942,gfx90a] [--fixtures-only]

Every figure is a gpusim prediction (simulated microseconds of the tuned dispatch), not a
measurement. The GEMMs are BERT-base's (128 tokens, hidden 768): the attention projection
128x768x768 and the feed-forward up projection 128x768x3072, built with onnx.helper
(int8: MatMulInteger of an int8 activation by int8 weights, zero points 0; bf16: MatMul of
bf16 tensors). Each is tuned with ``mma`` fixed to fma, then to mfma, at the same budget.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.frontends.onnx import from_model, load_onnx  # noqa: E402
from compiler.tuning.search import tune  # noqa: E402

GEMMS = {"attn_proj": (128, 768, 768), "ffn_up": (128, 768, 3072)}


def gemm_model(kind: str, m: int, k: int, n: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    if kind == "int8":
        w = onnx.numpy_helper.from_array(rng.integers(-128, 128, (k, n)).astype(np.int8), "w")
        node = helper.make_node("MatMulInteger", ["a", "w"], ["y"])
        a_t, y_t = TensorProto.INT8, TensorProto.INT32
    else:
        import ml_dtypes
        w = onnx.numpy_helper.from_array(
            rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16), "w")
        node = helper.make_node("MatMul", ["a", "w"], ["y"])
        a_t = y_t = TensorProto.BFLOAT16
    g = helper.make_graph([node], f"{kind}_gemm", [helper.make_tensor_value_info("a", a_t, [m, k])],
                          [helper.make_tensor_value_info("y", y_t, [m, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def gemm_us(graph, arch: str, budget: int, mma: str | None) -> tuple[float, dict]:
    fixed = {"mma": mma} if mma else None
    res = tune(graph, arch, budget=budget, baseline=False, verify=False, fixed=fixed)
    best = max((d for d in res.dispatches if d.best is not None), key=lambda d: d.best.time_us)
    return sum(d.best.time_us for d in res.dispatches if d.best is not None), best.best.knobs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--arch", default="gfx942,gfx90a")
    ap.add_argument("--fixtures-only", action="store_true")
    ap.add_argument("--gemms-only", action="store_true")
    args = ap.parse_args(argv)
    archs = args.arch.split(",")
    if not args.fixtures_only:
        print("| GEMM | dtype | arch | FMA us | MFMA us | FMA/MFMA | MFMA tile |")
        print("|---|---|---|---|---|---|---|")
        for name, (m, k, n) in GEMMS.items():
            for kind in ("int8", "bf16"):
                g = from_model(gemm_model(kind, m, k, n))
                for arch in archs:
                    t0 = time.perf_counter()
                    fma, _ = gemm_us(g, arch, args.budget, "fma")
                    mfma, knobs = gemm_us(g, arch, args.budget, "mfma")
                    tile = f"{knobs['BM']}x{knobs['BN']}x{knobs['BK']} KW{knobs['KW']}"
                    print(f"| {name} {m}x{k}x{n} | {kind} | {arch} | {fma:.2f} | {mfma:.2f} | "
                          f"{fma / mfma:.2f} | {tile} |", flush=True)
                    print(f"    ({time.perf_counter() - t0:.0f} s wall)", file=sys.stderr)
    if not args.gemms_only:
        print("\n| fixture | arch | simulated us (default search) |")
        print("|---|---|---|")
        for p in sorted((ROOT / "tests" / "data" / "dtypes").glob("*.onnx")):
            g = load_onnx(p)
            for arch in archs:
                us, _ = gemm_us(g, arch, args.budget, None)
                print(f"| {p.stem} | {arch} | {us:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
