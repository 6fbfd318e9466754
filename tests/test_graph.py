"""Type inference of the graph IR: shapes, dtypes, layouts, and errors that name the node."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.ir.graph import Graph, GraphError, ShapeError, TensorType, UnsupportedError


def test_tensor_type_layout_strides():
    t = TensorType((2, 3, 4, 5), "f16", layout=(0, 3, 1, 2))
    assert t.strides == (60, 4, 1, 12) and t.order == (0, 3, 1, 2)
    assert t.nbytes == 2 * 120 and not t.is_row_major
    assert TensorType((2, 3), layout=(0, 1)).layout is None  # identity order is row-major
    assert str(t) == "f16[2x3x4x5] layout=[0, 3, 1, 2]"


@pytest.mark.parametrize("kwargs,exc", [
    (dict(shape=(2, 0)), ShapeError), (dict(shape=(2, 3), layout=(0, 0)), ShapeError),
    (dict(shape=(2,), dtype="f64"), UnsupportedError)])
def test_tensor_type_errors(kwargs, exc):
    with pytest.raises(exc):
        TensorType(**kwargs)


def test_inference_of_each_kind():
    g = Graph()
    x = g.input("x", (4, 8))
    assert g.exp(x).shape == (4, 8)
    assert g.add(x, g.input("b", (8,))).shape == (4, 8)
    assert g.reduce_sum(x, 1, keepdims=False).shape == (4,)
    assert g.reduce_max(x, (0, 1), keepdims=True).shape == (1, 1)
    assert g.matmul(x, g.input("w", (3, 8, 5))).shape == (3, 4, 5)
    assert g.transpose(x, (1, 0)).shape == (8, 4)
    assert g.reshape(x, (2, -1)).shape == (2, 16)
    assert g.broadcast(g.input("r", (1, 8)), (5, 8)).shape == (5, 8)
    assert g.cast(x, "f16").dtype == "f16"
    conv = g.conv2d(g.input("img", (1, 9, 9, 4)), g.input("f", (6, 3, 3, 2)),
                    data_format="NHWC", stride=(2, 2), padding=(1, 1, 1, 1), groups=2)
    assert conv.shape == (1, 5, 5, 6)


@pytest.mark.parametrize("build,pattern", [
    (lambda g, x: g.add(x, g.input("y", (3, 5)), name="bad_add"), r"node 'bad_add' \(add\).*broadcast"),
    (lambda g, x: g.mul(x, g.input("h", (4, 8), "f16"), name="mix"), r"node 'mix'.*dtypes differ"),
    (lambda g, x: g.matmul(x, g.input("w", (4, 4)), name="mm"), r"node 'mm'.*contraction"),
    (lambda g, x: g.matmul(g.input("v", (8,)), x, name="mv"), r"node 'mv'.*rank >= 2"),
    (lambda g, x: g.reduce_sum(x, 2, name="r"), r"node 'r'.*axis 2 is out of range"),
    (lambda g, x: g.reduce_sum(x, (1, -1), name="r2"), r"node 'r2'.*repeated axis"),
    (lambda g, x: g.transpose(x, (0, 0), name="t"), r"node 't'.*permutation"),
    (lambda g, x: g.reshape(x, (5, -1), name="rs"), r"node 'rs'.*cannot reshape"),
    (lambda g, x: g.broadcast(x, (4, 1), name="bc"), r"node 'bc'"),
    (lambda g, x: g.conv2d(g.input("i", (1, 3, 5, 5)), g.input("k", (2, 2, 3, 3)), name="cv"),
     r"node 'cv'.*input channels"),
    (lambda g, x: g.conv2d(g.input("i", (1, 3, 2, 2)), g.input("k", (2, 3, 3, 3)), name="cv2"),
     r"node 'cv2'.*does not fit"),
    (lambda g, x: g.add_op("softmax", (x,), name="sm"), r"node 'sm'.*unknown op kind"),
])
def test_inference_errors_name_the_node_and_leave_graph_unchanged(build, pattern):
    g = Graph()
    x = g.input("x", (4, 8))
    with pytest.raises(GraphError, match=pattern):
        build(g, x)
    assert not any(n in g for n in ("bad_add", "mix", "mm", "mv", "r", "r2", "t", "rs", "bc",
                                    "cv", "cv2", "sm"))


def test_duplicate_names_cycles_and_validate():
    g = Graph("g")
    x = g.input("x", (2,))
    with pytest.raises(GraphError, match="already used"):
        g.input("x", (2,))
    with pytest.raises(GraphError, match="no outputs"):
        g.validate()
    y = g.exp(x)
    g.output(y)
    g.g.add_edge(y.name, x.name)
    with pytest.raises(GraphError, match="cycle"):
        g.topo_order()


def test_rename_keeps_operands_outputs_and_order():
    g = Graph()
    x = g.input("x", (3,))
    e = g.exp(x)
    s = g.add(e, e)
    g.output(s)
    g.rename(e.name, "e")
    g.rename(s.name, "out")
    assert g.op("out").inputs == ("e", "e") and g.outputs == ["out"]
    assert g.topo_order() == ["x", "e", "out"]
    with pytest.raises(GraphError, match="already used"):
        g.rename("e", "x")
    g.validate()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=0, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4))
def test_binary_broadcast_matches_numpy(base, ones_a, ones_b):
    """Random broadcast-compatible shapes: inferred shape == numpy's broadcast shape."""
    base = base or [1]
    a = tuple(1 if ones_a[i] else s for i, s in enumerate(base))
    b = tuple(1 if ones_b[i] else s for i, s in enumerate(base))[len(base) // 2:] or (1,)
    g = Graph()
    y = g.sub(g.input("a", a), g.input("b", b))
    assert y.shape == np.broadcast_shapes(a, b)
