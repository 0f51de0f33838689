"""Graphs that consume a data-dependent value (non_zero_indices: its row count is known only
once it has run), checked against numpy: the staged runs (docs/data_dependent.md), their
caching, unknown-dim placeholders, compile() and Executable.run with out=, random draws and
variable reads made once per run, assigns landing once, folding, pictures, memory plans and
errors. The op's own values are rows of the conformance table (tests/conformance_dynamic.py)."""
import numpy as np
import pytest

import mpsgraph as mg

RNG = np.random.default_rng(11)


def _np(td):
    return np.array(td.numpy(), copy=True)


def _mask(shape, p=0.5):
    return (RNG.random(shape) < p).astype(np.float32) * RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def _consumers(g, x):
    """nz = non_zero_indices(x) and values computed from it with existing ops."""
    nz = g.non_zero_indices(x)
    f = g.cast(nz, "float32")
    col_sums = g.reduction_sum(f, axes=0, keep_dims=False)          # sum over the rows
    gram = g.matrix_multiplication(g.transpose(f, [1, 0]), f)     # (rank, rank)
    shape = g.shape_of(nz)                                        # (count, rank)
    return nz, col_sums, gram, shape


def _expected(xv):
    nz = np.argwhere(xv).astype(np.int32)
    f = nz.astype(np.float64)
    return nz, f.sum(axis=0), f.T @ f, np.array(nz.shape, np.int32)


def test_consumers_run_twice_with_different_counts_and_reuse_stages():
    g = mg.Graph()
    x = g.placeholder((4, 5), "float32")
    outs = _consumers(g, x)
    exe = g.compile({x: ((4, 5), "float32")}, list(outs))
    first = exe.num_compilations  # nothing to compute before the op (it reads x): no prefix program
    x1, x2 = _mask((4, 5), 0.3), _mask((4, 5), 0.8)
    assert np.count_nonzero(x1) != np.count_nonzero(x2)
    for xv in (x1, x2, x1, x2):
        got = exe.run([xv])
        for k, (a, w) in enumerate(zip(got, _expected(xv))):
            np.testing.assert_allclose(_np(a), w, rtol=1e-6, err_msg=f"output {k}")
    # one final stage per count seen; the repeated counts compiled nothing
    assert exe.num_compilations == first + 2
    assert exe.num_specializations == 1


def test_graph_run_cache_and_unknown_dim_placeholders():
    g = mg.Graph()
    x = g.placeholder((None, None), "int32")
    nz, col_sums, gram, shape = _consumers(g, x)
    assert nz.shape == (None, 2) and nz.dtype == mg.int32
    exe = g.compile({x: ((None, None), "int32")}, [nz, col_sums, gram, shape])
    for shp in ((3, 4), (6, 2), (3, 4)):
        xv = RNG.integers(-1, 2, shp).astype(np.int32)
        got = exe.run([xv])
        for a, w in zip(got, _expected(xv)):
            np.testing.assert_allclose(_np(a), w)
        res = g.run({x: xv}, [nz, shape])
        np.testing.assert_array_equal(_np(res[nz]), np.argwhere(xv))
        np.testing.assert_array_equal(_np(res[shape]), np.argwhere(xv).shape)
    assert exe.num_specializations == 2


def test_two_non_zero_in_sequence():
    """The second non_zero_indices reads the first one's result: three stages."""
    g = mg.Graph()
    x = g.placeholder((3, 4, 2), "float32")
    nz1 = g.non_zero_indices(x)                          # (c1, 3)
    nz2 = g.non_zero_indices(g.greater_than(nz1, 1))     # (c2, 2): indices into nz1
    total = g.reduction_sum(g.cast(nz2, "float32"), keep_dims=False)
    exe = g.compile({x: ((3, 4, 2), "float32")}, [nz2, total, nz1])
    for p in (0.2, 0.9, 0.2):
        xv = _mask((3, 4, 2), p)
        a1 = np.argwhere(xv)
        a2 = np.argwhere(a1 > 1)
        got = exe.run([xv])
        np.testing.assert_array_equal(_np(got[0]), a2)
        np.testing.assert_allclose(_np(got[1]), a2.sum())
        np.testing.assert_array_equal(_np(got[2]), a1)
    stages = {e["stage"] for e in exe.memory_plan()}
    assert stages == {0, 1, 2}


