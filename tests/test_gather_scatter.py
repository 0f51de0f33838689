"""The gather family beyond the conformance rows (tests/conformance_gather.py): run-time index
errors (named op and index; the executable and the graph stay usable), build-time errors,
differentiability marks, partially unknown dims for the _nd forms, and large inputs that take the
parallel paths (against np.take / np.add.at / np.maximum.at)."""
import numpy as np
import pytest

import mpsgraph as mg

RNG = np.random.default_rng(7)
F32, I32 = mg.float32, mg.int32


def expect(kind, fn, *fragments):
    """fn() raises kind with a message holding every fragment."""
    with pytest.raises(kind) as ei:
        fn()
    msg = str(ei.value)
    assert all(f in msg for f in fragments), f"{[f for f in fragments if f not in msg]} not in: {msg}"


# ---------------------------------------------------------------- run-time index errors


@pytest.mark.parametrize("bad", [5, -6, 100])
def test_gather_index_out_of_range_names_op_and_index(bad):
    g = mg.Graph()
    x = g.placeholder((5, 3), F32)
    i = g.placeholder((4,), I32)
    y = g.gather(x, i, axis=0, name="pick")
    exe = g.compile({x: ((5, 3), F32), i: ((4,), I32)}, [y])
    xv = RNG.standard_normal((5, 3)).astype(np.float32)
    bad_idx = np.array([0, 1, bad, 2], np.int32)
    expect(IndexError, lambda: exe.run([xv, bad_idx]), "[gather]", f"index {bad}", "indices[2]", "axis 0 of size 5",
           "pick")
    expect(mg.GraphIndexError, lambda: exe.run([xv, bad_idx]), "[gather]")
    # the same executable runs correct indices afterwards
    good = np.array([4, -1, 0, -5], np.int32)
    np.testing.assert_array_equal(exe.run([xv, good])[0].numpy(), np.take(xv, good, axis=0))
    # and the graph builds and runs more work
    z = g.reduction_sum(g.gather(x, i, axis=0), axes=0)
    res = g.run({x: xv, i: good}, [z])
    np.testing.assert_allclose(res[z].numpy(), np.take(xv, good, axis=0).sum(0, keepdims=True), rtol=1e-6)


def test_index_errors_of_every_op():
    g = mg.Graph()
    x = g.placeholder((3, 4), F32)
    xv = np.ones((3, 4), np.float32)
    cases = [
        ("gather_nd", lambda i: g.gather_nd(x, i), np.array([[0, 4]], np.int32), "index 4 at indices[0, 1]",
         "dim 1 (tuple entry 1) of size 4"),
        ("gather_along_axis", lambda i: g.gather_along_axis(x, i, axis=1), np.array([[0], [9], [1]], np.int64),
         "index 9 at indices[1, 0]", "axis 1 of size 4"),
        ("scatter", lambda i: g.scatter(g.constant(np.ones((2, 4), np.float32)), i, shape=(3, 4), axis=0),
         np.array([1, -4], np.int32), "index -4 at indices[1]", "axis 0 of size 3"),
        ("scatter_with_data", lambda i: g.scatter_with_data(x, g.constant(np.ones((3, 1), np.float32)), i, axis=1,
                                                            mode="set"),
         np.array([7], np.int32), "index 7 at indices[0]", "(valid: -4 to 3)"),
        ("scatter_nd_with_data", lambda i: g.scatter_nd_with_data(x, g.constant(np.ones((1,), np.float32)), i),
         np.array([[3, 0]], np.int32), "index 3 at indices[0, 0]", "dim 0 (tuple entry 0) of size 3"),
        ("scatter_along_axis", lambda i: g.scatter_along_axis(g.constant(np.ones((1, 4), np.float32)), i,
                                                              shape=(3, 4), axis=0, mode="max"),
         np.array([[0, 1, 2, 3]], np.uint8), "index 3 at indices[0, 3]", "axis 0 of size 3"),
    ]
    for op, build, idx, *frags in cases:
        i = g.placeholder(idx.shape, mg.as_dtype(idx.dtype.name))
        y = build(i)
        expect(mg.GraphIndexError, lambda: g.run({x: xv, i: idx}, [y]), f"[{op}]", *frags)


def test_uint64_index_too_large():
    g = mg.Graph()
    x = g.placeholder((3,), F32)
    i = g.placeholder((1,), mg.uint64)
    y = g.gather(x, i)
    expect(mg.GraphIndexError, lambda: g.run({x: np.ones(3, np.float32), i: np.array([2 ** 63 + 5], np.uint64)}, [y]),
           "[gather]", f"index {2 ** 63 + 5}")


