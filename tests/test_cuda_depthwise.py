"""Depthwise convolutions on channels-last buffers run a generated kernel on CUDA (16-byte packs
of channels, a few outputs of a row per thread), and compute the elementwise group that is the
only reader of their result in the same pass (its buffer is never written). Checked against a
float64 numpy reference, against the CPU for the fused groups, and bit for bit against the
unfused kernels. Skips where no GPU is present."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mpsgraph as mg
from test_cuda_conv import TOL, _np, conv_ref

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

# (N, H, W, C), (kh, kw), strides, dilation, padding (top, bottom, left, right), channel multiplier
CASES = [
    ((2, 9, 10, 16), (3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),  # 10 columns: a partial group of 4 outputs
    ((2, 9, 11, 16), (3, 3), [2, 2], [1, 1], [1, 1, 1, 1], 1),
    ((1, 7, 7, 32), (5, 5), [1, 1], [1, 1], [2, 2, 2, 2], 1),
    ((2, 8, 11, 8), (3, 3), [2, 1], [2, 2], [0, 1, 1, 0], 1),   # dilated, asymmetric padding
    ((3, 5, 6, 24), (3, 1), [1, 1], [1, 1], [1, 1, 0, 0], 1),
    ((1, 9, 9, 8), (7, 7), [1, 2], [1, 1], [3, 3, 3, 3], 1),
    ((2, 6, 6, 12), (3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),  # 12 channels: whole packs in float32 only
    ((1, 6, 5, 8), (9, 9), [1, 1], [1, 1], [4, 4, 4, 4], 1),   # larger than 7x7: cuDNN
    ((2, 6, 6, 8), (3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 2),   # two outputs per channel: cuDNN
]


def _takes(case, dtype):
    (n, h, w, c), k, s, d, p, mult = case
    return mult == 1 and max(k) <= 7 and c % (16 // np.dtype(np.float32 if dtype == "float32" else np.float16).itemsize) == 0


def _dw_graph(case, dtype, name="dw"):
    (n, h, w, c), k, s, d, p, mult = case
    dt = mg.as_dtype(dtype)
    g = mg.Graph()
    x = g.placeholder((n, h, w, c), dt)
    # OIHW, one input channel per group: cuDNN needs no weights copy (whose scratch could have the
    # size of the generated kernel's float weights)
    wt = g.placeholder((c * mult, 1, k[0], k[1]), dt)
    y = g.convolution_2d(x, wt, strides=s, dilation_rates=d, padding=p, groups=c, data_layout="NHWC",
                         weights_layout="OIHW", name=name)
    rng = np.random.default_rng(11)
    feeds = {x: _np(rng.standard_normal((n, h, w, c)), dtype), wt: _np(rng.standard_normal(wt.shape) * 0.5, dtype)}
    return g, x, wt, y, feeds


def _weights_scratch(exe, nbytes):
    """Whether the convolution's step has the generated kernel's float weights in scratch."""
    return any(e["op"] == "convolution" and e["storage"] == "scratch" and e["nbytes"] == nbytes for e in exe.memory_plan())


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_depthwise_matches_reference(case, dtype):
    (n, h, w, c), k, s, d, p, mult = case
    g, x, wt, y, feeds = _dw_graph(case, dtype)
    exe = g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, [y], device="cuda")
    got = np.asarray(exe.run([feeds[x], feeds[wt]])[0]).astype(np.float64)
    xv = feeds[x].astype(np.float64).transpose(0, 3, 1, 2)
    wv = feeds[wt].astype(np.float64)
    want = conv_ref(xv, wv, s, d, p, c).transpose(0, 2, 3, 1)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * np.sqrt(k[0] * k[1]))
    # the generated kernel's float weights in scratch: there where it takes the convolution
    assert _weights_scratch(exe, c * k[0] * k[1] * 4) == _takes(case, dtype), exe.memory_plan()


def _epilogue_graph(dtype, shape=(2, 10, 9, 16), stride=1, residual=False, also_target=False, twice=False):
    n, h, w, c = shape
    dt = mg.as_dtype(dtype)
    g = mg.Graph()
    x = g.placeholder(shape, dt)
    wt = g.placeholder((3, 3, 1, c), dt)
    sc, sh = g.placeholder((c,), dt), g.placeholder((c,), dt)
    y = g.convolution_2d(x, wt, strides=[stride, stride], padding=[1, 1, 1, 1], groups=c, data_layout="NHWC",
                         weights_layout="HWIO", name="dw")
    a = g.clamp(y * sc + sh, g.constant(np.array(0.0, np.float32)).cast(dt), g.constant(np.array(6.0, np.float32)).cast(dt))
    if residual:
        a = a + x
    rng = np.random.default_rng(12)
    feeds = {x: _np(rng.standard_normal(shape) * 2, dtype), wt: _np(rng.standard_normal((3, 3, 1, c)), dtype),
             sc: _np(rng.standard_normal(c), dtype), sh: _np(rng.standard_normal(c), dtype)}
    feeds[x].reshape(-1)[5] = np.nan  # NaNs go through the epilogue as through the unfused kernels
    targets = [a]
    if also_target:
        targets.append(y)
    if twice:
        targets.append(g.relu(y))
    return g, feeds, targets


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("variant", ["plain", "stride2", "residual", "also_target", "twice"])
def test_depthwise_computes_the_group_after_it(dtype, variant):
    kw = dict(stride=2 if variant == "stride2" else 1, residual=variant == "residual", also_target=variant == "also_target",
              twice=variant == "twice")
    g, feeds, targets = _epilogue_graph(dtype, **kw)
    exe = g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, targets, device="cuda")
    got = exe.run([feeds[t] for t in feeds])
    want = g.run(feeds, targets, device="cpu")
    rtol, atol = TOL[dtype]
    for t, r in zip(targets, got):
        np.testing.assert_allclose(np.asarray(r).astype(np.float64), want[t].numpy().astype(np.float64), rtol=rtol,
                                   atol=atol * 3)
    # fused: the convolution has no step of its own, the group's step has the weights' scratch
    plan = exe.memory_plan()
    fused = variant in ("plain", "stride2", "residual")
    assert (not any(e["op"] == "convolution" for e in plan)) == fused, plan
    assert any(e["storage"] == "scratch" and e["nbytes"] == 16 * 9 * 4 for e in plan), plan


def _run_flagged(tmp_path, script, env, tag):
    path = str(tmp_path / f"{tag}.npy")
    p = subprocess.run([sys.executable, "-c", script, path], env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return np.load(path)


_SCRIPT = (
    "import sys, numpy as np, mpsgraph as mg\n"
    "sys.path.insert(0, {tests!r})\n"
    "from test_cuda_depthwise import _epilogue_graph\n"
    "out = []\n"
    "for dt in ('float16', 'bfloat16', 'float32'):\n"
    "    for st, res in ((1, True), (2, False)):\n"
    "        g, feeds, targets = _epilogue_graph(dt, shape=(2, 14, 13, 24), stride=st, residual=res)\n"
    "        r = g.run(feeds, targets, device='cuda')\n"
    "        out.append(np.asarray(r[targets[0]]).astype(np.float32).ravel())\n"
    "np.save(sys.argv[1], np.concatenate(out))\n")


def test_depthwise_epilogue_gives_the_bits_of_the_unfused_kernels(tmp_path):
    script = _SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    fused = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_CONV_EPILOGUES": "1"}, "on")
    unfused = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_CONV_EPILOGUES": "0"}, "off")
    # the same bits, NaNs aside: a NaN's payload may differ (the GPU's arithmetic gives its own)
    nan = np.isnan(unfused)
    np.testing.assert_array_equal(np.isnan(fused), nan)
    np.testing.assert_array_equal(fused[~nan].view(np.uint32), unfused[~nan].view(np.uint32))


def test_depthwise_switched_off_runs_cudnn(tmp_path):
    """MPSGRAPH_CUDA_DEPTHWISE=0: the convolutions go back to cuDNN (no fused group); the values
    agree with the generated kernel's within rounding."""
    script = _SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    ours = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_DEPTHWISE": "1"}, "on")
    cudnn = _run_flagged(tmp_path, script, {"MPSGRAPH_CUDA_DEPTHWISE": "0"}, "off")
    np.testing.assert_allclose(ours, cudnn, rtol=8e-2, atol=8e-2 * 3)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_unaligned_source_takes_the_element_access_kernel(dtype):
    """A CUDA tensor fed at an offset that breaks 16-byte alignment (the convolution's source and
    the residual operand) gives the aligned run's bits."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    g, feeds, targets = _epilogue_graph(dtype, residual=True)
    names = list(feeds)
    exe = g.compile({t: (v.shape, mg.as_dtype(v.dtype)) for t, v in feeds.items()}, targets, device="cuda")
    xv = feeds[names[0]]
    flat = torch.from_numpy(np.concatenate([xv.ravel()[:1], xv.ravel()])).cuda()
    shifted_x = flat[1:].reshape(xv.shape)
    assert shifted_x.data_ptr() % 16 != 0
    shifted = np.asarray(exe.run([mg.TensorData(shifted_x)] + [feeds[t] for t in names[1:]])[0]).astype(np.float32)
    aligned = np.asarray(exe.run([feeds[t] for t in names])[0]).astype(np.float32)
    np.testing.assert_array_equal(shifted, aligned)  # NaN positions too
