"""The strided copies behind transpose, slice, reverse and broadcast on cuda:0, against numpy bit
for bit: the tiled transpose (a dim contiguous in the source, another in the result, both 16 or
longer), the 32-bit kernel with divisions by constants (every other copy under 2^31 elements),
each for 1-, 2-, 4- and 8-byte elements, odd sizes, negative strides and more batches than one
grid dimension holds. `MPSGRAPH_CUDA_FAST_COPIES=0` (read once per process) keeps the 64-bit
kernel alone; a subprocess checks that one against numpy too. Skips without a GPU."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import DEVICE, run, skip_without_device

pytestmark = skip_without_device

RNG = np.random.default_rng(11)
DTYPES = [np.uint8, np.float16, ml_dtypes.bfloat16, np.float32, np.int64, np.complex64]


def _values(shape, dt):
    if np.dtype(dt).kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dt)
    if np.dtype(dt).kind in "iu":
        return RNG.integers(0, 200, size=shape).astype(dt)
    return RNG.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 37, 41), (0, 2, 3, 1)),     # NCHW -> NHWC with 3 channels: the 32-bit kernel
    ((2, 64, 9, 17), (0, 2, 3, 1)),     # NCHW -> NHWC: tiles over (HW, C)
    ((2, 9, 17, 64), (0, 3, 1, 2)),     # NHWC -> NCHW
    ((33, 47), (1, 0)),                 # partial tiles on both edges
    ((5, 16, 16), (2, 1, 0)),
    ((3, 4, 5, 6, 7, 8), (5, 3, 1, 0, 2, 4)),
])
def test_transpose_matches_numpy(dt, shape, perm):
    x = _values(shape, dt)
    (y,) = run(lambda g, a: g.transpose(a, list(perm)), [x])
    np.testing.assert_array_equal(y, np.transpose(x, perm))


def test_transpose_with_more_batches_than_a_grid_dim():
    x = _values((70000, 16, 17), np.uint8)
    (y,) = run(lambda g, a: g.transpose(a, [0, 2, 1]), [x])
    np.testing.assert_array_equal(y, np.transpose(x, (0, 2, 1)))


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.int64], ids=lambda d: np.dtype(d).name)
def test_reversed_and_strided_views_match_numpy(dt):
    x = _values((6, 40, 35), dt)
    (a, b, c) = run(lambda g, t: [g.transpose(g.reverse(t, [1, 2]), [0, 2, 1]),
                                  g.strided_slice(t, [5, 1, 34], [0, 39, 0], [-2, 3, -5]),
                                  g.transpose(g.strided_slice(t, [0, 0, 0], [6, 40, 35], [1, 2, 1]), [2, 0, 1])], [x])
    np.testing.assert_array_equal(a, np.transpose(x[:, ::-1, ::-1], (0, 2, 1)))
    np.testing.assert_array_equal(b, x[5:0:-2, 1:39:3, 34:0:-5])
    np.testing.assert_array_equal(c, np.transpose(x[:, ::2, :], (2, 0, 1)))


def test_broadcast_and_concat_match_numpy():
    x, y = _values((1, 19, 1), np.float32), _values((4, 19, 3), np.float32)
    (b, c) = run(lambda g, a, t: [g.broadcast_to(a, [4, 19, 33]), g.concat([t, g.transpose(t, [0, 1, 2])], 2)], [x, y])
    np.testing.assert_array_equal(b, np.broadcast_to(x, (4, 19, 33)))
    np.testing.assert_array_equal(c, np.concatenate([y, y], 2))


def test_generic_kernel_matches_numpy_too():
    script = (
        "import numpy as np, mpsgraph as mg\n"
        "x = np.random.default_rng(3).standard_normal((2, 64, 9, 17)).astype(np.float16)\n"
        "g = mg.Graph(); p = g.placeholder(x.shape, mg.float16)\n"
        "ys = [g.transpose(p, [0, 2, 3, 1]), g.reverse(g.transpose(p, [1, 0, 3, 2]), [3])]\n"
        f"r = g.run({{p: x}}, ys, device='{DEVICE}')\n"
        "np.testing.assert_array_equal(np.asarray(r[ys[0]]), x.transpose(0, 2, 3, 1))\n"
        "np.testing.assert_array_equal(np.asarray(r[ys[1]]), x.transpose(1, 0, 3, 2)[..., ::-1])\n"
        "print('ok')\n")
    for flag in ("1", "0"):
        env = dict(os.environ, MPSGRAPH_CUDA_FAST_COPIES=flag)
        p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "ok", p.stderr[-2000:]
