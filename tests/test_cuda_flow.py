"""Control flow, data-dependent ops and run_async on cuda:0, against the CPU backend and numpy:
if/while/for (nested, with captured values, zero trips, variables assigned inside), loop
gradients (with and without checkpoints), errors raised inside regions, non_zero_indices of
every dtype (empty results, several blocks, special values), and run_async (results equal
run's, many in flight, out= buffers, errors through the future). Skips where no GPU is."""
import concurrent.futures
import time

import numpy as np
import pytest

import mpsgraph as mg
from conformance import np_dtype

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

GPU = "cuda:0"
RNG = np.random.default_rng(11)


def _np(t):
    return np.asarray(t.numpy())


def on_both(g, feeds, targets):
    """(cpu results, cuda results) as numpy arrays in target order."""
    c = g.run(feeds, targets, device="cpu")
    d = g.run(feeds, targets, device=GPU)
    return [_np(c[t]) for t in targets], [_np(d[t]) for t in targets]


def assert_same(feeds_list, g, targets, rtol=1e-5, atol=1e-6):
    for feeds in feeds_list:
        cpu, gpu = on_both(g, feeds, targets)
        for c, d in zip(cpu, gpu):
            assert c.dtype == d.dtype and c.shape == d.shape
            np.testing.assert_allclose(d.astype(np.float64), c.astype(np.float64), rtol=rtol, atol=atol)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- if_then_else


def test_if_takes_each_branch_with_captured_values():
    g = mg.Graph()
    x = g.placeholder((3, 4), mg.float32)
    y = g.placeholder((3, 4), mg.float32)
    pred = g.reduction_sum(x, keep_dims=False) > 0.0
    out = g.if_then_else(pred, lambda: g.matrix_multiplication(x, g.transpose(y, [1, 0])) + 1.0,
                         lambda: g.matrix_multiplication(y, g.transpose(x, [1, 0])) - 2.0)
    xv = np.abs(f32(3, 4))
    assert_same([{x: xv, y: f32(3, 4)}, {x: -xv, y: f32(3, 4)}], g, [out])


def test_nested_if_with_several_results():
    g = mg.Graph()
    x = g.placeholder((2, 2), mg.float32)
    a = g.placeholder((), mg.bool)
    b = g.placeholder((), mg.bool)

    def then():
        inner = g.if_then_else(b, lambda: (x * 2.0, x + 1.0), lambda: (x * 3.0, x - 1.0))
        return inner[0] + inner[1], g.reduction_sum(x, keep_dims=False)

    out = g.if_then_else(a, then, lambda: (x, g.reduction_maximum(x, keep_dims=False)))
    xv = f32(2, 2)
    feeds = [{x: xv, a: np.array(av), b: np.array(bv)} for av in (True, False) for bv in (True, False)]
    assert_same(feeds, g, list(out))


def test_if_result_that_is_a_captured_value_or_a_constant():
    g = mg.Graph()
    x = g.placeholder((5,), mg.int32)
    p = g.placeholder((), mg.bool)
    out = g.if_then_else(p, lambda: (x, g.constant(np.arange(5, dtype=np.int32))),
                         lambda: (x * 2, x))
    xv = np.arange(5, dtype=np.int32) - 2
    assert_same([{x: xv, p: np.array(True)}, {x: xv, p: np.array(False)}], g, list(out), rtol=0, atol=0)


# ---------------------------------------------------------------- loops


def test_for_loop_values_index_and_bounds():
    g = mg.Graph()
    x = g.placeholder((4,), mg.float32)
    lo = g.placeholder((), mg.int32)
    hi = g.placeholder((), mg.int32)
    acc, cnt = g.for_loop(lo, hi, 3, [x * 0.0, g.constant(0, mg.int32)],
                          lambda i, a, c: [a + x * g.cast(i, mg.float32), c + 1])
    feeds = [{x: f32(4), lo: np.int32(l), hi: np.int32(h)} for l, h in ((2, 11), (0, 1), (5, 5), (7, 2))]
    assert_same(feeds, g, [acc, cnt])
    r = g.run(feeds[0], [acc, cnt], device=GPU)
    np.testing.assert_allclose(_np(r[acc]), feeds[0][x] * (2 + 5 + 8), rtol=1e-5)
    assert int(_np(r[cnt])) == 3


