"""complex64/complex128 and the FFT family beyond the conformance table: data in and out,
Python scalars, the gradient convention against PyTorch, and bad input (clear errors naming
the op, never a crash; the graph stays usable)."""
import numpy as np
import pytest

import mpsgraph as mg


def run1(g, feeds, y):
    return np.asarray(g.run(feeds, [y])[y])


def crandn(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


# ---------------------------------------------------------------- data in and out


@pytest.mark.parametrize("dt", ["complex64", "complex128"])
def test_complex_round_trip_and_arithmetic(dt):
    rng = np.random.default_rng(0)
    a, b = crandn(rng, (3, 4), dt), crandn(rng, (4,), dt)
    g = mg.Graph()
    x = g.placeholder((3, None), dt)
    y = g.placeholder((4,), dt)
    z = (x * y - x / y + 2.0) * g.conjugate(x)
    got = run1(g, {x: a, y: b}, z)
    assert got.dtype == np.dtype(dt)
    want = (a * b - a / b + 2.0) * np.conj(a)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dt == "complex64" else 1e-12)


def test_complex_constants_and_variables():
    g = mg.Graph()
    c = g.constant(1 + 2j)
    assert c.dtype == mg.complex64  # Python complex: the 32-bit default, as floats
    v = g.variable(np.array([1 - 1j, 2j], np.complex128))
    assert v.dtype == mg.complex128
    ys = [c * 2, g.real_part(v), g.imaginary_part(v), g.absolute(v), g.angle(v)]
    out = g.run({}, ys)
    vv = np.array([1 - 1j, 2j])
    for y, want in zip(ys, [2 + 4j, vv.real, vv.imag, np.abs(vv), np.angle(vv)]):
        np.testing.assert_allclose(np.asarray(out[y]), want, rtol=1e-12)


def test_complex_parts_and_polar_form():
    rng = np.random.default_rng(1)
    a = crandn(rng, (5, 3), np.complex64)
    g = mg.Graph()
    x = g.placeholder((5, 3), mg.complex64)
    re, im, r, th = g.real_part(x), g.imaginary_part(x), g.absolute(x), g.angle(x)
    back = g.complex(r * g.cos(th), r * g.sin(th))
    out = g.run({x: a}, [re, im, r, th, back])
    np.testing.assert_array_equal(np.asarray(out[re]), a.real)
    np.testing.assert_array_equal(np.asarray(out[im]), a.imag)
    np.testing.assert_allclose(np.asarray(out[r]), np.abs(a), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out[th]), np.angle(a), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out[back]), a, rtol=1e-5, atol=1e-6)
    assert out[r].dtype == mg.float32


def test_cast_to_and_from_complex():
    g = mg.Graph()
    x = g.placeholder((4,), mg.int32)
    z = g.cast(x, mg.complex64)
    w = g.cast(g.complex(g.constant([1.5, -2.5, 0.0, 0.0]), g.constant([0.0, 1.0, 2.0, 0.0])), mg.int32)
    nz = g.cast(g.complex(g.constant([1.5, 0.0, 0.0]), g.constant([0.0, 1.0, 0.0])), mg.bool_)
    out = g.run({x: np.array([1, -2, 3, 0], np.int32)}, [z, w, nz])
    np.testing.assert_array_equal(np.asarray(out[z]), np.array([1, -2, 3, 0], np.complex64))
    np.testing.assert_array_equal(np.asarray(out[w]), [1, -2, 0, 0])  # the real part, truncated
    np.testing.assert_array_equal(np.asarray(out[nz]), [True, True, False])


def test_data_movement_ops_take_complex():
    rng = np.random.default_rng(2)
    a = crandn(rng, (2, 3, 4), np.complex64)
    g = mg.Graph()
    x = g.placeholder((2, 3, 4), mg.complex64)
    ys = [g.reshape(x, (6, 4)), g.transpose(x, (2, 0, 1)), g.slice(x, 2, 1, 2), g.concat([x, x], axis=1),
          g.reverse(x, axes=(1,)), g.broadcast_to(g.expand_dims(x, 0), (2, 2, 3, 4))]
    out = g.run({x: a}, ys)
    wants = [a.reshape(6, 4), a.transpose(2, 0, 1), a[:, :, 1:3], np.concatenate([a, a], 1), a[:, ::-1],
             np.broadcast_to(a[None], (2, 2, 3, 4))]
    for y, w in zip(ys, wants):
        np.testing.assert_array_equal(np.asarray(out[y]), w)


