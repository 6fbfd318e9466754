"""The split-K reduction and stream-K fix-up kernels built once per the knobs they read
(``compiler.lower.contraction.reduce_kernel``) against building each point's afresh:
every legal point of real spaces (a GEMM with its epilogue, 3x3 convs with and without
padding, a grouped conv, gfx942 and gfx90a) lowers to the same kernels, text for text,
``meta`` included. Differential: a knob the reduction reads but the memo does not key on
makes two points share a kernel that differs, and names the point."""
from __future__ import annotations

import pytest

from gpusim.occupancy import _decided, _needed, _prune, _reads
from gpusim.hw import GFX90A, GFX942
from compiler.fusion import fuse
from compiler.ir.models import load_model
from compiler.lower import contraction, lower
from compiler.schedule import schedule_space
from compiler.tuning.bench_search import _conv
from compiler.tuning.search import legal_candidates

SPACES = {
    "gemm": lambda: load_model("mlp:tokens=64,hidden=64,ffn=256"),
    "conv3x3": _conv("c3", (1, 14, 14, 16), (16, 3, 3, 16), (1, 1), (1, 1, 1, 1)),
    "conv3x3-stride2": _conv("c3s", (1, 15, 15, 24), (16, 3, 3, 24), (2, 2), (0, 0, 0, 0)),
    "grouped": _conv("g", (1, 14, 14, 32), (32, 3, 3, 8), (1, 1), (1, 1, 1, 1), groups=4),
}


def _built_afresh(graph, dispatch, gemm, s, sk=None):
    return contraction._Builder(graph, dispatch, gemm, s, phase="reduce",
                                stream_k=sk).build()


def _texts(g, d, legal, arch) -> list:
    out = []
    for c in legal:
        try:
            out.append(repr(lower(g, d, c.knobs, arch)))
        except Exception as e:  # noqa: BLE001 - a refusal must be the same refusal
            out.append(f"{type(e).__name__}: {e}")
    return out


CASES = [(n, a) for n in SPACES for a in (GFX942, GFX90A)]


@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a.name}" for n, a in CASES])
def test_a_shared_reduction_is_the_one_built_afresh(name, arch, monkeypatch):
    g = SPACES[name]()
    d = next(x for x in fuse(g).dispatches if x.kind == "contraction")
    legal, _ = legal_candidates(schedule_space(g, d, arch), {}, d.name)
    sequences = [c for c in legal if int(c.knobs.get("split_k", 1)) > 1
                 or int(c.knobs.get("stream_k", 0))]
    assert len(sequences) >= 10
    shared = _texts(g, d, legal, arch)
    gemms = g.__dict__["_analysed_gemms"].values()
    built = sum(len(v[1]) for gm in gemms for v in gm.__dict__.get("_reduce_kernels", {}).values())
    assert built < len(sequences)  # the points did share reductions
    monkeypatch.setattr(contraction, "reduce_kernel", _built_afresh)
    g.__dict__.pop("_analysed_gemms")
    afresh = _texts(g, d, legal, arch)
    for c, a, b in zip(legal, shared, afresh):
        assert a == b, c.knobs


def test_knobs_read_records_reads_not_copies():
    s = contraction._KnobsRead({"BM": 16, "BN": 32, "swizzle": "none"})
    assert dict(s) == {"BM": 16, "BN": 32, "swizzle": "none"} and not s.read
    assert {**s} == dict(s) and not s.read
    assert s["BM"] == 16 and s.get("BK") is None and "swizzle" in s
    assert s.read == {"BM", "BK", "swizzle"}


def _needed_by_sweeps(body, env, kernel) -> set:
    """The closure as first written: sweep every producer until nothing changes."""
    from gpusim.analysis import stmt_defs, stmt_exprs
    from gpusim.program import For, If, LdsStore, Store, walk
    needed, producers = set(), []
    for s in walk(body):
        reads = set()
        for e in stmt_exprs(s):
            _reads(e, env, kernel, reads)
        if isinstance(s, (Store, LdsStore, If, For)):
            needed |= reads
        if stmt_defs(s) and not isinstance(s, For):
            producers.append(({v.name for v in stmt_defs(s)}, reads))
    changed = True
    while changed:
        changed = False
        for defs, reads in producers:
            if defs & needed and not reads <= needed:
                needed |= reads
                changed = True
    return needed


@pytest.mark.parametrize("name", ["gemm", "conv3x3"])
def test_needed_registers_are_the_sweeps_closure(name):
    """``gpusim.occupancy._needed``'s worklist against the sweeps it replaced, on
    every kernel (partial, reduction, one-kernel) of a sample of each space's points."""
    g = SPACES[name]()
    d = next(x for x in fuse(g).dispatches if x.kind == "contraction")
    legal, _ = legal_candidates(schedule_space(g, d, GFX942), {}, d.name)
    seen = 0
    for c in legal[::4]:
        try:
            k = lower(g, d, c.knobs, GFX942)
        except Exception:  # noqa: BLE001 - refused points have no kernel
            continue
        for kern in getattr(k, "kernels", (k,)):
            decided, env = _decided(kern)
            body = _prune(kern.body, decided)
            assert _needed(body, env, kern) == _needed_by_sweeps(body, env, kern)
            seen += 1
    assert seen >= 20
