"""The CUDA backend: device selection, why cuda:0 is absent where it is, GPU TensorData
(DLPack, __cuda_array_interface__, PyTorch round trips), every registry op covered by a CUDA
kernel or a decomposition, variables and CUDA-graph replay. GPU tests skip where no GPU is
present; the op results themselves are the conformance table's (tests/test_conformance.py runs
it on cuda:0)."""
import numpy as np
import pytest

import mpsgraph as mg
from cuda_device import torch_cuda as _torch_cuda

HAS_GPU = mg.Device("cuda:0").available
gpu = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="a CUDA GPU is present")


def test_device_names():
    assert mg.cuda() == mg.Device("cuda:0") == mg.Device("cuda") == mg.Device("gpu")
    assert str(mg.cuda(1)) == "cuda:1"
    assert mg.Device("cuda", 0).kind == "cuda"


@no_gpu
def test_cuda_unavailable_says_why():
    d = mg.Device("cuda:0")
    assert not d.available
    assert d.unavailable_reason  # a build without a toolkit, no driver, or no GPU
    assert "cuda:0" not in [str(x) for x in mg.devices()]
    g = mg.Graph()
    x = g.placeholder((2,), mg.float32)
    with pytest.raises(mg.GraphRuntimeError, match="cuda:0"):
        g.run({x: np.ones(2, np.float32)}, [x * 2.0], device="cuda:0")


def test_default_device_env_override(monkeypatch):
    monkeypatch.setenv("MPSGRAPH_DEVICE", "cpu")
    assert mg.default_device() == mg.cpu()
    monkeypatch.delenv("MPSGRAPH_DEVICE")
    want = mg.devices()[0]
    assert mg.default_device() == want
    if HAS_GPU and not any(d.kind == "metal" for d in mg.devices()):
        assert want == mg.cuda()


def _simple():
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float32, name="x")
    y = g.relu(x) * 2.0 + 1.0
    return g, x, y


@gpu
def test_results_live_on_the_gpu_and_convert():
    g, x, y = _simple()
    xv = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    r = g.run({x: xv}, [y], device="cuda")[y]
    assert r.device == "cuda:0"
    assert r.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(r.numpy(), np.maximum(xv, 0) * 2 + 1)
    np.testing.assert_array_equal(np.asarray(r), np.maximum(xv, 0) * 2 + 1)
    cai = r.__cuda_array_interface__
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f4" and cai["data"][0] == r.data_ptr
    assert r.to("cpu").device == "cpu"


@gpu
def test_gpu_result_feeds_a_cpu_run():
    g, x, y = _simple()
    xv = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    r = g.run({x: xv}, [y], device="cuda")[y]
    g2 = mg.Graph()
    z = g2.placeholder((2, 3), mg.float32)
    w = z * 3.0
    np.testing.assert_array_equal(np.asarray(g2.run({z: r}, [w], device="cpu")[w]), r.numpy() * 3)


@gpu
def test_torch_round_trip_without_copies():
    torch = _torch_cuda()
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    td = mg.TensorData(t)
    assert td.device == "cuda:0" and td.data_ptr == t.data_ptr()
    g = mg.Graph()
    x = g.placeholder((3, 4), mg.float32)
    y = x * x
    r = g.run({x: t}, [y], device="cuda")[y]
    back = torch.from_dlpack(r)
    assert back.device.type == "cuda" and back.data_ptr() == r.data_ptr
    torch.testing.assert_close(back, t * t)


# ops a CUDA program keeps in its own slots (feeds, a control-flow region's arguments, constants,
# variables) instead of running a kernel, and the data-dependent op it runs between the stages of
# a run (dynamic_cuda.cpp)
_NO_KERNEL = {"placeholder", "region_argument", "constant", "read_variable", "assign_variable", "non_zero_indices"}


