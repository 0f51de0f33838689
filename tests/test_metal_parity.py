"""Metal backend parity: the same graphs on mg.Device("metal") and on the CPU backend must give
the same results (bit-exact for integers and bools, within a few ulp for floats).

It reuses the conformance table (tests/conformance.py: every elementwise op and the other
families that have rows, with their broadcasting, rank-0, zero-size and special-value cases),
adds rows for the ops the table does not cover (autodiff helpers, swap_axes, ...), and checks
the Metal-specific behaviour: float64 refused, zero-copy feeds and out= buffers, variables,
zero-size tensors inside a program, K >= 32767 matmuls, rank and size limits, concurrency.

Skipped, with the reason, where "metal:0" is not a device of this build (Linux, or macOS
without the Metal backend / without a GPU). Nothing here has run on Apple hardware yet; see
docs/metal.md.

MPSGRAPH_PARITY_SELFTEST=1 runs the file anywhere with the CPU backend standing in for Metal:
that checks the harness itself (graph building, comparisons), not the Metal backend, and skips
the Metal-only checks.
"""
import os
import re
import threading

import numpy as np
import pytest

import mpsgraph as mg
from mpsgraph import _core

SELFTEST = os.environ.get("MPSGRAPH_PARITY_SELFTEST") == "1"
if "metal:0" not in _core.devices() and not SELFTEST:
    pytest.skip("no Metal device in this build (devices: %s): the Metal backend is built only on macOS with "
                "Apple's SDK and needs an Apple GPU; see docs/metal.md" % ", ".join(_core.devices()),
                allow_module_level=True)

import conformance as cf  # noqa: E402  (tests/ is on sys.path through conftest.py)

METAL = mg.Device("cpu") if SELFTEST else mg.Device("metal")
CPU = mg.Device("cpu")
metal_only = pytest.mark.skipif(SELFTEST, reason="checks the Metal backend itself (self-test runs on the CPU)")

# Metal's math library and MPSGraph's reduction order differ from libm and the CPU loops by a
# few ulp; semantic differences (NaN, signed zero, wrap-around, rounding mode) are far larger.
PARITY_TOL = {"float16": (5e-3, 1e-4), "bfloat16": (3e-2, 1e-3), "float32": (5e-5, 1e-6)}

# Ops the Metal backend must lower: the elementwise family and the families of issue 5.
REQUIRED = set(cf.REQUIRED_OPS) | {s["name"] for s in mg.op_schemas() if s["family"] == "elementwise"} | {
    "sum_to_like", "broadcast_like", "full_like", "stop_gradient", "reshape_like", "swap_axes", "slice_gradient",
    "tile_gradient", "split_like"}

# Huge arguments of periodic functions: libm reduces them exactly, GPU math libraries do not.
_LARGE_ARGUMENT_ROWS = {"sin", "cos", "tan"}


def _to_numpy(td):
    return np.array(td.numpy(), copy=True)


def _not_lowered(err):
    """The op named by a GraphNotImplementedError, or None."""
    m = re.match(r"\[(\w+)\]", str(err))
    return m.group(1) if m and "metal" in str(err) else None


def _run_both(g, feeds, targets, target_operations=None):
    cpu = g.run(feeds, targets, target_operations=target_operations, device=CPU)
    try:
        met = g.run(feeds, targets, target_operations=target_operations, device=METAL)
    except mg.GraphNotImplementedError as e:
        op = _not_lowered(e)
        if op is not None and op not in REQUIRED:
            pytest.skip(f"'{op}' is outside the Metal backend's op set: {e}")
        if "needs macOS" in str(e):
            pytest.skip(str(e))
        raise
    return cpu, met


def _assert_same(got, want, dtype_name, what, tol=None):
    assert got.shape == want.shape, f"{what}: metal shape {got.shape} != cpu {want.shape}"
    assert got.dtype == want.dtype, f"{what}: metal dtype {got.dtype} != cpu {want.dtype}"
    if dtype_name in PARITY_TOL:
        rtol, atol = tol or PARITY_TOL[dtype_name]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _dtype_name(a):
    return "bfloat16" if a.dtype == cf.BF16 else str(a.dtype)


# ---------------------------------------------------------------------------------------
# the conformance table, Metal against CPU


def _table_params():
    for r in cf.ROWS:
        for dt in r.dtypes:
            if dt != "float64":
                yield pytest.param(r, dt, id=f"{r.name}-{dt}")


