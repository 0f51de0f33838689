"""Process lifecycle, memory release and concurrency (issue 13, items 4-6): the CPU thread
pool survives fork(); interpreter exit while another thread is inside run neither aborts nor
hangs; a dropped Graph frees its memory without the cyclic collector; concurrent assigns lose
no update; building a graph while another thread compiles and runs it is safe."""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import mpsgraph as mg

SANITIZED = os.environ.get("MPSGRAPH_SANITIZED") == "1"


def _python(code, timeout=120):
    """Runs code in a fresh interpreter; returns (returncode, stdout+stderr)."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


# a graph whose run uses the CPU pool (2M elements), compiled in the parent before it forks
FORK_PRELUDE = """
import os, sys, threading, numpy as np, mpsgraph as mg
n = 1 << 21
g = mg.Graph()
x = g.placeholder((n,), mg.float32, name="x")
y = g.reduction_sum(g.exponent(x * 0.5) + g.sin(x), axes=0)
exe = g.compile({x: ((n,), mg.float32)}, [y])
a = np.linspace(-1, 1, n, dtype=np.float32)
want = float(np.exp(a.astype(np.float64) * 0.5).sum() + np.sin(a.astype(np.float64)).sum())
"""


# ---------------- fork ----------------

@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_after_the_pool_ran_child_runs_and_exits():
    code = FORK_PRELUDE + """
exe.run([a])                                         # the parent's pool is running now
exe.run_async([a]).result()                          # and the async pool too
pid = os.fork()
if pid == 0:
    try:
        got = float(np.asarray(exe.run([a])[0]).sum())      # the child makes its own pool
        got2 = float(np.asarray(exe.run_async([a]).result()[0]).sum())
        ok = abs(got - want) <= 1e-4 * abs(want) and abs(got2 - want) <= 1e-4 * abs(want)
    except BaseException as e:
        print("child failed:", repr(e), flush=True)
        os._exit(4)
    sys.exit(0 if ok else 3)  # a normal exit: the interpreter finalizes in the child
_, status = os.waitpid(pid, 0)
print("child status", status)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    rc, out = _python(code, timeout=120)
    assert rc == 0, out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.skipif(SANITIZED, reason="GCC 12's ASan takes no lock around fork(): a child forked while another "
                    "thread is inside ASan's malloc can deadlock there (4 of 40 runs, the child's new pool thread "
                    "waiting on ASan's size-class lock); glibc's malloc is fork-safe, and the plain build runs it")
def test_fork_while_another_thread_is_running_child_is_usable():
    code = FORK_PRELUDE + """
stop = False
def spin():
    while not stop:
        exe.run([a])
t = threading.Thread(target=spin)
t.start()
codes = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        # a fresh graph in the child: the parent's executable may be mid-run in a thread that
        # does not exist here, but the pool and new graphs must work
        g2 = mg.Graph()
        z = g2.placeholder((n,), mg.float32)
        s = g2.reduction_sum(g2.exponent(z * 0.5) + g2.sin(z), axes=0)
        v = float(np.asarray(g2.run({z: a}, [s])[s]).sum())
        os._exit(0 if abs(v - want) <= 1e-4 * abs(want) else 3)
    _, status = os.waitpid(pid, 0)
    codes.append(os.waitstatus_to_exitcode(status))
stop = True
t.join()
print(codes)
sys.exit(max(codes))
"""
    rc, out = _python(code, timeout=120)
    assert rc == 0, out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_multiprocessing_fork_pool_runs_graphs():
    code = """
    import multiprocessing as mp, numpy as np, mpsgraph as mg
    n = 1 << 20
    def work(k):
        g = mg.Graph()
        x = g.placeholder((n,), mg.float32)
        s = g.reduction_sum(x * float(k), axes=0)
        return float(np.asarray(g.run({x: np.ones(n, np.float32)}, [s])[s]).sum())
    if __name__ == "__main__":
        work(1)  # the parent's pool exists before the fork
        with mp.get_context("fork").Pool(2) as p:
            got = p.map(work, range(4))
        assert got == [float(k * n) for k in range(4)], got
        print("ok")
    """
    rc, out = _python(code, timeout=120)
    assert rc == 0 and "ok" in out, out


