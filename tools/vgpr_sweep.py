"""gpusim's VGPR estimate against hipcc's count over the schedule spaces of real models.

For every contraction and attention dispatch of the given models (the fused plan and the
unfused one), every legal schedule point is lowered, emitted as HIP, compiled with hipcc
(``--cuda-device-only -S -O3``) and its ``.vgpr_count`` compared with
``gpusim.occupancy.estimate_vgprs`` under ``wavefuse check``'s rule (within 10% of
hipcc's count, or the same VGPR-limited occupancy). Identical kernel sources are compiled
once; hipcc's counts are cached by source hash in ``--cache`` (default
``~/.cache/wavefuse/vgpr_sweep.json``), so changing the estimator reruns in seconds.

    python tools/vgpr_sweep.py [--arch gfx90a] [--models mlp conv_add_relu ...]
                               [--kinds contraction,attention] [--mma fma,mfma]
                               [--per-dispatch N] [--pin] [--json]

``--pin`` emits every kernel with ``amdgpu_waves_per_eu`` set to the occupancy the
simulator assumed (as ``wavefuse export`` does): a point then agrees when hipcc meets the
rule without spilling; the totals also count the points that spill (scratch or
``.vgpr_spill_count``).

Prints one line per point that misses the rule, then the totals. Needs hipcc on PATH.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen_hip.check import (VGPR_AGREEMENT_REL, check_arch, compile_to_asm,  # noqa: E402
                               hipcc_path, parse_asm)
from codegen_hip.emit import emit_kernel  # noqa: E402
from codegen_hip.names import c_identifier  # noqa: E402
from codegen_hip.simfacts import pinned_waves, vgpr_occupancy  # noqa: E402
from compiler.lower import dispatch_kind, lower  # noqa: E402
from compiler.ir.models import load_model  # noqa: E402
from compiler.fusion import fuse  # noqa: E402
from compiler.schedule import schedule_space  # noqa: E402
from gpusim.hw import get_arch  # noqa: E402
from gpusim.occupancy import estimate_vgprs  # noqa: E402
from gpusim.program import kernels_of  # noqa: E402

DEFAULT_MODELS = ("mlp", "conv_add_relu:c=256,k=64", "conv_add_relu", "attention",
                  "encoder_layer", "tests/data/bert_2layer.onnx",
                  "tests/data/gpt2_2block.onnx", "tests/data/vit_tiny.onnx")


def agrees(est: int, hip: int, arch: str) -> bool:
    """``wavefuse check``'s rule: within 10% of hipcc's count, or the same occupancy."""
    return (abs(est - hip) <= VGPR_AGREEMENT_REL * hip
            or vgpr_occupancy(est, arch) == vgpr_occupancy(hip, arch))


def normalized(kernel, src: str) -> str:
    """The source without comments and with the kernel's and buffers' names replaced:
    two dispatches of the same shape (the Q, K and V projections) compile alike."""
    names = sorted({c_identifier(kernel.name)} | {c_identifier(p.name) for p in kernel.params},
                   key=len, reverse=True)
    text = "\n".join(line.split("//", 1)[0].rstrip() for line in src.splitlines())
    for i, n in enumerate(names):
        text = text.replace(n, f"N{i}_")
    return text


def points(models, arch, kinds, mmas, per_dispatch=None, seed=0, pin=False):
    """(model, dispatch name, kind, knobs, kernel, source, hash) for every legal point,
    deduplicated by normalised source; a dispatch whose first point was seen before (the
    same shape in another layer) is skipped whole."""
    seen = set()
    hw = get_arch(arch)  # this tool's arch (a hipcc target name), resolved once
    for spec in models:
        g = load_model(spec)
        for plan in (fuse(g), fuse(g, aggressive=False)):
            for d in plan.dispatches:
                kind = dispatch_kind(g, d)
                if kind not in kinds:
                    continue
                cands = [c for c in schedule_space(g, d, hw)
                         if c.legal and c.knobs.get("lowering") != "direct"
                         and (kind != "contraction" or c.knobs.get("mma", "fma") in mmas)]
                if per_dispatch and len(cands) > per_dispatch:  # the first, then a sample
                    rest = cands[1:]  # shuffled: a smaller N takes a prefix of a larger one's
                    random.Random(f"{seed}:{d.name}").shuffle(rest)
                    cands = [cands[0]] + rest[:per_dispatch - 1]
                first = True
                for c in cands:
                    try:
                        # a split dispatch: its first (partial) kernel, the heavy one
                        k = kernels_of(lower(g, d, c.knobs, hw))[0]
                    except Exception as exc:  # noqa: BLE001 - a point the lowering refuses
                        print(f"skip {spec} {d.name} {c.label()}: {exc}", file=sys.stderr)
                        continue
                    src = emit_kernel(k, arch, waves_per_eu=(pinned_waves(k, hw)
                                                             if pin else None))
                    h = hashlib.sha256(normalized(k, src).encode()).hexdigest()[:20]
                    if h in seen:
                        if first:
                            break  # this dispatch's shape was swept already
                        continue
                    first = False
                    seen.add(h)
                    yield spec, d.name, kind, c.knobs, k, src, h


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx90a")
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                    help="built-in model specs or .onnx paths")
    ap.add_argument("--kinds", default="contraction,attention")
    ap.add_argument("--mma", default="fma,mfma")
    ap.add_argument("--per-dispatch", type=int, default=0,
                    help="at most N points per dispatch (the first, then a seeded sample); "
                         "0: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", default=str(Path.home() / ".cache/wavefuse/vgpr_sweep.json"))
    ap.add_argument("--pin", action="store_true",
                    help="emit with amdgpu_waves_per_eu at the simulator's occupancy; spills miss")
    ap.add_argument("--json", action="store_true", help="print every point as JSON")
    args = ap.parse_args(argv)
    if hipcc_path() is None:
        print("error: hipcc not found on PATH; install the Debian package 'hipcc'",
              file=sys.stderr)
        return 2
    real, _ = check_arch(args.arch)
    cache_path = Path(args.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    pts = list(points(args.models, args.arch, set(args.kinds.split(",")),
                      set(args.mma.split(",")), args.per_dispatch, args.seed, args.pin))
    todo = [p for p in pts if f"{real}:{p[6]}" not in cache]

    def compile_one(p):
        with tempfile.TemporaryDirectory(prefix="vgpr-sweep-") as tmp:
            src = Path(tmp) / "k.hip"
            src.write_text(p[5])
            r = compile_to_asm(src, real, Path(tmp) / "k.s")
            if r["rc"] != 0:
                return p[6], {"error": r["stderr"][:300]}
            a = parse_asm((Path(tmp) / "k.s").read_text())
            return p[6], {"vgprs": a["vgprs"], "agprs": a["agprs"],
                          "scratch": a["scratch_bytes"], "spills": a["vgpr_spills"]}

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for n, (h, res) in enumerate(pool.map(compile_one, todo), 1):
            cache[f"{real}:{h}"] = res
            if n % 10 == 0 or n == len(todo):
                cache_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
                os.replace(tmp, cache_path)
                print(f"compiled {n}/{len(todo)}", file=sys.stderr)
    rows, miss = [], 0
    for spec, dname, kind, knobs, k, _, h in pts:
        res = cache[f"{real}:{h}"]
        if "error" in res:
            print(f"compile error {spec} {dname}: {res['error']}", file=sys.stderr)
            continue
        est = estimate_vgprs(k, args.arch)
        hip = res["vgprs"]
        spill = bool(res.get("scratch") or res.get("spills"))
        ok = agrees(est, hip, real) and not spill
        miss += not ok
        rows.append({"model": spec, "dispatch": dname, "kind": kind, "knobs": knobs,
                     "estimate": est, "hipcc": hip, "hipcc_agprs": res["agprs"],
                     "scratch": res.get("scratch"), "spills": res.get("spills"), "ok": ok})
        if not ok and not args.json:
            kn = " ".join(f"{a}={b}" for a, b in knobs.items()
                          if a not in ("vec_a", "vec_b", "lowering"))
            sp = f" spills {res.get('spills')} scratch {res.get('scratch')} B" if spill else ""
            print(f"MISS {spec.split('/')[-1]:<22} {kind[:5]} est {est:>3} "
                  f"({vgpr_occupancy(est, real)}w) hipcc {hip:>3} "
                  f"({vgpr_occupancy(hip, real)}w){sp} {kn}")
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    by_kind = {}
    for r in rows:
        key = (r["kind"], r["knobs"].get("mma", ""))
        t = by_kind.setdefault(key, [0, 0, 0])
        t[0] += 1
        t[1] += not r["ok"]
        t[2] += bool(r["scratch"] or r["spills"])
    for (kind, mma), (n, m, sp) in sorted(by_kind.items()):
        pinned = f", {sp} spill; pinned at the simulator's occupancy" if args.pin else ""
        print(f"{kind} {mma}: {n - m}/{n} points within the rule ({m} miss{pinned}), "
              f"{args.arch}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