def test_constant_indices_out_of_range_fail_at_compile_or_run():
    g = mg.Graph()
    x = g.placeholder((3,), F32)
    y = g.gather(x, g.constant(np.array([3], np.int32)))
    expect(mg.GraphIndexError, lambda: g.run({x: np.ones(3, np.float32)}, [y]), "[gather]", "index 3")


# ---------------------------------------------------------------- build-time errors


def test_build_errors():
    g = mg.Graph()
    x = g.placeholder((2, 3), F32, name="xin")
    i = g.placeholder((4,), I32)
    fi = g.placeholder((4,), F32)
    expect(mg.GraphTypeError, lambda: g.gather(x, fi), "[gather]", "integer", "indices", "float32")
    expect(mg.GraphTypeError, lambda: g.scatter(x, fi, shape=(5, 3)), "[scatter]", "indices")
    expect(mg.GraphIndexError, lambda: g.gather(x, i, axis=2), "[gather]", "axis 2", "(2, 3)")
    expect(mg.GraphValueError, lambda: g.gather(x, g.placeholder((2, 4), I32), axis=1, batch_dims=3),
           "[gather]", "batch_dims 3")
    expect(mg.GraphValueError, lambda: g.gather(x, g.placeholder((2, 4), I32), axis=0, batch_dims=1),
           "[gather]", "batch_dims 1")
    expect(mg.GraphValueError, lambda: g.gather(x, g.placeholder((3, 4), I32), axis=1, batch_dims=1),
           "[gather]", "batch", "(3, 4)")
    expect(mg.GraphValueError, lambda: g.gather_nd(x, g.placeholder((4, 3), I32)), "[gather_nd]", "3-tuples")
    expect(mg.GraphValueError, lambda: g.gather_nd(x, g.placeholder((4, None), I32)), "[gather_nd]", "known")
    expect(mg.GraphValueError, lambda: g.gather_along_axis(x, g.placeholder((2,), I32), axis=0),
           "[gather_along_axis]", "rank")
    expect(mg.GraphValueError, lambda: g.gather_along_axis(x, g.placeholder((5, 4), I32), axis=0),
           "[gather_along_axis]", "except at axis 0")
    expect(mg.GraphValueError, lambda: g.scatter(g.placeholder((3, 3), F32), i, shape=(5, 3)),
           "[scatter]", "(3, 3)", "(4, 3)", "(5, 3)")
    expect(mg.GraphValueError, lambda: g.scatter(g.placeholder((4, 3), F32), i, shape=(None, 3)),
           "[scatter]", "static shape")
    expect(mg.GraphValueError, lambda: g.scatter_with_data(x, g.placeholder((4, 3), F32), i, mode="xor"),
           "[scatter_with_data]", "'xor'")
    expect(mg.GraphTypeError, lambda: g.scatter_with_data(x, g.placeholder((4, 3), mg.float16), i),
           "[scatter_with_data]", "float16")
    b = g.placeholder((2, 3), mg.bool)
    expect(mg.GraphTypeError, lambda: g.scatter_with_data(b, g.placeholder((4, 3), mg.bool), i, mode="add"),
           "[scatter_with_data]", "bool", "'set'")
    expect(mg.GraphValueError, lambda: g.scatter_nd(g.placeholder((4,), F32), g.placeholder((4, 2), I32),
                                                    shape=(2, 3), batch_dims=2), "[scatter_nd]", "batch_dims 2")
    expect(mg.GraphIndexError, lambda: g.gather(g.placeholder((), F32), i), "[gather]", "rank >= 1")
    # the graph still works
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = g.gather(x, i, axis=1 - 2)
    iv = np.array([2, 0, 1, -1], np.int32)
    np.testing.assert_array_equal(g.run({x: xv, i: iv}, [y])[y].numpy(), np.take(xv, iv, axis=-1))


# ---------------------------------------------------------------- gradients


def test_set_gradient_needs_known_updates_shape():
    g = mg.Graph()
    d = g.placeholder((3, 2), F32)
    u = g.placeholder((None, 2), F32)
    i = g.placeholder((None,), I32)
    loss = g.reduction_sum(g.scatter_with_data(d, u, i, mode="set"), keep_dims=False)
    expect(mg.GraphNotImplementedError, lambda: g.gradients(loss, [u]), "[scatter_with_data]", "'set'",
           "known")


def test_set_duplicates_last_wins_and_gradient_goes_to_it():
    g = mg.Graph()
    d = g.placeholder((3,), mg.float64)
    u = g.placeholder((4,), mg.float64)
    i = g.constant(np.array([1, 0, 1, -2], np.int32))
    y = g.scatter_with_data(d, u, i, mode="set")
    grads = g.gradients(g.reduction_sum(y * g.constant(np.array([1.0, 2.0, 3.0])), keep_dims=False), [d, u])
    res = g.run({d: np.array([10.0, 20.0, 30.0]), u: np.array([1.0, 2.0, 3.0, 4.0])}, [y, grads[d], grads[u]])
    np.testing.assert_array_equal(res[y].numpy(), [2.0, 4.0, 30.0])  # index 1 written by 1.0, 3.0, then 4.0
    np.testing.assert_array_equal(res[grads[d]].numpy(), [0.0, 0.0, 3.0])
    np.testing.assert_array_equal(res[grads[u]].numpy(), [0.0, 1.0, 0.0, 2.0])


