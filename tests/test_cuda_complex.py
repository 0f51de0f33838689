"""complex64 and the FFT family on cuda:0 (complex_cuda.cpp, fft_cuda.cpp) beyond the conformance
table: every FFT op with each sign and normalisation on odd, even and prime lengths, batched and
non-innermost axes and several axes at once, against numpy.fft (complex128) and the CPU; round
trips; gradients through each transform against the Jacobians numpy's transforms give on basis
vectors; the complex elementwise ops against numpy on complex128; complex64 fed and fetched
directly.

MPSGRAPH_TEST_CUDA_DEVICE=cpu runs the same checks on the CPU (the tests' own logic); without a
GPU the file skips."""
import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import DEVICE, run as _run, skip_without_device
from fft_reference import fft_ref, irfft_ref, rfft_ref

pytestmark = skip_without_device

MODES = ("none", "size", "unitary")


def _rng(seed):
    return np.random.default_rng(seed)


def _cplx(shape, seed):
    r = _rng(seed)
    return (r.standard_normal(shape) + 1j * r.standard_normal(shape)).astype(np.complex64)


def _close(got, want, rtol=2e-5):
    """Relative to the largest magnitude: float32 transforms round at that scale."""
    want = np.asarray(want)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1.0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(want.dtype), want, rtol=0, atol=rtol * scale * max(np.log2(want.size + 1), 1))


# (shape, axes): odd, even, prime and power-of-two lengths, batches before, between and after the axes
SHAPES = [((8,), None), ((7,), None), ((1,), None), ((97,), None), ((6, 10), (1,)), ((9, 5), (0,)),
          ((4, 6, 3), (0, 2)), ((3, 5, 7), None), ((2, 12, 3), (1,)), ((5, 4, 6, 2), (1, 2)), ((64, 1000), (-1,)),
          ((0, 5), (1,))]


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_fast_fourier_transform(shape, axes, inverse, mode):
    z = _cplx(shape, 1)
    kw = dict(axes=axes, inverse=inverse, scaling_mode=mode)
    (dev,) = _run(lambda g, x: g.fast_fourier_transform(x, **kw), [z])
    assert dev.dtype == np.complex64
    want = fft_ref(z.astype(np.complex128), **kw)
    _close(dev, want)
    (cpu,) = _run(lambda g, x: g.fast_fourier_transform(x, **kw), [z], "cpu")
    _close(dev, cpu.astype(np.complex128))


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("inverse", [False, True])
def test_fast_fourier_transform_of_real_input(shape, axes, inverse):
    x = _rng(2).standard_normal(shape).astype(np.float32)
    kw = dict(axes=axes, inverse=inverse, scaling_mode="size" if inverse else "none")
    (dev,) = _run(lambda g, a: g.fast_fourier_transform(a, **kw), [x])
    _close(dev, fft_ref(x.astype(np.complex128), **kw))


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_real_to_hermitean_fft(shape, axes, inverse, mode):
    x = _rng(3).standard_normal(shape).astype(np.float32)
    kw = dict(axes=axes, inverse=inverse, scaling_mode=mode)
    (dev,) = _run(lambda g, a: g.real_to_hermitean_fft(a, **kw), [x])
    assert dev.dtype == np.complex64
    _close(dev, rfft_ref(x, **kw))


@pytest.mark.parametrize("shape,axes", [(s, a) for s, a in SHAPES if s != (1,)])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("odd", [False, True])
def test_hermitean_to_real_fft(shape, axes, inverse, mode, odd):
    h = _cplx(shape, 4)
    kw = dict(axes=axes, inverse=inverse, scaling_mode=mode, round_to_odd_hermitean=odd)
    (dev,) = _run(lambda g, a: g.hermitean_to_real_fft(a, **kw), [h])
    assert dev.dtype == np.float32
    _close(dev, irfft_ref(h.astype(np.complex128), **kw))


