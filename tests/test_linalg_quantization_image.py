"""The linear-algebra, quantization and image families beyond the conformance table's values
(tests/conformance_linalg.py, conformance_quantization.py, conformance_image.py): bad input (clear
errors naming the op, the graph left usable), checks repeated at specialisation for unknown dims,
gradient conventions that finite differences cannot show (fake_quantize's straight-through gradient,
cholesky's gradient on symmetric constructions against PyTorch), and near-singular input."""
import numpy as np
import pytest

import mpsgraph as mg
from test_pad_space_band_one_hot import expect


def _run(g, feeds, targets):
    r = g.run(feeds, targets)
    return [np.array(r[t].numpy(), copy=True) for t in targets]


# ---------------------------------------------------------------------------------------
# linear algebra: bad input


@pytest.mark.parametrize("op", ("matrix_inverse", "cholesky", "determinant", "log_determinant"))
def test_linalg_needs_square_float_matrices(op):
    g = mg.Graph()
    n = g.num_nodes
    expect(mg.GraphValueError, lambda: getattr(g, op)(g.placeholder((3,), name="v")), f"[{op}]", "rank >= 2",
           "float32(3,)")
    expect(mg.GraphValueError, lambda: getattr(g, op)(g.placeholder((2, 3, 4), name="r")), f"[{op}]", "square",
           "float32(2, 3, 4)")
    expect(mg.GraphTypeError, lambda: getattr(g, op)(g.placeholder((3, 3), "int32", name="i")), f"[{op}]",
           "floating-point", "int32(3, 3)")
    x = g.placeholder((3, 3), name="ok")
    assert g.num_nodes == n + 4  # only the placeholders were added
    getattr(g, op)(x)  # and the graph still works


def test_linalg_square_check_repeats_at_specialisation():
    g = mg.Graph()
    x = g.placeholder((None, None), name="x")
    y = g.matrix_inverse(x)
    expect(mg.GraphValueError, lambda: g.run({x: np.ones((2, 3), np.float32)}, [y]), "[matrix_inverse]", "square")


def test_solve_shape_errors():
    g = mg.Graph()
    a = g.placeholder((3, 3), name="a")
    expect(mg.GraphValueError, lambda: g.solve(a, g.placeholder((4, 2))), "[solve]", "rows of 'b' (4, 2)",
           "'a' (3, 3)")
    expect(mg.GraphValueError, lambda: g.solve(a, g.placeholder((4,))), "[solve]", "'b' has 4 elements")
    expect(mg.GraphValueError, lambda: g.solve(g.placeholder((2, 3, 3)), g.placeholder((4, 3, 1))), "[solve]",
           "batch dimensions do not broadcast")
    expect(mg.GraphTypeError, lambda: g.solve(a, g.placeholder((3, 1), "float64")), "[solve]")


def test_triangular_solve_needs_upper_and_matching_sides():
    g = mg.Graph()
    a, b = g.placeholder((3, 3), name="a"), g.placeholder((2, 3), name="b")
    expect(mg.GraphTypeError, lambda: g.triangular_solve(a, b), "[triangular_solve]", "upper")
    expect(mg.GraphValueError, lambda: g.triangular_solve(a, b, upper=True), "[triangular_solve]", "rows of 'b'")
    assert g.triangular_solve(a, b, upper=True, left=False).shape == (2, 3)


# ---------------------------------------------------------------------------------------
# linear algebra: singular and near-singular input, gradients against PyTorch


def test_near_singular_inverse_and_solve_match_numpy():
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    a = (u * np.logspace(0, -9, 6)) @ u.T  # condition number 1e9
    b = rng.normal(size=(6, 2))
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, "float64"), g.placeholder(b.shape, "float64")
    inv, x, (s, ld), det = g.matrix_inverse(pa), g.solve(pa, pb), g.log_determinant(pa), g.determinant(pa)
    r = _run(g, {pa: a, pb: b}, [inv, x, s, ld, det])
    np.testing.assert_allclose(r[0] @ a, np.eye(6), atol=1e-5)
    np.testing.assert_allclose(a @ r[1], b, atol=1e-6)
    ws, wl = np.linalg.slogdet(a)
    assert r[2] == ws
    np.testing.assert_allclose(r[3], wl, rtol=1e-9)
    np.testing.assert_allclose(r[4], np.linalg.det(a), rtol=1e-6)


