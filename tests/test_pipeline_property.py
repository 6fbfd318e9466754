"""Property test of the whole pipeline: random graphs are fused, every dispatch is
lowered with a randomly chosen legal schedule and run functionally in gpusim, and the
kernels' outputs, fed dispatch to dispatch, equal the numpy reference of the graph."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpusim
from compiler.lower import lower
from compiler.schedule import schedule_space
from compiler.lower.common import memory_image
from compiler.passes import fuse
from compiler.reference import evaluate, random_inputs

from test_fusion_property import graphs  # noqa: E402  (the fusion tests' graph generator)


def describe(g) -> str:
    return "; ".join(f"{op.name}={op.kind}({','.join(op.inputs)}){list(op.type.shape)}"
                     f"{op.attrs.get('axes', '')}{op.attrs.get('perm', '')}"
                     for op in g.ops if op.kind != "constant")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(g=graphs(), aggressive=st.booleans(), pick=st.integers(0, 10_000),
       arch=st.sampled_from(["gfx942", "gfx90a", "gfx1100"]))
def test_simulated_kernels_compute_the_graph(g, aggressive, pick, arch):
    plan = fuse(g, aggressive=aggressive)
    env = evaluate(g, random_inputs(g, 3), keep_all=True)
    values = {n: env[n] for n in g.topo_order() if g.op(n).kind in ("input", "constant")}
    for d in plan.dispatches:
        space = schedule_space(g, d, arch)
        legal = [c for c in space if c.legal and not c.opt_in]
        assert legal, (f"{d.name} ops {d.ops} outputs {d.outputs}: no legal schedule "
                       f"({sorted({c.reason for c in space})}) in graph {describe(g)}")
        knobs = legal[pick % len(legal)].knobs
        where = f"{d.name} {knobs} ops {d.ops} of graph {describe(g)}"
        k = lower(g, d, knobs, arch)
        ins = {b.name: memory_image(g, b.name, values[b.name]) for b in k.buffers
               if b.intent == "in"}
        try:
            res = gpusim.simulate(k, arch, inputs=ins)
        except gpusim.KernelError as e:
            raise AssertionError(f"{e} in {where}") from None
        for o in d.outputs:
            got = np.asarray(res.outputs[o]).reshape(env[o].shape)
            np.testing.assert_allclose(got, env[o], rtol=1e-4, atol=1e-5,
                                       err_msg=f"output {o} of {where}")
            values[o] = got  # the next dispatch reads what this kernel wrote