@pytest.mark.skipif(not hasattr(mg._core, "cuda_kernel_names"), reason="this build has no CUDA backend")
def test_every_registered_op_has_a_cuda_kernel_or_expands():
    """Issue 11: every op of the registry runs on cuda: it has a kernel, or it is a composite that
    specialisation expands into ops that have one. The kernel table is static: no GPU needed."""
    kernels = set(mg._core.cuda_kernel_names())
    schemas = mg.op_schemas()
    names = {s["name"] for s in schemas}
    missing = sorted(s["name"] for s in schemas
                     if not s["composite"] and s["name"] not in kernels and s["name"] not in _NO_KERNEL)
    assert not missing, f"ops with neither a cuda kernel nor a decomposition: {missing}"
    assert kernels <= names, f"cuda kernels for ops the registry lacks: {sorted(kernels - names)}"


@gpu
def test_float64_is_refused():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float64)
    with pytest.raises(mg.GraphTypeError, match="float64"):
        g.run({x: np.ones(3)}, [x + 1.0], device="cuda")


@gpu
def test_replay_and_memory_plan():
    g = mg.Graph()
    a = g.placeholder((64, 32), mg.float32)
    b = g.placeholder((32, 16), mg.float32)
    y = g.reduction_sum(g.tanh(a @ b) * 0.5, axes=1)
    exe = g.compile({a: ((64, 32), mg.float32), b: ((32, 16), mg.float32)}, [y], device="cuda")
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 16), np.float32)
    want = (np.tanh(av @ bv) * 0.5).sum(axis=1, keepdims=True)
    for _ in range(20):  # replays of the captured graph (outputs come back to the same buffers)
        np.testing.assert_allclose(exe.run([av, bv])[0].numpy(), want, rtol=1e-4, atol=1e-4)
    plan = exe.memory_plan()
    assert {"feed", "output"} <= {e["storage"] for e in plan}


@gpu
def test_variables_and_assign():
    g = mg.Graph()
    w = g.variable(np.ones((3,), np.float32), name="w")
    x = g.placeholder((3,), mg.float32)
    loss = g.reduction_sum(w * x, axes=0)
    grad = g.gradients(loss, [w])[w]
    step = g.assign(w, w - grad * 0.5)
    xv = np.array([1, 2, 3], np.float32)
    want = np.ones(3, np.float32)
    for _ in range(3):
        g.run({x: xv}, [loss], [step], device="cuda")
        want = want - xv * 0.5
        np.testing.assert_allclose(np.asarray(w.value), want, rtol=1e-6)


@gpu
@pytest.mark.parametrize("batched", ["1", "0"])
def test_landings_batched_or_one_memcpy_each(batched, monkeypatch):
    """A run's variable updates land on the host and in their read buffers through one batched
    copy kernel (the default) or a memcpy each (MPSGRAPH_CUDA_BATCH_LANDINGS=0): the same values over several
    runs, for sizes that are and are not whole 16-byte words, and for an assign of one variable's
    value to another that the same run updates (the batch must not race with that update)."""
    monkeypatch.setenv("MPSGRAPH_CUDA_BATCH_LANDINGS", batched)
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((64, 130)).astype(np.float32)
    h0 = rng.standard_normal(5).astype(np.float16)  # 10 bytes: no whole word
    g = mg.Graph()
    w, h = g.variable(w0, name="w"), g.variable(h0, name="h")
    a, b = g.variable(np.zeros(3, np.float32), name="a"), g.variable(np.arange(3, dtype=np.float32), name="b")
    x = g.placeholder((130,), mg.float32)
    steps = [g.assign(w, w * 0.5 + x), g.assign(h, h + g.constant(np.float16(1))), g.assign(a, b),
             g.assign(b, b + 1.0)]
    exe = g.compile({x: ((130,), mg.float32)}, [], target_operations=steps, device="cuda")
    xv = rng.standard_normal(130).astype(np.float32)
    want_w, want_h, want_a, want_b = w0.copy(), h0.copy(), np.zeros(3, np.float32), np.arange(3, dtype=np.float32)
    for _ in range(4):
        exe.run([mg.TensorData(xv)])
        want_w, want_h, want_a, want_b = want_w * 0.5 + xv, want_h + np.float16(1), want_b.copy(), want_b + 1
        np.testing.assert_array_equal(np.asarray(w.value), want_w)
        np.testing.assert_array_equal(np.asarray(h.value), want_h)
        np.testing.assert_array_equal(np.asarray(a.value), want_a)
        np.testing.assert_array_equal(np.asarray(b.value), want_b)


