"""The Python API: Graph.run / compile / Executable, caches, devices, variables, target
operations, passes that must not change results, and the python -m mpsgraph demo."""
import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import pytest

import mpsgraph as mg

F32 = mg.float32


def _np(td):
    return np.array(td.numpy(), copy=True)


# ---------------- Graph.run ----------------

def test_run_returns_tensordata_for_every_target():
    g = mg.Graph()
    x = g.placeholder((2, 3), F32, name="x")
    a = g.exponent(x)
    b = x * x
    c = g.less_than(x, 0.0)
    xv = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    res = g.run({x: xv}, [a, b, c])
    assert set(res.keys()) == {a, b, c}
    assert all(isinstance(v, mg.TensorData) for v in res.values())
    np.testing.assert_allclose(_np(res[a]), np.exp(xv.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(_np(res[b]), xv.astype(np.float64) ** 2, rtol=1e-6)
    np.testing.assert_array_equal(_np(res[c]), xv < 0)
    assert res[c].dtype == mg.bool_ and res[a].shape == (2, 3)
    assert res[a].device == "cpu" or res[a].device == str(mg.default_device())
    # one target given bare
    one = g.run({x: xv}, b)
    assert list(one.keys()) == [b]
    # targets that are placeholders, constants and repeated
    k = g.constant(np.array([1, 2], np.int32))
    res = g.run({x: xv}, [x, k, b, b])
    np.testing.assert_array_equal(_np(res[x]), xv)
    np.testing.assert_array_equal(_np(res[k]), [1, 2])


def test_run_with_unused_feeds_and_no_feeds():
    g = mg.Graph()
    x = g.placeholder((2,), F32)
    unused = g.placeholder((5,), mg.int32)
    y = x + 1.0
    res = g.run({x: np.array([1, 2], np.float32), unused: np.zeros(5, np.int32)}, [y])
    np.testing.assert_array_equal(_np(res[y]), [2, 3])
    c = g.constant(np.array([1.5, 2.5], np.float32))
    res = g.run(None, [c * 2.0])
    assert len(res) == 1
    np.testing.assert_array_equal(_np(next(iter(res.values()))), [3, 5])


def test_python_lists_and_scalars_as_feeds():
    g = mg.Graph()
    x = g.placeholder((3,), mg.int16)
    s = g.placeholder((), F32)
    y = x * 2
    z = s + 1.0
    res = g.run({x: [1, 2, 3], s: 2.5}, [y, z])
    assert res[y].dtype == mg.int16
    np.testing.assert_array_equal(_np(res[y]), [2, 4, 6])
    np.testing.assert_array_equal(_np(res[z]), np.float32(3.5))


# ---------------- compile / Executable ----------------

def test_compile_with_shapedtype_and_pairs():
    g = mg.Graph()
    a = g.placeholder((2, 3), F32, name="a")
    b = g.placeholder((3,), F32, name="b")
    y = a * b - 1.0
    av = np.arange(6, dtype=np.float32).reshape(2, 3)
    bv = np.array([1, -2, 3], np.float32)
    want = av.astype(np.float64) * bv - 1
    for feeds in ({a: mg.ShapedType((2, 3), F32), b: mg.ShapedType((3,), F32)},
                  {a: ((2, 3), F32), b: ((3,), "float32")},
                  {a: ((2, 3), np.float32), b: ((3,), mg.float32)}):
        exe = g.compile(feeds, [y])
        assert isinstance(exe, mg.Executable)
        assert exe.feed_tensors == [a, b]
        assert exe.target_tensors == [y]
        np.testing.assert_array_equal(_np(exe.run([av, bv])[0]), want)
        np.testing.assert_array_equal(_np(exe.run({a: av, b: bv})[0]), want)
        np.testing.assert_array_equal(_np(exe({b: bv, a: av})[0]), want)


def test_feed_tensors_follow_the_feeds_order():
    g = mg.Graph()
    a = g.placeholder((2,), F32, name="a")
    b = g.placeholder((2,), F32, name="b")
    y = a - b
    exe = g.compile({b: ((2,), F32), a: ((2,), F32)}, [y])
    assert exe.feed_tensors == [b, a]
    r = exe.run([np.array([1, 1], np.float32), np.array([5, 7], np.float32)])[0]  # b first
    np.testing.assert_array_equal(_np(r), [4, 6])


def test_run_async_gives_the_same_results():
    g = mg.Graph()
    x = g.placeholder((None, 4), F32)
    y = g.tanh(x) * 2.0
    exe = g.compile({x: ((None, 4), F32)}, [y])
    xs = [np.random.default_rng(i).standard_normal((i + 1, 4)).astype(np.float32) for i in range(8)]
    sync = [_np(exe.run([v])[0]) for v in xs]
    futs = [exe.run_async([v]) for v in xs]
    assert all(isinstance(f, concurrent.futures.Future) for f in futs)
    for f, s, v in zip(futs, sync, xs):
        r = f.result(timeout=60)
        assert isinstance(r, list) and len(r) == 1
        np.testing.assert_array_equal(_np(r[0]), s)
        np.testing.assert_allclose(_np(r[0]), np.tanh(v.astype(np.float64)) * 2, rtol=1e-5, atol=1e-6)


def test_run_async_concurrent_runs_of_one_executable():
    g = mg.Graph()
    x = g.placeholder((64, 64), F32)
    y = g.select(x > 0.0, x * 2.0, -x)  # several intermediates in the arena
    exe = g.compile({x: ((64, 64), F32)}, [y])
    xs = [np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) for i in range(16)]
    futs = [exe.run_async([v]) for v in xs]
    for f, v in zip(futs, xs):
        np.testing.assert_array_equal(_np(f.result(timeout=60)[0]), np.where(v > 0, v * 2, -v))


def test_executable_specialises_on_none_dims():
    g = mg.Graph()
    x = g.placeholder((None, None), F32, name="x")
    y = x * 2.0 + g.constant(np.float32(1.0))
    exe = g.compile({x: ((None, None), F32)}, [y])
    shapes = [(1, 1), (2, 3), (5, 4), (0, 7), (2, 3)]
    for s in shapes:
        v = np.arange(int(np.prod(s)), dtype=np.float32).reshape(s)
        r = exe.run([v])[0]
        assert r.shape == s
        np.testing.assert_array_equal(_np(r), v * 2 + 1)
    assert exe.num_specializations == 4


def test_executable_specialisations_are_bounded():
    g = mg.Graph()
    x = g.placeholder((None,), F32)
    y = -x
    exe = g.compile({x: ((None,), F32)}, [y])
    for n in range(1, 41):
        np.testing.assert_array_equal(_np(exe.run([np.arange(n, dtype=np.float32)])[0]), -np.arange(n))
    assert 1 <= exe.num_specializations <= 32


def test_compile_time_fixed_dims_reject_other_shapes_but_none_dims_take_them():
    g = mg.Graph()
    x = g.placeholder((None, 3), F32)
    y = g.negative(x)
    fixed = g.compile({x: ((2, 3), F32)}, [y])
    with pytest.raises(mg.GraphValueError):
        fixed.run([np.zeros((4, 3), np.float32)])
    np.testing.assert_array_equal(_np(fixed.run([np.ones((2, 3), np.float32)])[0]), -np.ones((2, 3)))


# ---------------- cache ----------------

def test_cache_info_hits_misses_size_and_clear():
    g = mg.Graph()
    x = g.placeholder((None,), F32)
    y = x + 1.0
    z = x * 3.0
    g.clear_cache()
    info = g.cache_info()
    assert isinstance(info, mg.CacheInfo)
    assert (info.hits, info.misses, info.size) == (0, 0, 0)
    f3 = {x: np.ones(3, np.float32)}
    g.run(f3, [y])
    assert g.cache_info()[:3] == (0, 1, 1)
    g.run(f3, [y])
    g.run({x: np.zeros(3, np.float32)}, [y])
    assert g.cache_info()[:3] == (2, 1, 1)
    g.run({x: np.ones(4, np.float32)}, [y])  # new feed shape
    assert g.cache_info()[:3] == (2, 2, 2)
    g.run(f3, [z])  # other targets
    g.run(f3, [y, z])
    assert g.cache_info()[:3] == (2, 4, 4)
    g.clear_cache()
    assert g.cache_info()[:3] == (0, 0, 0)
    np.testing.assert_array_equal(_np(g.run(f3, [y])[y]), [2, 2, 2])
    assert g.cache_info()[:3] == (0, 1, 1)


def test_cache_capacity_is_bounded():
    g = mg.Graph()
    x = g.placeholder((None,), F32)
    y = x * 2.0
    g.set_cache_capacity(3)
    assert g.cache_info().capacity == 3
    for n in range(1, 11):
        np.testing.assert_array_equal(_np(g.run({x: np.arange(n, dtype=np.float32)}, [y])[y]), np.arange(n) * 2)
        assert g.cache_info().size <= 3
    info = g.cache_info()
    assert info.misses == 10 and info.size == 3
    g.run({x: np.arange(10, dtype=np.float32)}, [y])  # most recent: still cached
    assert g.cache_info().hits == 1
    g.run({x: np.arange(1, dtype=np.float32)}, [y])  # evicted long ago
    assert g.cache_info().misses == 11
    g.set_cache_capacity(1)
    assert g.cache_info().size == 1
    assert mg.Graph().cache_info().capacity >= 1


# ---------------- devices ----------------

def test_devices():
    ds = mg.devices()
    assert ds and all(isinstance(d, mg.Device) for d in ds)
    assert mg.default_device() == ds[0]
    assert mg.cpu() in ds
    assert mg.cpu().available
    assert mg.cpu() == "cpu" and str(mg.cpu()) == "cpu"
    assert mg.Device("mps") == mg.metal() and mg.Device("gpu") == mg.cuda()
    assert mg.Device("cuda:1").index == 1 and str(mg.Device("cuda:1")) == "cuda:1"
    assert len({mg.cpu(), mg.Device("cpu"), mg.Device(mg.cpu())}) == 1
    g = mg.Graph()
    x = g.placeholder((2,), F32)
    for d in ds:
        for spec in (d, str(d)):
            r = g.run({x: np.array([1, 2], np.float32)}, [x * 2.0], device=spec)
            np.testing.assert_array_equal(_np(next(iter(r.values()))), [2, 4])
        assert g.compile({x: ((2,), F32)}, [x + 1.0], device=d).device == str(d)


# ---------------- variables ----------------

def test_variables_read_pre_run_value_and_assign_lands_after():
    g = mg.Graph()
    v = g.variable(np.array([1.0, 2.0], np.float32), name="v")
    assert isinstance(v, mg.Variable) and v.shape == (2,) and v.dtype == F32
    upd = g.assign(v, v + 10.0)
    assert isinstance(upd, mg.Operation)
    r = v * 2.0
    res = g.run({}, [r, v], target_operations=[upd])
    np.testing.assert_array_equal(_np(res[r]), [2, 4])  # value from before the run
    np.testing.assert_array_equal(_np(res[v]), [1, 2])
    np.testing.assert_array_equal(_np(v.value), [11, 12])  # landed when the run completed
    res = g.run({}, [r], target_operations=upd)
    np.testing.assert_array_equal(_np(res[r]), [22, 24])
    np.testing.assert_array_equal(_np(g.variable_data(v)), [21, 22])
    # without the target operation nothing is assigned
    g.run({}, [r])
    np.testing.assert_array_equal(_np(v.value), [21, 22])


def test_swap_two_variables_in_one_run():
    g = mg.Graph()
    a = g.variable(np.array([1, 2, 3], np.int32))
    b = g.variable(np.array([7, 8, 9], np.int32))
    ops = [g.assign(a, b), g.assign(b, a)]
    g.run({}, [], target_operations=ops)
    np.testing.assert_array_equal(_np(a.value), [7, 8, 9])
    np.testing.assert_array_equal(_np(b.value), [1, 2, 3])


def test_variable_value_without_copy_and_snapshots():
    g = mg.Graph()
    init = np.arange(4, dtype=np.float32)
    v = g.variable(init, name="w")
    init[0] = 100.0  # the variable holds a copy of its initial value
    np.testing.assert_array_equal(_np(v.value), [0, 1, 2, 3])
    d1, d2 = v.value, g.variable_data(v)
    assert d1.data_ptr == d2.data_ptr  # both are the variable's own buffer, no copies
    assert np.shares_memory(np.asarray(d1), np.asarray(d2))
    held = v.value
    g.run({}, [], target_operations=[g.assign(v, v * 2.0)])
    np.testing.assert_array_equal(_np(held), [0, 1, 2, 3])  # a held value is not overwritten
    np.testing.assert_array_equal(_np(v.value), [0, 2, 4, 6])
    assert g.read(v) is v or _np(g.run({}, [g.read(v)])[g.read(v)]).tolist() == [0, 2, 4, 6]


def test_set_variable():
    g = mg.Graph()
    v = g.variable(np.zeros((2, 2), np.float32))
    y = v + 1.0
    new = np.array([[1, 2], [3, 4]], np.float32)
    g.set_variable(v, new)
    new[0, 0] = -50.0  # set_variable copies
    np.testing.assert_array_equal(_np(g.run({}, [y])[y]), [[2, 3], [4, 5]])
    g.set_variable(v, [[5, 5], [5, 5]])  # lists take the variable's dtype
    np.testing.assert_array_equal(_np(g.run({}, [y])[y]), [[6, 6], [6, 6]])
    exe = g.compile({}, [y])
    g.set_variable(v, np.full((2, 2), 9, np.float32))
    np.testing.assert_array_equal(_np(exe.run([])[0]), np.full((2, 2), 10))  # compiled code sees the new value


def test_variable_dtypes_from_python_values():
    g = mg.Graph()
    assert g.variable([1.5, 2.0]).dtype == F32
    assert g.variable([1, 2]).dtype == mg.int32
    assert g.variable(np.zeros(2, np.float64)).dtype == mg.float64
    assert g.variable([1, 2], dtype=mg.int8).dtype == mg.int8


def test_target_operations_only():
    g = mg.Graph()
    counter = g.variable(np.array(0, np.int64), name="counter")
    step = g.assign(counter, counter + 1)
    for _ in range(5):
        res = g.run({}, None, target_operations=[step])
        assert res == {}
    np.testing.assert_array_equal(_np(counter.value), 5)
    exe = g.compile({}, [], target_operations=[step])
    for _ in range(3):
        assert exe.run([]) == []
    np.testing.assert_array_equal(_np(counter.value), 8)
    assert step.op_type == "assign_variable"
    assert isinstance(step.name, str) and step.name


def test_target_operation_with_feeds():
    g = mg.Graph()
    w = g.variable(np.ones(3, np.float32))
    grad = g.placeholder((3,), F32, name="grad")
    upd = g.assign(w, w - grad * 0.5)
    exe = g.compile({grad: ((3,), F32)}, [w], target_operations=[upd])
    out = exe.run([np.array([2, 4, 6], np.float32)])[0]
    np.testing.assert_array_equal(_np(out), [1, 1, 1])
    np.testing.assert_array_equal(_np(w.value), [0, -1, -2])


# ---------------- passes must not change results ----------------

def test_constant_folding_does_not_change_results():
    rng = np.random.default_rng(0)
    cv = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    xv = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    g = mg.Graph()
    c = g.constant(cv)
    x = g.placeholder((3, 4), F32)
    folded = (g.logarithm(c) * 2.0 + g.sin(c)) * x  # the constant part folds at compile time
    cp = g.placeholder((3, 4), F32)
    unfolded = (g.logarithm(cp) * 2.0 + g.sin(cp)) * x
    all_const = g.square_root(c) + g.constant(np.float32(1.0))
    res = g.run({x: xv, cp: cv}, [folded, unfolded, all_const])
    want = (np.log(cv.astype(np.float64)) * 2 + np.sin(cv.astype(np.float64))) * xv
    np.testing.assert_allclose(_np(res[folded]), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(res[folded]), _np(res[unfolded]))
    np.testing.assert_allclose(_np(res[all_const]), np.sqrt(cv.astype(np.float64)) + 1, rtol=1e-6)
    # integer wrap-around is the same folded or not
    ci = g.constant(np.array([100, 120], np.int8))
    pi = g.placeholder((2,), mg.int8)
    res = g.run({pi: np.array([100, 120], np.int8)}, [ci * ci + 7, pi * pi + 7])
    vals = list(res.values())
    want = (np.array([100, 120], np.int8) * np.array([100, 120], np.int8) + np.int8(7)).astype(np.int8)
    np.testing.assert_array_equal(_np(vals[0]), want)
    np.testing.assert_array_equal(_np(vals[1]), want)


def test_constant_is_a_copy():
    arr = np.array([1, 2, 3], np.float32)
    g = mg.Graph()
    c = g.constant(arr)
    arr[:] = 0
    y = c + 0.0
    np.testing.assert_array_equal(_np(g.run({}, [y])[y]), [1, 2, 3])


def test_constant_dtypes_from_python_values():
    g = mg.Graph()
    assert g.constant(1.5).dtype == F32
    assert g.constant(3).dtype == mg.int32
    assert g.constant(True).dtype == mg.bool_
    assert g.constant([1.0, 2.0], dtype=mg.float16).dtype == mg.float16
    assert g.constant(np.arange(3, dtype=np.uint16)).dtype == mg.uint16


def test_cse_same_expression_twice():
    g = mg.Graph()
    x = g.placeholder((5,), F32)
    e1 = g.exponent(x) * 2.0 + x
    e2 = g.exponent(x) * 2.0 + x  # built twice: merged by CSE, both targets must come back
    e3 = g.exponent(x) * 3.0 + x  # similar but different
    xv = np.linspace(-2, 2, 5, dtype=np.float32)
    res = g.run({x: xv}, [e1, e2, e3])
    want = np.exp(xv.astype(np.float64)) * 2 + xv
    np.testing.assert_allclose(_np(res[e1]), want, rtol=1e-6)
    np.testing.assert_allclose(_np(res[e2]), want, rtol=1e-6)
    np.testing.assert_allclose(_np(res[e3]), np.exp(xv.astype(np.float64)) * 3 + xv, rtol=1e-6)
    assert res[e1].data_ptr != res[e2].data_ptr  # two results, two buffers
    exe = g.compile({x: ((5,), F32)}, [e1, e2, e1])
    outs = exe.run([xv])
    assert len({o.data_ptr for o in outs}) == 3
    for o in outs:
        np.testing.assert_allclose(_np(o), want, rtol=1e-6)


def test_fused_chain_matches_numpy():
    """A long elementwise chain (fusion territory) with broadcasting and a shared input."""
    rng = np.random.default_rng(3)
    g = mg.Graph()
    a = g.placeholder((None, 7), F32)
    b = g.placeholder((7,), F32)
    y = g.tanh(a * b + 1.0) - g.sigmoid(a) * g.absolute(b) + g.maximum(a, b) / (g.square(b) + 1.0)
    av = rng.standard_normal((40000 // 7, 7)).astype(np.float32)
    bv = rng.standard_normal(7).astype(np.float32)
    r = _np(g.run({a: av, b: bv}, [y])[y])
    A, B = av.astype(np.float64), bv.astype(np.float64)
    want = np.tanh(A * B + 1) - 1 / (1 + np.exp(-A)) * np.abs(B) + np.maximum(A, B) / (B * B + 1)
    np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-5)


# ---------------- Tensor API niceties ----------------

def test_tensor_properties_and_operations():
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float16, name="inp")
    assert x.shape == (None, 3) and x.dtype == mg.float16 and x.ndim == 2 and x.name == "inp"
    y = g.exponent(x, name="ex")
    assert y.name == "ex" and y.operation.op_type == "exponent"
    assert y.operation.input_tensors == [x]
    assert y.operation.output_tensors == [y]
    assert "inp" in repr(x) and "float16" in repr(x)
    with pytest.raises(TypeError):
        bool(x > 0.0)
    with pytest.raises(TypeError):
        len(x)
    assert len(g.placeholder((4, 2), F32)) == 4
    ops = [o.op_type for o in g.operations]
    assert ops.count("placeholder") == 2 and "exponent" in ops
    assert "exponent" in mg.op_names() and "exp" in mg.op_names()
    schemas = {s["name"]: s for s in mg.op_schemas()}
    assert [i[0] for i in schemas["exponent"]["inputs"]] == ["x"]
    assert "exp" in schemas["exponent"]["aliases"]
    assert g.exponent.__doc__ and "e**x" in g.exponent.__doc__
    # method-style calls on tensors
    z = x.exponent()
    assert z.dtype == mg.float16


def test_names_appear_and_auto_names_are_unique():
    g = mg.Graph()
    x = g.placeholder((2,), F32)
    ys = [g.negative(x) for _ in range(3)]
    assert len({y.name for y in ys}) == 3


# ---------------- the demo ----------------

def test_python_m_mpsgraph_runs():
    import importlib.util
    if importlib.util.find_spec("mpsgraph.__main__") is None:
        pytest.fail("python -m mpsgraph: the demo (mpsgraph/__main__.py) does not exist yet")
    env = dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "mpsgraph", "--quiet"], cwd="/", env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, f"python -m mpsgraph failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "matches numpy: True" in p.stdout


