"""Zero-copy GPU interop on cuda:0: DLPack with its stream semantics and
__cuda_array_interface__ (v3), against PyTorch, CuPy and JAX where they are installed with
CUDA, and device selection beyond cuda:0. Skips without a GPU.

Stream semantics are checked by racing: a producer queues a long chain of matmuls on one
stream and the consumer reads the result on another at once; the read must equal the
finished value (the buffer held something else before, so a read that does not wait sees
it)."""
import os

import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import torch_cuda as _torch_cuda

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

N, CHAIN = 4096, 24  # 24 matmuls of 4096 x 4096: tens of milliseconds on the GPU


def _cupy():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no GPU")
    except cp.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"CuPy cannot use the GPU: {e}")
    return cp


def _jax_gpu():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to the others
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    return jax, gpus[0]


def _twice():
    g = mg.Graph()
    x = g.placeholder((None, None), mg.float32)
    return g, x, x * 2.0


def _operand(seed):
    # entries of size 1/64: tanh(h @ a) stays well inside (-1, 1) along the whole chain
    return (np.random.default_rng(seed).standard_normal((N, N)) / 64).astype(np.float32)


# ---------------------------------------------------------------- export (mpsgraph produces)


def test_export_orders_pending_work_before_the_consumer_stream():
    torch = _torch_cuda()
    g = mg.Graph()
    x = g.placeholder((N, N), mg.float32)
    h = x
    for _ in range(CHAIN):
        h = g.tanh(h @ x)
    exe = g.compile({x: ((N, N), mg.float32)}, [h], device="cuda")
    out = exe.run([_operand(1)])[0]
    before = out.numpy()
    fut = exe.run_async([_operand(2)], out=[out])  # queued: rewrites `out` for a while
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.from_dlpack(out)  # out.__dlpack__(stream=side's handle)
        early = t.clone()  # queued on `side` right away
    side.synchronize()
    fut.result()
    final = out.numpy()
    assert t.data_ptr() == out.data_ptr
    assert not np.array_equal(final, before)
    np.testing.assert_array_equal(early.cpu().numpy(), final)


def test_torch_consumes_results_on_its_current_stream():
    torch = _torch_cuda()
    g, x, y = _twice()
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = g.run({x: xv}, [y], device="cuda")[y]
    t = torch.from_dlpack(r)  # the default stream: stream=1
    assert t.device.type == "cuda" and t.data_ptr() == r.data_ptr
    np.testing.assert_array_equal((t + 1).cpu().numpy(), xv * 2 + 1)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t2 = torch.from_dlpack(r)
        s = (t2 * 3).sum()
    side.synchronize()
    assert t2.data_ptr() == r.data_ptr and float(s) == float((xv * 6).sum())


@pytest.mark.parametrize("stream", [None, 1, 2, -1])
def test_export_takes_dlpack_stream_numbers(stream):
    g, x, y = _twice()
    r = g.run({x: np.ones((2, 2), np.float32)}, [y], device="cuda")[y]
    cap = r.__dlpack__(stream=stream, max_version=(1, 0))
    assert type(cap).__name__ == "PyCapsule"
    np.testing.assert_array_equal(r.numpy(), np.full((2, 2), 2, np.float32))


def test_export_refuses_bad_streams():
    g, x, y = _twice()
    r = g.run({x: np.ones((2, 2), np.float32)}, [y], device="cuda")[y]
    with pytest.raises(BufferError, match=r"\[TensorData\].*stream 0 .*ambiguous"):
        r.__dlpack__(stream=0)
    with pytest.raises(BufferError, match=r"\[TensorData\].*stream -2 "):
        r.__dlpack__(stream=-2)
    with pytest.raises(TypeError, match=r"\[TensorData\].*stream must be an int or None, got 'side'"):
        r.__dlpack__(stream="side")
    with pytest.raises(TypeError, match=r"\[TensorData\].*stream must be an int"):
        r.__dlpack__(stream=True)


def test_cuda_array_interface_names_its_stream():
    g, x, y = _twice()
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = g.run({x: xv}, [y], device="cuda")[y]
    cai = r.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"] == (r.data_ptr, False)
    assert isinstance(cai["stream"], int) and cai["stream"] not in (0, 1, 2)  # the backend's own stream
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f4" and cai["strides"] is None


# ---------------------------------------------------------------- import (mpsgraph consumes)


