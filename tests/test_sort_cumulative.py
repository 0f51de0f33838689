"""The sort and cumulative families beyond the conformance table's values (tests/conformance_sort.py):
bad input (clear errors naming the op, the graph left usable), checks repeated at specialisation for
unknown dims, static shapes, the schema (defaults, multi-output, differentiability), and gradients
of the int32 outputs."""
import numpy as np
import pytest

import mpsgraph as mg
from test_pad_space_band_one_hot import expect

SORT_OPS = ("sort", "arg_sort")
SCAN_OPS = ("cumulative_sum", "cumulative_product", "cumulative_minimum", "cumulative_maximum")


@pytest.mark.parametrize("op", SORT_OPS + SCAN_OPS)
def test_bad_axis(op):
    g = mg.Graph()
    x = g.placeholder((2, 3), name="x")
    n = g.num_nodes
    expect(mg.GraphIndexError, lambda: getattr(g, op)(x, axis=2), f"[{op}]", "axis 2 is out of range for rank 2",
           "float32(2, 3)")
    expect(mg.GraphIndexError, lambda: getattr(g, op)(x, axis=-3), f"[{op}]", "axis -3 is out of range")
    assert g.num_nodes == n  # the graph is unchanged
    y = getattr(g, op)(x, axis=-2)  # and still usable
    assert y.shape == (2, 3)


@pytest.mark.parametrize("op", SORT_OPS + SCAN_OPS + ("top_k", "bottom_k"))
def test_rank_0_is_refused(op):
    g = mg.Graph()
    s = g.placeholder((), name="s")
    kw = {"k": 0} if op in ("top_k", "bottom_k") else {}
    expect(mg.GraphIndexError, lambda: getattr(g, op)(s, **kw), f"[{op}]", "needs an input of rank >= 1",
           "float32()")


@pytest.mark.parametrize("op", ("top_k", "bottom_k"))
def test_k_out_of_range(op):
    g = mg.Graph()
    x = g.placeholder((2, 5), name="x")
    expect(mg.GraphValueError, lambda: getattr(g, op)(x, k=6), f"[{op}]", "k = 6 is out of range [0, 5] for axis 1",
           "float32(2, 5)")
    expect(mg.GraphValueError, lambda: getattr(g, op)(x, k=3, axis=0), "k = 3 is out of range [0, 2] for axis 0")
    expect(mg.GraphValueError, lambda: getattr(g, op)(x, k=-1), "k = -1 is out of range")
    expect(mg.GraphError, lambda: getattr(g, op)(x), "k")  # k is required
    v, i = getattr(g, op)(x, k=5)
    assert v.shape == (2, 5) and i.shape == (2, 5) and i.dtype == mg.int32


@pytest.mark.parametrize("op", ("top_k", "bottom_k"))
def test_k_checked_again_when_the_dim_becomes_known(op):
    g = mg.Graph()
    x = g.placeholder((None, None), name="x")
    v, i = getattr(g, op)(x, k=4)
    assert v.shape == (None, 4) and i.shape == (None, 4)
    r = g.run({x: np.arange(10, dtype=np.float32).reshape(2, 5)}, [v, i])
    assert np.asarray(r[v]).shape == (2, 4)
    with pytest.raises(mg.GraphValueError, match=r"\[" + op + r"\] k = 4 is out of range \[0, 3\]"):
        g.run({x: np.zeros((2, 3), np.float32)}, [v, i])


def test_dtypes_refused():
    g = mg.Graph()
    b = g.placeholder((4,), "bool")
    for op in SCAN_OPS:
        expect(mg.GraphTypeError, lambda: getattr(g, op)(b), f"[{op}]", "bool")
    assert g.sort(b).dtype == mg.bool  # sorting bools is fine (False < True)