# ---------------------------------------------------------------- numpy.fft on odd sizes


@pytest.mark.parametrize("shape,axes", [((15,), None), ((9, 25), (0,)), ((3, 7, 11), (1, 2)), ((6, 5), (-2, -1))])
def test_fft_matches_numpy_on_odd_sizes(shape, axes):
    rng = np.random.default_rng(3)
    a = crandn(rng, shape)
    r = rng.standard_normal(shape)
    ax = tuple(range(len(shape))) if axes is None else tuple(sorted(x % len(shape) for x in axes))
    g = mg.Graph()
    x = g.placeholder(shape, mg.complex128)
    xr = g.placeholder(shape, mg.float64)
    f = g.fast_fourier_transform(x, axes=axes)
    fi = g.fast_fourier_transform(x, axes=axes, inverse=True, scaling_mode="size")
    fu = g.fast_fourier_transform(x, axes=axes, scaling_mode="unitary")
    rf = g.real_to_hermitean_fft(xr, axes=axes)
    n = shape[ax[-1]]
    back = g.hermitean_to_real_fft(rf, axes=axes, inverse=True, scaling_mode="size",
                                   round_to_odd_hermitean=n % 2 == 1)
    out = g.run({x: a, xr: r}, [f, fi, fu, rf, back])
    np.testing.assert_allclose(np.asarray(out[f]), np.fft.fftn(a, axes=ax), atol=1e-10)
    np.testing.assert_allclose(np.asarray(out[fi]), np.fft.ifftn(a, axes=ax), atol=1e-12)
    np.testing.assert_allclose(np.asarray(out[fu]), np.fft.fftn(a, axes=ax, norm="ortho"), atol=1e-10)
    np.testing.assert_allclose(np.asarray(out[rf]), np.fft.rfftn(r, axes=ax), atol=1e-10)
    np.testing.assert_allclose(np.asarray(out[back]), r, atol=1e-12)  # irfftn(rfftn(r)) with the odd length


# ---------------------------------------------------------------- gradients: PyTorch's convention


def test_complex_gradients_follow_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a = crandn(rng, (4, 6))
    w = crandn(rng, (4, 6))
    r = rng.standard_normal((4, 7))

    g = mg.Graph()
    z = g.placeholder((4, 6), mg.complex128)
    x = g.placeholder((4, 7), mg.float64)
    k = g.constant(w)
    f = g.fast_fourier_transform(z * k, axes=(1,), scaling_mode="unitary")
    h = g.real_to_hermitean_fft(x, axes=(0, 1))
    y = g.hermitean_to_real_fft(h * g.conjugate(h), axes=(0, 1), inverse=True, round_to_odd_hermitean=True)
    loss = g.reduction_sum(g.square(g.absolute(f)) + g.angle(f), axes=None) + g.reduction_sum(y * y, axes=None)
    gz, gx = g.gradients(loss, [z, x]).values()
    out = g.run({z: a, x: r}, [loss, gz, gx])

    tz = torch.tensor(a, requires_grad=True)
    tx = torch.tensor(r, requires_grad=True)
    tf = torch.fft.fft(tz * torch.tensor(w), dim=1, norm="ortho")
    th = torch.fft.rfftn(tx, dim=(0, 1))
    ty = torch.fft.irfftn(th * th.conj(), s=(4, 7), dim=(0, 1), norm="forward")
    tl = (tf.abs() ** 2 + tf.angle()).sum() + (ty * ty).sum()
    tl.backward()
    np.testing.assert_allclose(float(np.asarray(out[loss]).reshape(())), tl.item(), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out[gz]), tz.grad.numpy(), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(out[gx]), tx.grad.numpy(), rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------- bad input