def test_import_waits_for_the_torch_producers_stream():
    torch = _torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(N, N, device="cuda", generator=gen) / 64
    c = torch.zeros(N, N, device="cuda")
    torch.cuda.synchronize()
    g, x, y = _twice()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the producer's current stream when it is asked
        h = a
        for _ in range(CHAIN):
            h = torch.tanh(h @ a)
        c.copy_(h)  # written last, long after this line returns
        td = mg.TensorData(c)
        r = g.run({x: c}, [y], device="cuda")[y]
    torch.cuda.synchronize()
    assert td.device == "cuda:0" and td.data_ptr == c.data_ptr() and not td.copied
    want = c.cpu().numpy()
    assert np.abs(want).min() > 0
    np.testing.assert_array_equal(r.numpy(), want * 2)


def test_torch_out_buffer_is_written_in_place():
    torch = _torch_cuda()
    g, x, y = _twice()
    xv = np.arange(8, dtype=np.float32).reshape(2, 4)
    dst = torch.empty(2, 4, device="cuda")
    r = g.compile({x: ((2, 4), mg.float32)}, [y], device="cuda").run([xv], out=[dst])[0]
    assert r.data_ptr == dst.data_ptr()
    np.testing.assert_array_equal(dst.cpu().numpy(), xv * 2)


# ---------------------------------------------------------------- CuPy


def test_cupy_round_trip_without_copies():
    cp = _cupy()
    g, x, y = _twice()
    a = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    td = mg.TensorData(a)
    assert td.device == "cuda:0" and td.data_ptr == a.data.ptr
    r = g.run({x: a}, [y], device="cuda")[y]
    back = cp.from_dlpack(r)
    assert back.data.ptr == r.data_ptr
    np.testing.assert_array_equal(cp.asnumpy(back), np.arange(12, dtype=np.float32).reshape(3, 4) * 2)
    via_cai = cp.asarray(r)  # __cuda_array_interface__
    assert via_cai.data.ptr == r.data_ptr
    np.testing.assert_array_equal(cp.asnumpy(via_cai), cp.asnumpy(back))


def test_import_waits_for_the_cupy_producers_stream():
    cp = _cupy()
    a = cp.asarray(_operand(3))
    c = cp.zeros((N, N), cp.float32)
    cp.cuda.Device().synchronize()
    g, x, y = _twice()
    side = cp.cuda.Stream(non_blocking=True)
    with side:
        h = a
        for _ in range(CHAIN):
            h = cp.tanh(h @ a)
        c[...] = h
        r = g.run({x: c}, [y], device="cuda")[y]
    cp.cuda.Device().synchronize()
    want = cp.asnumpy(c)
    assert np.abs(want).min() > 0
    np.testing.assert_array_equal(r.numpy(), want * 2)


# ---------------------------------------------------------------- JAX


def test_jax_round_trip_without_copies():
    jax, gpu = _jax_gpu()
    import jax.numpy as jnp
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = jax.device_put(jnp.asarray(xv), gpu)
    td = mg.TensorData(a)
    assert td.device == "cuda:0" and td.data_ptr == a.unsafe_buffer_pointer()
    g, x, y = _twice()
    r = g.run({x: a}, [y], device="cuda")[y]
    back = jnp.from_dlpack(r)
    assert back.unsafe_buffer_pointer() == r.data_ptr
    np.testing.assert_array_equal(np.asarray(back), xv * 2)


# ---------------------------------------------------------------- devices beyond cuda:0


def test_cuda1_is_refused_naming_the_limitation():
    d = mg.Device("cuda:1")
    assert not d.available
    assert "one GPU per process" in d.unavailable_reason and "CUDA_VISIBLE_DEVICES=1" in d.unavailable_reason
    g, x, y = _twice()
    with pytest.raises(mg.GraphRuntimeError, match=r"cuda:1.*CUDA_VISIBLE_DEVICES"):
        g.run({x: np.ones((2, 2), np.float32)}, [y], device="cuda:1")


def test_tensor_on_a_second_gpu_is_refused_by_name():
    torch = _torch_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    t = torch.ones(3, 3, device="cuda:1")
    with pytest.raises(mg.GraphValueError, match=r"\[TensorData\].*cuda:1.*CUDA_VISIBLE_DEVICES"):
        mg.TensorData(t)


def test_runs_on_cuda0_while_another_gpu_is_current():
    torch = _torch_cuda()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    g, x, y = _twice()
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    prev = torch.cuda.current_device()
    torch.cuda.set_device(1)
    try:
        r = g.run({x: xv}, [y], device="cuda")[y]
        t = torch.arange(6, dtype=torch.float32, device="cuda:0").reshape(2, 3)
        r2 = g.run({x: t}, [y], device="cuda")[y]
        assert torch.cuda.current_device() == 1  # the caller's device is left current
    finally:
        torch.cuda.set_device(prev)
    np.testing.assert_array_equal(r.numpy(), xv * 2)
    np.testing.assert_array_equal(r2.numpy(), xv * 2)
    assert torch.from_dlpack(r2).device == torch.device("cuda:0")