# ---------------- random graphs (memory plan, fusion, CSE, folding together) ----------------

def _random_graph(seed):
    """A random DAG of elementwise, broadcasting, reduction and shape ops over three inputs,
    built twice: with mpsgraph and as the equivalent numpy (float64) computation."""
    rng = np.random.default_rng(seed)
    g = mg.Graph()
    shapes = [(4, 6), (6,), (4, 1)]
    vals = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes]
    phs = [g.placeholder((None,) * len(s), F32) for s in shapes]
    pool = [(p, v.astype(np.float64)) for p, v in zip(phs, vals)]
    pool.append((g.constant(np.float32(0.75)), np.float64(np.float32(0.75))))
    unary = [(g.tanh, np.tanh), (g.sigmoid, lambda a: 1 / (1 + np.exp(-a))), (g.negative, np.negative),
             (g.absolute, np.abs), (lambda t: g.exponent(g.minimum(t, 2.0)), lambda a: np.exp(np.minimum(a, 2.0))),
             (g.square, np.square), (lambda t: g.square_root(g.absolute(t)), lambda a: np.sqrt(np.abs(a)))]
    binary = [(g.addition, np.add), (g.subtraction, np.subtract), (g.multiplication, np.multiply),
              (g.maximum, np.maximum), (g.minimum, np.minimum),
              (lambda a, b: a / (g.absolute(b) + 1.0), lambda a, b: a / (np.abs(b) + 1.0))]
    for _ in range(rng.integers(8, 60)):
        kind = rng.random()
        if kind < 0.4:
            (t, v) = pool[rng.integers(len(pool))]
            f, nf = unary[rng.integers(len(unary))]
            pool.append((f(t), nf(v)))
        elif kind < 0.85:
            (a, va), (b, vb) = pool[rng.integers(len(pool))], pool[rng.integers(len(pool))]
            try:
                np.broadcast_shapes(np.shape(va), np.shape(vb))
            except ValueError:
                continue
            f, nf = binary[rng.integers(len(binary))]
            pool.append((f(a, b), nf(va, vb)))
        else:
            (t, v) = pool[rng.integers(len(pool))]
            if np.ndim(v) == 2:
                ax = int(rng.integers(2))
                if rng.random() < 0.5:
                    pool.append((g.reduction_sum(t, axes=ax), np.sum(v, axis=ax, keepdims=True)))
                else:
                    pool.append((g.transpose(t), v.T))
            elif np.ndim(v) == 1:
                pool.append((g.reverse(t, axes=0), v[::-1]))
    k = int(rng.integers(1, 5))
    picks = list(rng.choice(np.arange(4, len(pool)), size=min(k, len(pool) - 4), replace=False)) or [len(pool) - 1]
    targets = [pool[i] for i in picks]
    return g, phs, vals, targets


