"""Channels-last planning (core/channels_last.h): convolutions keep NHWC activations between
them and the elementwise ops after them run on the NHWC values.

The CUDA backend plans float16/bfloat16 inference networks so with MPSGRAPH_CUDA_CHANNELS_LAST=1
(opt-in: docs/cuda.md); MPSGRAPH_CPU_CHANNELS_LAST=1 makes the CPU plan the same way, which checks the
rewrite itself: each element is computed by the same ops in the same order, so the results must
equal the CPU's usual plan bit for bit, for every kind of operand an elementwise op can meet
(per-channel, per-position, per-image and scalar broadcasts, full-size NCHW values, values that
are targets). On a GPU the planned network is compared with the CPU and its transposes must be
absorbed by the convolutions."""
import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import DEVICE

RNG = np.random.default_rng(7)


def _w(o, i, k=3, dtype=np.float32):
    return (RNG.standard_normal((o, i, k, k)) / np.sqrt(i * k * k)).astype(dtype)


def _conv(g, h, w, stride=1, groups=1, dtype=np.float32):
    pad = w.shape[-1] // 2
    return g.convolution_2d(h, g.constant(w.astype(dtype)), strides=[stride, stride], padding=[pad] * 4,
                            groups=groups, data_layout="NCHW", weights_layout="OIHW")


def residual_net(g, x, dtype):
    """conv-bn-relu, a strided block with a downsampling shortcut, max pool, relu6, global mean,
    average pool; the block's output is a second target."""
    c = lambda a: g.constant(np.asarray(a, dtype))
    h = g.relu(_conv(g, x, _w(8, 3), dtype=dtype) * c(RNG.random((1, 8, 1, 1)) + 0.5) + c(RNG.random((8, 1, 1))))
    y = _conv(g, g.relu(_conv(g, h, _w(16, 8), 2, dtype=dtype)), _w(16, 16), dtype=dtype)
    block = g.relu(y + _conv(g, h, _w(16, 8, 1), 2, dtype=dtype))
    p = g.max_pooling_2d(block, kernel_sizes=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], data_layout="NCHW")
    z = g.clamp(_conv(g, p, _w(16, 16), dtype=dtype), c(0.0), c(6.0))
    a = g.avg_pooling_2d(z, kernel_sizes=[2, 3], strides=[1, 2], padding=[0, 1, 1, 1], include_zero_pad=True,
                         data_layout="NCHW")
    return [g.mean(z, axes=[2, 3]), block, a * c(0.5)]


def operand_net(g, x, r, dtype):
    """Elementwise ops after a convolution meeting every operand shape: per-position (1, 1, H, W)
    and (H, W), per-image (N, 1, 1, 1), per-sample (C, H, W), a full-size NCHW placeholder, a
    scalar; a depthwise convolution; a select on a comparison; the convolution's own result and
    its source as targets."""
    c = lambda a: g.constant(np.asarray(a, dtype))
    n, _, hh, ww = x.shape
    y = _conv(g, x, _w(6, 4), dtype=dtype)
    a = y * c(RNG.random((1, 1, hh, ww))) + c(RNG.random((hh, ww)))
    # both branches are 0 where a = 0.25, so float16 rounding that flips the comparison moves
    # the result by a rounding error only (the float32 reference picks the other branch there)
    a0 = a - c(0.25)
    b = g.select(a > c(0.25), a0 * c(RNG.random((n, 1, 1, 1))), a0 * c(RNG.random((6, hh, ww))))
    d = _conv(g, g.maximum(b + r, c(-0.5)), _w(6, 1), groups=6, dtype=dtype)
    return [g.sigmoid(d) * c(2.0), y, b]


def nhwc_net(g, x, dtype):
    """A graph built channels-last (NHWC front ends, HWIO weights): its own transposes around the
    convolutions and the pool meet the plan's; bias rows broadcast along C."""
    c = lambda a: g.constant(np.asarray(a, dtype))
    hwio = lambda o, i: np.ascontiguousarray(_w(o, i, dtype=dtype).transpose(2, 3, 1, 0))
    h = g.relu(g.convolution_2d(x, c(hwio(8, 3)), padding=[1] * 4) + c(RNG.random(8)))
    p = g.max_pooling_2d(h, kernel_sizes=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])
    y = g.convolution_2d(p, c(hwio(8, 8)), padding=[1] * 4) * c(RNG.random(8) + 0.5)
    return [g.relu(y + p), h]


def nhwc_operand_net(g, x, r, dtype):
    """An NHWC graph whose elementwise ops between convolutions meet every operand shape against
    (N, H, W, C): per-channel (C,), per-position (H, W, 1), per-image (N, 1, 1, 1), a full-size
    NHWC placeholder, a scalar; a select; a conv result, a pool result and an intermediate as
    targets; a reduction reading an NCHW-held value."""
    c = lambda a: g.constant(np.asarray(a, dtype))
    n, hh, ww, _ = x.shape
    hwio = lambda o, i: np.ascontiguousarray(_w(o, i, dtype=dtype).transpose(2, 3, 1, 0))
    y = g.convolution_2d(x, c(hwio(6, 4)), padding=[1] * 4)
    a = y * c(RNG.random(6)) + c(RNG.random((hh, ww, 1)))
    b = g.select(a > c(0.25), a * c(RNG.random((n, 1, 1, 1))), a + r)
    p = g.avg_pooling_2d(b, kernel_sizes=[2, 2], strides=[1, 1], padding=[0, 1, 0, 1])
    d = g.depthwise_convolution_2d(g.maximum(p, c(-0.5)), c(RNG.random((3, 3, 6, 1)).astype(dtype)), padding=[1] * 4)
    return [g.sigmoid(d) * c(2.0), y, b, g.reduction_sum(a, axes=[1, 2])]


