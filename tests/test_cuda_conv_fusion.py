"""Dense float16/bfloat16 convolutions on channels-last buffers whose result's one reader is an
elementwise group of scale/shift, ReLU, clamp and residual additions run as one cuDNN operation
graph on CUDA (the group's values stay in float inside it). Checked against a float64 numpy
reference, against the CPU, and against the unfused steps (MPSGRAPH_CUDA_CUDNN_FUSION=0) within
rounding; a fed buffer cuDNN's alignment refuses takes the unfused steps. Skips where no GPU is
present."""
import os

import numpy as np
import pytest

import mpsgraph as mg
from test_cuda_conv import TOL, _np, conv_ref
from test_cuda_depthwise import _run_flagged

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

VARIANTS = ["bn_relu", "bn_residual_relu", "clamp6", "stride2", "nchw", "fed_weights", "also_target"]


def _graph(dtype, variant, n=2, hw=(10, 9), c=16, o=32):
    """conv -> * scale + shift -> [+ residual] -> relu (or clamp 0..6); NHWC unless `nchw`, where a
    first convolution + relu (reading the NCHW source: not fused) feeds the tested one."""
    dt = mg.as_dtype(dtype)
    nchw = variant == "nchw"
    stride = 2 if variant == "stride2" else 1
    rng = np.random.default_rng(21)
    xs = (n, c) + hw if nchw else (n,) + hw + (c,)
    oh, ow = [(d + 2 - 3) // stride + 1 for d in hw]
    ys = (n, o, oh, ow) if nchw else (n, oh, ow, o)
    per_channel = (1, o, 1, 1) if nchw else (o,)
    wv = rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)
    g = mg.Graph()
    x = g.placeholder(xs, dt)
    feeds = {x: _np(rng.standard_normal(xs), dtype)}
    feeds[x].reshape(-1)[7] = np.nan
    src, src64 = x, feeds[x].astype(np.float64)
    if nchw:
        w0 = _np(rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c), dtype)
        src = g.relu(g.convolution_2d(x, g.constant(w0), padding=[1, 1, 1, 1], data_layout="NCHW",
                                      weights_layout="OIHW"))
        src64 = np.maximum(conv_ref(src64, w0.astype(np.float64), [1, 1], [1, 1], [1, 1, 1, 1], 1), 0)
    if variant == "fed_weights":
        w = g.placeholder(wv.shape, dt)
        feeds[w] = _np(wv, dtype)
    else:
        w = g.constant(_np(wv, dtype))
    y = g.convolution_2d(src, w, strides=[stride, stride], padding=[1, 1, 1, 1], data_layout="NCHW" if nchw else "NHWC",
                         weights_layout="OIHW", name="conv")
    scale = _np(rng.uniform(0.5, 1.5, per_channel), dtype)
    shift = _np(rng.standard_normal(per_channel), dtype)
    a = y * g.constant(scale) + g.constant(shift)
    res = None
    if variant == "bn_residual_relu":
        r = g.placeholder(ys, dt)
        feeds[r] = _np(rng.standard_normal(ys), dtype)
        res = feeds[r]
        a = a + r
    if variant == "clamp6":
        a = g.clamp(a, g.constant(_np(np.array(0.0), dtype)), g.constant(_np(np.array(6.0), dtype)))
    else:
        a = g.relu(a)
    targets = [a, y] if variant == "also_target" else [a]

    # float64 reference
    ref = conv_ref(src64 if nchw else src64.transpose(0, 3, 1, 2), _np(wv, dtype).astype(np.float64),
                   [stride, stride], [1, 1], [1, 1, 1, 1], 1)
    s64, b64 = scale.astype(np.float64).reshape(1, o, 1, 1), shift.astype(np.float64).reshape(1, o, 1, 1)
    want = ref * s64 + b64
    if res is not None:
        want = want + res.astype(np.float64).transpose(0, 3, 1, 2)
    want = np.clip(want, 0, 6) if variant == "clamp6" else np.maximum(want, 0)  # NaN stays NaN
    if not nchw:
        want = want.transpose(0, 2, 3, 1)
    return g, feeds, targets, want, 9 * c * (2 if nchw else 1)


def conv_steps(exe):
    """The convolutions that run as steps of their own (their result goes to memory)."""
    return len({e["node"] for e in exe.memory_plan() if e["op"] == "convolution"})


def _compile(g, feeds, targets):
    return g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, targets, device="cuda")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_convolution_matches_reference(dtype, variant):
    g, feeds, targets, want, k = _graph(dtype, variant)
    exe = _compile(g, feeds, targets)
    got = [np.asarray(r).astype(np.float64) for r in exe.run([feeds[t] for t in feeds])]
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got[0], want, rtol=rtol, atol=atol * np.sqrt(k))
    cpu = g.run(feeds, targets, device="cpu")
    for t, r in zip(targets, got):
        np.testing.assert_allclose(r, cpu[t].numpy().astype(np.float64), rtol=rtol, atol=atol * np.sqrt(k))
    # fused: the tested convolution has no step of its own (its result never goes to memory)
    unfused = (variant == "also_target") + (variant == "nchw")
    assert conv_steps(exe) == unfused, exe.memory_plan()