def _build_row(row, dtype):
    """The row's cases for dtype in one graph, with the inputs conformance.check_row draws."""
    rng = np.random.default_rng(cf.seed_for(row.name, dtype))
    g = mg.Graph()
    feeds, outs, labels = {}, [], []
    for ci, case in enumerate(cf.cases_for(row, dtype)):
        n = len(case.values) if case.values is not None else len(case.shapes)
        try:
            in_dts = row.in_dtypes(dtype, n)
        except TypeError:  # an older table without per-case input counts
            in_dts = row.in_dtypes(dtype)
        if case.values is not None:
            arrays = [cf.make_value(v, in_dts[i]) for i, v in enumerate(case.values)]
        else:
            arrays = [row.dom_for(i).draw(rng, s, in_dts[i]) for i, s in enumerate(case.shapes)]
        if row.name in _LARGE_ARGUMENT_ROWS and case.label == "special":
            arrays = [np.where(np.abs(a.astype(np.float64)) > 1e4, a.dtype.type(0.25), a).astype(a.dtype)
                      for a in arrays]
        attrs = dict(case.attrs)
        if row.dtype_attr:
            attrs[row.dtype_attr] = dtype
        try:
            ts = []
            for a, idt in zip(arrays, in_dts):
                p = g.placeholder(a.shape, idt)
                feeds[p] = a
                ts.append(p)
            built = cf._as_tuple(cf.build(g, row, ts, attrs))
        except mg.GraphError:
            continue  # a case the op refuses at build time: nothing to compare
        for k, t in enumerate(built):
            outs.append(t)
            labels.append(f"case {ci} {case.label} shapes={case.shapes} attrs={case.attrs} output {k}")
    return g, feeds, outs, labels


@pytest.mark.parametrize("row,dtype", list(_table_params()))
def test_conformance_row_matches_cpu(row, dtype):
    g, feeds, outs, labels = _build_row(row, dtype)
    if not outs:
        pytest.skip("no case of this row builds for this dtype")
    cpu, met = _run_both(g, feeds, outs)
    tol = row.tol.get(dtype)
    if tol is not None and dtype in PARITY_TOL:
        tol = tuple(max(a, b) for a, b in zip(tol, PARITY_TOL[dtype]))
    failures = []
    for t, label in zip(outs, labels):
        want, got = _to_numpy(cpu[t]), _to_numpy(met[t])
        try:
            _assert_same(got, want, _dtype_name(want), f"{row.name}[{dtype}] {label}", tol)
        except AssertionError as e:
            failures.append(str(e).strip())
    assert not failures, f"{len(failures)} output(s) differ between metal and cpu:\n" + "\n".join(failures)


# ---------------------------------------------------------------------------------------
# ops the table does not cover