@pytest.mark.parametrize("seed", range(60))
def test_random_graphs_match_numpy(seed):
    g, phs, vals, targets = _random_graph(seed)
    ts = [t for t, _ in targets]
    res = g.run(dict(zip(phs, vals)), ts)
    for t, want in targets:
        np.testing.assert_allclose(_np(res[t]), want, rtol=2e-5, atol=2e-5, err_msg=f"seed {seed}")
    # the same through one executable, twice (the arena is reused), and with out= buffers
    exe = g.compile({p: (p.shape, F32) for p in phs}, ts)
    for _ in range(2):
        outs = exe.run(vals)
        for o, (_, want) in zip(outs, targets):
            np.testing.assert_allclose(_np(o), want, rtol=2e-5, atol=2e-5, err_msg=f"seed {seed}")
    bufs = [np.full(np.shape(w), np.nan, np.float32) for _, w in targets]
    exe.run(vals, out=bufs)
    for b, (_, want) in zip(bufs, targets):
        np.testing.assert_allclose(b, want, rtol=2e-5, atol=2e-5, err_msg=f"seed {seed} out=")


def test_split_returns_a_tuple_even_for_one_part():
    g = mg.Graph()
    x = g.placeholder((4, 2), F32)
    parts = g.split(x, num_splits=1, axis=0)
    assert isinstance(parts, tuple) and len(parts) == 1
    parts = g.split(x, split_sizes=[1, 3], axis=0)
    assert isinstance(parts, tuple) and len(parts) == 2
    xv = np.arange(8, dtype=np.float32).reshape(4, 2)
    res = g.run({x: xv}, list(parts))
    np.testing.assert_array_equal(_np(res[parts[0]]), xv[:1])
    np.testing.assert_array_equal(_np(res[parts[1]]), xv[1:])


def test_reduction_defaults_mpsgraph_and_numpy_names():
    g = mg.Graph()
    x = g.placeholder((2, 3), F32)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b, c, d = g.reduction_sum(x), g.sum(x), g.mean(x, axes=1), x.sum(axis=1)
    assert a.shape == (1, 1) and b.shape == () and c.shape == (2, 1) and d.shape == (2,)
    res = g.run({x: xv}, [a, b, c, d])
    np.testing.assert_array_equal(_np(res[a]), [[15]])
    np.testing.assert_array_equal(_np(res[b]), 15)
    np.testing.assert_array_equal(_np(res[c]), [[1], [4]])
    np.testing.assert_array_equal(_np(res[d]), [3, 12])
    e = g.argmax(x)
    assert e.dtype == mg.int32 and e.shape == ()
    np.testing.assert_array_equal(_np(g.run({x: xv}, [e])[e]), 5)
