"""Per-model tables of issues 26 and 27 for whole models: one command, a time box.

For each ``.onnx`` model (default: the six that ``tools/export_models.py --full DIR``
writes, read from ``DIR``), one model at a time, every step a ``wavefuse`` command run as
a subprocess under ``nice`` with the per-step time box (so each figure has the command
that gives it, printed with ``--commands``):

1. ``tune MODEL --json --no-baseline --cache DB`` on an empty database: the cold tune
   (wall and CPU seconds), plan choice and predicted total at the default budget;
2. the same again: the warm tune (every score cached);
3. ``--launch graph`` on the same database: the total with one HIP graph launch;
4. ``--budget 4x`` (four times each dispatch's default budget): plan choice and total,
   and how far the total moved (issue 26: under 3%);
5. ``verify MODEL --json --cache DB`` on the same database (tune's default budget, so it
   checks the kernels tune chose): wall and CPU seconds;
6. with ``--pin-before``: ``tune --fix split_k=1 --fix key_splits=1`` on the same
   database, the totals with issue 27's splits pinned off ("before" by pin).

From the default tune: dispatches, the sum of the dispatches' rooflines (each roofline
includes its one launch: issue 27's "rooflines plus launches"), total / that sum, and the
worst dispatches' time / roofline. Every time in us is a gpusim prediction (simulated
cycles at the modelled clock plus launch overhead), never a measurement; wall and CPU
seconds are of this machine and its load, which is recorded beside them.

Results go to ``--out`` (JSON, one entry per model, written after every step, so a run
cut short keeps what it finished and ``--resume`` skips the steps done)::

    python tools/model_tables.py --dir /tmp/wf-models/full --out /tmp/wf-models/tables.json
    python tools/model_tables.py --dir DIR resnet50 --time-box 900 --pin-before
    python tools/model_tables.py --out /tmp/wf-models/tables.json --print   # tables only
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("bert_base", "gpt2_small", "vit_b16", "resnet50", "mobilenet_v2", "convnext_tiny")
NAMES = {"bert_base": "BERT-base (seq 128)", "gpt2_small": "GPT-2 small (128 tokens)",
         "vit_b16": "ViT-B/16 (224)", "resnet50": "ResNet-50 (224)",
         "mobilenet_v2": "MobileNetV2 (224, depthwise)", "convnext_tiny": "ConvNeXt-T (224)"}
#: "before" figures recorded in docs/models.md (tune --budget 4, gfx942, simulated), with
#: the commit and plan they were taken at: the issue-12 re-tunes, before issue 27's
#: split-K, flash-decoding, strided reductions and horizontal fusion
RECORDED_BEFORE = {
    "bert_base": (2020.8, "split-attention", "b6eca5b, --budget 4"),
    "gpt2_small": (1932.1, "conservative", "b6eca5b, --budget 4"),
    "vit_b16": (3059.6, "split-attention", "b6eca5b, --budget 4"),
    "resnet50": (1385.7, "aggressive", "b6eca5b, --budget 4"),
}
STEPS = ("cold", "warm", "graph", "x4", "verify", "pinned")


def wavefuse(args: list) -> list:
    return ["nice", "-n", "10", sys.executable, "-m", "compiler.cli", *args]


def run_step(cmd: list, time_box: float) -> dict:
    """Runs one command; its wall and CPU seconds (children's user + system), exit status
    and parsed JSON stdout (None when it printed none)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=time_box, cwd=ROOT,
                              env=env)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", f"timed out after {time_box:.0f} s"
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = None
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    return {"command": " ".join(shlex.quote(c) for c in cmd[3:]), "rc": rc,
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_avg_1min": round(os.getloadavg()[0], 2), "json": data,
            "error": (err.strip().splitlines() or [""])[-1][:300] if rc not in (0, 1) else ""}