@pytest.mark.parametrize("n", [1, 2, 7, 8, 15, 16, 243, 1000])
@pytest.mark.parametrize("mode", ["size", "unitary"])
def test_round_trips(n, mode):
    """ifft(fft(z)) = z and irfft(rfft(x), n) = x, the scaling split between the two ways."""
    z = _cplx((3, n), 5)
    x = _rng(6).standard_normal((3, n)).astype(np.float32)
    fwd_mode, inv_mode = ("none", "size") if mode == "size" else ("unitary", "unitary")

    def build(g, a, b):
        back = g.fast_fourier_transform(g.fast_fourier_transform(a, axes=[1], scaling_mode=fwd_mode), axes=[1],
                                        inverse=True, scaling_mode=inv_mode)
        h = g.real_to_hermitean_fft(b, axes=[1], scaling_mode=fwd_mode)
        real = g.hermitean_to_real_fft(h, axes=[1], inverse=True, scaling_mode=inv_mode,
                                       round_to_odd_hermitean=n % 2 == 1)
        return [back, real]

    back, real = _run(build, [z, x])
    np.testing.assert_allclose(back, z, rtol=0, atol=2e-5 * max(1.0, np.log2(n + 1)))
    np.testing.assert_allclose(real, x, rtol=0, atol=2e-5 * max(1.0, np.log2(n + 1)))


# ---- gradients: L = sum(wr * Re(y) + wi * Im(y)) (or sum(w * y) for a real y) ----

def _jacobian(f, n, complex_in):
    """Columns f(e_j) (and f(i e_j)) of a transform along the last axis, numpy, complex128."""
    eye = np.eye(n)
    cols = [f(eye[j]) for j in range(n)]
    j_re = np.stack(cols, axis=-1)
    j_im = np.stack([f(1j * eye[j]) for j in range(n)], axis=-1) if complex_in else None
    return j_re, j_im


def _grad_ref(j, wr, wi):
    """dL/d(input part) for each batch row, J the Jacobian of that part (output complex or real)."""
    g = wr @ j.real
    if wi is not None:
        g += wi @ j.imag
    return g


_GRAD_CASES = [(8, False, "none"), (7, True, "size"), (9, False, "unitary"), (12, True, "none"), (1, False, "size")]


@pytest.mark.parametrize("n,inverse,mode", _GRAD_CASES)
def test_gradient_of_fast_fourier_transform(n, inverse, mode):
    b = 3
    kw = dict(axes=[1], inverse=inverse, scaling_mode=mode)
    r = _rng(7)
    re, im = r.standard_normal((b, n)).astype(np.float32), r.standard_normal((b, n)).astype(np.float32)
    wr, wi = r.standard_normal((b, n)).astype(np.float32), r.standard_normal((b, n)).astype(np.float32)

    def build(g, a, c, u, v):
        y = g.fast_fourier_transform(g.complex(a, c), **kw)
        loss = g.reduction_sum(u * g.real_part(y) + v * g.imaginary_part(y), axes=[0, 1])
        d = g.gradients(loss, [a, c])
        return [d[a], d[c]]

    dre, dim = _run(build, [re, im, wr, wi])
    j_re, j_im = _jacobian(lambda e: fft_ref(e.astype(np.complex128), inverse=inverse, scaling_mode=mode), n, True)
    np.testing.assert_allclose(dre, _grad_ref(j_re, wr, wi), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dim, _grad_ref(j_im, wr, wi), rtol=1e-4, atol=1e-4)
    cpu = _run(build, [re, im, wr, wi], "cpu")
    for a, c in zip((dre, dim), cpu):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,inverse,mode", _GRAD_CASES)
