"""Pooling: what is not per-op values (max / average / L2 / sum pooling in 2-D, 4-D and N-d,
return indices, ceil mode, padding styles, the gradient primitives and global pooling are rows
of the conformance table, tests/conformance_nn.py, against PyTorch, a numpy reference visiting
every window tap, and finite differences): static shape inference with some dims unknown, the
gradient where an L2 window sums to zero, and the error messages."""
import numpy as np
import pytest

import mpsgraph as mg
from conformance_nn import np_pool

RNG = np.random.default_rng(7)


def _np(td):
    return np.array(td.numpy(), copy=True)


def distinct(*shape):
    n = int(np.prod(shape))
    return (RNG.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(np.float64)


def to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def test_unknown_batch_and_channel_dims():
    x = distinct(2, 7, 6, 3)
    kw = dict(kernel_sizes=(3, 2), strides=(2, 2), padding=(1, 1, 0, 1), ceil_mode=True)
    g = mg.Graph()
    p = g.placeholder((None, 7, 6, None), mg.float64)
    y = g.max_pooling_2d(p, **kw)
    assert y.shape == (None, 4, 3, None)
    yi = g.max_pooling_2d_return_indices(p, **kw)
    assert yi[1].shape == (None, 4, 3, None) and yi[1].dtype == mg.int32
    a = g.avg_pooling_2d(p, **kw)
    gx = g.gradients(g.reduction_sum(y * y) + g.reduction_sum(a), [p])[p]
    res = g.run({p: x}, [y, yi[1], a, gx])
    want, idx = np_pool(to_nchw(x), 2, "max", **kw)
    np.testing.assert_array_equal(_np(res[y]), to_nhwc(want))
    np.testing.assert_array_equal(_np(res[yi[1]]), to_nhwc(idx))
    np.testing.assert_allclose(_np(res[a]), to_nhwc(np_pool(to_nchw(x), 2, "avg", **kw)), rtol=1e-12)
    assert _np(res[gx]).shape == x.shape


def test_global_pooling_keeps_dims_when_unknown():
    g = mg.Graph()
    assert g.global_average_pooling_2d(g.placeholder((None, 5, 4, None), mg.float32)).shape == (None, 1, 1, None)
    assert g.global_max_pooling_2d(g.placeholder((None, 5, None, 3), mg.float32),
                                   data_layout="NCHW").shape == (None, 5, 1, 1)


def test_l2_pooling_of_zero_window_has_zero_gradient():
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 0] = 2.0
    g = mg.Graph()
    p = g.placeholder(x.shape, mg.float64)
    y = g.l2_norm_pooling_2d(p, 2, 2, data_layout="NCHW")
    gx = g.gradients(g.reduction_sum(y), [p])[p]
    res = g.run({p: x}, [y, gx])
    np.testing.assert_array_equal(_np(res[y]), [[[[2.0, 0], [0, 0]]]])
    expect = np.zeros_like(x)
    expect[0, 0, 0, 0] = 1.0
    np.testing.assert_array_equal(_np(res[gx]), expect)


# ---------------- errors ----------------

def test_window_too_large_message():
    g = mg.Graph()
    x = g.placeholder((1, 3, 3, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[max_pooling_2d\] window 5 with dilation 1 does not fit in padded "
                                            r"input of size 3 \(source float32\(1, 3, 3, 2\)\)"):
        g.max_pooling_2d(x, (5, 1), (1, 1))


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(kernel_sizes=(2, 2, 2), strides=(1, 1)), r"kernel_sizes \(2, 2, 2\) needs 2 values"),
    (dict(kernel_sizes=(2, 2), strides=(0, 1)), r"strides \(0, 1\) must be positive"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding=(1, 2, 3)), r"padding \(1, 2, 3\) needs 4 values"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding=(-1,)), r"padding \(-1,\) must be non-negative"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), padding_style="full"), r"padding_style must be"),
    (dict(kernel_sizes=(2, 2), strides=(1, 1), data_layout="NDHWC"), r"data_layout must be 'NHWC' or 'NCHW'"),
])
def test_bad_attributes(kwargs, pattern):
    g = mg.Graph()
    x = g.placeholder((1, 4, 4, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[avg_pooling_2d\] " + pattern):
        g.avg_pooling_2d(x, **kwargs)


def test_bad_sources():
    g = mg.Graph()
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_2d\] expects a rank-4 NHWC source, got float32\(4, 4, 2\)"):
        g.max_pooling_2d(g.placeholder((4, 4, 2), mg.float32), 2, 2)
    with pytest.raises(TypeError, match=r"\[max_pooling_2d\] expects a floating-point dtype"):
        g.max_pooling_2d(g.placeholder((1, 4, 4, 2), mg.int32), 2, 2)
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_nd\] kernel_sizes \(2, 2, 2\) pool 3 trailing dims, "
                                            r"but source float32\(4, 4\) has rank 2"):
        g.max_pooling_nd(g.placeholder((4, 4), mg.float32), (2, 2, 2))
    with pytest.raises(mg.GraphError, match=r"\[max_pooling_nd_gradient\] dy float32\(1, 3\) does not match"):
        g.max_pooling_nd_gradient(g.placeholder((1, 3), mg.float32), g.placeholder((1, 4), mg.float32), (2,), (2,))
    with pytest.raises(TypeError, match=r"indices_dtype must be int32 or int64"):
        g.max_pooling_2d_return_indices(g.placeholder((1, 4, 4, 2), mg.float32), 2, 2, indices_dtype=mg.int16)


def test_unknown_dims_too_small_fail_at_run_time():
    g = mg.Graph()
    x = g.placeholder((1, None, None, 2), mg.float32)
    y = g.max_pooling_2d(x, 5, 1)
    assert y.shape == (1, None, None, 2)
    with pytest.raises(mg.GraphError, match=r"window 5 with dilation 1 does not fit in padded input of size 3"):
        g.run({x: np.zeros((1, 3, 3, 2), np.float32)}, [y])
    out = g.run({x: np.zeros((1, 6, 5, 2), np.float32)}, [y])  # the graph stays usable
    assert _np(out[y]).shape == (1, 2, 1, 2)
