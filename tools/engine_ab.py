"""Paired A/B timing of engine variants in one process, alternating call by call.

``python tools/engine_ab.py [--rounds N] NAME=SOURCE[@JIT] ...`` where SOURCE is a path to
an engine.py or ``git:REV`` (that revision's gpusim/engine.py; it must fit the current
``gpusim.sim``: same ``Params`` and ``new_state``) and the optional JIT a path to an
engine_jit.py or ``git:REV`` (that revision's gpusim/engine_jit.py; default: the current
one), to compare compile settings. Each variant is JIT-compiled as its own module (cached
next to its copy under ``$TMPDIR/engine_ab``); then every round simulates
each bench kernel (``gpusim.bench.mix(8)``) once per variant, in alternating order, and
the script prints per kernel the median wave-instructions/s of each variant and the
median of the per-round ratios to the first variant. Pairing cancels most of a shared
machine's load drift, which separate runs of ``python -m gpusim.bench`` do not.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpusim import bench, sim  # noqa: E402
from gpusim import engine_jit  # noqa: E402


def variant_source(name: str, source: str, folder: str, module: str = "engine") -> str:
    if source.startswith("git:"):
        rev = source[4:]
        text = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:gpusim/{module}.py"], check=True,
                              capture_output=True, text=True).stdout
    else:
        with open(source) as f:
            text = f.read()
    path = os.path.join(folder, f"{module}_{name}.py")
    old = open(path).read() if os.path.exists(path) else None
    if old != text:
        with open(path, "w") as f:
            f.write(text)
    return path


def jitted_run(name: str, path: str, jit_path: str | None = None):
    """``run`` of the engine at ``path``, compiled exactly as ``gpusim.engine_jit`` (or the
    engine_jit.py at ``jit_path``) does."""
    with open(jit_path or engine_jit.__file__) as f:
        src = f.read()
    src = src.replace('os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine.py")', repr(path))
    src = src.replace('"gpusim._engine_jitted"', repr(f"gpusim._engine_ab_{name}"))
    # a variant may lack a helper of today's list (or have its own): compile what it has
    src = src.replace("for _name in _FUNCS:", "for _name in [n for n in _FUNCS if hasattr(_code, n)]:")
    mod = type(sys)(f"gpusim._engine_ab_jit_{name}")
    mod.__file__ = path
    exec(compile(src, engine_jit.__file__, "exec"), mod.__dict__)
    return mod.run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kernels", default="", help="comma-separated name prefixes (default: all)")
    ap.add_argument("--cpu", action="store_true",
                    help="time with this process's CPU time instead of wall time (on a crowded "
                         "machine wall time is mostly waiting for a core)")
    ap.add_argument("variants", nargs="+", help="NAME=SOURCE[@JIT], SOURCE and JIT each a path or git:REV")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        print(f"engine_ab: --rounds {args.rounds} is not a count; pass 1 or more", file=sys.stderr)
        sys.exit(2)
    folder = os.path.join(tempfile.gettempdir(), "engine_ab")
    os.makedirs(folder, exist_ok=True)
    runs = {}
    for v in args.variants:
        if "=" not in v:
            print(f"engine_ab: variant {v!r} is not NAME=SOURCE; pass e.g. old=git:HEAD", file=sys.stderr)
            sys.exit(2)
        name, source = v.split("=", 1)
        source, _, jit_source = source.partition("@")
        if not name.isidentifier() or name in runs:
            print(f"engine_ab: variant name {name!r} is not a new identifier; use e.g. old, new",
                  file=sys.stderr)
            sys.exit(2)
        paths = []
        for src, module in ((source, "engine"), (jit_source, "engine_jit")):
            try:
                paths.append(variant_source(name, src, folder, module) if src else None)
            except (OSError, subprocess.CalledProcessError) as e:
                why = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else e
                print(f"engine_ab: cannot read {src!r} ({why}); pass a {module}.py path or git:REV",
                      file=sys.stderr)
                sys.exit(2)
        path, jit_path = paths
        # the cache key is the engine's text: a copy per compile setting, so another
        # engine_jit.py under the same variant name never loads this one's cached build
        digest = hashlib.sha256()
        for f in (path, jit_path or engine_jit.__file__):
            with open(f, "rb") as fh:
                digest.update(fh.read())
        tagged = f"{path[:-3]}_{digest.hexdigest()[:10]}.py"
        os.replace(path, tagged)  # same name, same text: the cached build stays valid
        path = tagged
        t = time.perf_counter()
        runs[name] = jitted_run(name, path, jit_path)
        print(f"{name}: loaded ({time.perf_counter() - t:.1f} s)", flush=True)
    names = list(runs)
    kernels = [k for k in bench.mix(8)
               if not args.kernels or any(k.name.startswith(p) for p in args.kernels.split(","))]
    if not kernels:
        print(f"engine_ab: --kernels {args.kernels!r} matches none of "
              f"{', '.join(k.name for k in bench.mix(8))}", file=sys.stderr)
        sys.exit(2)
    real = sim._engine
    clock = time.process_time if args.cpu else time.perf_counter
    rates = {(k.name, n): [] for k in kernels for n in names}
    try:
        for k in kernels:  # warm: compile each program and each variant's run
            for n in names:
                sim._engine = lambda jit, r=runs[n]: r
                sim.simulate(k, "gfx942")
        for rnd in range(args.rounds):
            order = names if rnd % 2 == 0 else names[::-1]
            for k in kernels:
                for n in order:
                    sim._engine = lambda jit, r=runs[n]: r
                    t = clock()
                    insts = sim.simulate(k, "gfx942").wave_insts
                    rates[(k.name, n)].append(insts / (clock() - t))
    finally:
        sim._engine = real
    print(f"medians of {args.rounds} paired rounds, M wave-instructions per {'CPU' if args.cpu else 'wall'} "
          f"second (ratio: median of per-round ratios to {names[0]}); load average "
          f"{os.getloadavg()[0]:.2f}")
    for k in kernels:
        base = rates[(k.name, names[0])]
        cells = []
        for n in names:
            r = rates[(k.name, n)]
            ratio = statistics.median(a / b for a, b in zip(r, base))
            cells.append(f"{n} {statistics.median(r) / 1e6:6.2f} ({ratio:.3f})")
        print(f"{k.name:28s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
