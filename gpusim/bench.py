"""Simulator speed: simulated wave-instructions per second, JIT vs pure Python.

``python -m gpusim.bench [--json]`` simulates a fixed mix (a float4 stream, a 32x32 LDS
transpose without padding, a row reduction with WaveReduce, an LDS-tiled matmul) on gfx942
with full functional values, with the JIT engine and with the pure-Python engine (the same
code, not compiled), and reports the medians of repeated runs. The Python path runs a
smaller instance of each kernel (same code paths, fewer workgroups) so that it finishes;
both rates are per simulated wave-instruction. ``compile_s`` is the first call in a fresh
process with an empty Numba cache (a temporary ``NUMBA_CACHE_DIR``); ``cached_start_s``
is import + first simulate in a fresh process with the cache filled.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from gpusim import microbench as mb
from gpusim.sim import simulate


def mix(scale: int):
    return [
        mb.stream_copy(scale * 256 * 4 * 64),
        mb.lds_transpose(32 * max(1, scale)),
        mb.row_sum(16 * scale, 2048),
        mb.tiled_matmul(32 * scale, 32 * scale, 128),
    ]


def rate(kernels, jit: bool, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        insts = 0.0
        t0 = time.perf_counter()
        for k in kernels:
            insts += simulate(k, "gfx942", jit=jit).wave_insts
        runs.append(insts / (time.perf_counter() - t0))
    return statistics.median(runs)


_CHILD = ("import time; t = time.perf_counter(); from gpusim import simulate, microbench as mb; "
          "simulate(mb.strided_load(1), 'gfx942'); print(time.perf_counter() - t)")


def child_seconds(env_extra: dict) -> float:
    env = dict(os.environ, **env_extra)
    env.pop("NUMBA_BOUNDSCHECK", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        compile_s = child_seconds({"NUMBA_CACHE_DIR": d})
    cached_start_s = child_seconds({})
    simulate(mb.strided_load(1), "gfx942")  # warm this process
    jit = rate(mix(8), True, args.repeats)
    py = rate(mix(1), False, max(1, args.repeats // 2))
    result = dict(jit_wave_insts_per_s=jit, python_wave_insts_per_s=py, ratio=jit / py,
                  compile_s=compile_s, cached_start_s=cached_start_s)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"JIT          {jit / 1e6:8.2f} M wave-insts/s (median of {args.repeats})")
        print(f"pure Python  {py / 1e3:8.2f} k wave-insts/s")
        print(f"ratio        {jit / py:8.0f} x")
        print(f"first compile {compile_s:.1f} s, cached start {cached_start_s:.2f} s")


if __name__ == "__main__":
    main()
