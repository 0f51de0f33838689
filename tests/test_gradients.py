"""Every differentiable op's gradient rule against central finite differences (float64,
CPU), first order for all and second order for a representative set. One row per op here for
the elementwise, reduction, matmul, shape and autodiff-helper ops; the NN families' gradient
checks are driven by their conformance rows (Grad specs in tests/conformance_nn.py, run by
tests/test_conformance.py::test_gradient)."""
import numpy as np
import pytest

import conformance as cf
import mpsgraph as mg
from gradcheck import check_op_gradient

RNG = np.random.default_rng(1234)


def normal(*shape):
    return RNG.standard_normal(shape)


def uniform(lo, hi, *shape):
    return RNG.uniform(lo, hi, shape)


def away(*shape, gap=0.15):
    """Normal values kept away from 0 (kinks of abs/relu/sign)."""
    x = RNG.standard_normal(shape)
    return np.where(np.abs(x) < gap, np.sign(x + 1e-12) * (gap + np.abs(x)), x)


def off_grid(*shape):
    """Values away from integers and halves (floor, ceil, round, truncate are flat there)."""
    return RNG.integers(-3, 3, shape) + RNG.uniform(0.1, 0.4, shape)


def distinct(*shape):
    """Values with no ties (max/min/argmax kinks)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(np.float64)


def unary(op, make=normal, shape=(2, 3), second=False, **kw):
    return pytest.param(op, lambda g, x: getattr(g, op)(x, **kw), [make(*shape)], second, id=op)


def binary(op, mx=normal, my=normal, sx=(2, 3), sy=(2, 3), second=False, id=None):
    return pytest.param(op, lambda g, x, y: getattr(g, op)(x, y), [mx(*sx), my(*sy)], second, id=id or op)


ROWS = [
    # ---- elementwise unary ----
    unary("identity"), unary("negative"), unary("absolute", away), unary("sign", away),
    unary("floor", off_grid), unary("ceil", off_grid), unary("round", off_grid), unary("truncate", off_grid),
    unary("exponent"), unary("exponent_base2"), unary("exponent_base10"), unary("log1p", lambda *s: uniform(-0.5, 2, *s)), unary("expm1"),
    unary("logarithm", lambda *s: uniform(0.5, 2, *s)), unary("logarithm_base2", lambda *s: uniform(0.5, 2, *s)),
    unary("logarithm_base10", lambda *s: uniform(0.5, 2, *s)), unary("square"),
    unary("square_root", lambda *s: uniform(0.5, 2, *s)),
    unary("reverse_square_root", lambda *s: uniform(0.5, 2, *s)),
    unary("reciprocal", lambda *s: uniform(0.5, 2, *s)),
    unary("sin"), unary("cos"), unary("tan", lambda *s: uniform(-1, 1, *s)), unary("sinh"), unary("cosh"),
    unary("tanh", second=True), unary("asin", lambda *s: uniform(-0.8, 0.8, *s)),
    unary("acos", lambda *s: uniform(-0.8, 0.8, *s)), unary("atan"), unary("asinh"),
    unary("acosh", lambda *s: uniform(1.3, 3, *s)), unary("atanh", lambda *s: uniform(-0.8, 0.8, *s)),
    unary("erf"), unary("sigmoid"), unary("relu", away),
    pytest.param("cast", lambda g, x: g.cast(x, mg.float64), [normal(2, 3)], False, id="cast"),
    # ---- elementwise binary, with broadcasting ----
    binary("addition", sx=(2, 3), sy=(3,), second=True), binary("subtraction", sx=(2, 1), sy=(1, 3)),
    binary("multiplication", sx=(2, 3), sy=(2, 1), second=True),
    binary("division", my=lambda *s: uniform(0.5, 2, *s), sy=(3,), second=True),
    binary("floor_division", off_grid, lambda *s: uniform(3.6, 3.9, *s)),
    binary("modulo", lambda *s: uniform(0.1, 1.4, *s), lambda *s: uniform(1.5, 2.5, *s)),
    binary("power", lambda *s: uniform(0.5, 2, *s), normal, sy=(3,), second=True),
    binary("maximum", distinct, lambda *s: distinct(*s) + 0.11), binary("minimum", distinct, lambda *s: distinct(*s) + 0.11),
    binary("atan2", normal, away),
    pytest.param("select", lambda g, a, b: g.select(g.constant(np.array([True, False, True])), a, b),
                 [normal(2, 3), normal(3)], False, id="select"),
    pytest.param("clamp", lambda g, x, lo, hi: g.clamp(x, lo, hi),
                 [np.array([[-2.0, -0.5, 0.3], [0.7, 1.5, 3.0]]), np.full((3,), -1.0), np.full((2, 1), 1.0)], False,
                 id="clamp"),
    # ---- autodiff helpers ----
    pytest.param("sum_to_like", lambda g, x, like: g.sum_to_like(x, like), [normal(2, 3), normal(1, 3)], False,
                 id="sum_to_like"),
    pytest.param("full_like", lambda g, x: g.full_like(x, 2.5) * x, [normal(2, 3)], False, id="full_like"),
    pytest.param("broadcast_like", lambda g, x, like: g.broadcast_like(x, like), [normal(3), normal(2, 3)], False,
                 id="broadcast_like"),
    # ---- reductions ----
    pytest.param("reduction_sum", lambda g, x: g.reduction_sum(x, axes=(0, 2)), [normal(2, 3, 4)], True,
                 id="reduction_sum"),
    pytest.param("reduction_product", lambda g, x: g.reduction_product(x, axes=1, keep_dims=False),
                 [uniform(0.5, 1.5, 2, 3)], False, id="reduction_product"),
    pytest.param("reduction_maximum", lambda g, x: g.reduction_maximum(x, axes=-1), [distinct(3, 4)], True,
                 id="reduction_maximum"),
    pytest.param("reduction_minimum", lambda g, x: g.reduction_minimum(x, axes=0, keep_dims=False),
                 [distinct(3, 4)], False, id="reduction_minimum"),
    pytest.param("mean", lambda g, x: g.mean(x, axes=(1,)), [normal(2, 3, 2)], True, id="mean"),
    pytest.param("variance", lambda g, x: g.variance(x, axes=1, keep_dims=False), [normal(3, 4)], True,
                 id="variance"),
    pytest.param("logsumexp", lambda g, x: g.logsumexp(x, axes=1), [normal(3, 4)], True, id="logsumexp"),
    # ---- matrix multiplication ----
    pytest.param("matrix_multiplication", lambda g, a, b: g.matrix_multiplication(a, b), [normal(2, 3), normal(3, 4)],
                 True, id="matmul_2d"),
    pytest.param("matrix_multiplication", lambda g, a, b: a @ b, [normal(2, 1, 2, 3), normal(4, 3, 2)], True,
                 id="matmul_batch_broadcast"),
    pytest.param("matrix_multiplication", lambda g, a, b: a @ b, [normal(3), normal(2, 3, 4)], False,
                 id="matmul_vector_left"),
    pytest.param("matrix_multiplication", lambda g, a, b: a @ b, [normal(2, 3), normal(3)], False,
                 id="matmul_vector_right"),
    # ---- shape ops ----
    pytest.param("reshape", lambda g, x: g.reshape(x, (3, -1)), [normal(2, 3)], False, id="reshape"),
    pytest.param("transpose", lambda g, x: g.transpose(x, (2, 0, 1)), [normal(2, 3, 4)], False, id="transpose"),
    pytest.param("expand_dims", lambda g, x: g.expand_dims(x, axes=(0, -1)), [normal(2, 3)], False, id="expand_dims"),
    pytest.param("squeeze", lambda g, x: g.squeeze(x, axes=1), [normal(2, 1, 3)], False, id="squeeze"),
    pytest.param("broadcast_to", lambda g, x: g.broadcast_to(x, (4, 2, 3)), [normal(2, 1)], False, id="broadcast_to"),
    pytest.param("slice", lambda g, x: g.slice(x, 1, 1, 2), [normal(2, 4)], False, id="slice"),
    pytest.param("strided_slice", lambda g, x: x[::-1, 1::2], [normal(3, 5)], False, id="strided_slice"),
    pytest.param("strided_slice", lambda g, x: x[1, None, ..., -1], [normal(3, 4, 5)], False, id="getitem_int_none"),
    pytest.param("concat", lambda g, a, b: g.concat([a, b, a], axis=1), [normal(2, 3), normal(2, 1)], False,
                 id="concat"),
    pytest.param("split", lambda g, x: (lambda s: s[0] * 2.0 + s[1])(g.split(x, num_splits=2, axis=1)),
                 [normal(2, 4)], False, id="split"),
    pytest.param("stack", lambda g, a, b: g.stack([a, b], axis=1), [normal(2, 3), normal(2, 3)], False, id="stack"),
    pytest.param("pad", lambda g, x: g.pad(x, (1, 0), (2, 1), constant_value=0.5), [normal(2, 3)], False, id="pad"),
    pytest.param("tile", lambda g, x: g.tile(x, (2, 3)), [normal(2, 3)], False, id="tile"),
    pytest.param("reverse", lambda g, x: g.reverse(x, axes=(1,)), [normal(2, 3)], False, id="reverse"),
    pytest.param("flatten_2d", lambda g, x: g.flatten_2d(x, 2), [normal(2, 3, 2)], False, id="flatten_2d"),
    pytest.param("flatten", lambda g, x: g.flatten(x), [normal(2, 3)], False, id="flatten"),
    pytest.param("swap_axes", lambda g, x: g.swap_axes(x, 0, 2), [normal(2, 3, 4)], False, id="swap_axes"),
    pytest.param("slice_gradient", lambda g, d, like: g.slice_gradient(d, like, starts=(0, 1), ends=(2, 4), strides=(1, 2)),
                 [normal(2, 2), normal(3, 5)], True, id="slice_gradient"),
    pytest.param("split_like", lambda g, x, a, b: (lambda s: s[0] * 3.0 + g.reduction_sum(s[1], axes=1))(
        g.split_like(x, [a, b], axis=1)), [normal(2, 5), normal(2, 2), normal(2, 3)], False, id="split_like"),
    pytest.param("tile_gradient", lambda g, d, like: g.tile_gradient(d, like, multiples=(2, 3)),
                 [normal(4, 6), normal(2, 2)], True, id="tile_gradient"),
    pytest.param("reshape_like", lambda g, x, like: g.reshape_like(x, like), [normal(2, 3), normal(3, 2)], False,
                 id="reshape_like"),
    # pad modes, pad_gradient, space/depth and band_part: Grad specs of their conformance rows
    pytest.param("erfinv", lambda g, x: g.erfinv(x), [uniform(-0.9, 0.9, 2, 3)], False, id="erfinv"),
    # activations, softmax and losses, normalisation, convolution, pooling, resize and the
    # optimizer updates: the Grad specs of their conformance rows (tests/conformance_nn.py)
]

# ops whose rule reaches only through other ops (their rows exist under the name tested)
COVERED_ELSEWHERE = {"broadcast", "permute"}
# static-shape random draws have no inputs to differentiate
COVERED_ELSEWHERE |= {"random_uniform", "random_normal", "random_truncated_normal"}
# random draws change every run, so finite differences cannot see them; and stop_gradient
# is zero by design: each has its own test below
COVERED_ELSEWHERE |= {"random_uniform_like", "random_normal_like", "dropout", "stop_gradient"}
# a straight-through gradient is not the derivative of the values: checked against torch's and the
# in-range mask (fake_quantize_vs_torch, tests/test_linalg_quantization_image.py)
COVERED_ELSEWHERE |= {"fake_quantize"}


@pytest.mark.parametrize("op,build,arrays,second", ROWS)
def test_gradient(op, build, arrays, second):
    check_op_gradient(build, [a.copy() for a in arrays], second_order=second)


@pytest.mark.parametrize("op,build,arrays,second", [r for r in ROWS if r.values[3]][:6])
def test_gradient_unknown_dims(op, build, arrays, second):
    # broadcasting is summed back to each input's run-time shape
    check_op_gradient(build, [a.copy() for a in arrays], unknown_dims=True)


def test_every_differentiable_op_has_a_row():
    tested = {r.values[0] for r in ROWS}
    table = {n for r in cf.ROWS if r.grad is not None and r.grad.cases
             for n in ((r.op,) if isinstance(r.op, str) else ()) + r.covers}
    missing = [s["name"] for s in mg.op_schemas()
               if s["differentiable"] == "yes" and s["python_method"]
               and s["name"] not in tested | table and s["name"] not in COVERED_ELSEWHERE]
    assert not missing, f"differentiable ops without a gradient check row: {missing}"


def test_no_op_lacks_a_differentiability_mark():
    unset = [s["name"] for s in mg.op_schemas() if s["differentiable"] == "unset"]
    assert not unset, f"ops with neither a gradient rule nor a not-differentiable mark: {unset}"


def test_comparisons_and_integer_paths_give_no_gradient():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32, name="x")
    y = g.cast(g.floor_division(x, 2.0), mg.float32) + g.cast(g.greater_than(x, 0.0), mg.float32) * x
    grads = g.gradients(y, [x])  # comparisons give no gradient; the product rule still flows through x
    out = g.run({x: np.array([1.0, -2.0, 3.0], np.float32)}, [grads[x]])
    np.testing.assert_allclose(out[grads[x]].numpy(), [1.0, 0.0, 1.0])


def test_gradient_of_unconnected_input_is_zero():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float64)
    z = g.placeholder((2,), mg.float64)
    grads = g.gradients(g.reduction_sum(x * x), [x, z])
    out = g.run({x: np.array([1.0, 2.0]), z: np.zeros(2)}, [grads[x], grads[z]])
    np.testing.assert_allclose(out[grads[x]].numpy(), [2.0, 4.0])
    np.testing.assert_allclose(out[grads[z]].numpy(), [0.0, 0.0])


def test_explicit_dy_for_non_scalar_y():
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float64)
    y = g.sin(x)
    dy = g.placeholder((None, 3), mg.float64)
    gx = g.gradients(y, [x], dy=dy)[x]
    xv, dyv = normal(2, 3), normal(2, 3)
    out = g.run({x: xv, dy: dyv}, [gx])
    np.testing.assert_allclose(out[gx].numpy(), np.cos(xv) * dyv, rtol=1e-12)


def test_gradient_wrt_intermediate_tensor():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float64)
    h = g.exp(x)
    y = g.reduction_sum(h * h)
    grads = g.gradients(y, [h, x])
    xv = normal(3)
    out = g.run({x: xv}, [grads[h], grads[x]])
    np.testing.assert_allclose(out[grads[h]].numpy(), 2 * np.exp(xv), rtol=1e-12)
    np.testing.assert_allclose(out[grads[x]].numpy(), 2 * np.exp(2 * xv), rtol=1e-12)


def test_stop_gradient_blocks():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float64)
    y = g.reduction_sum(g.stop_gradient(x * x) + x)
    gx = g.gradients(y, [x])[x]
    out = g.run({x: normal(3)}, [gx])
    np.testing.assert_allclose(out[gx].numpy(), np.ones(3))


def test_stop_gradient_on_non_differentiable_path_message():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32, name="x")
    with pytest.raises(mg.GraphError, match=r"\[gradients\].*non-float"):
        g.gradients(g.argmax(x), [x]) if hasattr(g, "argmax") else g.gradients(g.less_than(x, 1.0), [x])


def test_dropout_gradient_is_its_mask():
    g = mg.Graph()
    x = g.placeholder((None, 50), mg.float64)
    y = g.dropout(x, rate=0.4, seed=3)
    gx = g.gradients(y, [x])[x]
    xv = uniform(0.5, 1.5, 4, 50)
    out = g.run({x: xv}, [y, gx])  # one run: the same mask for both
    kept = out[y].numpy() != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(out[gx].numpy(), kept / 0.6, rtol=1e-12)


def test_random_draws_carry_no_gradient():
    g = mg.Graph()
    x = g.placeholder((3, 4), mg.float64)
    y = g.random_normal_like(x, seed=2) + g.random_uniform_like(x, seed=5) + x * 3.0
    gx = g.gradients(y, [x])[x]
    out = g.run({x: normal(3, 4)}, [gx])
    np.testing.assert_allclose(out[gx].numpy(), np.full((3, 4), 3.0))
