"""The device of the tests/test_cuda_*.py files that compare a GPU with the CPU and numpy:
cuda:0, or MPSGRAPH_TEST_CUDA_DEVICE (e.g. cpu, to check the tests' own logic where no GPU is).
Modules set `pytestmark = skip_without_device` to skip where that device is absent."""
import os

import numpy as np
import pytest

import mpsgraph as mg

DEVICE = os.environ.get("MPSGRAPH_TEST_CUDA_DEVICE", "cuda:0")
skip_without_device = pytest.mark.skipif(not mg.Device(DEVICE).available,
                                         reason=f"no {DEVICE} here: {mg.Device(DEVICE).unavailable_reason}")


def run(build, values, device=DEVICE):
    """build(g, *placeholders) -> a tensor or a list of them; placeholders take the values' shapes
    and dtypes. Returns the results as numpy arrays, in a list."""
    g = mg.Graph()
    ph = [g.placeholder(v.shape, mg.as_dtype(v.dtype)) for v in values]
    outs = build(g, *ph)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    r = g.run(dict(zip(ph, values)), list(outs), device=device)
    return [np.asarray(r[o]) for o in outs]


def torch_cuda():
    """PyTorch with CUDA, or the test skips."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch
