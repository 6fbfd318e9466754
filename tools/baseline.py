"""Record what the compiler decides for every built-in model, and diff two records.

A restructuring must not change behaviour: the dispatch counts and the predicted times of
the built-in models stay identical. ``record`` runs ``fuse --json`` (aggressive and
conservative) and ``tune --json`` for each model at small sizes that still exercise every
dispatch kind (elementwise, row reduction, transpose, contraction, generic) and writes
the outputs to one JSON file; ``compare`` lists every field that differs between two
such files (exit 1 if any).

    python tools/baseline.py record OUT.json [--models softmax,mlp]
    python tools/baseline.py compare BEFORE.json AFTER.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

#: small sizes: every model keeps its structure (and so its dispatch kinds) at a size the
#: simulator scores in seconds on a loaded 2-core machine.
MODELS = {
    "softmax": "softmax",
    "layernorm": "layernorm",
    "rmsnorm": "rmsnorm",
    "conv_add_relu": "conv_add_relu:c=64,k=32",
    "conv_add_relu_mismatch": "conv_add_relu_mismatch:c=64,k=32",
    "mlp": "mlp:tokens=64,hidden=32,ffn=64",
    "attention": "attention:heads=2,seq=32,dim=16",
    "transpose_add": "transpose_add:rows=128,cols=128",
    "encoder_layer": "encoder_layer:seq=32,hidden=64,heads=2,ffn=128",
}
TUNE_ARGS = ["--budget", "4", "--seed", "0"]


def _run(args: list[str]) -> object:
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", *args, "--json"],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        return {"error": proc.returncode, "stderr": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout)


def record(out: str, names: list[str]) -> int:
    result = {}
    for name in names:
        spec = MODELS[name]
        print(f"{name} ...", file=sys.stderr, flush=True)
        result[name] = {"spec": spec,
                        "fuse": _run(["fuse", spec]),
                        "fuse_conservative": _run(["fuse", spec, "--no-aggressive"]),
                        "tune": _run(["tune", spec, *TUNE_ARGS])}
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    return 0


def _diff(a, b, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k not in a else 'before'}")
            else:
                _diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}")


def compare(before: str, after: str) -> int:
    with open(before) as f:
        a = json.load(f)
    with open(after) as f:
        b = json.load(f)
    diffs: list[str] = []
    _diff(a, b, "", diffs)
    for line in diffs:
        print(line)
    n = sum(1 for m in a.values() if isinstance(m, dict))
    print(f"{len(diffs)} difference(s) over {n} model(s)" if diffs else
          f"identical: {n} model(s), fuse + conservative fuse + tune outputs")
    return 1 if diffs else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {', '.join(MODELS)}")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = p.parse_args(argv)
    if args.cmd == "record":
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        bad = [n for n in names if n not in MODELS]
        if bad:
            p.error(f"unknown model(s) {', '.join(bad)}; known: {', '.join(MODELS)}")
        return record(args.out, names)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
