"""Convolution family: what is not per-op values (those are rows of the conformance table,
tests/conformance_nn.py: the primitive and its gradient primitives, convolution_2d/3d with both
layouts, depthwise, transposed and the MPSGraph-named gradient front ends, against PyTorch
and finite differences): static shape inference with unknown dims, one graph specialised for
several feed shapes, and the error messages."""
import numpy as np
import pytest
import torch

import mpsgraph as mg
from conformance_nn import same_pads

F = torch.nn.functional
RNG = np.random.default_rng(7)


def normal(*shape):
    return RNG.standard_normal(shape)


def nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def from_nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


def test_same_padding_with_unknown_spatial_dims():
    """'same' resolves at specialisation; the resolved padding differs per feed shape."""
    g = mg.Graph()
    x = g.placeholder((None, None, None, 3), mg.float64)
    w = g.placeholder((3, 3, 3, 5), mg.float64)
    y = g.convolution_2d(x, w, strides=(2, 2), padding_style="same")
    assert y.shape == (None, None, None, 5)
    grads = g.gradients(g.reduction_sum(y * y), [x, w])
    wv = normal(3, 3, 3, 5)
    for shape in [(1, 7, 8, 3), (2, 6, 5, 3)]:
        xv = normal(*shape)
        r = g.run({x: xv, w: wv}, [y, grads[x], grads[w]])
        xc, wc = from_nhwc(xv), np.transpose(wv, (3, 2, 0, 1))
        pads = same_pads(shape[1:3], (3, 3), (2, 2), (1, 1))
        xt, wt = torch.tensor(xc, requires_grad=True), torch.tensor(wc, requires_grad=True)
        yt = F.conv2d(F.pad(xt, (pads[2], pads[3], pads[0], pads[1])), wt, stride=2)
        rx, rw = torch.autograd.grad((yt * yt).sum(), [xt, wt])
        np.testing.assert_allclose(r[y].numpy(), nhwc(yt.detach().numpy()), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(r[grads[x]].numpy(), nhwc(rx.numpy()), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(r[grads[w]].numpy(), np.transpose(rw.numpy(), (2, 3, 1, 0)), rtol=1e-11,
                                   atol=1e-11)


def test_unknown_batch_and_channels_infer():
    g = mg.Graph()
    x = g.placeholder((None, 3, None, 9), mg.float32)
    w = g.placeholder((8, 3, 3, 3), mg.float32)
    y = g.convolution(x, w, strides=2, padding=(1, 1, 1, 1))
    assert y.shape == (None, 8, None, 5)


# ---------------- errors ----------------

def raises(fragments, fn, exc=mg.GraphError):
    with pytest.raises(exc) as ei:
        fn()
    msg = str(ei.value)
    for f in fragments:
        assert f in msg, msg


def test_errors():
    g = mg.Graph()
    x = g.placeholder((1, 8, 8, 3), mg.float32, name="img")
    w = g.placeholder((3, 3, 4, 16), mg.float32)
    raises(["[convolution_2d]", "channels differ: source (1, 8, 8, 3) has 3 channels but weights (3, 3, 4, 16) expect 4"],
           lambda: g.convolution_2d(x, w))
    w2 = g.placeholder((3, 3, 1, 16), mg.float32)
    raises(["[convolution_2d]", "groups=2 does not divide the 3 channels of source (1, 8, 8, 3)"],
           lambda: g.convolution_2d(x, w2, groups=2))
    w3 = g.placeholder((3, 3, 1, 4), mg.float32)
    raises(["[convolution_2d]", "groups=3 does not divide the 4 output channels"], lambda: g.convolution_2d(x, w3, groups=3))
    raises(["[convolution_2d]", "must have rank 4 (NHWC)"], lambda: g.convolution_2d(g.placeholder((8, 8, 3), mg.float32), w))
    big = g.placeholder((5, 5, 3, 2), mg.float32)
    small = g.placeholder((1, 3, 3, 3), mg.float32)
    raises(["[convolution_2d]", "kernel larger than padded input", "(1, 3, 3, 3)"], lambda: g.convolution_2d(small, big))
    raises(["[convolution_2d]", "dilated to 9"], lambda: g.convolution_2d(small, big, dilation_rates=(2, 2), padding=(1, 1, 1, 1)))
    ok = g.placeholder((3, 3, 3, 2), mg.float32)
    raises(["[convolution_2d]", "data_layout must be 'NHWC' or 'NCHW', not 'NWHC'"],
           lambda: g.convolution_2d(x, ok, data_layout="NWHC"))
    raises(["[convolution_2d]", "weights_layout must be 'HWIO' or 'OIHW'"], lambda: g.convolution_2d(x, ok, weights_layout="IOHW"))
    raises(["[convolution_3d]", "data_layout must be 'NDHWC' or 'NCDHW'"],
           lambda: g.convolution_3d(g.placeholder((1, 2, 2, 2, 3), mg.float32),
                                    g.placeholder((1, 1, 1, 3, 2), mg.float32), data_layout="NHWC"))
    raises(["[convolution_2d]", "strides (0, 1) must be positive"], lambda: g.convolution_2d(x, ok, strides=(0, 1)))
    raises(["[convolution_2d]", "dilation_rates"], lambda: g.convolution_2d(x, ok, dilation_rates=(1, -1)))
    raises(["[convolution_2d]", "padding (1, 2, 3) must have 4 values"], lambda: g.convolution_2d(x, ok, padding=(1, 2, 3)))
    raises(["[convolution_2d]", "padding_style must be"], lambda: g.convolution_2d(x, ok, padding_style="full"))
    raises(["[convolution]", "expects a floating-point dtype"],
           lambda: g.convolution(g.placeholder((1, 2, 3, 3), mg.int32), g.placeholder((1, 2, 1, 1), mg.int32)))
    raises(["[convolution]", "rank >= 3"], lambda: g.convolution(g.placeholder((2, 3), mg.float32), g.placeholder((2, 3), mg.float32)))
    raises(["[depthwise_convolution_2d]", "channels differ"],
           lambda: g.depthwise_convolution_2d(x, g.placeholder((3, 3, 4, 1), mg.float32)))
    # transposed: output_shape that no convolution maps back to the source
    src = g.placeholder((1, 4, 4, 2), mg.float32)
    tw = g.placeholder((3, 3, 5, 2), mg.float32)  # HWIO of the forward conv: I = 5 outputs, O = 2 = source channels
    raises(["[convolution_transpose_2d]", "does not match output_shape"],
           lambda: g.convolution_transpose_2d(src, tw, output_shape=(1, 12, 9, 5), strides=(2, 2)))
    raises(["[convolution_transpose_2d]", "channels differ"],
           lambda: g.convolution_transpose_2d(src, g.placeholder((3, 3, 5, 3), mg.float32)))
    # the graph still works
    y = g.convolution_2d(x, ok, name="fine")
    r = g.run({x: np.ones((1, 8, 8, 3), np.float32), ok: np.ones((3, 3, 3, 2), np.float32)}, [y])[y].numpy()
    np.testing.assert_allclose(r, np.full((1, 6, 6, 2), 27.0))


def test_error_at_specialisation_for_unknown_dims():
    g = mg.Graph()
    x = g.placeholder((1, None, None, 3), mg.float32)
    w = g.placeholder((5, 5, 3, 2), mg.float32)
    y = g.convolution_2d(x, w)
    with pytest.raises(mg.GraphError, match=r"kernel larger than padded input"):
        g.run({x: np.zeros((1, 3, 8, 3), np.float32), w: np.zeros((5, 5, 3, 2), np.float32)}, [y])
    r = g.run({x: np.zeros((1, 6, 8, 3), np.float32), w: np.zeros((5, 5, 3, 2), np.float32)}, [y])[y]
    assert r.numpy().shape == (1, 2, 4, 2)
