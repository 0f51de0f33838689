"""The CPU runs the front of a batched network one image at a time, one image per thread
(cpp/backends/cpu/image_split.h): layers whose activations outweigh their weights, compiled
for one image, then the rest of the graph over the batch. Results must not change: each is
checked against PyTorch in float64, and the front's values against the same graph built for
one image and run alone."""
import contextlib
import os

import numpy as np
import pytest
import torch

import mpsgraph as mg
from concurrency import run_concurrently
from fusion_helpers import threads as _threads

C, E, H = 16, 64, 40  # an inverted residual block: 16 -> 64 -> depthwise -> 16 channels at 40x40
CLASSES = 300


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _params(seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s, scale=0.2: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    return {"w1": f(E, C, 1, 1), "b1": f(E, 1, 1), "wd": f(E, 1, 3, 3, scale=0.3), "bd": f(E, 1, 1),
            "w2": f(C, E, 1, 1), "b2": f(C, 1, 1), "fc": f(C, CLASSES, scale=0.5)}


def _block(g, x, p, const, bias2=None):
    """MobileNetV2's inverted residual (ReLU6 after the expansion and the depthwise layer, the
    residual added after the projection), then global average pooling and a classifier."""
    nchw = dict(data_layout="NCHW", weights_layout="OIHW")
    relu6 = lambda t: g.clamp(t, g.constant(0.0), g.constant(6.0))  # noqa: E731
    h = relu6(g.convolution_2d(x, const(p["w1"]), **nchw) + const(p["b1"]))
    h = relu6(g.depthwise_convolution_2d(h, const(p["wd"].reshape(1, E, 3, 3)), padding=[1, 1, 1, 1], **nchw)
              + const(p["bd"]))
    y = g.convolution_2d(h, const(p["w2"]), **nchw) + (bias2 if bias2 is not None else const(p["b2"])) + x
    pooled = g.reshape(g.mean(y, axes=[2, 3]), (-1, C))
    return y, g.matmul(pooled, const(p["fc"]))


def _torch_block(x, p):
    t = {k: torch.from_numpy(v).double() for k, v in p.items()}
    xt = torch.from_numpy(x).double()
    h = torch.clamp(torch.nn.functional.conv2d(xt, t["w1"]) + t["b1"], 0, 6)
    h = torch.clamp(torch.nn.functional.conv2d(h, t["wd"], padding=1, groups=E) + t["bd"], 0, 6)
    y = torch.nn.functional.conv2d(h, t["w2"]) + t["b2"] + xt
    return y.numpy(), (y.mean(dim=(2, 3)) @ t["fc"]).numpy()


def _compile(batch, p, targets="both", variables=False):
    g = mg.Graph()
    x = g.placeholder((batch, C, H, H), mg.float32)
    const = (lambda v: g.variable(v)) if variables else g.constant
    y, logits = _block(g, x, p, const)
    outs = {"both": [y, logits], "logits": [logits], "twice": [logits, y, y]}[targets]
    return g.compile({x: ((batch, C, H, H), mg.float32)}, outs, device="cpu")


def _image_entries(exe):
    return [e for e in exe.memory_plan() if e["storage"].startswith("image ")]


def _close(got, want):
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale)


@pytest.mark.parametrize("batch,threads,split", [(4, 1, True), (4, 2, True), (5, 2, True), (8, 2, True),
                                                 (3, 2, False), (1, 2, False)])
