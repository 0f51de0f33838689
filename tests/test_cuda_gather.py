"""The gather family on cuda:0 beyond the conformance table: index errors raised after the run
with the CPU's message, executables usable after one, repeated indices under every scatter
mode against numpy (atomics through the containing word for 1- and 2-byte dtypes), 'set'
keeping the last update, and CUDA-graph replay with new index values. Skips without a GPU."""
import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")


def _error(device, build, feeds):
    g = mg.Graph()
    out, ph = build(g)
    with pytest.raises(mg.GraphIndexError) as e:
        g.run({ph[k]: v for k, v in feeds.items()}, [out], device=device)
    return str(e.value)


@pytest.mark.parametrize("idt", [np.int8, np.int32, np.int64, np.uint32, np.uint64])
def test_gather_out_of_range_same_message_as_cpu(idt):
    def build(g):
        x = g.placeholder((4, 3), mg.float32)
        i = g.placeholder((2, 3), mg.as_dtype(idt))
        return g.gather(x, i, axis=0, name="gth"), {"x": x, "i": i}

    iv = np.array([[0, 1, 2], [3, 9, 5]], idt)  # 9 is the first bad one in row-major order
    feeds = {"x": np.ones((4, 3), np.float32), "i": iv}
    cpu = _error("cpu", build, feeds)
    assert "[gather]" in cpu and "index 9" in cpu
    assert _error("cuda", build, feeds) == cpu


def test_gather_nd_and_scatter_errors_same_message_as_cpu():
    def nd(g):
        x = g.placeholder((3, 4), mg.float32)
        i = g.placeholder((2, 2), mg.int64)
        return g.gather_nd(x, i), {"x": x, "i": i}

    feeds = {"x": np.ones((3, 4), np.float32), "i": np.array([[0, 1], [-4, 2]], np.int64)}
    assert "tuple entry 0" in _error("cpu", nd, feeds)
    assert _error("cuda", nd, feeds) == _error("cpu", nd, feeds)

    def sc(g):
        d = g.placeholder((5, 2), mg.float32)
        u = g.placeholder((3, 2), mg.float32)
        i = g.placeholder((3,), mg.int32)
        return g.scatter_with_data(d, u, i, axis=0, mode="add"), {"d": d, "u": u, "i": i}

    feeds = {"d": np.zeros((5, 2), np.float32), "u": np.ones((3, 2), np.float32), "i": np.array([1, -6, 7], np.int32)}
    assert "index -6" in _error("cpu", sc, feeds)
    assert _error("cuda", sc, feeds) == _error("cpu", sc, feeds)


def test_executable_usable_after_index_error_and_replays_new_indices():
    g = mg.Graph()
    x = g.placeholder((5, 2), mg.float32)
    i = g.placeholder((3,), mg.int32)
    y = g.gather(x, i, axis=0)
    exe = g.compile({x: ((5, 2), mg.float32), i: ((3,), mg.int32)}, [y], device="cuda")
    xv = np.arange(10, dtype=np.float32).reshape(5, 2)
    for iv in ([0, 4, -1], [2, 2, 1], [3, -5, 0]):
        iv = np.array(iv, np.int32)
        np.testing.assert_array_equal(exe.run([xv, iv])[0].numpy(), xv[iv])
    with pytest.raises(mg.GraphIndexError, match="index 5"):
        exe.run([xv, np.array([0, 5, 1], np.int32)])
    iv = np.array([1, 0, -2], np.int32)
    np.testing.assert_array_equal(exe.run([xv, iv])[0].numpy(), xv[iv])


def _numpy_scatter(data, upd, idx, mode):
    r = data.copy()
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}
    if mode == "set":
        for q, t in enumerate(idx):
            r[t] = upd[q]
    else:
        ops[mode].at(r, idx, upd)
    return r


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.float16, np.int32, np.int64, np.float32])
@pytest.mark.parametrize("mode", ["add", "sub", "mul", "min", "max", "set"])
def test_scatter_repeated_indices_every_mode(dt, mode):
    rng = np.random.default_rng(7)
    n, q = 6, 400  # many updates per result element: the atomics contend
    idx = rng.integers(0, n, size=q).astype(np.int64)
    if mode == "mul":
        upd = rng.choice([-1, 1, 2], size=(q, 3), p=[0.45, 0.45, 0.1]).astype(dt)
        data = np.ones((n, 3), dt)
    else:
        upd = rng.integers(-3 if np.dtype(dt).kind != "u" else 0, 4, size=(q, 3)).astype(dt)
        data = rng.integers(0, 5, size=(n, 3)).astype(dt)
    g = mg.Graph()
    d = g.placeholder((n, 3), mg.as_dtype(dt))
    u = g.placeholder((q, 3), mg.as_dtype(dt))
    i = g.placeholder((q,), mg.int64)
    y = g.scatter_with_data(d, u, i, axis=0, mode=mode)
    r = g.run({d: data, u: upd, i: idx}, [y], device="cuda")[y].numpy()
    with np.errstate(over="ignore"):
        ref = _numpy_scatter(data, upd, idx, mode)
    np.testing.assert_array_equal(r, ref)


def test_scatter_nd_set_last_update_wins_on_large_contention():
    rng = np.random.default_rng(3)
    idx = rng.integers(-8, 8, size=(20000, 2)).astype(np.int32)
    upd = rng.standard_normal(20000).astype(np.float32)
    g = mg.Graph()
    u = g.placeholder((20000,), mg.float32)
    i = g.placeholder((20000, 2), mg.int32)
    y = g.scatter_nd(u, i, shape=(8, 8), mode="set")
    r = g.run({u: upd, i: idx}, [y], device="cuda")[y].numpy()
    ref = np.zeros((8, 8), np.float32)
    for q in range(20000):
        ref[idx[q, 0], idx[q, 1]] = upd[q]
    np.testing.assert_array_equal(r, ref)


def test_scatter_add_float32_many_rows_matches_float64_sum():
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 50, size=100000).astype(np.int32)
    upd = rng.standard_normal((100000, 4)).astype(np.float32)
    g = mg.Graph()
    u = g.placeholder((100000, 4), mg.float32)
    i = g.placeholder((100000,), mg.int32)
    y = g.scatter(u, i, shape=(50, 4), axis=0, mode="add")
    r = g.run({u: upd, i: idx}, [y], device="cuda")[y].numpy()
    ref = np.zeros((50, 4))
    np.add.at(ref, idx, upd.astype(np.float64))
    np.testing.assert_allclose(r, ref, rtol=1e-4, atol=1e-3)
