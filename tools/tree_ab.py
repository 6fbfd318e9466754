"""Paired A/B timing of whole ``simulate`` calls from two source trees, in alternating processes.

``python tools/tree_ab.py [--rounds N] NAME=SOURCE NAME=SOURCE`` where SOURCE is a checkout
root or ``git:REV`` (that revision's tree, exported with ``git archive`` under
``$TMPDIR/tree_ab``). ``tools/engine_ab.py`` swaps only ``gpusim/engine.py`` inside one
process; this one also times what changed around the engine (``gpusim.sim``: memory images,
cache arrays, validation). Each round runs one fresh process per tree, in alternating
order; each process simulates every bench kernel (``gpusim.bench.mix(8)``) once to warm up
and then three times, and reports the median wall and CPU seconds per kernel. The script
prints per kernel and for the mix (all instructions over the summed times) the median rate
of each tree and the median of the per-round ratios to the first tree. A tree's first
process compiles its engine into its own Numba cache (not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = """
import json, statistics, time
from gpusim import bench
from gpusim.sim import simulate
out = {}
for k in bench.mix(8):
    simulate(k, "gfx942")
    w, c = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        n = simulate(k, "gfx942").wave_insts
        c.append(time.process_time() - c0)
        w.append(time.perf_counter() - t0)
    out[k.name] = (n, statistics.median(w), statistics.median(c))
print(json.dumps(out))
"""


def tree(name: str, source: str, folder: str) -> str:
    if not source.startswith("git:"):
        if not os.path.isfile(os.path.join(source, "gpusim", "sim.py")):
            raise ValueError(f"{source} has no gpusim/sim.py")
        return os.path.abspath(source)
    path = os.path.join(folder, name)
    os.makedirs(path, exist_ok=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", source[4:]], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", path], input=archive, check=True)
    return path


def run(path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=path, env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        raise RuntimeError(f"{path}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("trees", nargs=2, help="NAME=PATH or NAME=git:REV")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        print(f"tree_ab: --rounds {args.rounds} is not a count; pass 1 or more", file=sys.stderr)
        sys.exit(2)
    folder = os.path.join(tempfile.gettempdir(), "tree_ab")
    paths = {}
    for t in args.trees:
        name, _, source = t.partition("=")
        if not source or not name.isidentifier() or name in paths:
            print(f"tree_ab: {t!r} is not NAME=SOURCE with a new name; pass e.g. old=git:main",
                  file=sys.stderr)
            sys.exit(2)
        try:
            paths[name] = tree(name, source, folder)
        except (OSError, ValueError, subprocess.CalledProcessError) as e:
            why = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else e
            print(f"tree_ab: cannot use {source!r} ({why}); pass a checkout root or git:REV",
                  file=sys.stderr)
            sys.exit(2)
    names = list(paths)
    res = {n: [] for n in names}
    try:
        for n in names:  # compile each tree's engine into its cache first
            run(paths[n])
        for r in range(args.rounds):
            for n in (names if r % 2 == 0 else names[::-1]):
                res[n].append(run(paths[n]))
    except RuntimeError as e:
        print(f"tree_ab: a simulate process failed: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"medians of {args.rounds} alternating process pairs (3 calls per kernel each), "
          f"M wave-instructions/s, ratio to {names[0]}; load average {os.getloadavg()[0]:.1f}")
    kernels = list(res[names[0]][0])
    for label, i in (("CPU", 2), ("wall", 1)):
        for k in kernels + ["mix"]:
            rates = {}
            for n in names:
                if k == "mix":
                    rates[n] = [sum(x[j][0] for j in kernels) / sum(x[j][i] for j in kernels)
                                for x in res[n]]
                else:
                    rates[n] = [x[k][0] / x[k][i] for x in res[n]]
            cells = [f"{n} {statistics.median(rates[n]) / 1e6:6.2f} "
                     f"({statistics.median(a / b for a, b in zip(rates[n], rates[names[0]])):.3f})"
                     for n in names]
            print(f"{label:4s} {k:28s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