def test_front_runs_per_image_and_matches_torch(batch, threads, split):
    """The front (the block and the pooling) runs one image at a time where the images spread
    evenly over the threads (5 on 2 is even enough, 3 is not): its values are the bits of the
    same graph built for one image and run on one thread; both outputs match PyTorch in float64,
    as do those of the graph compiled with the split switched off."""
    p = _params()
    x = np.random.default_rng(batch).standard_normal((batch, C, H, H)).astype(np.float32)
    want_y, want_logits = _torch_block(x, p)
    with _threads(threads):
        exe = _compile(batch, p)
        y, logits = (np.asarray(v) for v in exe.run([x]))
        with _env(MPSGRAPH_CPU_IMAGE_SPLIT="0"):
            off = _compile(batch, p)
        y_off, logits_off = (np.asarray(v) for v in off.run([x]))
    assert bool(_image_entries(exe)) == split
    assert not _image_entries(off)
    for got_y, got_logits in ((y, logits), (y_off, logits_off)):
        _close(got_y, want_y)
        _close(got_logits, want_logits)
    if split:
        with _threads(1):
            one = _compile(1, p)
            for i in range(batch):
                np.testing.assert_array_equal(np.asarray(one.run([x[i:i + 1]])[0]), y[i:i + 1])
        # one image's buffers: the expansion's output (E channels) is the largest
        assert max(e["nbytes"] for e in _image_entries(exe)) <= E * H * H * 4


def test_targets_inside_the_front_repeated_or_absent():
    """A front value asked for twice is written to both outputs; with only the classifier's
    output asked for, the front's values live in the split's own buffer."""
    p = _params(1)
    x = np.random.default_rng(7).standard_normal((4, C, H, H)).astype(np.float32)
    want_y, want_logits = _torch_block(x, p)
    with _threads(2):
        twice = _compile(4, p, "twice")
        only = _compile(4, p, "logits")
        for _ in range(2):  # the buffers are reused by the next run
            logits, y1, y2 = (np.asarray(v) for v in twice.run([x]))
            (logits_only,) = (np.asarray(v) for v in only.run([x]))
            _close(logits, want_logits)
            _close(logits_only, want_logits)
            _close(y1, want_y)
            np.testing.assert_array_equal(y1, y2)
    assert _image_entries(twice) and _image_entries(only)


def test_front_reads_variables_and_whole_feeds():
    """Weights held in variables are read by every image's run (a new value is seen by the next
    run), and a placeholder without the batch (a bias fed at run time, fed first: its dim 0 is
    not the batch) is read whole."""
    p = _params(2)
    x = np.random.default_rng(3).standard_normal((4, C, H, H)).astype(np.float32)
    g = mg.Graph()
    pb = g.placeholder((C, 1, 1), mg.float32)
    px = g.placeholder((4, C, H, H), mg.float32)
    variables = {}

    def const(v):
        variables[id(v)] = g.variable(v)
        return variables[id(v)]

    y, logits = _block(g, px, p, const, bias2=pb)
    with _threads(2):
        exe = g.compile({pb: ((C, 1, 1), mg.float32), px: (x.shape, mg.float32)}, [y, logits], device="cpu")
        assert _image_entries(exe)
        got_y, got_logits = (np.asarray(v) for v in exe.run([p["b2"], x]))
        _close(got_y, _torch_block(x, p)[0])
        _close(got_logits, _torch_block(x, p)[1])
        p2 = dict(p, w1=p["w1"] * -0.5, b2=p["b2"] + 1)
        g.set_variable(variables[id(p["w1"])], p2["w1"])
        got_y, got_logits = (np.asarray(v) for v in exe.run([p2["b2"], x]))
        _close(got_y, _torch_block(x, p2)[0])
        _close(got_logits, _torch_block(x, p2)[1])