def test_out_buffers():
    g = mg.Graph()
    x = g.placeholder((6,), "float32")
    nz = g.non_zero_indices(x)
    s = g.reduction_sum(nz, keep_dims=False)
    exe = g.compile({x: ((6,), "float32")}, [nz, s])
    xv = np.array([0, 1, 0, 2, 3, 0], np.float32)
    out = [mg.TensorData.empty((3, 1), "int32"), mg.TensorData.empty((), "int32")]
    got = exe.run([xv], out=out)
    assert got[0].data_ptr == out[0].data_ptr and got[1].data_ptr == out[1].data_ptr
    np.testing.assert_array_equal(_np(out[0]), [[1], [3], [4]])
    assert int(_np(out[1])) == 8
    with pytest.raises(mg.GraphValueError, match=r"out buffer 0 is int32\(2, 1\) but the target is int32\(3, 1\)"):
        exe.run([xv], out=[mg.TensorData.empty((2, 1), "int32"), out[1]])


def test_random_draw_made_once_per_run():
    """The mask comes from a random draw: the indices, the returned draw and a value computed
    from the draw after the op all see the same draw, and the next run draws again."""
    g = mg.Graph()
    r = g.random_uniform((50,), seed=5)
    nz = g.non_zero_indices(g.greater_than(r, 0.5))
    # computed in the stage after the op, from the draw made before it
    later = g.reduction_sum(g.cast(nz, "float32"), keep_dims=False) + g.reduction_sum(r, keep_dims=False)
    exe = g.compile({}, [r, nz, later])
    draws = []
    for _ in range(3):
        rv, nzv, lv = (_np(t) for t in exe.run([]))
        np.testing.assert_array_equal(nzv, np.argwhere(rv > 0.5))
        np.testing.assert_allclose(lv, np.argwhere(rv > 0.5).sum() + rv.astype(np.float64).sum(), rtol=1e-5)
        draws.append(rv)
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])


def test_variable_read_once_and_assign_lands_once():
    """The variable is read before the op (its value picks the mask) and after it; the assign
    downstream of the op adds the count once per run, after every read."""
    g = mg.Graph()
    x = g.placeholder((8,), "float32")
    v = g.variable(np.float32(0.0), name="acc")
    nz = g.non_zero_indices(g.greater_than(x, v))
    count = g.cast(g.shape_of(nz), "float32")
    new = v + g.reduction_sum(count[0:1], keep_dims=False)
    step = g.assign(v, new)
    exe = g.compile({x: ((8,), "float32")}, [v, new], target_operations=[step])
    xv = np.arange(8, dtype=np.float32)
    acc = 0.0
    for _ in range(4):
        before, after = (float(_np(t)) for t in exe.run([xv]))
        c = np.count_nonzero(xv > acc)
        assert before == acc and after == acc + c
        acc += c
        assert float(_np(g.variable_data(v))) == acc


