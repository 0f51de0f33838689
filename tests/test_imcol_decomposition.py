"""im_to_col / col_to_im / im_to_col_gradient as their decompositions (pad + one strided slice per
kernel tap, and the adjoint), which the Metal and CUDA backends run: against torch's F.unfold / F.fold,
the numpy references of the conformance table and the CPU kernels."""
import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg
from conformance_image import _col_to_im_ref, _im_to_col_ref
from conftest import cpu_decompositions
from gradcheck import check_op_gradient

# (attrs, image shape): strides, dilations, asymmetric padding, rectangular kernels, zero sizes
WINDOWS = [
    ({"kernel_sizes": (2, 2)}, (1, 2, 4, 5)),
    ({"kernel_sizes": (3, 2), "strides": (2, 1)}, (2, 3, 7, 4)),
    ({"kernel_sizes": (2, 3), "dilation_rates": (2, 1), "padding": (1, 0, 2, 1)}, (1, 2, 5, 6)),
    ({"kernel_sizes": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, (2, 1, 6, 6)),
    ({"kernel_sizes": (1, 1)}, (1, 3, 2, 2)),
    ({"kernel_sizes": (2, 2), "strides": (3, 3)}, (1, 1, 7, 8)),
    ({"kernel_sizes": (3, 2), "strides": (2, 3), "dilation_rates": (2, 2), "padding": (2, 1, 0, 3)}, (2, 2, 7, 9)),
    ({"kernel_sizes": (1, 4), "dilation_rates": (1, 2), "padding": (0, 0, 3, 3)}, (1, 2, 3, 4)),
    ({"kernel_sizes": (2, 2)}, (0, 2, 4, 4)),
    ({"kernel_sizes": (2, 2), "padding": (1, 1, 1, 1)}, (2, 0, 3, 3)),
]
IDS = [f"{a}-{s}" for a, s in WINDOWS]


def _dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _unfold(x, attrs, unknown_batch=False):
    g = mg.Graph()
    p = g.placeholder(((None,) + x.shape[1:]) if unknown_batch else x.shape, str(x.dtype))
    out = g.im_to_col(p, **attrs)
    return np.asarray(g.run({p: x}, [out])[out].numpy())


def _fold(cols, size, attrs, unknown_batch=False):
    g = mg.Graph()
    p = g.placeholder(((None,) + cols.shape[1:]) if unknown_batch else cols.shape, str(cols.dtype))
    out = g.col_to_im(p, output_size=size, **attrs)
    return np.asarray(g.run({p: cols}, [out])[out].numpy())


def _fold_like(cols, image, attrs, unknown=False):
    g = mg.Graph()
    dt = str(cols.dtype)
    p = g.placeholder((None,) * 3 if unknown else cols.shape, dt)
    like = g.placeholder((None,) * 4 if unknown else image, dt)
    out = g.im_to_col_gradient(p, like, **attrs)
    return np.asarray(g.run({p: cols, like: np.zeros(image, cols.dtype)}, [out])[out].numpy())


def _torch_padding(attrs):
    p = attrs.get("padding", (0, 0, 0, 0))
    return (p[0], p[2]) if p[0] == p[1] and p[2] == p[3] else None


@pytest.mark.parametrize("attrs,shape", WINDOWS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "uint8"])
def test_im_to_col_decomposition(attrs, shape, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 100, shape).astype(_dtype(dtype))
    kernel = _unfold(x, attrs)
    with cpu_decompositions():
        decomposed = _unfold(x, attrs)
        unknown_batch = _unfold(x, attrs, unknown_batch=True)
    ref = _im_to_col_ref(x, **attrs)
    np.testing.assert_array_equal(decomposed, ref)
    np.testing.assert_array_equal(decomposed, kernel)
    np.testing.assert_array_equal(unknown_batch, ref)


@pytest.mark.parametrize("attrs,shape", WINDOWS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32"])
def test_col_to_im_decomposition(attrs, shape, dtype):
    rng = np.random.default_rng(1)
    cols_shape = _im_to_col_ref(np.zeros(shape), **attrs).shape
    cols = rng.integers(-50, 50, cols_shape).astype(_dtype(dtype))
    kernel = _fold(cols, shape[2:], attrs)
    with cpu_decompositions():
        decomposed = _fold(cols, shape[2:], attrs)
        unknown_batch = _fold(cols, shape[2:], attrs, unknown_batch=True)
        like = _fold_like(cols, shape, attrs)
        like_unknown = _fold_like(cols, shape, attrs, unknown=True)
    # exact sums rounded once, as the kernel (in double) and the decomposition (float32 for halves) do
    ref = _col_to_im_ref(cols, shape[2:], **attrs).astype(_dtype(dtype))
    for got in (decomposed, kernel, unknown_batch, like, like_unknown):
        np.testing.assert_array_equal(got, ref)


TORCH_CASES = [(i, w) for i, w in zip(IDS, WINDOWS) if _torch_padding(w[0]) and w[1][1] > 0]  # torch: C > 0


@pytest.mark.parametrize("attrs,shape", [w for _, w in TORCH_CASES], ids=[i for i, _ in TORCH_CASES])
def test_decomposition_against_torch(attrs, shape):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    t = dict(kernel_size=attrs["kernel_sizes"], dilation=attrs.get("dilation_rates", (1, 1)),
             padding=_torch_padding(attrs), stride=attrs.get("strides", (1, 1)))
    with cpu_decompositions():
        cols = _unfold(x, attrs)
        np.testing.assert_allclose(cols, F.unfold(torch.from_numpy(x), **t).numpy(), rtol=0, atol=0)
        c = rng.standard_normal(cols.shape)
        np.testing.assert_allclose(_fold(c, shape[2:], attrs),
                                   F.fold(torch.from_numpy(c), output_size=shape[2:], **t).numpy(),
                                   rtol=1e-12, atol=1e-12)


GRAD_CASES = [WINDOWS[i] for i in (1, 2, 3, 6)]


@pytest.mark.parametrize("attrs,shape", GRAD_CASES, ids=[f"{a}-{s}" for a, s in GRAD_CASES])
def test_gradients_through_decomposition(attrs, shape):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    cols = rng.standard_normal(_im_to_col_ref(np.zeros(shape), **attrs).shape)
    with cpu_decompositions():
        check_op_gradient(lambda g, a: g.im_to_col(a, **attrs), [x], second_order=True)
        check_op_gradient(lambda g, a: g.col_to_im(a, output_size=shape[2:], **attrs), [cols], second_order=True)
        check_op_gradient(lambda g, a: g.im_to_col(a, **attrs), [x], unknown_dims=True)
        check_op_gradient(lambda g, a: g.im_to_col_gradient(a, g.constant(np.zeros(shape)), **attrs), [cols],
                          second_order=True)