def test_gradient_of_real_to_hermitean_fft(n, inverse, mode):
    b, m = 2, n // 2 + 1
    kw = dict(axes=[1], inverse=inverse, scaling_mode=mode)
    r = _rng(8)
    x = r.standard_normal((b, n)).astype(np.float32)
    wr, wi = r.standard_normal((b, m)).astype(np.float32), r.standard_normal((b, m)).astype(np.float32)

    def build(g, a, u, v):
        y = g.real_to_hermitean_fft(a, **kw)
        loss = g.reduction_sum(u * g.real_part(y) + v * g.imaginary_part(y), axes=[0, 1])
        return g.gradients(loss, a)[a]

    (dx,) = _run(build, [x, wr, wi])
    j, _ = _jacobian(lambda e: rfft_ref(e.real, inverse=inverse, scaling_mode=mode), n, False)
    np.testing.assert_allclose(dx, _grad_ref(j, wr, wi), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,inverse,mode", _GRAD_CASES)
def test_gradient_of_hermitean_to_real_fft(n, inverse, mode):
    """n is the real length: m = n // 2 + 1 bins, odd n through round_to_odd_hermitean."""
    b, m = 2, n // 2 + 1
    kw = dict(axes=[1], inverse=inverse, scaling_mode=mode, round_to_odd_hermitean=n % 2 == 1)
    r = _rng(9)
    re, im = r.standard_normal((b, m)).astype(np.float32), r.standard_normal((b, m)).astype(np.float32)
    w = r.standard_normal((b, n)).astype(np.float32)

    def build(g, a, c, u):
        y = g.hermitean_to_real_fft(g.complex(a, c), **kw)
        loss = g.reduction_sum(u * y, axes=[0, 1])
        d = g.gradients(loss, [a, c])
        return [d[a], d[c]]

    dre, dim = _run(build, [re, im, w])
    j_re, j_im = _jacobian(lambda e: irfft_ref(e.astype(np.complex128), inverse=inverse, scaling_mode=mode,
                                               round_to_odd_hermitean=n % 2 == 1), m, True)
    np.testing.assert_allclose(dre, _grad_ref(j_re, w, None), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dim, _grad_ref(j_im, w, None), rtol=1e-4, atol=1e-4)


# ---- complex64 elementwise ops and shape ops ----

_BINARY = {"addition": np.add, "subtraction": np.subtract, "multiplication": np.multiply, "division": np.divide}
_UNARY = {"negative": np.negative, "conjugate": np.conj, "square": np.square, "exponent": np.exp,
          "reciprocal": np.reciprocal, "identity": lambda z: z}
_REAL = {"absolute": np.abs, "angle": np.angle, "real_part": np.real, "imaginary_part": np.imag}


@pytest.mark.parametrize("op", sorted(_BINARY))
def test_complex_binary(op):
    a, b = _cplx((4, 5), 10), _cplx((1, 5), 11)  # broadcast
    (dev,) = _run(lambda g, x, y: getattr(g, op)(x, y), [a, b])
    assert dev.dtype == np.complex64
    want = _BINARY[op](a.astype(np.complex128), b.astype(np.complex128))
    np.testing.assert_allclose(dev, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", sorted(_UNARY) + sorted(_REAL))
def test_complex_unary(op):
    z = _cplx((3, 7), 12) * np.complex64(0.7)
    (dev,) = _run(lambda g, x: getattr(g, op)(x), [z])
    ref = {**_UNARY, **_REAL}[op]
    want = ref(z.astype(np.complex128))
    assert dev.dtype == (np.float32 if op in _REAL else np.complex64)
    np.testing.assert_allclose(dev, want, rtol=2e-6, atol=2e-6)


def test_complex_compare_make_cast_and_shape_ops():
    re = _rng(13).integers(-1, 2, (4, 3)).astype(np.float32)
    im = _rng(14).integers(-1, 2, (4, 3)).astype(np.float32)
    other = (re + 1j * im).astype(np.complex64)[::-1].copy()

    def build(g, a, b, o):
        z = g.complex(a, b)
        return [g.equal(z, o), g.not_equal(z, o), g.cast(a, mg.complex64), g.transpose(z, [1, 0]),
                g.concat([z, o], axis=0), g.reshape(z, [3, 4]), g.slice(z, 0, 1, 2)]

    eq, ne, cast, tr, cat, rs, sl = _run(build, [re, im, other])
    z = re + 1j * im
    np.testing.assert_array_equal(eq, z == other)
    np.testing.assert_array_equal(ne, z != other)
    np.testing.assert_array_equal(cast, re.astype(np.complex64))
    np.testing.assert_array_equal(tr, z.T)
    np.testing.assert_array_equal(cat, np.concatenate([z, other]))
    np.testing.assert_array_equal(rs, z.reshape(3, 4))
    np.testing.assert_array_equal(sl, z[1:3])


def test_spectral_filter_pipeline():
    """rfft -> complex scaling -> irfft, a low-pass filter, against numpy end to end."""
    x = _rng(15).standard_normal((4, 256)).astype(np.float32)
    keep = (np.arange(129) < 20).astype(np.float32)

    def build(g, a, k):
        h = g.real_to_hermitean_fft(a, axes=[1])
        hf = h * g.complex(k, k * 0.0)
        return g.hermitean_to_real_fft(hf, axes=[1], inverse=True, scaling_mode="size")

    (dev,) = _run(build, [x, keep])
    want = np.fft.irfft(np.fft.rfft(x.astype(np.float64), axis=1) * keep, n=256, axis=1)
    np.testing.assert_allclose(dev, want, rtol=0, atol=1e-5)