def test_schema():
    schemas = {s["name"]: s for s in mg.op_schemas()}
    for op in SORT_OPS + ("top_k", "bottom_k"):
        assert schemas[op]["family"] == "sort"
    for op in SCAN_OPS:
        assert schemas[op]["family"] == "cumulative"
        assert schemas[op]["differentiable"] == "yes"
    assert schemas["arg_sort"]["differentiable"] == "no"
    # gradients use the public gather family; the old internal helpers are gone
    assert "sort_gather_along_axis" not in schemas and "sort_scatter_add_along_axis" not in schemas
    doc = mg.Graph.sort.__doc__
    assert "NaN sorts above +inf" in doc and "stable" in doc
    assert "exclusive identity is -inf" in mg.Graph.cumulative_maximum.__doc__


def test_defaults():
    g = mg.Graph()
    x = g.placeholder((2, 3))
    xv = np.array([[3, 1, 2], [0, 5, 4]], np.float32)
    outs = [g.sort(x), g.arg_sort(x), g.cumulative_sum(x), g.argsort(x)]
    r = g.run({x: xv}, outs)
    np.testing.assert_array_equal(np.asarray(r[outs[0]]), np.sort(xv, axis=-1))
    np.testing.assert_array_equal(np.asarray(r[outs[1]]), np.argsort(xv, axis=-1))
    np.testing.assert_array_equal(np.asarray(r[outs[2]]), np.cumsum(xv, axis=0))  # axis 0 by default
    np.testing.assert_array_equal(np.asarray(r[outs[3]]), np.argsort(xv, axis=-1))
    assert r[outs[1]].numpy().dtype == np.int32


def test_top_k_gradient_ignores_the_indices_output():
    """Only the values carry a gradient; the int32 indices do not contribute."""
    g = mg.Graph()
    x = g.placeholder((5,), "float64")
    v, i = g.top_k(x, k=2)
    loss = g.reduction_sum(v * g.constant(np.array([2.0, 3.0])), keep_dims=False)
    dx = g.gradients(loss, [x])[x]
    r = g.run({x: np.array([0.5, 4.0, -1.0, 2.0, 1.0])}, [dx])
    np.testing.assert_array_equal(np.asarray(r[dx]), [0, 2.0, 0, 3.0, 0])


def test_sort_gradient_with_ties_goes_through_the_stable_permutation():
    g = mg.Graph()
    x = g.placeholder((4,), "float64")
    y = g.sort(x, descending=True)
    w = np.array([1.0, 10.0, 100.0, 1000.0])
    loss = g.reduction_sum(y * g.constant(w), keep_dims=False)
    dx = g.gradients(loss, [x])[x]
    r = g.run({x: np.array([2.0, 5.0, 2.0, 7.0])}, [dx])
    # descending, stable: 7 (index 3), 5 (1), 2 (0), 2 (2)
    np.testing.assert_array_equal(np.asarray(r[dx]), [100.0, 10.0, 1000.0, 1.0])


def test_cumulative_extremum_gradient_ties_go_to_the_earliest_in_scan_order():
    g = mg.Graph()
    x = g.placeholder((5,), "float64")
    xv = np.array([1.0, 3.0, 3.0, 0.0, 3.0])
    ys = {rev: g.cumulative_maximum(x, reverse=rev) for rev in (False, True)}
    dxs = {rev: g.gradients(g.reduction_sum(y, keep_dims=False), [x])[x] for rev, y in ys.items()}
    r = g.run({x: xv}, list(dxs.values()))
    # forward: running max positions 0, 1, 1, 1, 1; reverse (from the end): 4, 4, 4, 4, 4
    np.testing.assert_array_equal(np.asarray(r[dxs[False]]), [1, 4, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(r[dxs[True]]), [0, 0, 0, 0, 5])


def test_cumulative_product_gradient_with_several_zeros():
    """d/dx of sum(cumprod(x)) against the brute-force sum of products that leave x_k out."""
    g = mg.Graph()
    x = g.placeholder((6,), "float64")
    xv = np.array([2.0, 0.0, 3.0, 0.0, -1.5, 0.5])
    dx = g.gradients(g.reduction_sum(g.cumulative_product(x), keep_dims=False), [x])[x]
    r = np.asarray(g.run({x: xv}, [dx])[dx])
    want = [sum(np.prod([xv[j] for j in range(i + 1) if j != k]) for i in range(k, 6)) for k in range(6)]
    np.testing.assert_allclose(r, want, rtol=1e-12)