def summary(tune_json: dict) -> dict:
    """The figures a table row needs from ``tune --json``."""
    ds = tune_json["dispatches"]
    roof_sum = sum(d["roofline_us"] for d in ds)
    worst = sorted(ds, key=lambda d: d["time_us"] / d["roofline_us"], reverse=True)[:3]
    choice = tune_json.get("plan_choice", {})
    return {"plan": tune_json["mode"], "total_us": round(tune_json["total_time_us"], 2),
            "dispatches": len(ds), "kernels": sum(d.get("kernels", 1) for d in ds),
            "roofline_sum_us": round(roof_sum, 2),
            "model_roofline_us": round(tune_json["roofline_time_us"], 2),
            "x_roofline_sum": round(tune_json["total_time_us"] / roof_sum, 2),
            "worst": [{"name": d["name"], "kind": d["kind"], "time_us": round(d["time_us"], 2),
                       "x_roofline": round(d["time_us"] / d["roofline_us"], 1),
                       "schedule": d["schedule"]} for d in worst],
            "plans_us": choice.get("predicted_us", {}),
            "mismatches": [d["name"] for d in ds if d.get("verified") is False],
            "launch": tune_json.get("launch", "stream")}


def model_steps(path: str, db: str, pin_before: bool) -> dict:
    common = [path, "--json", "--cache", db]
    tune = ["tune", *common, "--no-baseline"]
    steps = {"cold": tune, "warm": tune, "graph": tune + ["--launch", "graph"],
             "x4": tune + ["--budget", "4x"], "verify": ["verify", *common]}
    if pin_before:
        steps["pinned"] = tune + ["--fix", "split_k=1", "--fix", "key_splits=1"]
    return steps


def run_model(name: str, path: str, entry: dict, args, save) -> dict:
    db = os.path.join(args.work, f"{name}.db")
    if "cold" not in entry.get("steps", {}):
        for suffix in ("", "-wal", "-shm"):  # the cold tune starts from an empty database
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
    entry.setdefault("steps", {})
    for step, cmd in model_steps(path, db, args.pin_before).items():
        if step in entry["steps"] and entry["steps"][step]["rc"] in (0, 1):
            continue
        print(f"[{name}] {step}: wavefuse {' '.join(cmd)}", flush=True)
        r = run_step(wavefuse(cmd), args.time_box)
        if r["json"] is not None and step != "verify":
            r["summary"] = summary(r["json"])
        if step == "verify" and r["json"] is not None:
            r["checks"] = [{k: c.get(k) for k in ("name", "status", "detail")}
                           for c in r["json"]["checks"]]
        r.pop("json")
        entry["steps"][step] = r
        print(f"[{name}] {step}: rc {r['rc']}, {r['wall_s']} s wall, {r['cpu_s']} s CPU"
              + (f", {r['summary']['total_us']} us predicted ({r['summary']['plan']})"
                 if "summary" in r else "") + (f" {r['error']}" if r["error"] else ""),
              flush=True)
        save()
    return entry


def _fig(step: dict | None, key: str, fmt: str = "{:.1f}") -> str:
    if not step or "summary" not in step:
        return "-" if not step else ("timed out" if step["rc"] is None else "failed")
    return fmt.format(step["summary"][key])