def _rand(shape, dtype="float32", seed=0, lo=-3, hi=3):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def _check(build, inputs, dtype_tol=None):
    g = mg.Graph()
    ps = [g.placeholder(a.shape, str(a.dtype)) for a in inputs]
    outs = build(g, *ps)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    cpu, met = _run_both(g, dict(zip(ps, inputs)), outs)
    for k, t in enumerate(outs):
        want, got = _to_numpy(cpu[t]), _to_numpy(met[t])
        _assert_same(got, want, _dtype_name(want), f"output {k}", dtype_tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_autodiff_helpers(dtype):
    x, like = _rand((4, 3, 5), dtype), _rand((3, 1), dtype)
    _check(lambda g, a, b: [g.sum_to_like(a, b), g.broadcast_like(b, a), g.full_like(a, 2.5),
                            g.stop_gradient(a), g.reshape_like(a, g.reshape(a, (12, 5)))], [x, like])


def test_swap_axes_split_like_tile_gradient_slice_gradient():
    x = _rand((4, 6, 5))
    _check(lambda g, a: [g.swap_axes(a, 0, 2), g.swap_axes(a, -1, 1)], [x])
    _check(lambda g, a, b, c: g.split_like(a, [b, c], axis=1), [x, _rand((4, 2, 5)), _rand((4, 4, 5))])
    _check(lambda g, dy, like: g.tile_gradient(dy, like, multiples=[2, 1, 3]), [_rand((8, 6, 15)), x])
    _check(lambda g, dy, like: g.slice_gradient(dy, like, starts=[1, 5, 0], ends=[4, 0, 5], strides=[2, -2, 1]),
           [_rand((2, 3, 5)), x])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gradients_of_a_small_model(dtype):
    """Backward graphs use sum_to_like, broadcast_like, slice_gradient, tile_gradient, transposes."""
    g = mg.Graph()
    x = g.placeholder((8, 5), dtype)
    w = g.placeholder((5, 3), dtype)
    b = g.placeholder((3,), dtype)
    h = g.tanh(g.matrix_multiplication(x, w) + b)
    h = g.tile(g.strided_slice(h, starts=[0, 0], ends=[8, 3], strides=[2, 1]), multiples=[2, 1])
    loss = g.reduction_sum(h * h, keep_dims=False)
    grads = g.gradients(loss, [x, w, b])
    feeds = {x: _rand((8, 5), dtype, 1), w: _rand((5, 3), dtype, 2, -1, 1), b: _rand((3,), dtype, 3)}
    targets = [loss] + [grads[v] for v in (x, w, b)]
    cpu, met = _run_both(g, feeds, targets)
    tol = (2e-2, 2e-2) if dtype == "float16" else (1e-4, 1e-5)
    for t in targets:
        _assert_same(_to_numpy(met[t]), _to_numpy(cpu[t]), dtype, "gradient", tol)


def test_composites_decompose_to_lowered_ops():
    x = _rand((6, 10), seed=4)
    labels = np.eye(10, dtype=np.float32)[np.arange(6) % 10]
    _check(lambda g, a, l: [g.softmax(a), g.log_softmax(a, axis=0), g.gelu(a), g.gelu(a, approximate="tanh"),
                            g.silu(a), g.softplus(a), g.elu(a), g.selu(a), g.mish(a), g.leaky_relu(a),
                            g.hard_sigmoid(a), g.hard_swish(a), g.log_sigmoid(a), g.softsign(a),
                            g.softmax_cross_entropy(a, l), g.sigmoid_cross_entropy(a, l),
                            g.mean_squared_error(a, l)], [x, labels], (1e-4, 1e-5))


# ---------------------------------------------------------------------------------------
# Metal specifics


@metal_only
def test_float64_is_refused_with_a_clear_type_error():
    g = mg.Graph()
    x = g.placeholder((3,), "float64")
    y = g.exponent(x)
    with pytest.raises(mg.GraphTypeError, match=r"float64 is not supported by MPSGraph; cast to float32"):
        g.run({x: np.ones(3)}, [y], device=METAL)
    # the graph stays usable, and float32 works
    x32 = g.placeholder((3,), "float32")
    r = g.run({x32: np.ones(3, np.float32)}, [g.exponent(x32)], device=METAL)
    assert np.allclose(list(r.values())[0].numpy(), np.e)


@metal_only
def test_an_op_without_lowering_says_so():
    g = mg.Graph()
    if not hasattr(g, "random_uniform_like"):
        pytest.skip("no op outside the Metal backend's set is registered")
    x = g.placeholder((3,), "float32")
    r = g.random_uniform_like(x)
    with pytest.raises(mg.GraphNotImplementedError, match=r"\[random_uniform_like\] is not implemented on the metal backend"):
        g.run({x: np.ones(3, np.float32)}, [r], device=METAL)


@metal_only
def test_results_live_in_metal_buffers():
    g = mg.Graph()
    x = g.placeholder((4, 4), "float32")
    y = x * 2.0
    r = g.run({x: np.ones((4, 4), np.float32)}, [y], device=METAL)[y]
    assert r.__dlpack_device__() == (8, 0)  # kDLMetal
    np.testing.assert_array_equal(r.numpy(), np.full((4, 4), 2, np.float32))


def _page_aligned(nbytes, dtype, page=16384):
    raw = np.empty(nbytes + page, np.uint8)
    off = (-raw.ctypes.data) % page
    return raw[off:off + nbytes].view(dtype)


@pytest.mark.parametrize("aligned", [True, False])
def test_zero_copy_inputs_and_out_buffers(aligned):
    n = 16384 // 4 * 4  # 16 KiB of float32 when aligned: wrapped with newBufferWithBytesNoCopy
    if aligned:
        a, out = _page_aligned(n * 4, np.float32), _page_aligned(n * 4, np.float32)
    else:
        a, out = np.empty(n + 1, np.float32)[1:], np.empty(n + 1, np.float32)[1:]  # copied once
    a[:] = np.arange(n, dtype=np.float32)
    g = mg.Graph()
    x = g.placeholder((n,), "float32")
    y = x * 3.0 + 1.0
    exe = g.compile({x: ((n,), "float32")}, [y], device=METAL)
    res = exe.run([a], out=[out])
    np.testing.assert_array_equal(out, a * 3 + 1)
    np.testing.assert_array_equal(res[0].numpy(), a * 3 + 1)


def test_variables_read_before_and_assign_after_the_run():
    g = mg.Graph()
    v = g.variable(np.array([1.0, 2.0], np.float32), name="v")
    w = g.variable(np.array([5, 6], np.int32), name="w")
    read = v * 1.0
    ops = [g.assign(v, v + 10.0), g.assign(w, w * 2)]
    r = g.run({}, [read], target_operations=ops, device=METAL)
    np.testing.assert_array_equal(r[read].numpy(), [1, 2])  # the pre-run value
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [11, 12])
    np.testing.assert_array_equal(g.variable_data(w).numpy(), [10, 12])
    g.run({}, [], target_operations=ops, device=METAL)
    np.testing.assert_array_equal(g.variable_data(v).numpy(), [21, 22])