def test_constant_input_is_folded():
    g = mg.Graph()
    c = g.constant(np.array([[0, 3], [5, 0]], np.int16))
    nz = g.non_zero_indices(c)
    s = g.reduction_sum(nz, axes=0, keep_dims=False)
    exe = g.compile({}, [nz, s])
    assert exe.num_compilations == 1  # no stages: folded at specialisation
    assert {e["stage"] for e in exe.memory_plan()} == {0}
    got = exe.run([])
    np.testing.assert_array_equal(_np(got[0]), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(_np(got[1]), [1, 1])


def test_memory_plan_picture_and_profile():
    g = mg.Graph()
    x = g.placeholder((3, 3), "float32", name="x")
    y = g.relu(x, name="y")
    nz = g.non_zero_indices(y, name="nz")
    out = g.reduction_sum(nz, keep_dims=False, name="out")
    exe = g.compile({x: ((3, 3), "float32")}, [out])
    with mg.profiler.profile() as prof:
        exe.run([np.eye(3, dtype=np.float32)])
    assert prof.ops["non_zero_indices"][1] == 1 and prof.ops["relu"][1] == 1
    plan = exe.memory_plan()
    dd = [e for e in plan if e["storage"] == "data_dependent"]
    assert [(e["node"], e["stage"], e["nbytes"]) for e in dd] == [("nz", 0, 3 * 2 * 4)]
    assert any(e["node"] == "y" and e["stage"] == 0 for e in plan)
    assert any(e["node"] == "out" and e["stage"] == 1 and e["storage"] == "output" for e in plan)
    text = g.format()
    line = next(ln for ln in text.splitlines() if "non_zero_indices" in ln)
    assert "int32[None, 2]" in line and "data-dependent" in line
    assert "dashed" in g.to_dot()


def test_schema_and_not_differentiable():
    schema = {s["name"]: s for s in mg.op_schemas()}["non_zero_indices"]
    assert schema["differentiable"] == "no"
    g = mg.Graph()
    x = g.placeholder((4,), "float32")
    nz = g.non_zero_indices(x)
    loss = g.reduction_sum(g.cast(nz, "float32"), keep_dims=False) + g.reduction_sum(x * x, keep_dims=False)
    dx = g.gradients(loss, [x])[x]  # only through x * x
    xv = np.array([0, 1, -2, 0], np.float32)
    np.testing.assert_allclose(_np(g.run({x: xv}, [dx])[dx]), 2 * xv)


def test_value_computed_before_is_not_recomputed_and_feeds_later_stage():
    """A value computed before the op and used after it comes from the first stage: its
    kernel runs once per run (the profile counts calls)."""
    g = mg.Graph()
    x = g.placeholder((5,), "float32")
    e = g.exponent(x)
    nz = g.non_zero_indices(g.greater_than(e, 1.5))
    later = g.reduction_sum(e, keep_dims=False) + g.cast(g.reduction_sum(nz, keep_dims=False), "float32")
    exe = g.compile({x: ((5,), "float32")}, [later])
    xv = np.array([0.1, 1.0, -1.0, 2.0, 0.3], np.float32)
    with mg.profiler.profile() as prof:
        got = _np(exe.run([xv])[0])
    assert prof.ops["exponent"][1] == 1
    ev = np.exp(xv.astype(np.float64))
    np.testing.assert_allclose(got, ev.sum() + np.argwhere(ev > 1.5).sum(), rtol=1e-5)


def test_composite_after_the_op_is_expanded_in_the_later_stage():
    g = mg.Graph()
    x = g.placeholder((4, 4), "float32")
    f = g.cast(g.non_zero_indices(x), "float32")
    sm = g.softmax(f, axis=0)  # a composite over a (count, 2) input
    exe = g.compile({x: ((4, 4), "float32")}, [sm])
    for p in (0.3, 0.7):
        xv = _mask((4, 4), p)
        a = np.argwhere(xv).astype(np.float64)
        e = np.exp(a - a.max(axis=0))
        np.testing.assert_allclose(_np(exe.run([xv])[0]), e / e.sum(axis=0), rtol=1e-5, atol=1e-7)


def test_a_count_that_does_not_fit_raises_clearly_and_lands_nothing():
    """A later stage's specialisation fails for one count (the shapes do not broadcast): a
    clear error naming the op, no assign lands, and the executable still runs other counts."""
    g = mg.Graph()
    x = g.placeholder((5,), "float32")
    v = g.variable(np.float32(0.0))
    nz = g.cast(g.non_zero_indices(x), "float32")             # (count, 1)
    y = nz + g.constant(np.arange(3, dtype=np.float32).reshape(3, 1))
    step = g.assign(v, v + 1.0)
    exe = g.compile({x: ((5,), "float32")}, [y], target_operations=[step])
    with pytest.raises(mg.GraphValueError, match=r"\[addition\].*\(2, 1\).*\(3, 1\)"):
        exe.run([np.array([1, 0, 2, 0, 0], np.float32)])
    assert float(_np(g.variable_data(v))) == 0.0
    got = _np(exe.run([np.array([1, 0, 2, 0, 3], np.float32)])[0])
    np.testing.assert_array_equal(got, [[0], [3], [6]])
    assert float(_np(g.variable_data(v))) == 1.0


def test_dims_beyond_int32_are_refused_naming_the_op():
    g = mg.Graph()
    with pytest.raises(mg.GraphValueError, match=r"\[non_zero_indices\] dim 2147483648 of float32\(2147483648, 0\) "
                                                 r"does not fit the int32 indices"):
        g.non_zero_indices(g.placeholder((2 ** 31, 0), "float32"))
    x = g.placeholder((None, 0), "float32")
    nz = g.non_zero_indices(x)  # known only when fed
    with pytest.raises(mg.GraphValueError, match=r"\[non_zero_indices\] dim 2147483648"):
        g.run({x: np.zeros((2 ** 31, 0), np.float32)}, [nz])
    np.testing.assert_array_equal(_np(g.run({x: np.zeros((3, 0), np.float32)}, [nz])[nz]), np.zeros((0, 2)))


def test_folded_op_feeding_a_composite():
    """non_zero_indices of a constant folds at specialisation; the composite after it, kept
    whole while its input dims were unknown, is then expanded for the CPU."""
    g = mg.Graph()
    c = g.constant(np.array([[0, 1], [2, 0], [0, 3]], np.float32))
    sm = g.softmax(g.cast(g.non_zero_indices(c), "float32"), axis=0)
    a = np.argwhere(np.array([[0, 1], [2, 0], [0, 3]])).astype(np.float64)
    e = np.exp(a - a.max(axis=0))
    np.testing.assert_allclose(_np(g.run({}, [sm])[sm]), e / e.sum(axis=0), rtol=1e-6)
