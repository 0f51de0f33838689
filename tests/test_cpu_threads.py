"""The CPU backend's thread count (mg.set_num_threads, which sizes BLAS's threads too) and
threaded GEMMs from several Python threads: results must not depend on either."""
import time

import numpy as np

import mpsgraph as mg
from concurrency import run_concurrently


def _matmul(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    g = mg.Graph()
    pa, pb = g.placeholder(a.shape, mg.float32), g.placeholder(b.shape, mg.float32)
    exe = g.compile({pa: (a.shape, mg.float32), pb: (b.shape, mg.float32)}, [pa @ pb, g.tanh(pa)], device="cpu")
    ref = a.astype(np.float64) @ b
    return exe, [a, b], ref


def test_set_num_threads_caps_and_restores():
    default = mg.get_num_threads()
    assert default >= 1
    try:
        mg.set_num_threads(1)
        assert mg.get_num_threads() == 1
        exe, feeds, ref = _matmul(300)
        y, _ = exe.run(feeds)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-4, atol=1e-3)
        mg.set_num_threads(10_000)  # capped at the pool's size
        assert mg.get_num_threads() == default
    finally:
        mg.set_num_threads(0)
    assert mg.get_num_threads() == default


def test_threaded_gemm_on_the_pool_from_several_python_threads():
    """Large GEMMs (threaded by BLAS) beside the pool's kernels, from concurrent Python
    threads, each with its own executable."""
    def work(exe, feeds, ref):
        for _ in range(3):
            y, _ = exe.run(feeds)
            np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-4, atol=1e-3)

    run_concurrently(work, [_matmul(n) for n in (256, 384, 512)])


def test_pool_short_batches_from_several_python_threads():
    """Many short parallel steps (1x1 convolutions + ReLU, each split over the pool), with pauses
    longer than the workers' spin between some runs (so they sleep and are woken), from three
    Python threads at once, each with its own executable: every run gives the first run's bits,
    which agree with float64 numpy; no run is lost or hangs."""
    rng = np.random.default_rng(7)
    ws = [(rng.standard_normal((32, 32)) * 0.2).astype(np.float32) for _ in range(10)]

    def case(seed):
        x = np.random.default_rng(seed).standard_normal((1, 32, 28, 28)).astype(np.float32)
        g = mg.Graph()
        px = g.placeholder(x.shape, mg.float32)
        h = px
        for w in ws:
            h = g.relu(g.convolution(h, g.constant(w[:, :, None, None]), strides=1, padding=0))
        ref = x[0].reshape(32, -1).astype(np.float64)
        for w in ws:
            ref = np.maximum(w.astype(np.float64) @ ref, 0)
        return g.compile({px: x}, [h], device="cpu"), x, ref.reshape(x.shape)

    def work(exe, x, ref):
        first = np.asarray(exe.run([x])[0])
        np.testing.assert_allclose(first, ref, rtol=1e-4, atol=1e-4)
        for i in range(300):
            if i % 25 == 0:
                time.sleep(0.002)
            np.testing.assert_array_equal(np.asarray(exe.run([x])[0]), first)

    run_concurrently(work, [case(s) for s in range(3)])
