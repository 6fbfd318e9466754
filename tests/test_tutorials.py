"""The lesson runner and the exercise checks: every check must reject a wrong answer."""
import os
import sys

import pytest

TUTORIALS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tutorials")

from compiler.lessons import exercises as ex  # noqa: E402
from compiler.lessons.runner import LessonError, lesson_paths, parse_blocks, run_lesson  # noqa: E402
from gpusim.program import (  # noqa: E402
    Assign, Buffer, Kernel, Load, Store, Var, block_id, thread_id)


# ------------------------------------------------------------------------------ runner
LESSON = """# t

```python
x = 1
```

```python no-run
raise RuntimeError("shown, not run")
```

```console
$ wavefuse models
```

```python
y = x + 1
assert y == {want}
```
"""


def test_parse_blocks_skips_no_run_and_console():
    blocks = parse_blocks(LESSON.format(want=2))
    assert [b.number for b in blocks] == [1, 2]
    assert [b.line for b in blocks] == [4, 16]
    assert blocks[1].code.startswith("y = x + 1")


def test_blocks_share_one_namespace(tmp_path):
    p = tmp_path / "01_t.md"
    p.write_text(LESSON.format(want=2))
    assert run_lesson(str(p))["y"] == 2


def test_failing_block_names_file_block_and_line(tmp_path):
    p = tmp_path / "02_t.md"
    p.write_text(LESSON.format(want=3))
    with pytest.raises(LessonError) as e:
        run_lesson(str(p))
    msg = str(e.value)
    assert "02_t.md" in msg and "block 2 (line 16)" in msg and "AssertionError" in msg
    assert "02_t.md\", line 17" in msg  # the traceback points at the lesson's own line


def test_unclosed_fence_is_an_error():
    with pytest.raises(LessonError, match="unclosed"):
        parse_blocks("```python\nx = 1\n")


def test_lessons_are_numbered_in_order():
    names = [os.path.basename(p) for p in lesson_paths(TUTORIALS)]
    assert names and names == sorted(names)
    plain = [n for n in names if n[2] == "_"]
    assert [n[:2] for n in plain] == [f"{i:02d}" for i in range(1, len(plain) + 1)]
    for n in names:   # an inserted lesson (05a_) follows the lesson it extends (05_)
        assert n[2] == "_" or (n[2].isalpha() and n[3] == "_" and
                               any(p[:2] == n[:2] for p in plain)), n


# ------------------------------------------------------------------ lesson 1: coalescing
def _copy(n, strided: bool, width: int):
    i = Var("i", "i32")
    if width == 1 and not strided:
        x = Var("x")
        body = (Assign(i, block_id() * 256 + thread_id()), Load((x,), "a", i), Store("b", i, (x,)))
        grid = n // 256
    else:
        regs = [Var(f"v{j}") for j in range(4)]
        body = (Assign(i, block_id() * 1024 + thread_id()),) + tuple(
            s for j, v in enumerate(regs)
            for s in (Load((v,), "a", i + j * 256), Store("b", i + j * 256, (v,))))
        grid = n // 1024
    return Kernel("copy", (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n,), "out")),
                  grid=grid, block=256, body=body)


def test_vector_copy_check_rejects_scalar_and_strided_copies():
    for wrong in (lambda n: _copy(n, False, 1), lambda n: _copy(n, True, 4)):
        v = ex.check_vector_copy(wrong)
        assert not v.ok and any("wave load instructions" in p for p in v.problems)
        assert v.time_us is not None


def test_vector_copy_check_rejects_wrong_values():
    def off_by_one(n):
        i = Var("i", "i32")
        v = tuple(Var(f"v{j}") for j in range(4))
        return Kernel("bad", (Buffer("a", "f32", (n,)), Buffer("b", "f32", (n,), "out")),
                      grid=n // 1024 - 1, block=256,
                      body=(Assign(i, (block_id() * 256 + thread_id()) * 4), Load(v, "a", i + 4),
                            Store("b", i, v)))
    v = ex.check_vector_copy(off_by_one)
    assert not v.ok and "b != a" in v.problems[0]