# ---------------- interpreter exit ----------------

@pytest.mark.parametrize("how", ["daemon_run", "daemon_graph_run", "run_async"])
def test_exit_while_another_thread_is_inside_run(how):
    code = f"""
    import sys, threading, time, numpy as np, mpsgraph as mg
    n = 1 << 22
    g = mg.Graph()
    x = g.placeholder((n,), mg.float32, name="x")
    y = x
    for _ in range(40):
        y = g.sin(y) + 0.5
    s = g.reduction_sum(y, axes=0)
    exe = g.compile({{x: ((n,), mg.float32)}}, [s])
    a = np.linspace(-1, 1, n, dtype=np.float32)
    started = threading.Event()
    how = "{how}"
    def loop():
        started.set()
        while True:
            if how == "daemon_graph_run":
                g.run({{x: a}}, [s])
            else:
                exe.run([a])
    if how == "run_async":
        fut = exe.run_async([a])   # a non-daemon pool thread: exit waits for it
        started.set()
    else:
        threading.Thread(target=loop, daemon=True).start()
    started.wait()
    time.sleep(0.3)
    print("exiting", flush=True)
    sys.exit(0)
    """
    rc, out = _python(code, timeout=120)
    assert rc == 0, out
    assert "exiting" in out and "terminate" not in out and "Abort" not in out


def test_exit_with_pool_never_used_and_with_live_results():
    rc, out = _python("""
    import numpy as np, mpsgraph as mg
    g = mg.Graph()
    x = g.placeholder((3,), mg.float32)
    keep = g.run({x: np.ones(3, np.float32)}, [x + 1.0])
    print("ok")
    """)
    assert rc == 0 and "ok" in out, out


# ---------------- deterministic memory release ----------------