# ---------------------------------------------------------------- unknown dims (nd forms)


def test_gather_nd_and_scatter_nd_partial_unknown_dims():
    g = mg.Graph()
    x = g.placeholder((None, 3, None), F32)
    i = g.placeholder((None, 2), I32)
    y = g.gather_nd(x, i)
    assert y.shape == (None, None)
    xv = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    iv = np.array([[0, 1], [-1, 2], [3, -3]], np.int32)
    want = np.stack([xv[a, b] for a, b in iv])
    np.testing.assert_array_equal(g.run({x: xv, i: iv}, [y])[y].numpy(), want)
    u = g.placeholder((None, None), F32)
    s = g.scatter_nd(u, i, shape=(4, 3, 5))
    assert s.shape == (4, 3, 5)
    uv = RNG.standard_normal((3, 5)).astype(np.float32)
    ref = np.zeros((4, 3, 5), np.float32)
    np.add.at(ref, (iv[:, 0], iv[:, 1]), uv)
    np.testing.assert_allclose(g.run({u: uv, i: iv}, [s])[s].numpy(), ref, rtol=1e-6)


# ---------------------------------------------------------------- large inputs (parallel paths)


def test_large_gather_and_scatter_against_numpy():
    g = mg.Graph()
    x = g.placeholder((2000, 64), F32)
    i = g.placeholder((50000,), mg.int64)
    xv = RNG.standard_normal((2000, 64)).astype(np.float32)
    iv = RNG.integers(-2000, 2000, 50000)
    y = g.gather(x, i)
    u = g.placeholder((50000, 64), F32)
    uv = RNG.standard_normal((50000, 64)).astype(np.float32)
    s_add = g.scatter(u, i, shape=(2000, 64), mode="add")
    s_max = g.scatter_with_data(x, u, i, mode="max")
    ia = g.placeholder((2000, 64), I32)
    iav = RNG.integers(0, 2000, (2000, 64)).astype(np.int32)
    al = g.gather_along_axis(x, ia, axis=0)
    res = g.run({x: xv, i: iv, u: uv, ia: iav}, [y, s_add, s_max, al])
    np.testing.assert_array_equal(res[y].numpy(), np.take(xv, iv, axis=0))
    ref = np.zeros((2000, 64), np.float64)
    np.add.at(ref, iv, uv.astype(np.float64))
    np.testing.assert_allclose(res[s_add].numpy(), ref, rtol=1e-4, atol=1e-4)
    ref = xv.copy()
    np.maximum.at(ref, iv, uv)
    np.testing.assert_array_equal(res[s_max].numpy(), ref)
    np.testing.assert_array_equal(res[al].numpy(), np.take_along_axis(xv, iav, axis=0))
    # deterministic: the same run again gives the same bits
    again = g.run({x: xv, i: iv, u: uv, ia: iav}, [s_add])
    np.testing.assert_array_equal(again[s_add].numpy(), res[s_add].numpy())


def test_large_set_scatter_last_wins_when_parallel():
    g = mg.Graph()
    d = g.placeholder((8, 20000), F32)
    u = g.placeholder((8, 3000), F32)
    i = g.placeholder((8, 3000), I32)
    y = g.scatter_along_axis_with_data(d, u, i, axis=1, mode="set")
    dv = np.zeros((8, 20000), np.float32)
    uv = RNG.standard_normal((8, 3000)).astype(np.float32)
    iv = RNG.integers(0, 500, (8, 3000)).astype(np.int32)
    ref = dv.copy()
    for r in range(8):
        for c in range(3000):
            ref[r, iv[r, c]] = uv[r, c]
    np.testing.assert_array_equal(g.run({d: dv, u: uv, i: iv}, [y])[y].numpy(), ref)


def test_schema_roles_and_docs():
    schemas = {s["name"]: s for s in mg._core.op_schemas()}
    for op in ("gather", "gather_nd", "gather_along_axis", "scatter", "scatter_with_data", "scatter_nd",
               "scatter_nd_with_data", "scatter_along_axis", "scatter_along_axis_with_data"):
        s = schemas[op]
        assert s["input_roles"][-1] == "index", op
        assert "negative index counts from the end" in s["doc"], op
        if op.startswith("scatter"):
            assert "the last one wins" in s["doc"], op