def test_scale_without_activation_and_sub_div_ops():
    """Other pointwise ops cuDNN expresses: -((c * conv - a) / b), the broadcast operand first;
    a maximum after it is not taken (cuDNN's MAX drops NaN), so that group stays unfused."""
    dtype = "float16"
    dt = mg.as_dtype(dtype)
    rng = np.random.default_rng(5)
    g = mg.Graph()
    x = g.placeholder((1, 6, 7, 8), dt)
    wv = _np(rng.standard_normal((16, 8, 3, 3)) / 8, dtype)
    y = g.convolution_2d(x, g.constant(wv), padding=[1, 1, 1, 1], data_layout="NHWC", weights_layout="OIHW")
    av = _np(rng.standard_normal(16), dtype)
    bv, cv = _np(rng.uniform(1, 2, 16), dtype), _np(rng.uniform(1, 2, 16), dtype)
    z = -((g.constant(cv) * y - g.constant(av)) / g.constant(bv))
    xv = _np(rng.standard_normal((1, 6, 7, 8)), dtype)
    ref = conv_ref(xv.astype(np.float64).transpose(0, 3, 1, 2), wv.astype(np.float64), [1, 1], [1, 1], [1, 1, 1, 1], 1)
    want = -((cv.astype(np.float64) * ref.transpose(0, 2, 3, 1) - av.astype(np.float64)) / bv.astype(np.float64))
    for out, fused in ((z, True), (g.maximum(z, g.constant(np.array(-0.5, np.float16))), False)):
        exe = g.compile({x: ((1, 6, 7, 8), dt)}, [out], device="cuda")
        got = np.asarray(exe.run([xv])[0]).astype(np.float64)
        np.testing.assert_allclose(got, want if fused else np.maximum(want, -0.5), rtol=2e-2, atol=2e-2 * 9)
        assert conv_steps(exe) == (0 if fused else 1), exe.memory_plan()


_SCRIPT = (
    "import sys, numpy as np, mpsgraph as mg\n"
    "sys.path.insert(0, {tests!r})\n"
    "from test_cuda_conv_fusion import _graph, _compile, conv_steps\n"
    "values, steps = [], []\n"
    "for dt in ('float16', 'bfloat16'):\n"
    "    for v in ('bn_relu', 'bn_residual_relu', 'clamp6', 'nchw'):\n"
    "        g, feeds, targets, want, k = _graph(dt, v, n=3, hw=(14, 13), c=32, o=64)\n"
    "        exe = _compile(g, feeds, targets)\n"
    "        values.append(np.asarray(exe.run([feeds[t] for t in feeds])[0]).astype(np.float32).ravel())\n"
    "        steps.append(conv_steps(exe))\n"
    "with open(sys.argv[1], 'wb') as f:\n"
    "    np.savez(f, values=np.concatenate(values), steps=np.array(steps))\n")


def test_switched_off_gives_the_unfused_steps_within_rounding(tmp_path):
    script = _SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    on = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_CUDNN_FUSION": "1"}, "on")
    off = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_CUDNN_FUSION": "0"}, "off")
    np.testing.assert_array_equal(on["steps"], off["steps"] - 1)  # the tested convolution's step is gone
    fused, unfused = on["values"], off["values"]
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(unfused))
    # the unfused steps round the convolution's result to the storage type before the group
    np.testing.assert_allclose(fused, unfused, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unaligned_fed_buffers_take_the_unfused_steps(dtype):
    """A CUDA tensor fed at an offset that breaks 16-byte alignment (the source, the residual)
    gives the aligned run's values within rounding."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    g, feeds, targets, want, k = _graph(dtype, "bn_residual_relu")
    exe = _compile(g, feeds, targets)
    names = list(feeds)
    tdt = torch.float16 if dtype == "float16" else torch.bfloat16

    def shifted(a):
        flat = torch.from_numpy(np.asarray(a, np.float32)).to(tdt).cuda().reshape(-1)
        t = torch.cat([flat[:1], flat])[1:].reshape(a.shape)
        assert t.data_ptr() % 16 != 0
        return mg.TensorData(t)

    got = np.asarray(exe.run([shifted(feeds[t]) for t in names])[0]).astype(np.float64)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * np.sqrt(k))
    aligned = np.asarray(exe.run([feeds[t] for t in names])[0]).astype(np.float64)
    np.testing.assert_allclose(got, aligned, rtol=rtol, atol=atol * 3)