def assert_still_works(g):
    x = g.placeholder((3,), mg.complex64)
    y = g.real_part(x * x)
    v = np.array([1 + 1j, 2, 1j], np.complex64)
    np.testing.assert_allclose(run1(g, {x: v}, y), (v * v).real)


def test_ops_without_complex_support_refuse_it():
    g = mg.Graph()
    z = g.placeholder((2, 3), mg.complex64, name="zin")
    for build, op in [(lambda: g.sin(z), "sin"), (lambda: g.reduction_sum(z, axes=(0,)), "reduction_sum"),
                      (lambda: g.matrix_multiplication(z, g.transpose(z, (1, 0))), "matrix_multiplication"),
                      (lambda: g.maximum(z, z), "maximum"), (lambda: g.less_than(z, z), "less_than")]:
        with pytest.raises(mg.GraphTypeError, match=rf"\[{op}\].*complex64"):
            build()
    with pytest.raises(mg.GraphTypeError, match=r"\[zeros\].*complex"):
        g.zeros((2,), mg.complex64)
    assert_still_works(g)


def test_complex32_is_refused_clearly():
    g = mg.Graph()
    with pytest.raises(mg.GraphTypeError, match="complex32 is not supported"):
        g.placeholder((2,), "complex32")
    h = g.placeholder((4,), mg.float16)
    with pytest.raises(mg.GraphTypeError, match=r"\[fast_fourier_transform\].*complex32"):
        g.fast_fourier_transform(h)
    with pytest.raises(mg.GraphTypeError, match=r"\[complex\].*complex32"):
        g.complex(h, h)
    assert_still_works(g)


def test_fft_bad_input():
    g = mg.Graph()
    z = g.placeholder((4, 6), mg.complex64)
    x = g.placeholder((4, 6), mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[real_to_hermitean_fft\].*complex64.*fast_fourier_transform"):
        g.real_to_hermitean_fft(z)
    with pytest.raises(mg.GraphTypeError, match=r"\[hermitean_to_real_fft\].*complex tensor.*float32"):
        g.hermitean_to_real_fft(x)
    with pytest.raises(mg.GraphValueError, match=r"\[fast_fourier_transform\].*scaling_mode.*'bogus'"):
        g.fast_fourier_transform(z, scaling_mode="bogus")
    with pytest.raises(mg.GraphError, match=r"\[fast_fourier_transform\].*axis"):
        g.fast_fourier_transform(z, axes=(2,))
    with pytest.raises(mg.GraphValueError, match=r"\[fast_fourier_transform\].*repeated axis"):
        g.fast_fourier_transform(z, axes=(1, -1))
    e = g.placeholder((3, 0), mg.complex64)
    with pytest.raises(mg.GraphValueError, match=r"\[fast_fourier_transform\].*size 0.*\(3, 0\)"):
        g.fast_fourier_transform(e, axes=(1,))
    one = g.placeholder((3, 1), mg.complex64)
    with pytest.raises(mg.GraphValueError, match=r"\[hermitean_to_real_fft\].*0 output points"):
        g.hermitean_to_real_fft(one, axes=(1,))
    # unknown length: the forward op builds, its error comes when the feed says size 0
    u = g.placeholder((None,), mg.complex64)
    f = g.fast_fourier_transform(u)
    with pytest.raises(mg.GraphValueError, match=r"\[fast_fourier_transform\].*size 0"):
        g.run({u: np.zeros((0,), np.complex64)}, [f])
    assert_still_works(g)


def test_mixed_dtypes_and_scalars():
    g = mg.Graph()
    z = g.placeholder((2,), mg.complex64)
    x = g.placeholder((2,), mg.float32)
    with pytest.raises(mg.GraphTypeError, match=r"\[addition\].*complex64.*float32"):
        z + x
    with pytest.raises(mg.GraphTypeError, match=r"\[multiplication\].*complex value"):
        x * 1j
    y = z * 2.0 + 1j
    v = np.array([1 + 1j, -2j], np.complex64)
    np.testing.assert_allclose(run1(g, {z: v}, y), v * 2 + 1j)
    assert_still_works(g)