def test_ops_across_the_batch_stay_out_of_the_front():
    """Values that mix the images end the front, though their shapes keep the batch as dim 0: a
    mean over the batch axis (of a tensor with as many channels as images), a constant with a
    value per image, a pooling window along the batch axis. What follows runs over the batch."""
    p = _params(4)
    N, K, S = 8, 8, 48  # K channels after the block, as many as images; S: 48x48 images
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, C, S, S)).astype(np.float32)
    wa = (rng.standard_normal((K, C, 1, 1)) * 0.3).astype(np.float32)
    wo = (rng.standard_normal((K, K, 1, 1)) * 0.3).astype(np.float32)
    per_image = rng.standard_normal((N, 1, 1, 1)).astype(np.float32)
    nchw = dict(data_layout="NCHW", weights_layout="OIHW")
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    y, _ = _block(g, px, p, g.constant)
    a = g.convolution_2d(y, g.constant(wa), **nchw)
    across = g.mean(a, axes=[0], keep_dims=False)  # (K, S, S): broadcast against (N, K, S, S)
    per = a + g.constant(per_image)
    pooled = g.max_pooling_4d(a, kernel_sizes=[2, 1, 1, 1], padding=[0, 1, 0, 0, 0, 0, 0, 0])
    out = g.convolution_2d(a + across + per + pooled, g.constant(wo), **nchw)
    with _threads(2):
        exe = g.compile({px: (x.shape, mg.float32)}, [out], device="cpu")
        got = np.asarray(exe.run([x])[0])
    assert _image_entries(exe)
    at = torch.nn.functional.conv2d(torch.from_numpy(_torch_block(x, p)[0]), torch.from_numpy(wa).double())
    pooled_t = torch.maximum(at, torch.cat([at[1:], at[-1:]]))  # each image's and the next one's
    summed = at + at.mean(dim=0) + (at + torch.from_numpy(per_image).double()) + pooled_t
    want = torch.nn.functional.conv2d(summed, torch.from_numpy(wo).double()).numpy()
    _close(got, want)


def test_split_executables_from_several_python_threads():
    """Two split executables and a plain one, each run from its own Python thread at once: the
    pool takes one batch of images at a time, and every run gives its first run's bits."""
    p = _params(5)
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal((4, C, H, H)).astype(np.float32) for _ in range(3)]
    with _threads(2):
        exes = [_compile(4, p, "logits"), _compile(4, p, "logits"), _compile(1, p, "logits")]
        assert _image_entries(exes[0]) and not _image_entries(exes[2])
        firsts = [np.asarray(exes[0].run([xs[0]])[0]), np.asarray(exes[1].run([xs[1]])[0]),
                  np.asarray(exes[2].run([xs[2][:1]])[0])]

        def work(k):
            for _ in range(20):
                got = np.asarray(exes[k].run([xs[k] if k < 2 else xs[k][:1]])[0])
                np.testing.assert_array_equal(got, firsts[k])

        run_concurrently(work, [(0,), (1,), (2,)])
    _close(firsts[0], _torch_block(xs[0], p)[1])


def test_nhwc_network_front():
    """An NHWC network (MPSGraph's default layout): the transposes the CPU keeps at the graph's
    edges keep the batch axis first, so they run per image with the layers between them."""
    p = _params(6)
    x = np.random.default_rng(11).standard_normal((4, H, H, C)).astype(np.float32)
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    hwio = lambda w: g.constant(np.ascontiguousarray(w.transpose(2, 3, 1, 0)))  # noqa: E731
    bias = lambda b: g.constant(b.reshape(1, 1, -1))  # noqa: E731
    relu6 = lambda t: g.clamp(t, g.constant(0.0), g.constant(6.0))  # noqa: E731
    h = relu6(g.convolution_2d(px, hwio(p["w1"])) + bias(p["b1"]))
    h = relu6(g.depthwise_convolution_2d(h, hwio(p["wd"].transpose(1, 0, 2, 3)), padding=[1, 1, 1, 1]) + bias(p["bd"]))
    y = g.convolution_2d(h, hwio(p["w2"])) + bias(p["b2"]) + px
    with _threads(2):
        exe = g.compile({px: (x.shape, mg.float32)}, [y], device="cpu")
        got = np.asarray(exe.run([x])[0])
    assert _image_entries(exe)
    want = _torch_block(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), p)[0].transpose(0, 2, 3, 1)
    _close(got, want)