def test_zero_size_tensors_inside_a_program():
    e = np.zeros((0, 3), np.float32)
    x = _rand((2, 3))
    _check(lambda g, a, b: [g.concat([a, b], axis=0), g.reduction_sum(a, axes=[0]), g.mean(b),
                            g.matrix_multiplication(g.transpose(a), a), a * 2.0,
                            g.pad(a, left_padding=[1, 0], right_padding=[0, 0], constant_value=7.0)], [e, x])


def test_rank_zero_feeds_and_results():
    _check(lambda g, a, b: [a + b, a * b, g.maximum(a, b), g.stack([a, b])],
           [np.array(2.5, np.float32), np.array(-1.0, np.float32)])


def test_matmul_with_k_of_32767_or_more_is_split():
    a, b = _rand((3, 40000), seed=5, lo=-1, hi=1), _rand((40000, 2), seed=6, lo=-1, hi=1)
    _check(lambda g, x, y: g.matrix_multiplication(x, y), [a, b], (1e-3, 1e-3))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_matmul_is_exact(dtype):
    a, b = _rand((2, 3, 7), dtype, 7, 0, 9), _rand((7, 5), dtype, 8, 0, 9)
    _check(lambda g, x, y: g.matrix_multiplication(x, y), [a, b])


@metal_only
def test_rank_above_16_is_refused_before_mpsgraph():
    g = mg.Graph()
    x = g.placeholder((1,) * 17, "float32")
    with pytest.raises(mg.GraphValueError, match="16 dimensions"):
        g.run({x: np.ones((1,) * 17, np.float32)}, [x + 1.0], device=METAL)


def test_concurrent_runs_are_serialised_safely():
    g = mg.Graph()
    x = g.placeholder((256, 256), "float32")
    y = g.matrix_multiplication(x, x) + 1.0
    exe = g.compile({x: ((256, 256), "float32")}, [y], device=METAL)
    inputs = [_rand((256, 256), seed=i, lo=-1, hi=1) for i in range(8)]
    wants = [i @ i + 1.0 for i in inputs]
    futures = [exe.run_async([i]) for i in inputs]
    for f, want in zip(futures, wants):
        np.testing.assert_allclose(f.result()[0].numpy(), want, rtol=1e-4, atol=1e-4)
    errors = []

    def worker(k):
        try:
            gg = mg.Graph()
            p = gg.placeholder((64,), "int32")
            q = gg.modulo(p, 7) - k
            r = gg.run({p: np.arange(64, dtype=np.int32)}, [q], device=METAL)[q].numpy()
            np.testing.assert_array_equal(r, np.arange(64) % 7 - k)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@metal_only
def test_bfloat16_needs_macos_14_or_runs():
    g = mg.Graph()
    x = g.placeholder((4,), "bfloat16")
    y = x + x
    import ml_dtypes
    a = np.array([1, 2, 3, 4], ml_dtypes.bfloat16)
    try:
        r = g.run({x: a}, [y], device=METAL)[y].numpy()
    except mg.GraphNotImplementedError as e:
        assert "bfloat16 needs macOS 14" in str(e)
        return
    np.testing.assert_array_equal(np.asarray(r, np.float32), [2, 4, 6, 8])