def _values(dtype):
    return {"residual": [RNG.standard_normal((2, 3, 17, 15)).astype(dtype)],
            "operands": [RNG.standard_normal((3, 4, 9, 11)).astype(dtype),
                         RNG.standard_normal((3, 6, 9, 11)).astype(dtype)],
            "nhwc": [RNG.standard_normal((2, 9, 11, 3)).astype(dtype)],
            "nhwc_operands": [RNG.standard_normal((3, 9, 11, 4)).astype(dtype),
                              RNG.standard_normal((3, 9, 11, 6)).astype(dtype)]}


NETS = {"residual": residual_net, "operands": operand_net, "nhwc": nhwc_net, "nhwc_operands": nhwc_operand_net}


def _run(name, dtype, device):
    global RNG
    RNG = np.random.default_rng(7)  # the same values and weights for every plan
    vals = _values(dtype)[name]
    g = mg.Graph()
    ph = [g.placeholder(v.shape, mg.as_dtype(v.dtype)) for v in vals]
    outs = NETS[name](g, *ph, dtype)
    exe = g.compile({p: (v.shape, mg.as_dtype(v.dtype)) for p, v in zip(ph, vals)}, outs, device=device)
    return [np.asarray(o) for o in exe.run(vals)], exe.memory_plan()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", sorted(NETS))
def test_cpu_channels_last_plan_gives_the_same_bits(monkeypatch, name, dtype):
    monkeypatch.delenv("MPSGRAPH_CPU_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("MPSGRAPH_CPU_CHANNELS_FIRST", "0")  # the graph as built
    want, plan = _run(name, dtype, "cpu")
    before = [p for p in plan if p["op"] == "transpose"]
    assert bool(before) == name.startswith("nhwc")  # only the NHWC front ends transpose in the usual plan
    monkeypatch.setenv("MPSGRAPH_CPU_CHANNELS_LAST", "1")
    got, plan = _run(name, dtype, "cpu")
    after = [p for p in plan if p["op"] == "transpose"]
    assert after, "the plan made no NHWC values"
    if name.startswith("nhwc"):  # the graph's own transposes met the plan's and cancelled
        assert len(after) < len(before), (before, after)
    # pooling reads the NHWC values as they are
    assert not [p for p in plan if p["op"] == "transpose" and "pooling" in p["node"]]
    for w, o in zip(want, got):
        assert o.dtype == w.dtype and o.shape == w.shape
        np.testing.assert_array_equal(o, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", ["nhwc", "nhwc_operands"])
def test_cpu_channels_first_plan_cancels_nhwc_transposes(monkeypatch, name, dtype):
    """The CPU's kernels run NCHW: an NHWC graph keeps its values NCHW between convolutions and
    pools (on by default), bit for bit the graph as built, with only the edges transposed."""
    monkeypatch.delenv("MPSGRAPH_CPU_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("MPSGRAPH_CPU_CHANNELS_FIRST", "0")
    want, plan = _run(name, dtype, "cpu")
    before = [p for p in plan if p["op"] == "transpose"]
    monkeypatch.setenv("MPSGRAPH_CPU_CHANNELS_FIRST", "1")
    got, plan = _run(name, dtype, "cpu")
    after = [p for p in plan if p["op"] == "transpose"]
    if name == "nhwc":  # (the other's many targets each need one back)
        assert len(after) < len(before), (before, after)
    # what stays: the source into NCHW, and each target (or NCHW-held operand) back to NHWC
    own = [p for p in after if not p["node"].endswith(("/back_to_nhwc", "/operand_nchw"))]
    assert len(own) == 1 and own[0]["node"].startswith("convolution_2d_0/"), after
    for w, o in zip(want, got):
        assert o.dtype == w.dtype and o.shape == w.shape
        np.testing.assert_array_equal(o, w)


needs_cuda = pytest.mark.skipif(not DEVICE.startswith("cuda") or not mg.Device(DEVICE).available,
                                reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("name", sorted(NETS))
def test_cuda_half_network_is_planned_channels_last(monkeypatch, name):
    monkeypatch.setenv("MPSGRAPH_CUDA_CHANNELS_LAST", "1")
    got, plan = _run(name, np.float16, DEVICE)
    ref, _ = _run(name, np.float32, "cpu")
    for r, o in zip(ref, got):
        np.testing.assert_allclose(o.astype(np.float32), r, rtol=2e-2, atol=2e-2)
    # the transposes beside each convolution, its weights' included (stored OHWI), are absorbed
    # (views); only those at the edges, to targets and from NCHW operands, copy
    beside = [p for p in plan if p["op"] == "transpose"
              and p["node"].endswith(("/from_nhwc", "/to_nhwc", "/weights_from_ohwi"))]
    assert any(p["node"].endswith("/weights_from_ohwi") for p in beside)
    assert beside and all(p["storage"] == "view" for p in beside), beside
    assert not [p for p in plan if p["op"] == "transpose" and "pooling" in p["node"]]
    monkeypatch.setenv("MPSGRAPH_CUDA_CHANNELS_LAST", "0")
    plain, plan = _run(name, np.float16, DEVICE)
    assert bool([p for p in plan if p["op"] == "transpose"]) == name.startswith("nhwc")
    for p_, o in zip(plain, got):
        np.testing.assert_allclose(o.astype(np.float32), p_.astype(np.float32), rtol=1e-2, atol=1e-2)