@gpu
@pytest.mark.parametrize("xs,ys", [((5, 7), (7, 3)), ((4, 5, 7), (7, 3)), ((4, 5, 7), (4, 7, 3)), ((2, 1, 5, 7), (3, 7, 2)),
                                   ((7,), (7, 3)), ((5, 7), (7,)), ((0, 7), (7, 3)), ((5, 0), (0, 3))])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_matmul_shapes(xs, ys, dtype):
    rng = np.random.default_rng(1)
    xv = rng.integers(-3, 4, xs).astype(np.float32)
    yv = rng.integers(-3, 4, ys).astype(np.float32)
    g = mg.Graph()
    dt = mg.as_dtype(dtype)
    x, y = g.placeholder(xs, dt), g.placeholder(ys, dt)
    z = x @ y
    if dtype == "bfloat16":
        import ml_dtypes
        feeds = {x: xv.astype(ml_dtypes.bfloat16), y: yv.astype(ml_dtypes.bfloat16)}
    else:
        feeds = {x: xv.astype(dtype), y: yv.astype(dtype)}
    r = g.run(feeds, [z], device="cuda")[z].numpy().astype(np.float64)
    np.testing.assert_array_equal(r, np.matmul(xv.astype(np.float64), yv.astype(np.float64)))


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gigaflop_gemms_are_exact_on_integers(dtype):
    """GEMMs of about 1 GFLOP (plain, batched, with the bias/ReLU epilogue): integer operands
    make cuBLASLt's float sums exact whatever its algorithm splits, so the results must be
    numpy's products rounded to the dtype, bit for bit."""
    import ml_dtypes
    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    dt = mg.as_dtype(dtype)
    rng = np.random.default_rng(7)
    for xs, ys, bias in [((1024, 512), (512, 1024), False), ((4, 256, 512), (4, 512, 1024), False),
                         ((1024, 512), (512, 1024), True)]:
        xv, yv = rng.integers(-3, 4, xs).astype(np.float64), rng.integers(-3, 4, ys).astype(np.float64)
        bv = rng.integers(-8, 9, ys[-1]).astype(np.float64)
        g = mg.Graph()
        x, y, b = g.placeholder(xs, dt), g.placeholder(ys, dt), g.placeholder((ys[-1],), dt)
        z = g.relu(x @ y + b) if bias else x @ y
        want = np.maximum(np.matmul(xv, yv) + bv, 0) if bias else np.matmul(xv, yv)
        feeds = {x: xv.astype(np_dt), y: yv.astype(np_dt)}
        if bias:
            feeds[b] = bv.astype(np_dt)
        got = g.run(feeds, [z], device="cuda")[z].numpy()
        # the float sums are exact: the product is rounded to the dtype once, and the bias sum
        # once more, unless the epilogue adds the bias before rounding
        def rounded(a):
            return a.astype(np_dt).astype(np.float64)
        once, got64 = rounded(want), got.astype(np.float64)
        if bias:
            twice = rounded(np.maximum(rounded(np.matmul(xv, yv)) + bv, 0))
            wrong = (got64 != once) & (got64 != twice)
            assert not wrong.any(), f"[{dtype}] {wrong.sum()} wrong"
        else:
            np.testing.assert_array_equal(got64, once)