def test_for_loop_refuses_a_non_positive_step_on_the_gpu_too():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float32)
    s = g.placeholder((), mg.int32)
    (y,) = g.for_loop(0, 4, s, [x], lambda i, v: [v + 1.0])
    with pytest.raises(mg.GraphValueError, match="step must be positive"):
        g.run({x: f32(2), s: np.int32(0)}, [y], device=GPU)
    np.testing.assert_allclose(_np(g.run({x: np.zeros(2, np.float32), s: np.int32(2)}, [y], device=GPU)[y]), [2, 2])


def test_while_loop_with_data_dependent_trip_count_and_passed_values():
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32)
    n = g.placeholder((), mg.int32)

    def before(v, k):
        return g.reduction_sum(v, keep_dims=False) < 100.0, v * 1.0, k, g.reduction_sum(v, keep_dims=True)

    def after(v, k, s):
        return [v * 1.5 + s * 0.01, k + 1]

    out = g.while_loop([x, n], before, after)
    feeds = [{x: np.abs(f32(3)) + 0.5, n: np.int32(0)}, {x: np.full(3, 200, np.float32), n: np.int32(4)}]
    assert_same(feeds, g, list(out))


def test_nested_loops_and_if_inside_a_loop():
    g = mg.Graph()
    x = g.placeholder((2, 3), mg.float32)
    m = g.placeholder((3, 3), mg.float32)

    def outer(i, v):
        (inner,) = g.for_loop(3, [v], lambda j, u: [g.tanh(g.matrix_multiplication(u, m)) + u * 0.5])
        odd = g.cast(i, mg.float32) * 0.5 - g.floor(g.cast(i, mg.float32) * 0.5) > 0.25
        return [g.if_then_else(odd, lambda: inner * 0.9, lambda: inner - 0.1)]

    (y,) = g.for_loop(5, [x], outer)
    (z,) = g.while_loop([y], lambda v: (g.reduction_maximum(g.absolute(v), keep_dims=False) > 0.05, v),
                        lambda v: [v * 0.5])
    assert_same([{x: f32(2, 3), m: f32(3, 3) * 0.5}], g, [y, z])


def test_loop_between_other_ops_runs_repeatedly_with_new_inputs():
    # the parent program launches its steps directly around the loop; the body replays its
    # own CUDA graph for the two ping-pong buffer sets
    g = mg.Graph()
    x = g.placeholder((64, 64), mg.float32)
    w = g.placeholder((64, 64), mg.float32)
    h = g.relu(g.matrix_multiplication(x, w))
    (y,) = g.for_loop(7, [h], lambda i, v: [g.tanh(g.matrix_multiplication(v, w)) + v])
    out = g.reduction_sum(y * y, axes=[1]) + 1.0
    exe_gpu = g.compile({x: ((64, 64), mg.float32), w: ((64, 64), mg.float32)}, [out], device=GPU)
    exe_cpu = g.compile({x: ((64, 64), mg.float32), w: ((64, 64), mg.float32)}, [out], device="cpu")
    for _ in range(4):
        xv, wv = f32(64, 64) * 0.1, f32(64, 64) * 0.1
        np.testing.assert_allclose(_np(exe_gpu.run([xv, wv])[0]), _np(exe_cpu.run([xv, wv])[0]), rtol=1e-4, atol=1e-4)


def test_loop_with_unknown_dims_specialised_per_shape():
    g = mg.Graph()
    x = g.placeholder((None, 2), mg.float32)
    (y,) = g.for_loop(3, [x], lambda i, v: [v + g.reduction_sum(v, axes=[0], keep_dims=True)])
    assert_same([{x: f32(n, 2)} for n in (1, 5, 0)], g, [y])


def test_variable_assigned_inside_a_loop_lands_after_the_run():
    g = mg.Graph()
    v = g.variable(np.zeros(3, np.float32), name="v")
    x = g.placeholder((3,), mg.float32)

    def body(i, acc):
        nxt = acc + g.cast(i, mg.float32)
        g.assign(v, nxt + v)
        return [nxt]

    (y,) = g.for_loop(4, [x], body)
    xv = f32(3)
    before = v * 1.0
    r = g.run({x: xv}, [y, before], device=GPU)
    np.testing.assert_allclose(_np(r[y]), xv + 6, rtol=1e-6)
    np.testing.assert_array_equal(_np(r[before]), np.zeros(3))  # reads see the value from before the run
    np.testing.assert_allclose(g.variable_data(v).numpy(), xv + 6, rtol=1e-6)
    g.run({x: xv}, [y], device=GPU)
    np.testing.assert_allclose(g.variable_data(v).numpy(), 2 * (xv + 6), rtol=1e-6)