def tables(results: dict) -> str:
    """Markdown tables of every model in ``results``."""
    lines = ["| model | plan (default) | predicted default us | plan (4x) | predicted 4x us "
             "| move | roofline sum us | x roof | dispatches (kernels) | graph launch us "
             "| before us (source) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in results.items():
        s = e.get("steps", {})
        cold, x4, graph = s.get("cold"), s.get("x4"), s.get("graph")
        move = "-"
        if cold and x4 and "summary" in cold and "summary" in x4:
            a, b = cold["summary"]["total_us"], x4["summary"]["total_us"]
            move = f"{(b - a) / a * 100:+.1f}%"
        before = "-"
        if "pinned" in s and "summary" in s["pinned"]:
            before = f"{s['pinned']['summary']['total_us']:.1f} (splits pinned off)"
        elif name in RECORDED_BEFORE:
            us, plan, where = RECORDED_BEFORE[name]
            before = f"{us:.1f} ({plan}, docs/models.md, {where})"
        kern = "-" if not cold or "summary" not in cold else \
            f"{cold['summary']['dispatches']} ({cold['summary']['kernels']})"
        lines.append(f"| {NAMES.get(name, name)} | {_fig(cold, 'plan', '{}')} | "
                     f"{_fig(cold, 'total_us')} | {_fig(x4, 'plan', '{}')} | "
                     f"{_fig(x4, 'total_us')} | {move} | {_fig(cold, 'roofline_sum_us')} | "
                     f"{_fig(cold, 'x_roofline_sum', '{:.2f}')} | {kern} | "
                     f"{_fig(graph, 'total_us')} | {before} |")
    lines += ["", "| model | worst dispatches (x their roofline) | cold tune wall / CPU s | "
              "warm tune wall / CPU s | verify wall / CPU s | verify | load (1 min) |",
              "|---|---|---|---|---|---|---|"]
    for name, e in results.items():
        s = e.get("steps", {})
        cold = s.get("cold")
        worst = "-" if not cold or "summary" not in cold else ", ".join(
            f"{w['name']} {w['x_roofline']}x" for w in cold["summary"]["worst"])

        def secs(step):
            st = s.get(step)
            if not st:
                return "-"
            return (f"> {st['wall_s']:.0f} (timed out)" if st["rc"] is None else
                    f"{st['wall_s']:.0f} / {st['cpu_s']:.0f}")
        v = s.get("verify")
        verdict = "-" if not v else ("timed out" if v["rc"] is None else
                                     {0: "pass", 1: "FAIL"}.get(v["rc"], "error"))
        loads = "/".join(f"{s[k]['load_avg_1min']:.0f}" for k in ("cold", "verify") if k in s)
        warm = secs("warm")
        if s.get("cold", {}).get("rc", 0) is None and warm != "-":
            warm += " (cold timed out: this run went on tuning)"
        lines.append(f"| {NAMES.get(name, name)} | {worst} | {secs('cold')} | {warm} "
                     f"| {secs('verify')} | {verdict} | {loads or '-'} |")
    return "\n".join(lines)


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", metavar="MODEL",
                    help=f"names in --dir (default: {', '.join(MODELS)}) or .onnx paths")
    ap.add_argument("--dir", default="/tmp/wf-models/full",
                    help="where tools/export_models.py --full wrote the models")
    ap.add_argument("--out", default="/tmp/wf-models/tables.json",
                    help="results JSON (read first with --resume, written after every step)")
    ap.add_argument("--work", default=None,
                    help="folder for the tuning databases (default: a temporary one)")
    ap.add_argument("--time-box", type=float, default=1800.0, metavar="SECONDS",
                    help="limit per command (default 1800); a step over it is 'timed out'")
    ap.add_argument("--resume", action="store_true",
                    help="keep the steps --out already holds and run only the others")
    ap.add_argument("--pin-before", action="store_true",
                    help="also tune with split_k=1 and key_splits=1 pinned (a 'before')")
    ap.add_argument("--print", action="store_true", help="print the tables of --out only")
    args = ap.parse_args(argv)
    if args.time_box <= 0:
        print(f"--time-box {args.time_box:g}: give a positive number of seconds",
              file=sys.stderr)
        return 2
    results = {}
    if (args.resume or args.print) and os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    if args.print:
        print(tables(results))
        return 0
    paths = {}
    for m in args.models or MODELS:
        path = m if m.endswith(".onnx") else os.path.join(args.dir, f"{m}.onnx")
        if not os.path.isfile(path):
            print(f"{path}: no such model file (tools/export_models.py --full DIR writes "
                  f"them)", file=sys.stderr)
            return 2
        paths[os.path.basename(path)[:-len(".onnx")]] = path
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.access(out_dir, os.W_OK):
        print(f"--out {args.out}: folder {out_dir} is not writable", file=sys.stderr)
        return 2
    work = args.work or tempfile.mkdtemp(prefix="wavefuse-tables-")
    os.makedirs(work, exist_ok=True)
    args.work = work

    def save():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.out)

    for name, path in paths.items():
        results[name] = results.get(name, {})  # saved after every step, in place
        run_model(name, path, results[name], args, save)
    print(tables({n: results[n] for n in paths}))
    print("\nTimes in us are gpusim predictions (gfx942, simulated), not measurements; "
          "wall and CPU seconds are of this machine under the load shown.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