def test_singular_gives_nan_zero_and_minus_inf_without_raising():
    a = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]], np.float32)
    g = mg.Graph()
    p = g.placeholder(a.shape)
    inv, x, det, (s, ld) = g.matrix_inverse(p), g.solve(p, g.constant(np.ones((2, 2, 1), np.float32))), \
        g.determinant(p), g.log_determinant(p)
    chol = g.cholesky(p)
    r = _run(g, {p: a}, [inv, x, det, s, ld, chol])
    assert np.isnan(r[0][0]).all() and np.isnan(r[1][0]).all()
    np.testing.assert_allclose(r[0][1], np.linalg.inv(a[1].astype(np.float64)), rtol=1e-5)
    assert r[2][0] == 0 and r[3][0] == 0 and r[4][0] == -np.inf
    assert np.isnan(r[5][0]).all()  # not positive definite
    np.testing.assert_allclose(r[5][1], np.linalg.cholesky(a[1].astype(np.float64)), rtol=1e-5)


def _torch():
    return pytest.importorskip("torch")


def test_cholesky_gradient_matches_torch_on_a_symmetric_construction():
    torch = _torch()
    rng = np.random.default_rng(1)
    m = rng.normal(size=(2, 4, 4))
    w = rng.normal(size=(2, 4, 4))
    for upper in (False, True):
        g = mg.Graph()
        pm = g.placeholder(m.shape, "float64")
        a = g.matmul(pm, g.swap_axes(pm, axis1=-1, axis2=-2)) + g.constant(4 * np.eye(4))
        loss = g.reduction_sum(g.cholesky(a, upper=upper) * g.constant(w), axes=None)
        dm = g.gradients(loss, [pm])[pm]
        got = _run(g, {pm: m}, [dm])[0]
        tm = torch.tensor(m, requires_grad=True)
        ta = tm @ tm.transpose(-1, -2) + 4 * torch.eye(4, dtype=torch.float64)
        (torch.linalg.cholesky(ta, upper=upper) * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(got, tm.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("op", ("inv", "det", "slogdet", "solve", "solve_triangular"))
def test_linalg_gradients_match_torch(op):
    torch = _torch()
    rng = np.random.default_rng(2)
    a = rng.uniform(-0.2, 0.2, size=(3, 4, 4)) + np.eye(4) * np.array([1.0, -1.0, 1.5])[:, None, None]
    b = rng.normal(size=(3, 4, 2))
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, "float64"), g.placeholder(b.shape, "float64")
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    if op == "inv":
        y, ty = g.matrix_inverse(pa), torch.linalg.inv(ta)
    elif op == "det":
        y, ty = g.determinant(pa), torch.linalg.det(ta)
    elif op == "slogdet":
        y, ty = g.log_determinant(pa)[1], torch.linalg.slogdet(ta)[1]
    elif op == "solve":
        y, ty = g.solve(pa, pb), torch.linalg.solve(ta, tb)
    else:
        y, ty = g.triangular_solve(pa, pb, upper=True), torch.linalg.solve_triangular(ta, tb, upper=True)
    w = rng.normal(size=tuple(ty.shape))
    loss = g.reduction_sum(y * g.constant(w), axes=None)
    grads = g.gradients(loss, [pa, pb] if op in ("solve", "solve_triangular") else [pa])
    da, db = grads[pa], grads.get(pb)
    (ty * torch.tensor(w)).sum().backward()
    got = _run(g, {pa: a, pb: b}, [da] + ([db] if db is not None else []))
    np.testing.assert_allclose(got[0], ta.grad.numpy(), rtol=1e-9, atol=1e-11)
    if db is not None:
        np.testing.assert_allclose(got[1], tb.grad.numpy(), rtol=1e-9, atol=1e-11)


# ---------------------------------------------------------------------------------------
# quantization


def test_quantize_bad_input():
    g = mg.Graph()
    x = g.placeholder((2, 3), name="x")
    expect(mg.GraphValueError, lambda: g.quantize(x, g.constant(np.ones(3, np.float32)), 0.0), "[quantize]",
           "'scale' float32(3,) must hold one element", "pass axis")
    expect(mg.GraphValueError, lambda: g.quantize(x, g.constant(np.ones(2, np.float32)), 0.0, axis=1), "[quantize]",
           "must hold 1 or x.shape[1] elements")
    expect(mg.GraphIndexError, lambda: g.quantize(x, 0.1, 0.0, axis=2), "[quantize]", "axis 2 is out of range")
    expect(mg.GraphTypeError, lambda: g.quantize(x, 0.1, 0.0, dtype="int16"), "[quantize]", "int8 or uint8")
    expect(mg.GraphTypeError, lambda: g.quantize(g.placeholder((2,), "int32"), 1.0, 0), "[quantize]",
           "floating-point")
    q = g.placeholder((2, 3), "int8", name="q")
    expect(mg.GraphTypeError, lambda: g.dequantize(q, 0.1, 0, dtype="int32"), "[dequantize]", "floating-point")
    expect(mg.GraphTypeError, lambda: g.dequantize(x, 0.1, 0.0), "[dequantize]", "int8, uint8 or int32")
    expect(mg.GraphTypeError, lambda: g.dequantize_lut(q, g.placeholder((256,))), "[dequantize_lut]", "uint8")
    u = g.placeholder((2, 3), "uint8", name="u")
    expect(mg.GraphValueError, lambda: g.dequantize_lut(u, g.placeholder((16,))), "[dequantize_lut]", "256 entries")
    expect(mg.GraphValueError, lambda: g.dequantize_lut(u, g.placeholder((4, 256))), "[dequantize_lut]",
           "do not broadcast")


def test_python_scalar_parameters():
    x = np.array([-1.0, 0.26, 0.5, 3.0], np.float32)
    g = mg.Graph()
    p = g.placeholder(x.shape)
    q = g.quantize(p, 0.1, 3, dtype="int8")
    y = g.dequantize(q, 0.1, 3)
    rq, ry = _run(g, {p: x}, [q, y])
    np.testing.assert_array_equal(rq, [-7, 6, 8, 33])
    np.testing.assert_allclose(ry, (rq.astype(np.float64) - 3) * np.float32(0.1), rtol=1e-6)


def test_fake_quantize_gradient_is_straight_through_inside_the_range():
    x = np.array([[-20.0, -1.0, 0.33, 5.0, 6.4, 7.0]], np.float64)  # int8 with scale 0.05, zp 0: [-6.4, 6.35]
    g = mg.Graph()
    p = g.placeholder(x.shape, "float64")
    w = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    y = g.fake_quantize(p, 0.05, 0.0, dtype="int8")
    dx = g.gradients(g.reduction_sum(y * g.constant(w), axes=None), [p])[p]
    ry, rdx = _run(g, {p: x}, [y, dx])
    np.testing.assert_allclose(ry, np.clip(np.rint(x / 0.05), -128, 127) * 0.05)
    np.testing.assert_array_equal(rdx, w * ((x / 0.05 >= -128) & (np.rint(x / 0.05) <= 127)))


def test_quantize_has_no_gradient_through_integers():
    g = mg.Graph()
    p = g.placeholder((3,), "float64")
    q = g.quantize(p, 0.1, 0.0)
    loss = g.reduction_sum(g.dequantize(q, 0.1, 0.0, dtype="float64"), axes=None) + g.reduction_sum(p, axes=None)
    dx = g.gradients(loss, [p])[p]
    np.testing.assert_array_equal(_run(g, {p: np.zeros(3)}, [dx])[0], np.ones(3))  # only the direct path


# ---------------------------------------------------------------------------------------
# image ops


def test_sample_grid_bad_input():
    g = mg.Graph()
    x = g.placeholder((1, 2, 3, 3), name="x")
    expect(mg.GraphValueError, lambda: g.sample_grid(x, g.placeholder((1, 2, 2, 3))), "[sample_grid]",
           "(N, H_out, W_out, 2)")
    expect(mg.GraphValueError, lambda: g.sample_grid(x, g.placeholder((2, 2, 2, 2))), "[sample_grid]",
           "batch sizes differ")
    expect(mg.GraphValueError, lambda: g.sample_grid(g.placeholder((2, 3, 3)), g.placeholder((1, 2, 2, 2))),
           "[sample_grid]", "rank 4")
    grid = g.placeholder((1, 2, 2, 2), name="grid")
    expect(mg.GraphValueError, lambda: g.sample_grid(x, grid, mode="bicubic"), "[sample_grid]", "'bicubic'")
    expect(mg.GraphValueError, lambda: g.sample_grid(x, grid, padding_mode="wrap"), "[sample_grid]", "'wrap'")
    assert g.sample_grid(x, grid).shape == (1, 2, 2, 2)


def test_sample_grid_borders_match_torch():
    torch = _torch()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 5, 7)).astype(np.float32)
    # coordinates at and beyond the borders, corners and exact pixel centres
    grid = np.array([-1.0, 1.0, -1.0 - 1 / 7, 1.0 + 1 / 5, 0.0, -3.1, 2.7, 1e-7, -1 + 1e-7], np.float32)
    grid = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1)[None].repeat(2, 0)
    g = mg.Graph()
    px, pg = g.placeholder(x.shape), g.placeholder(grid.shape)
    cases = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection") for a in (0, 1)]
    outs = [g.sample_grid(px, pg, mode=m, padding_mode=p, align_corners=bool(a)) for m, p, a in cases]
    got = _run(g, {px: x, pg: grid}, outs)
    for (m, p, a), r in zip(cases, got):
        want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grid), mode=m, padding_mode=p,
                                               align_corners=bool(a)).numpy()
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-5, err_msg=f"{m} {p} align_corners={a}")


