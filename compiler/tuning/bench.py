"""Tuning benchmarks: how long ``wavefuse tune`` takes, and how that grows with the problem.

``python -m compiler.tuning.bench tune [MODEL ...]`` times ``wavefuse tune MODEL`` (default
``encoder_layer``) four ways: serial, ``--workers 2``, ``--cluster local:2`` and a second
run on a warm tuning database (the first serial run fills a fresh one; the other runs use
``--no-cache`` so each one simulates everything). ``python -m compiler.tuning.bench scaling``
times ``tune attention:heads=8,seq=S,dim=64 --budget 8`` for S = 256 ... 4096, with each
run's peak memory and CPU time (user + system: steadier than wall time on a shared
machine). Every figure is the median of ``--repeat`` runs (default 3) of a fresh
process, so it includes Python start-up and loading the simulator; the ratios printed are
of those medians. Wall-clock times on a shared machine vary; say how loaded it was.
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

SCALING_SIZES = (256, 512, 1024, 2048, 4096)


def run_cli(args: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak resident MiB, CPU seconds (user + system)) of one ``wavefuse``
    command. The CPU time is what the process itself used: steadier than wall time on a
    loaded machine (it still rises somewhat when other jobs contend for caches and memory)."""
    cmd = [sys.executable, "-m", "compiler.cli", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace").strip()
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"compiler.tuning.bench: `{' '.join(cmd[2:])}` failed "
                         f"({proc.returncode}): {err.splitlines()[-1] if err else ''}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _median(runs: list) -> dict:
    walls, mems, cpus = [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs]
    return {"median_s": statistics.median(walls), "runs_s": walls,
            "peak_mib": max(mems), "median_cpu_s": statistics.median(cpus), "runs_cpu_s": cpus}


def bench_tune(model: str, repeat: int, extra: list[str]) -> dict:
    """Serial, --workers 2, LocalCluster(2) and cached runs of one model."""
    out = {"model": model}
    with tempfile.TemporaryDirectory(prefix="wavefuse-bench-") as tmp:
        db = os.path.join(tmp, "tune.sqlite3")
        ways = {"serial": ["--no-cache"], "workers_2": ["--no-cache", "--workers", "2"],
                "local_cluster_2": ["--no-cache", "--cluster", "local:2"]}
        for name, flags in ways.items():
            out[name] = _median([run_cli(["tune", model, *extra, *flags]) for _ in range(repeat)])
            print(f"{model} {name}: {out[name]['median_s']:.1f} s", file=sys.stderr)
        run_cli(["tune", model, *extra, "--cache", db])  # fills the database
        out["cached"] = _median([run_cli(["tune", model, *extra, "--cache", db])
                                 for _ in range(repeat)])
    base = out["serial"]["median_s"]
    out["speedup"] = {k: base / out[k]["median_s"] for k in
                      ("workers_2", "local_cluster_2", "cached")}
    return out


def bench_scaling(sizes, repeat: int, budget: int) -> dict:
    rows = []
    for s in sizes:
        spec = f"attention:heads=8,seq={s},dim=64"
        r = _median([run_cli(["tune", spec, "--budget", str(budget), "--no-cache"])
                     for _ in range(repeat)])
        rows.append({"seq": s, **r})
        print(f"seq {s}: {r['median_s']:.1f} s, {r['median_cpu_s']:.1f} s CPU, "
              f"{r['peak_mib']:.0f} MiB", file=sys.stderr)
    by = {r["seq"]: r for r in rows}
    both = {1024, 4096} <= set(by)
    ratio = by[4096]["median_s"] / by[1024]["median_s"] if both else None
    cpu_ratio = by[4096]["median_cpu_s"] / by[1024]["median_cpu_s"] if both else None
    return {"model": "attention:heads=8,seq=S,dim=64", "budget": budget, "rows": rows,
            "time_4096_over_1024": ratio, "cpu_4096_over_1024": cpu_ratio}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m compiler.tuning.bench", description=__doc__.split(
        "\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tune", help="serial / --workers 2 / local cluster / cached tune")
    t.add_argument("models", nargs="*", default=["encoder_layer"])
    t.add_argument("--budget", type=int, default=None)
    s = sub.add_parser("scaling", help="tune time and memory vs attention's sequence length")
    s.add_argument("--sizes", default=",".join(map(str, SCALING_SIZES)))
    s.add_argument("--budget", type=int, default=8)
    for q in (t, s):
        q.add_argument("--repeat", type=int, default=3,
                       help="runs per figure, the median is reported (default 3; fewer for "
                            "a quick look)")
        q.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.what == "tune":
        extra = ["--budget", str(args.budget)] if args.budget else []
        result = {"repeat": args.repeat, "cores": len(os.sched_getaffinity(0)),
                  "models": [bench_tune(m, args.repeat, extra) for m in args.models]}
        lines = [f"{m['model']}: serial {m['serial']['median_s']:.1f} s, --workers 2 "
                 f"{m['workers_2']['median_s']:.1f} s ({m['speedup']['workers_2']:.2f}x), "
                 f"local:2 {m['local_cluster_2']['median_s']:.1f} s "
                 f"({m['speedup']['local_cluster_2']:.2f}x), cached "
                 f"{m['cached']['median_s']:.2f} s ({m['speedup']['cached']:.0f}x)"
                 for m in result["models"]]
    else:
        sizes = [int(x) for x in args.sizes.split(",")]
        result = {"repeat": args.repeat, **bench_scaling(sizes, args.repeat, args.budget)}
        lines = [f"seq {r['seq']:>5}: {r['median_s']:7.1f} s  {r['median_cpu_s']:7.1f} s CPU  "
                 f"{r['peak_mib']:7.0f} MiB peak" for r in result["rows"]]
        if result["time_4096_over_1024"] is not None:
            lines.append(f"time at 4096 / time at 1024: {result['time_4096_over_1024']:.2f} "
                         f"(CPU time: {result['cpu_4096_over_1024']:.2f})")
    if args.json:
        print(json.dumps(result))
    else:
        print("\n".join(lines))
        print(f"(medians of {args.repeat} fresh processes each; wall-clock on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
