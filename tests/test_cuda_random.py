"""Random ops on cuda:0 draw the CPU's Philox stream: the same seed gives the same uniform
numbers bit for bit, run after run of one executable (the run counter advances inside the
replayed CUDA graph); normals agree to float32 rounding. Skips without a GPU."""
import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")


def _runs(device, build, n_runs=3):
    g = mg.Graph()
    y = build(g)
    exe = g.compile({}, [y], device=device)
    return [np.array(exe.run([])[0].numpy(), copy=True) for _ in range(n_runs)]


@pytest.mark.parametrize("dt", [mg.float32, mg.float16, mg.bfloat16])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1001, 3)])
def test_uniform_same_bits_as_cpu_every_run(dt, shape):
    def build(g):
        return g.random_uniform(shape, seed=1234, dtype=dt)

    cpu, gpu = _runs("cpu", build), _runs("cuda", build)
    for c, d in zip(cpu, gpu):
        assert c.dtype == d.dtype
        np.testing.assert_array_equal(c.view(np.uint8), d.view(np.uint8))
    if np.prod(shape) > 10:
        assert not np.array_equal(gpu[0], gpu[1])  # fresh numbers each run
        assert 0.0 <= gpu[0].astype(np.float32).min() and gpu[0].astype(np.float32).max() < 1.0


def test_normal_and_dropout_follow_the_cpu():
    def build(g):
        return g.random_normal((4096,), seed=7, mean=1.0, standard_deviation=2.0)

    for c, d in zip(_runs("cpu", build, 2), _runs("cuda", build, 2)):
        np.testing.assert_allclose(d, c, rtol=1e-5, atol=1e-5)

    def drop(g):
        return g.dropout(g.constant(np.ones(5000, np.float32)), rate=0.3, seed=11)

    for c, d in zip(_runs("cpu", drop, 2), _runs("cuda", drop, 2)):
        np.testing.assert_array_equal(d, c)