def test_im_to_col_bad_input():
    g = mg.Graph()
    x = g.placeholder((1, 2, 4, 4), name="x")
    expect(mg.GraphValueError, lambda: g.im_to_col(x, kernel_sizes=(5, 5)), "[im_to_col]", "larger than the padded")
    expect(mg.GraphValueError, lambda: g.im_to_col(x, kernel_sizes=(2,)), "[im_to_col]", "kernel_sizes needs 2")
    expect(mg.GraphValueError, lambda: g.im_to_col(x, kernel_sizes=(2, 2), padding=(1, 1)), "[im_to_col]",
           "padding needs 4")
    expect(mg.GraphValueError, lambda: g.im_to_col(g.placeholder((4, 4)), kernel_sizes=(2, 2)), "[im_to_col]",
           "rank 4")
    c = g.placeholder((1, 8, 9), name="c")
    expect(mg.GraphValueError, lambda: g.col_to_im(c, output_size=(4, 5), kernel_sizes=(2, 2)), "[col_to_im]",
           "number of blocks, 12")
    expect(mg.GraphValueError, lambda: g.col_to_im(g.placeholder((1, 7, 9)), output_size=(4, 4),
                                                   kernel_sizes=(2, 2)), "[col_to_im]", "multiple")
    assert g.col_to_im(c, output_size=(4, 4), kernel_sizes=(2, 2)).shape == (1, 2, 4, 4)


