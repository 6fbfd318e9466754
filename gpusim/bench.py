"""Simulator speed: simulated wave-instructions per second, JIT vs pure Python, per kernel.

``python -m gpusim.bench [--json] [--repeats N]`` simulates a fixed mix (a float4 stream, a
32x32 LDS transpose without padding, a row reduction with WaveReduce, an LDS-tiled matmul)
on gfx942 with full functional values, with the JIT engine and with the pure-Python engine
(the same code, not compiled), and reports for each kernel the median over ``N`` runs
(``N // 2`` for Python, at least 1), and the ratio JIT / Python measured in this same run.
The Python path runs a smaller instance of each kernel (same code paths, fewer
workgroups) so that it finishes; both rates are per simulated wave-instruction and count
the whole ``simulate`` call. The mix figure is all kernels' instructions over the sum of
their median times (the matmul dominates it).

Each figure is given in wall time and in CPU time of this process (``time.process_time``):
on a shared machine the wall time includes waiting for a core, the CPU time what one
core spent. ``compile`` is import + first simulate in a fresh process with an empty Numba
cache (a temporary ``NUMBA_CACHE_DIR``, one run); ``cached start`` the same with the
cache that run filled (median of 3), so neither touches the user's engine cache. CPU time
there is the child's user + system time.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
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


def timed(kernel, jit: bool, repeats: int):
    """(wave-instructions, median wall s, median CPU s) of ``repeats`` simulate calls."""
    walls, cpus = [], []
    insts = 0.0
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        insts = simulate(kernel, "gfx942", jit=jit).wave_insts
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    return insts, statistics.median(walls), statistics.median(cpus)


_CHILD = ("import time; t = time.perf_counter(); from gpusim import simulate, microbench as mb; "
          "simulate(mb.strided_load(1), 'gfx942'); print(time.perf_counter() - t)")


def child_seconds(env_extra: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of import + first simulate in a fresh process."""
    env = dict(os.environ, **env_extra)
    env.pop("NUMBA_BOUNDSCHECK", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(out.stdout.strip().splitlines()[-1]), cpu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=int, default=5, help="runs per kernel (JIT); Python gets half")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        print(f"gpusim.bench: --repeats {args.repeats} is not a count; pass 1 or more", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as d:
        compile_s, compile_cpu_s = child_seconds({"NUMBA_CACHE_DIR": d})
        starts = [child_seconds({"NUMBA_CACHE_DIR": d}) for _ in range(3)]
    cached_start_s = statistics.median(w for w, _ in starts)
    cached_start_cpu_s = statistics.median(c for _, c in starts)
    simulate(mb.strided_load(1), "gfx942")  # warm this process
    py_repeats = max(1, args.repeats // 2)
    kernels = []
    for big, small in zip(mix(8), mix(1)):
        ji, jw, jc = timed(big, True, args.repeats)
        pi, pw, pc = timed(small, False, py_repeats)
        kernels.append(dict(kernel=big.name, jit_wave_insts=ji, jit_s=jw, jit_cpu_s=jc,
                            jit_wave_insts_per_s=ji / jw, jit_wave_insts_per_cpu_s=ji / jc,
                            python_kernel=small.name, python_wave_insts=pi, python_s=pw,
                            python_cpu_s=pc, python_wave_insts_per_s=pi / pw,
                            python_wave_insts_per_cpu_s=pi / pc, ratio=(ji / jw) / (pi / pw),
                            ratio_cpu=(ji / jc) / (pi / pc)))

    def total(key_i, key_t):
        return sum(k[key_i] for k in kernels) / sum(k[key_t] for k in kernels)

    jit, jit_cpu = total("jit_wave_insts", "jit_s"), total("jit_wave_insts", "jit_cpu_s")
    py, py_cpu = total("python_wave_insts", "python_s"), total("python_wave_insts", "python_cpu_s")
    result = dict(jit_wave_insts_per_s=jit, jit_wave_insts_per_cpu_s=jit_cpu,
                  python_wave_insts_per_s=py, python_wave_insts_per_cpu_s=py_cpu,
                  ratio=jit / py, ratio_cpu=jit_cpu / py_cpu, repeats=args.repeats,
                  python_repeats=py_repeats, compile_s=compile_s, compile_cpu_s=compile_cpu_s,
                  cached_start_s=cached_start_s, cached_start_cpu_s=cached_start_cpu_s,
                  kernels=kernels)
    if args.json:
        print(json.dumps(result))
        return
    print(f"medians of {args.repeats} runs (JIT) and {py_repeats} (Python); M = million "
          f"wave-instructions/s, wall / CPU")
    print(f"{'kernel':28s} {'JIT wall':>9s} {'JIT CPU':>9s} {'Python wall':>12s} {'Python CPU':>11s} "
          f"{'ratio':>7s}")
    rows = kernels + [dict(kernel="mix", jit_wave_insts_per_s=jit, jit_wave_insts_per_cpu_s=jit_cpu,
                           python_wave_insts_per_s=py, python_wave_insts_per_cpu_s=py_cpu, ratio=jit / py)]
    for k in rows:
        print(f"{k['kernel']:28s} {k['jit_wave_insts_per_s'] / 1e6:7.2f} M {k['jit_wave_insts_per_cpu_s'] / 1e6:7.2f} M"
              f" {k['python_wave_insts_per_s'] / 1e3:10.2f} k {k['python_wave_insts_per_cpu_s'] / 1e3:9.2f} k"
              f" {k['ratio']:6.0f}x")
    print(f"first compile {compile_s:.1f} s wall, {compile_cpu_s:.1f} s CPU; "
          f"cached start {cached_start_s:.2f} s wall, {cached_start_cpu_s:.2f} s CPU")


if __name__ == "__main__":
    main()