def test_assign_inside_if_only_when_taken():
    g = mg.Graph()
    v = g.variable(np.zeros(2, np.float32))
    p = g.placeholder((), mg.bool)

    def then():
        g.assign(v, v + 5.0)
        return v * 1.0

    out = g.if_then_else(p, then, lambda: v * 2.0)
    np.testing.assert_array_equal(_np(g.run({p: np.array(True)}, [out], device=GPU)[out]), [0, 0])
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [5, 5])
    g.run({p: np.array(False)}, [out], device=GPU)
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [5, 5])
    g.run({p: np.array(True)}, [out], device=GPU)
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [10, 10])


@pytest.mark.parametrize("checkpoint", [False, True])
def test_for_loop_gradient_matches_the_cpu(checkpoint):
    g = mg.Graph()
    a = g.placeholder((3,), mg.float32)
    x0 = g.placeholder((3,), mg.float32)
    w = g.placeholder((3,), mg.float32)
    (y,) = g.for_loop(6, [x0], lambda i, x: [(x + a / x) * 0.5 + w * g.sin(x)], checkpoint=checkpoint)
    loss = g.reduction_sum(y * y, keep_dims=False)
    grads = list(g.gradients(loss, [a, x0, w]).values())
    feeds = {a: RNG.uniform(1, 3, 3).astype(np.float32), x0: RNG.uniform(1, 2, 3).astype(np.float32),
             w: RNG.uniform(-0.1, 0.1, 3).astype(np.float32)}
    assert_same([feeds], g, [loss] + grads, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_while_loop_gradient_with_data_dependent_trip_count(checkpoint):
    g = mg.Graph()
    x0 = g.placeholder((), mg.float32)
    c = g.placeholder((), mg.float32)
    (y,) = g.while_loop([x0], lambda v: v < 1000.0, lambda v: [v * c + g.sin(v)], checkpoint=checkpoint)
    gx, gc = g.gradients(y, [x0, c]).values()
    feeds = [{x0: np.float32(xv), c: np.float32(cv)} for xv, cv in ((1.3, 1.7), (2.0, 3.1), (2000.0, 2.0))]
    assert_same(feeds, g, [y, gx, gc], rtol=1e-4)


def test_second_order_through_a_loop():
    g = mg.Graph()
    x0 = g.placeholder((3,), mg.float32)
    c = g.placeholder((3,), mg.float32)
    (y,) = g.for_loop(4, [x0], lambda i, v: [g.sin(v) * c + v * 1.3])
    gx = g.gradients(g.reduction_sum(y * y, keep_dims=False), [x0])[x0]
    hx = g.gradients(g.reduction_sum(gx, keep_dims=False), [x0])[x0]
    feeds = {x0: RNG.uniform(0.2, 1, 3).astype(np.float32), c: RNG.uniform(0.1, 0.5, 3).astype(np.float32)}
    assert_same([feeds], g, [gx, hx], rtol=1e-4, atol=1e-4)


def test_an_index_error_inside_a_loop_is_raised():
    g = mg.Graph()
    x = g.placeholder((4,), mg.float32)
    idx = g.placeholder((2,), mg.int32)
    (y,) = g.for_loop(3, [x], lambda i, v: [v + g.reduction_sum(g.gather(v, idx, axis=0), keep_dims=False)])
    good = {x: f32(4), idx: np.array([0, 3], np.int32)}
    assert_same([good], g, [y])
    with pytest.raises(mg.GraphIndexError, match="out of range"):
        g.run({x: f32(4), idx: np.array([0, 9], np.int32)}, [y], device=GPU)
    assert_same([good], g, [y])  # the executable stays usable


# ---------------------------------------------------------------- non_zero_indices

DTYPES = ["float32", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "bool"]


def _values(dtype, shape, density):
    v = np.asarray(RNG.random(shape) < density, np.float64) * RNG.integers(1, 5, shape)
    return np.asarray(v).astype(np_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,density", [((7,), 0.5), ((3, 4, 5), 0.3), ((1000, 37), 0.1), ((4099,), 0.9),
                                           ((2, 3), 0.0), ((0, 5), 0.5), ((), 1.0), ((), 0.0)])
