"""How many of onnx's own backend node tests wavefuse's importer passes.

Runs every case the installed ``onnx`` package generates (``onnx.backend.test.case.node``:
one small model per op variant, with its input and expected output arrays) through
``compiler.frontends.onnx.from_model`` and the numpy reference interpreter, and compares
with the expected outputs at the case's own rtol/atol (integers and bools exactly). Cases
whose every op wavefuse lists as supported are the denominator that matters; the rest are
counted apart. Many cases feed axes, shapes or pads as run-time inputs; wavefuse imports
static shapes, so those pass only with the inputs pinned to the case's values
(``from_model(..., values=)``), and are counted apart from the cases that pass as given.
Prints the totals and the most common reasons for failing::

    python tools/onnx_backend_coverage.py              # summary
    python tools/onnx_backend_coverage.py -v           # every failing supported case
    python tools/onnx_backend_coverage.py --json       # machine-readable
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect_testcases()


#: bf16 outputs: four bf16 ulps (2^-8 each) relative, and as much absolute (see _match)
BF16_RTOL = 2.0 ** -6


def _match(ours, want, rtol, atol) -> str:
    ours, want = np.asarray(ours), np.asarray(want)
    if ours.shape != want.shape and ours.size == want.size == 1:
        ours = ours.reshape(want.shape)
    if ours.shape != want.shape:
        return f"shape {ours.shape} != expected {want.shape}"
    if want.dtype.kind in "biu":
        if not np.array_equal(ours.astype(want.dtype), want):
            return "integer/bool values differ"
        return ""
    if want.dtype.name == "bfloat16":
        # onnx's reference computes bf16 through numpy on ml_dtypes' bfloat16, which
        # accumulates MatMul and the reductions in bf16 (a 64-term dot product of normal
        # values: 0.057 from the f32-accumulated result rounded once); a kernel
        # accumulates in f32. The cases' rtol (1e-3) is below one bf16 ulp (2^-8), so bf16
        # outputs are compared at BF16_RTOL, which docs/dtypes.md states with the counts
        rtol, atol = max(rtol, BF16_RTOL), max(atol, BF16_RTOL)
    o, w = ours.astype(np.float64), want.astype(np.float64)
    same = (o == w) | (np.isnan(o) & np.isnan(w))
    with np.errstate(all="ignore"):
        close = np.abs(o - w) <= atol + rtol * np.abs(w)
    if not np.all(same | close):
        return f"values differ (max {np.nanmax(np.abs(o - w)):.3g})"
    return ""


def _array(x):
    """Cases give numpy arrays, TensorProtos for dtypes numpy lacks, or lists of arrays
    (a sequence input, which the importer refuses as not a tensor: kept a list)."""
    import onnx
    from onnx import numpy_helper
    if isinstance(x, (list, tuple)):
        return [_array(a) for a in x]
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


_NEEDS_CONSTANT = re.compile(r"must be a constant .*'([^']+)' is computed")
_FOLDS_ONLY = "folds it only when its inputs are constants"


def _import(model, name, inputs, in_names):
    """from_model, pinning (``values=``) the case's inputs the importer needs as constants:
    the input an error names ("'axes' is computed"); when it names a tensor computed from
    inputs (pads from a shape input inside a function body), the integer inputs; every
    input when a folded op (Range, ConstantOfShape) sits on one. Returns (graph, pinned
    input names)."""
    from compiler.frontends.onnx import from_model
    from compiler.ir.graph import UnsupportedError
    given = dict(zip(in_names, inputs))
    pinned: dict = {}
    while True:
        try:
            return from_model(model, name, values=pinned), sorted(pinned)
        except UnsupportedError as exc:
            msg = str(exc)
            m = _NEEDS_CONSTANT.search(msg)
            ints = {k for k, v in given.items()
                    if isinstance(v, np.ndarray) and v.dtype.kind in "iu"}
            more = (({m.group(1)} if m.group(1) in given else ints) if m else
                    set(given) if _FOLDS_ONLY in msg else set())
            more = {k for k in more if k in given} - set(pinned)
            if not more:
                raise
            pinned.update({k: given[k] for k in more})


def run_case(case) -> tuple[bool, str, str]:
    """(supported, status, reason): status is 'pass', 'pinned' (passes with some inputs
    pinned to the case's values, see ``_import``) or 'fail'."""
    from compiler.frontends.onnx import SUPPORTED_OPS
    from compiler.ir.graph import GraphError
    from compiler.ir.models import ModelError
    from compiler.ir.reference import evaluate
    model = case.model
    supported = all(n.op_type in SUPPORTED_OPS and n.domain in ("", "ai.onnx")
                    for n in model.graph.node)
    pinned_any = False
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            init = {t.name for t in model.graph.initializer}
            in_names = [vi.name for vi in model.graph.input if vi.name not in init]
            out_names = [vi.name for vi in model.graph.output]
            for inputs, outputs in case.data_sets:
                inputs, outputs = [_array(a) for a in inputs], [_array(a) for a in outputs]
                graph, pinned = _import(model, case.name, inputs, in_names)
                pinned_any = pinned_any or bool(pinned)
                meta = graph.meta
                feed = {}
                for name, arr in zip(in_names, inputs):
                    if name in meta["onnx_inputs"]:
                        g_name = meta["onnx_inputs"][name]
                        # the IR has no rank-0 tensors: a scalar input is shape (1,)
                        feed[g_name] = np.asarray(arr).reshape(graph.op(g_name).type.shape) \
                            if np.size(arr) == 1 else arr
                got = evaluate(graph, feed)
                for name, want in zip(out_names, outputs):
                    why = _match(got[meta["onnx_outputs"][name]], want, case.rtol, case.atol)
                    if why:
                        return supported, "fail", f"{name}: {why}"
    except (GraphError, ModelError) as exc:
        return supported, "fail", str(exc).replace(case.name + ": ", "", 1)
    except Exception as exc:  # a crash is a finding too: name it
        return supported, "fail", f"CRASH {type(exc).__name__}: {exc}"
    return supported, "pinned" if pinned_any else "pass", ""


#: a failing case's reason that is a finding, not a refusal: wavefuse imported the model
#: and computed something other than onnx's expected output
_WRONG = re.compile(r"values differ|!= expected")


def verdict(status: str, reason: str) -> str:
    """'pass', 'pinned', 'refused' (one clear line: an unsupported op, dtype or shape),
    'wrong' (imported and evaluated, but beyond the case's tolerance) or 'crash'."""
    if status != "fail":
        return status
    if reason.startswith("CRASH"):
        return "crash"
    return "wrong" if _WRONG.search(reason) else "refused"


def _reason_key(reason: str) -> str:
    import re
    r = re.sub(r"node '[^']*' \(", "node (", reason)
    r = re.sub(r"'[^']*'", "'…'", r)
    r = re.sub(r"\d+", "N", r)
    return r[:110]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list failing supported cases")
    ap.add_argument("--json", action="store_true", help="print a JSON summary")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    args = ap.parse_args(argv)
    import onnx
    cases = [c for c in _cases() if c.kind == "node" and args.k in c.name]
    rows = [(c.name, *run_case(c)) for c in cases]
    sup = [r for r in rows if r[1]]
    passed_sup = [r for r in sup if r[2] == "pass"]
    pinned_sup = [r for r in sup if r[2] == "pinned"]
    passed_all = [r for r in rows if r[2] != "fail"]
    reasons = collections.Counter(_reason_key(r[3]) for r in sup if r[2] == "fail")
    verdicts = collections.Counter(verdict(r[2], r[3]) for r in rows)
    summary = {"onnx": onnx.__version__, "cases": len(rows), "passed": len(passed_all),
               "supported_cases": len(sup), "supported_passed": len(passed_sup),
               "supported_passed_pinned": len(pinned_sup),
               "refused": verdicts["refused"], "wrong": verdicts["wrong"],
               "crashed": verdicts["crash"],
               "top_failure_reasons": reasons.most_common(15)}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"onnx {onnx.__version__}: {len(rows)} backend node test cases")
    print(f"  every op supported: {len(sup)} cases, {len(passed_sup)} pass as given, "
          f"{len(pinned_sup)} more with their shape inputs pinned (from_model values=)")
    print(f"  passing overall:    {len(passed_all)} of {len(rows)}")
    print(f"  refused in one line: {verdicts['refused']}, values wrong: {verdicts['wrong']}, "
          f"crashed: {verdicts['crash']}")
    if reasons:
        print("most common reasons among failing supported cases:")
        for why, n in reasons.most_common(15):
            print(f"  {n:4d}  {why}")
    if args.verbose:
        for name, s, st, why in sup:
            if st == "fail":
                print(f"FAIL {name}: {why}")
        for name, s, st, why in rows:
            if verdict(st, why) in ("wrong", "crash") and not s:
                print(f"FAIL {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
