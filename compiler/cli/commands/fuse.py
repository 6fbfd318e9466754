"""`wavefuse fuse MODEL`: the fusion plan — dispatches, boundary tensors, traffic, reasons.

How the plan is formed (details in :mod:`compiler.fusion`): every primitive op starts as
its own dispatch; named rules, one per module, merge dispatches when the indexing maps of
the ops put both sides on the same parallel point, and record a reason for every pair
they fuse or keep apart. ``--no-aggressive`` gives IREE's default (one root per
dispatch): softmax and layer norm take 2 dispatches instead of 1.

Dispatch counts of the built-in models (aggressive / conservative): softmax 1/2,
layernorm 1/2, rmsnorm 1/1, conv_add_relu 1/1, mlp 2/2, attention 1/4, encoder_layer
9/14. Without the attention rule (the plan ``tune`` compares as ``split-attention``)
attention is 3 and the encoder layer 11: the q, k and v projections (matmul + bias
each), QK^T + scale, softmax, PV, output projection + bias + residual, layer norm, FFN1 +
bias + GELU, FFN2 + bias + residual, layer norm. Reductions never join a contraction's
dispatch (its epilogue runs per output element) except through the attention rule, which
folds QK^T, the softmax and PV into one; each layer norm stays a dispatch of its own;
the head reshapes/transposes cost nothing (index maps).
"""
from __future__ import annotations

from compiler.fusion import fuse
from compiler.fusion.plan import render_plan
from compiler.cli.views.plan import explain_view
from compiler.cli.commands import common


def register(sub) -> None:
    p = sub.add_parser("fuse", help="form fused dispatches and show why",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    common.add_model(p)
    p.add_argument("--no-aggressive", dest="aggressive", action="store_false",
                   help="conservative plan (IREE's default): no dispatch holds two chained "
                        "roots, consumers add no loops beyond the root's")
    p.add_argument("--explain", action="store_true",
                   help="also list every fuse / not-fuse decision with its reason")
    common.add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    # sibling GEMMs merged when aggressive, as tune's aggressive plan does
    plan = fuse(common.load(args, compute=False), aggressive=args.aggressive,
                horizontal_gemms=args.aggressive)
    if args.json:
        common.emit_json(plan.to_dict())
        return 0
    con = common.console()
    render_plan(plan, con)
    if args.explain:
        con.print(explain_view(plan, cost_hint=f"`wavefuse view explain {args.model} --tune` "
                                               "adds them"))
    return 0