def test_hamming_distance_bad_input():
    g = mg.Graph()
    a = g.placeholder((3, 4), "int32", name="a")
    expect(mg.GraphTypeError, lambda: g.hamming_distance(g.placeholder((3, 4)), g.placeholder((3, 4))),
           "[hamming_distance]", "integer")
    expect(mg.GraphValueError, lambda: g.hamming_distance(a, g.placeholder((2, 5), "int32")), "[hamming_distance]",
           "vector lengths differ")
    expect(mg.GraphTypeError, lambda: g.hamming_distance(a, a, dtype="int32"), "[hamming_distance]", "uint32 or uint16")
    expect(mg.GraphValueError, lambda: g.hamming_distance(g.placeholder((4,), "int32"), g.placeholder((4,), "int32")),
           "[hamming_distance]", "rank >= 2")


def test_stencil_bad_input_and_no_gradient():
    g = mg.Graph()
    x, w = g.placeholder((1, 1, 4, 4), name="x"), g.placeholder((1, 1, 2, 2), name="w")
    expect(mg.GraphValueError, lambda: g.stencil(g.placeholder((4, 4)), w), "[stencil]", "rank >= 4")
    expect(mg.GraphValueError, lambda: g.stencil(x, g.placeholder((2, 2))), "[stencil]", "4-D weights")
    expect(mg.GraphValueError, lambda: g.stencil(x, w, boundary_mode="mirror"), "[stencil]", "'mirror'")
    expect(mg.GraphValueError, lambda: g.stencil(x, w, reduction_mode="argmax"), "[stencil]", "'argmax'")
    expect(mg.GraphValueError, lambda: g.stencil(x, w, strides=(1, 1, 0, 1)), "[stencil]", "positive")
    expect(mg.GraphValueError, lambda: g.stencil(x, g.placeholder((1, 1, 5, 2))), "[stencil]", "larger than the padded")
    y = g.stencil(x, w)
    assert y.shape == (1, 1, 3, 3)
    expect(mg.GraphValueError, lambda: g.gradients(g.reduction_sum(y, axes=None), [x]), "[stencil]",
           "not differentiable")


def test_stencil_same_padding_resolves_at_specialisation():
    g = mg.Graph()
    x = g.placeholder((1, 1, None, None))
    y = g.stencil(x, g.constant(np.ones((1, 1, 3, 3), np.float32)), padding_style="same")
    r = _run(g, {x: np.ones((1, 1, 5, 4), np.float32)}, [y])[0]
    want = np.array([[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]], np.float32)
    np.testing.assert_array_equal(r[0, 0], want)