def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.skipif(SANITIZED, reason="ASan quarantines freed memory, so RSS does not fall back")
def test_dropped_graphs_free_their_memory_without_the_collector():
    mb = 16
    payload = np.ones(mb * 2**20 // 4, np.float32)
    gc.collect()
    gc.disable()
    try:
        base = _rss_mb()
        peak = base
        for i in range(40):  # 40 x (constant + variable + executable arena) = GBs if nothing is freed
            g = mg.Graph()
            c = g.constant(payload + i)
            v = g.variable(payload)
            x = g.placeholder(payload.shape, mg.float32, name="x")
            y = g.reduction_sum(x * c + v, axes=0)
            g.assign(v, v + 1.0)
            exe = g.compile({x: (payload.shape, mg.float32)}, [y])
            r = exe.run([payload])
            g.run({x: payload}, [y])
            del g, c, v, x, y, exe, r
            peak = max(peak, _rss_mb())
        assert peak - base < 12 * mb, f"RSS grew by {peak - base:.0f} MB over 40 dropped graphs"
    finally:
        gc.enable()


def test_a_graph_is_freed_when_its_last_reference_goes():
    import weakref
    gc.disable()
    try:
        g = mg.Graph()
        x = g.placeholder((2,), mg.float32, name="x")
        v = g.variable(np.zeros(2, np.float32))
        y = g.relu(x) + v
        grads = g.gradients(g.reduction_sum(y, axes=0), [x])
        exe = g.compile({x: ((2,), mg.float32)}, [y, grads[x]])
        exe.run([np.ones(2, np.float32)])
        ref = weakref.ref(g)
        del g, v, y, grads
        assert ref() is not None  # x and exe still hold it
        del x
        assert ref() is not None
        del exe
        assert ref() is None
    finally:
        gc.enable()


def test_tensor_identity_is_kept_while_tensors_live():
    g = mg.Graph()
    x = g.placeholder((2,), mg.float32, name="x")
    v = g.variable(np.zeros(2, np.float32), name="v")
    y = x + v
    assert y.operation.input_tensors[0] is x
    assert y.operation.input_tensors[1] is v
    vid = v.variable_id
    del v
    v2 = y.operation.input_tensors[1]  # made again from the graph: still a Variable
    assert isinstance(v2, mg.Variable) and v2.variable_id == vid
    np.testing.assert_array_equal(np.asarray(g.run({x: np.ones(2, np.float32)}, [y])[y]), [1.0, 1.0])
    g.assign(v2, v2 + 1.0)


# ---------------- concurrency ----------------

def test_concurrent_assigns_from_two_executables_lose_no_update():
    g = mg.Graph()
    v = g.variable(np.zeros((64, 64), np.float32), name="counter")
    inc = g.assign(v, v + 1.0)
    dec = g.assign(v, v + 2.0)
    e1 = g.compile({}, [], target_operations=[inc])
    e2 = g.compile({}, [], target_operations=[dec])
    n = 200

    def work(e):
        for _ in range(n):
            e.run([])
    ts = [threading.Thread(target=work, args=(e,)) for e in (e1, e2, e1, e2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    np.testing.assert_array_equal(np.asarray(v.value), np.full((64, 64), 2 * n * 1.0 + 2 * n * 2.0, np.float32))


def test_graph_run_assigns_from_threads_lose_no_update():
    g = mg.Graph()
    v = g.variable(np.zeros(8, np.float32))
    x = g.placeholder((8,), mg.float32, name="x")
    upd = g.assign(v, v + x)
    one = np.ones(8, np.float32)

    def work():
        for _ in range(100):
            g.run({x: one}, [], target_operations=[upd])
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    np.testing.assert_array_equal(np.asarray(v.value), np.full(8, 400.0, np.float32))


def test_building_while_another_thread_compiles_and_runs():
    g = mg.Graph()
    x = g.placeholder((None, 16), mg.float32, name="x")
    y = g.reduction_sum(g.tanh(x) * 2.0, axes=1)
    a = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    want = (np.tanh(a) * 2.0).sum(axis=1, keepdims=True)
    errors = []
    stop = threading.Event()

    def runner():
        try:
            k = 0
            while not stop.is_set():
                k += 1
                exe = g.compile({x: ((None, 16), mg.float32)}, [y])  # specialises while nodes are added
                np.testing.assert_allclose(np.asarray(exe.run([a[:1 + k % 32]])[0]), want[:1 + k % 32], rtol=1e-5)
                np.testing.assert_allclose(np.asarray(g.run({x: a}, [y])[y]), want, rtol=1e-5)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
    ts = [threading.Thread(target=runner) for _ in range(2)]
    for t in ts:
        t.start()
    t_ = x
    for i in range(1500):  # many nodes: the node store grows while the runners read it
        t_ = g.addition(t_, float(i % 3)) if i % 2 else g.multiplication(t_, 1.0)
        if i % 100 == 0:
            g.gradients(g.reduction_sum(t_, axes=1), [x])
    stop.set()
    for t in ts:
        t.join()
    assert not errors, errors
    z = g.run({x: a}, [t_])[t_]
    assert np.asarray(z).shape == (32, 16)


def test_inputs_are_borrowed_for_the_duration_of_run_async():
    g = mg.Graph()
    x = g.placeholder((1 << 20,), mg.float32, name="x")
    y = g.reduction_sum(x, axes=0)
    exe = g.compile({x: ((1 << 20,), mg.float32)}, [y])
    fut = exe.run_async([np.ones(1 << 20, np.float32)])  # the only reference is the run's
    gc.collect()
    assert float(np.asarray(fut.result()[0]).sum()) == float(1 << 20)


def test_bfloat16_numpy_view_keeps_its_buffer_alive():
    """Regression: TensorData.numpy() of bfloat16 data kept only a memoryview alive, not the data:
    once the TensorData was dropped, later runs of the executable reused the buffer and the array
    changed under the user (float32 was fine)."""
    g = mg.Graph()
    y = g.random_uniform((1001, 3), seed=1234, dtype=mg.bfloat16)
    exe = g.compile({}, [y], device="cpu")
    views = [exe.run([])[0].numpy() for _ in range(3)]  # the TensorData is dropped at once
    snapshots = [v.copy() for v in views]
    gc.collect()
    for _ in range(3):
        exe.run([])
    for v, s in zip(views, snapshots):
        np.testing.assert_array_equal(v.view(np.uint16), s.view(np.uint16))
    assert not np.array_equal(snapshots[0], snapshots[1])  # each run draws fresh numbers