def test_non_zero_indices_against_numpy(dtype, shape, density):
    g = mg.Graph()
    x = g.placeholder(shape, getattr(mg, dtype))
    y = g.non_zero_indices(x)
    xv = _values(dtype, shape, density)
    got = _np(g.run({x: xv}, [y], device=GPU)[y])
    want = np.argwhere(xv).astype(np.int32)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_non_zero_indices_special_values(dtype):
    g = mg.Graph()
    x = g.placeholder((8,), getattr(mg, dtype))
    y = g.non_zero_indices(x)
    xv = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 0.5, -0.0, 1.0], np_dtype(dtype))
    np.testing.assert_array_equal(_np(g.run({x: xv}, [y], device=GPU)[y]), [[0], [3], [4], [5], [7]])


def test_non_zero_indices_computed_on_the_gpu_then_used():
    # the op's input is an intermediate (device memory), its result feeds a later stage
    g = mg.Graph()
    x = g.placeholder((None, 6), mg.float32)
    idx = g.non_zero_indices(g.relu(x - 0.5))
    total = g.reduction_sum(g.cast(idx, mg.float32), axes=[0])
    for n in (3, 200, 0):
        xv = f32(n, 6)
        assert_same([{x: xv}], g, [idx, total], rtol=0, atol=0)


# ---------------------------------------------------------------- run_async


def _exe():
    g = mg.Graph()
    x = g.placeholder((256, 256), mg.float32)
    w = g.placeholder((256, 256), mg.float32)
    y = g.tanh(g.matrix_multiplication(x, w)) * 2.0 + g.reduction_sum(x, axes=[1])
    return g.compile({x: ((256, 256), mg.float32), w: ((256, 256), mg.float32)}, [y], device=GPU)


def test_run_async_results_equal_run_with_many_in_flight():
    exe = _exe()
    ins = [(f32(256, 256), f32(256, 256) * 0.05) for _ in range(12)]
    sync = [_np(exe.run(list(p))[0]) for p in ins]
    futs = [exe.run_async(list(p)) for p in ins]
    assert all(isinstance(f, concurrent.futures.Future) for f in futs)
    for f, s in zip(futs, sync):
        np.testing.assert_array_equal(_np(f.result(timeout=60)[0]), s)


def test_run_async_of_two_executables_interleaved_and_with_device_inputs():
    a, b = _exe(), _exe()
    xs = [f32(256, 256) for _ in range(6)]
    w = f32(256, 256) * 0.05
    wd = mg.TensorData(w).to(GPU)  # read in place by every run
    want = [_np(a.run([x, w])[0]) for x in xs]
    futs = [(a if k % 2 else b).run_async([x, wd]) for k, x in enumerate(xs)]
    for f, s in zip(futs, want):
        np.testing.assert_allclose(_np(f.result(timeout=60)[0]), s, rtol=1e-6)


def test_run_async_into_out_buffers_and_inputs_borrowed():
    exe = _exe()
    x, w = f32(256, 256), f32(256, 256) * 0.05
    want = _np(exe.run([x, w])[0])
    buf = np.empty((256, 256), np.float32)
    fut = exe.run_async([x.copy(), w.copy()], out=[buf])  # the only references to the inputs are the run's
    fut.result(timeout=60)
    np.testing.assert_array_equal(buf, want)


def test_run_async_raises_through_the_future():
    exe = _exe()
    fut = exe.run_async([f32(3, 3), f32(256, 256)])
    with pytest.raises(mg.GraphValueError):
        fut.result(timeout=60)