# ------------------------------------------------------------------ lesson 2: LDS banks
@pytest.mark.parametrize("wrong,why", [
    (lambda r, c: c, "bank-conflict"),                 # plain layout
    (lambda r, c: c ^ (r // 2), "bank-conflict"),      # half-way swizzle
    (lambda r, c: c * 0, "out != inp.T"),              # not a permutation
])
def test_transpose_swizzle_check_rejects(wrong, why):
    v = ex.check_transpose_swizzle(wrong)
    assert not v.ok and any(why in p for p in v.problems)


def test_transpose_swizzle_check_accepts_a_rotation_too():
    assert ex.check_transpose_swizzle(lambda r, c: (c + r) % 32).ok


# ------------------------------------------------------- lesson 3: occupancy and latency
def test_latency_check_rejects_the_serial_gather():
    v = ex.check_latency_hiding(ex.gather_serial)
    assert not v.ok and any("more than half" in p for p in v.problems)


def test_latency_check_rejects_dropping_the_lds():
    from gpusim.program import Assign, Load, Var, block_id, thread_id

    def batched_no_lds(lds_kib):
        i, acc = Var("i", "i32"), Var("acc")
        xs = [Var(f"x{j}") for j in range(4)]
        body = [Assign(i, block_id() * ex.GATHER_BLOCK + thread_id())]
        body += [Load((x,), "a", i + j * ex.GATHER_N) for j, x in enumerate(xs)]
        body += [Assign(acc, xs[0] + xs[1] + xs[2] + xs[3])]
        return ex.gather_kernel("no_lds", body, acc, i, 0)
    v = ex.check_latency_hiding(batched_no_lds)
    assert not v.ok and any("keep the 33 KiB" in p for p in v.problems)


def test_latency_check_rejects_wrong_sums():
    from gpusim.program import Assign, Load, Var, block_id, thread_id

    def three_loads(lds_kib):
        i, acc = Var("i", "i32"), Var("acc")
        xs = [Var(f"x{j}") for j in range(3)]
        body = [Assign(i, block_id() * ex.GATHER_BLOCK + thread_id())]
        body += [Load((x,), "a", i + j * ex.GATHER_N) for j, x in enumerate(xs)]
        body += [Assign(acc, xs[0] + xs[1] + xs[2])]
        return ex.gather_kernel("three", body, acc, i, lds_kib)
    v = ex.check_latency_hiding(three_loads)
    assert not v.ok and any("not the sum" in p for p in v.problems)


# --------------------------------------------------- lesson 4: an elementwise schedule
def _chain():
    from compiler.ir.graph import Graph
    g = Graph("chain")
    x = g.input("x", (1024, 1024))
    b = g.input("bias", (1024,))
    y = g.relu(g.add(g.mul(x, 2.0), b))
    g.output(g.mul(y, y))
    return g


def test_elementwise_schedule_check_rejects_slow_and_illegal():
    g = _chain()
    slow = ex.check_elementwise_schedule(g, {"workgroup": 256, "vector": 1, "elems": 4,
                                             "order": "output"})
    assert not slow.ok and any("over 1.1 x" in p for p in slow.problems)
    bad = ex.check_elementwise_schedule(g, {"workgroup": 256, "vector": 3, "elems": 3,
                                            "order": "output"})
    assert not bad.ok and "illegal schedule" in bad.problems[0]


def test_elementwise_schedule_check_needs_one_dispatch():
    from compiler.ir.graph import Graph
    g = Graph("two")
    x = g.input("x", (64, 64))
    g.output(g.reduce_sum(g.exp(x)), g.matmul(x, x))
    v = ex.check_elementwise_schedule(g, {"workgroup": 256})
    assert not v.ok and "dispatches, not 1" in v.problems[0]


# ------------------------------------------------------------------ lesson 5: softmax
def test_softmax_schedule_check_rejects_row_per_wave():
    from compiler.ir.models import load_model
    g = load_model("softmax:rows=128,cols=4096")
    v = ex.check_schedule(g, dict(mapping="wave", workgroup=256, vector=4, cache="reread",
                                  reduce="wave", passes="single"), slack=1.25, budget=48)
    assert not v.ok and any("over 1.25 x" in p for p in v.problems)


# --------------------------------------------------------------- lesson 6: layer norm
def _ln(g, h, gamma, beta, axis=-1):
    d = g.sub(h, g.reduce_mean(h, axis, keepdims=True))
    var = g.reduce_mean(g.mul(d, d), axis, keepdims=True)
    return g.add(g.mul(g.mul(d, g.rsqrt(g.add(var, 1e-5))), gamma), beta)


def test_layer_norm_check_rejects_missing_residual_and_wrong_axis():
    v = ex.check_layer_norm(lambda g, x, res, gamma, beta: _ln(g, x, gamma, beta))
    assert not v.ok and "does not compute" in v.problems[0]
    v = ex.check_layer_norm(lambda g, x, res, gamma, beta: _ln(g, g.add(x, res), gamma, beta, 0))
    assert not v.ok and "does not compute" in v.problems[0]


def test_layer_norm_check_accepts_the_builder():
    from compiler.ir import builders
    v = ex.check_layer_norm(lambda g, x, res, gamma, beta:
                            builders.layer_norm(g, x, gamma, beta, residual=res))
    assert v.ok and v.time_us > 0


# ----------------------------------------------------------- lesson 10: HIP and the ISA
@pytest.mark.hip
@pytest.mark.skipif(__import__("shutil").which("hipcc") is None, reason="needs hipcc")
def test_isa_check_rejects_scalar_loads():
    v = ex.check_isa_vector_loads(lambda n: _copy(n, True, 4))
    assert not v.ok and any("want only 16 B" in p for p in v.problems)
    assert v.facts["isa_loads"] == {4: 4}


@pytest.mark.hip
@pytest.mark.skipif(__import__("shutil").which("hipcc") is None, reason="needs hipcc")
def test_isa_fma_check_rejects_scalar_elements():
    from gpusim.program import fma

    def scalar(n):
        i = Var("i", "i32")
        body = [Assign(i, block_id() * 2048 + thread_id())]
        for h in range(8):
            a, b, c = Var(f"a{h}"), Var(f"b{h}"), Var(f"c{h}")
            body += [Load((a,), "a", i + 256 * h), Load((b,), "b", i + 256 * h),
                     Load((c,), "c", i + 256 * h), Store("out", i + 256 * h, (fma(a, b, c),))]
        return Kernel("fma_s", tuple(Buffer(x, "f32", (n,)) for x in "abc")
                      + (Buffer("out", "f32", (n,), "out"),), grid=n // 2048, block=256,
                      body=tuple(body))
    v = ex.check_isa_fma(scalar)
    assert not v.ok and v.facts["isa_loads"] == {4: 24}


# ------------------------------------------------------- lesson 9: the output swizzle
@pytest.mark.parametrize("wrong,why", [("none", "coalescing"), ("after_fusion", "not faster"),
                                       ("sideways", "does not lower")])
def test_swizzle_check_rejects(wrong, why):
    v = ex.check_swizzle_placement(wrong)
    assert not v.ok and any(why in p for p in v.problems)


# ------------------------------------------------------- lesson 8: attention in one dispatch
def test_online_softmax_check_rejects_a_missing_rescale():
    import numpy as np

    def no_rescale(m, l, acc, x, v):
        m_new = max(m, float(np.max(x)))
        p = np.exp(x - m_new)
        return m_new, l + p.sum(), acc + p @ v

    v = ex.check_online_softmax(no_rescale)
    assert not v.ok and "rescaled" in v.problems[0]

    def right(m, l, acc, x, v):
        m_new = max(m, float(np.max(x)))
        a = np.exp(m - m_new)
        p = np.exp(x - m_new)
        return m_new, a * l + p.sum(), a * acc + p @ v

    assert ex.check_online_softmax(right).ok


# ---------------------------------------------------------- lesson 7: GEMM and matrix cores
def test_gemm_check_rejects_fma_tiles_and_illegal_micro_tiles():
    v = ex.check_gemm_schedule(dict(BM=128, BN=128, TM=8, TN=8))
    assert not v.ok and any("not 2x faster" in p for p in v.problems)
    v = ex.check_gemm_schedule(dict(BM=64, BN=64, TM=3, TN=4))
    assert not v.ok and "does not lower" in v.problems[0]


def test_gemm_check_accepts_mfma_blocks():
    v = ex.check_gemm_schedule(dict(mma="mfma", BM=64, BN=64, TM=32, TN=32))
    assert v.ok and v.facts["speedup"] >= 2
