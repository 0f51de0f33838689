"""resize / resize_gradient: what is not per-op values (bilinear and nearest against PyTorch's
F.interpolate, every coordinate and rounding mode against weights from exact fractions, layouts,
dtypes, zero-size batches and gradients are rows of the conformance table,
tests/conformance_nn.py): static shape inference with some dims unknown, and the error
messages."""
import numpy as np
import pytest

import mpsgraph as mg
from conformance_nn import np_resize

RNG = np.random.default_rng(11)


def _np(td):
    return np.array(td.numpy(), copy=True)


def test_unknown_batch_and_channel_dims():
    x = RNG.standard_normal((2, 5, 4, 3))
    g = mg.Graph()
    p = g.placeholder((None, 5, 4, None), mg.float64)
    y = g.resize(p, (3, 6))
    assert y.shape == (None, 3, 6, None)
    gx = g.gradients(g.reduction_sum(y * y), [p])[p]
    res = g.run({p: x}, [y, gx])
    np.testing.assert_allclose(_np(res[y]), np_resize(x, (3, 6)), rtol=1e-12)
    assert _np(res[gx]).shape == x.shape
    # unknown spatial dims too
    g = mg.Graph()
    p = g.placeholder((None, None, None, None), mg.float64)
    y = g.resize(p, (3, 6), mode="nearest")
    assert y.shape == (None, 3, 6, None)


# ---------------- errors ----------------

@pytest.mark.parametrize("kwargs,pattern", [
    (dict(size=(0, 3)), r"size \(0, 3\) must be positive"),
    (dict(size=(3,)), r"size needs 2 values"),
    (dict(size=(3, 3), mode="bicubic"), r"mode must be 'nearest' or 'bilinear'"),
    (dict(size=(3, 3), data_layout="NCDHW"), r"data_layout must be"),
    (dict(size=(3, 3), data_layout="HWC"), r"expects a rank-3 HWC source, got float32\(1, 4, 4, 2\)"),
    (dict(size=(3, 3), mode="nearest", nearest_rounding_mode="up"), r"nearest_rounding_mode must be"),
])
def test_bad_attributes(kwargs, pattern):
    g = mg.Graph()
    x = g.placeholder((1, 4, 4, 2), mg.float32)
    with pytest.raises(mg.GraphError, match=r"^\[resize\] " + pattern):
        g.resize(x, **kwargs)


def test_bad_inputs():
    g = mg.Graph()
    with pytest.raises(TypeError, match=r"\[resize\] expects a floating-point dtype"):
        g.resize(g.placeholder((1, 4, 4, 2), mg.int32), (2, 2))
    with pytest.raises(mg.GraphError, match=r"\[resize\] cannot resize an empty image: source float32\(1, 0, 4, 2\)"):
        g.resize(g.placeholder((1, 0, 4, 2), mg.float32), (2, 2))
    with pytest.raises(mg.GraphError, match=r"\[resize_gradient\] dy float32\(1, 3, 3, 2\) does not match the resized "
                                            r"shape \(1, 2, 2, 2\)"):
        g.resize_gradient(g.placeholder((1, 3, 3, 2), mg.float32), g.placeholder((1, 4, 4, 2), mg.float32), (2, 2))