def test_run_async_with_control_flow_and_data_dependent_ops():
    g = mg.Graph()
    x = g.placeholder((50,), mg.float32)
    (y,) = g.while_loop([x], lambda v: (g.reduction_sum(v, keep_dims=False) < 100.0, v), lambda v: [v * 2.0 + 0.1])
    idx = g.non_zero_indices(g.relu(x))
    exe = g.compile({x: ((50,), mg.float32)}, [y, idx], device=GPU)
    xs = [np.abs(f32(50)) for _ in range(4)]
    want = [[_np(t) for t in exe.run([v])] for v in xs]
    futs = [exe.run_async([v]) for v in xs]
    for f, w in zip(futs, want):
        got = [_np(t) for t in f.result(timeout=60)]
        for a, b in zip(got, w):
            np.testing.assert_array_equal(a, b)


def test_run_async_futures_complete_for_wait_as_completed_and_callbacks():
    # nothing asks for the results: the waiter thread completes the futures
    exe = _exe()
    ins = [(f32(256, 256), f32(256, 256) * 0.05) for _ in range(10)]
    want = [_np(exe.run(list(p))[0]) for p in ins]
    futs = [exe.run_async(list(p)) for p in ins]
    called = []
    for f in futs:
        f.add_done_callback(lambda f: called.append(f))
    done, not_done = concurrent.futures.wait(futs, timeout=60)
    assert not not_done
    assert len(list(concurrent.futures.as_completed(futs, timeout=60))) == len(futs)
    deadline = time.monotonic() + 60  # a callback runs just after wait() is woken
    while len(called) < len(futs) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(called) == len(futs)
    for f, w in zip(futs, want):
        np.testing.assert_array_equal(_np(f.result(timeout=0)[0]), w)


def test_run_async_done_polling_completes_and_a_loop_into_one_buffer():
    exe = _exe()
    x, w = f32(256, 256), f32(256, 256) * 0.05
    want = _np(exe.run([x, w])[0])
    xd, wd = mg.TensorData(x).to(GPU), mg.TensorData(w).to(GPU)
    out = exe.run([xd, wd])
    futs = [exe.run_async([xd, wd], out=out) for _ in range(200)]  # each completes the finished ones
    deadline = time.monotonic() + 60
    while not futs[-1].done() and time.monotonic() < deadline:
        time.sleep(0.0001)
    assert all(f.done() for f in futs)  # each finished run completes when asked
    np.testing.assert_array_equal(_np(out[0]), want)


def test_executable_dropped_on_another_thread_while_graphs_are_captured():
    # regression: an executable's destructor waited on the shared stream outside run_mutex, so
    # a thread dropping one while another captured a CUDA graph crashed the driver or failed
    # the capture (a run_async future's waiter thread dropped the last reference); compiling
    # (constant uploads) and copying results to the host on one thread failed the other's
    # capture the same way
    import threading

    x, w = f32(256, 256), f32(256, 256) * 0.05
    want = _np(_exe().run([x, w])[0])
    stop, errors = threading.Event(), []

    def dropper():
        try:
            while not stop.is_set():
                e = _exe()
                np.testing.assert_array_equal(_np(e.run([x, w])[0]), want)
                del e
        except Exception as ex:  # noqa: BLE001 - reported below
            errors.append(ex)

    t = threading.Thread(target=dropper)
    t.start()
    try:
        for _ in range(40):
            np.testing.assert_array_equal(_np(_exe().run([x, w])[0]), want)
    finally:
        stop.set()
        t.join()
    assert not errors


def test_run_async_of_an_executable_that_assigns_completes_each_step_in_order():
    # such runs complete before run_async returns; their futures complete at once (none older
    # pending) or in order behind another executable's run
    g = mg.Graph()
    v = g.variable(np.zeros(4, np.float32))
    x = g.placeholder((4,), mg.float32)
    seen = v * 1.0
    step = g.compile({x: ((4,), mg.float32)}, [seen], target_operations=[g.assign(v, v + x)], device=GPU)
    other = _exe()
    xv = np.arange(4, dtype=np.float32)
    futs, steps = [], []
    for k in range(20):
        if k % 5 == 0:
            futs.append(other.run_async([f32(256, 256), f32(256, 256)]))
        steps.append(step.run_async([xv]))
        futs.append(steps[-1])
    concurrent.futures.wait(futs, timeout=60)
    for k, f in enumerate(steps):
        np.testing.assert_array_equal(_np(f.result(timeout=0)[0]), xv * k)  # the value before step k
    np.testing.assert_array_equal(g.variable_data(v).numpy(), xv * 20)
