"""Metal backend parity: the same graphs on mg.Device("metal") and on the CPU backend must give
the same results (bit-exact for integers and bools, within a few ulp for floats).

It reuses the conformance table (tests/conformance.py: every elementwise op and the other
families that have rows, with their broadcasting, rank-0, zero-size and special-value cases),
adds rows for the ops the table does not cover (autodiff helpers, swap_axes, convolution, pooling,
resize, random numbers, the newer shape ops with their edge cases, ...), and checks
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

# Ops the Metal backend must lower: the elementwise family, the families of issue 5 and the
# primitives lowered in the second pass (random, convolution, pooling, resize, the newer shape ops).
REQUIRED = set(cf.REQUIRED_OPS) | {s["name"] for s in mg.op_schemas() if s["family"] == "elementwise"} | {
    "sum_to_like", "broadcast_like", "full_like", "stop_gradient", "reshape_like", "swap_axes", "slice_gradient",
    "tile_gradient", "split_like",
    "log1p", "expm1", "random_uniform_like",
    "convolution", "convolution_data_gradient", "convolution_weights_gradient",
    "max_pooling_nd", "max_pooling_nd_return_indices", "max_pooling_nd_gradient", "max_pooling_nd_gather",
    "avg_pooling_nd", "avg_pooling_nd_gradient", "sum_pooling_nd", "sum_pooling_nd_gradient",
    "resize", "resize_gradient",
    "pad", "pad_gradient", "band_part", "one_hot", "space_to_depth_2d", "depth_to_space_2d",
    "sparse_tensor", "sparse_matmul", "non_zero_indices",
    "gather", "gather_nd", "gather_along_axis", "scatter", "scatter_with_data", "scatter_nd", "scatter_nd_with_data",
    "scatter_along_axis", "scatter_along_axis_with_data",
    "sort", "arg_sort", "top_k", "bottom_k",
    "cumulative_sum", "cumulative_product", "cumulative_minimum", "cumulative_maximum",
    "if_then_else", "while_loop", "for_loop",
    "fast_fourier_transform", "real_to_hermitean_fft", "hermitean_to_real_fft",
    # composites lowered to MPSGraph's own op (issue 12; the others are expanded)
    "softmax", "softmax_cross_entropy", "normalization", "batch_normalization", "layer_normalization",
    "instance_normalization", "group_normalization", "leaky_relu", "stochastic_gradient_descent", "adam", "adamw",
    "convolution_2d", "convolution_3d", "avg_pooling_2d", "avg_pooling_4d", "max_pooling_2d", "max_pooling_4d",
    # gradient composites lowered to MPSGraph's gradient selectors
    "softmax_gradient", "softmax_cross_entropy_gradient", "batch_normalization_gradient",
    "instance_normalization_gradient", "avg_pooling_2d_gradient", "avg_pooling_4d_gradient",
    "scaled_dot_product_attention", "single_gate_rnn", "lstm", "gru",
    "matrix_inverse", "solve", "hamming_distance", "stencil", "dequantize", "sample_grid",
    "im_to_col", "col_to_im", "im_to_col_gradient"}

# Huge arguments of periodic functions: libm reduces them exactly, GPU math libraries do not.
_LARGE_ARGUMENT_ROWS = {"sin", "cos", "tan"}


def _to_numpy(td):
    return np.array(td.numpy(), copy=True)


def _not_lowered(err):
    """The op named by a GraphNotImplementedError, or None."""
    m = re.match(r"\[(\w+)\]", str(err))
    return m.group(1) if m and "metal" in str(err) else None


def _on_metal(fn):
    """fn() (something run or compiled on METAL); an op outside the Metal backend's set, or a
    feature that needs a newer macOS, skips the test instead of failing it."""
    try:
        return fn()
    except mg.GraphNotImplementedError as e:
        op = _not_lowered(e)
        if op is not None and op not in REQUIRED:
            pytest.skip(f"'{op}' is outside the Metal backend's op set: {e}")
        if "needs macOS" in str(e):
            pytest.skip(str(e))
        raise


def _run_both(g, feeds, targets, target_operations=None):
    cpu = g.run(feeds, targets, target_operations=target_operations, device=CPU)
    met = _on_metal(lambda: g.run(feeds, targets, target_operations=target_operations, device=METAL))
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
        if "metal" in r.skip_devices:  # a CPU fact the row documents (e.g. an order MPSGraph leaves open)
            continue
        for dt in r.dtypes:
            if dt != "float64":
                yield pytest.param(r, dt, id=f"{r.name}-{dt}")


def _build_row(row, dtype):
    """The row's cases for dtype in one graph, with the inputs conformance.check_row draws."""
    rng = np.random.default_rng(cf.seed_for(row.name, dtype))
    g = mg.Graph()
    feeds, outs, labels = {}, [], []
    for ci, case in enumerate(cf.cases_for(row, dtype)):
        arrays, in_dts = cf.case_inputs(row, case, dtype, rng)
        if row.name in _LARGE_ARGUMENT_ROWS and case.label == "special":
            arrays = [np.where(np.abs(a.astype(np.float64)) > 1e4, a.dtype.type(0.25), a).astype(a.dtype)
                      for a in arrays]
        attrs = cf.case_attrs(row, case, dtype)
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
    if row.stat_check is not None:
        # random draws: each device's first run of its own graph starts the seed's sequence
        g2, feeds2, outs2, _ = _build_row(row, dtype)
        cpu = g.run(feeds, outs, device=CPU)
        met2 = _on_metal(lambda: g2.run(feeds2, outs2, device=METAL))
        met = {t: met2[t2] for t, t2 in zip(outs, outs2)}
    else:
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


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sort_family_and_scan_gradients(dtype):
    """The sort family's gradients (scatter_along_axis_with_data, and gather_along_axis in the
    second order) and the scans' gradient compositions, on distinct values."""
    x = (np.random.default_rng(3).permutation(24).reshape(4, 6) * 0.25 - 3).astype(dtype)

    def build(g, a):
        ys = [g.sort(a, axis=1, descending=True), g.top_k(a, k=3, axis=0)[0], g.bottom_k(a, k=2)[0],
              g.cumulative_maximum(a, axis=1, reverse=True), g.cumulative_minimum(a, axis=0),
              g.cumulative_product(a, axis=1, exclusive=True), g.cumulative_sum(a, axis=0, exclusive=True, reverse=True)]
        outs = []
        for k, y in enumerate(ys):
            w = g.constant(np.linspace(-1, 1, int(np.prod(y.shape))).reshape(y.shape).astype(dtype))
            loss = g.reduction_sum(y * y * w if k == 0 else y * w, keep_dims=False)
            dx = g.gradients(loss, [a])[a]
            outs.append(dx)
            if k == 0:  # second order: gather_along_axis
                outs.append(g.gradients(g.reduction_sum(dx * dx, keep_dims=False), [a])[a])
        return outs

    _check(build, [x], (2e-2, 2e-2) if dtype == "float16" else None)


def test_complex_fft_pipeline_and_its_gradients():
    """rfft -> complex multiply -> irfft (odd and even lengths, size and unitary scaling) and the
    gradients through them: the half-spectrum weights, conjugates and flipped transforms."""
    x, k = _rand((3, 6, 9)), _rand((6, 9), seed=1)

    def build(g, a, b):
        fa = g.real_to_hermitean_fft(a, axes=(1, 2))
        fb = g.real_to_hermitean_fft(b, axes=(0, 1), scaling_mode="unitary")
        y = g.hermitean_to_real_fft(fa * g.conjugate(fb), axes=(1, 2), inverse=True, scaling_mode="size",
                                    round_to_odd_hermitean=True)
        z = g.fast_fourier_transform(g.complex(a, a * 0.5), axes=(0, 2), inverse=True)
        loss = g.reduction_sum(y * y, keep_dims=False) + g.reduction_sum(g.absolute(z) + g.angle(z), keep_dims=False)
        ga, gb = g.gradients(loss, [a, b]).values()
        return [y, g.real_part(z), g.imaginary_part(z), ga, gb]

    _check(build, [x, k], (1e-4, 1e-4))


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
# the primitives lowered in the second pass: log1p / expm1, random numbers, convolution, pooling,
# resize and the newer shape ops, with the edge cases where an MPSGraph op's own semantics would
# differ from the CPU kernels (the lowering composes those; see docs/metal.md)


def _special(shape, dtype="float32", seed=0):
    """Small integers (many ties), signed zeros, NaN and -inf: the max-pooling edge cases."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    u = rng.random(shape)
    x[u < 0.15] = -0.0
    x[(u >= 0.15) & (u < 0.2)] = np.nan
    x[(u >= 0.2) & (u < 0.25)] = -np.inf
    return _as(x, dtype)


def _as(a, dtype):
    return a.astype(cf.BF16 if dtype == "bfloat16" else dtype)


def _shape_of(build, *inputs):
    """The shape of build(g, *placeholders) (to make its incoming gradient)."""
    g = mg.Graph()
    return tuple(build(g, *[g.placeholder(a.shape, str(a.dtype)) for a in inputs]).shape)


_TOL16 = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_log1p_expm1_small_and_edge_values(dtype):
    v = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 3e-5, -3e-5, 1e-3, -1e-3, 0.01, -0.01, 0.2928, -0.2929, 0.4142,
                  0.4143, 0.3465, -0.3466, 0.6931, -0.6932, 0.75, -0.75, 1.0, -1.0, -0.999, 2.0, 30.0, 88.0, 89.0,
                  -50.0, -104.0, np.inf, -np.inf, np.nan, -2.0], np.float32)
    rng = np.random.default_rng(3)
    x = _as(np.concatenate([v, rng.uniform(-1, 1, 200).astype(np.float32),
                            (10.0 ** rng.uniform(-12, 0, 100)).astype(np.float32)]), dtype)
    _check(lambda g, a: [g.log1p(a), g.expm1(a)], [x])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_random_uniform_like_is_the_cpu_philox_stream(dtype):
    """The Metal lowering computes the CPU's Philox-4x32-10 stream in the graph: the same numbers
    run for run, fresh numbers every run, and a new executable starts the sequence again."""
    g = mg.Graph()
    x = g.placeholder((3, 37), "int32")  # 111 elements: the last Philox block is partial
    r = g.random_uniform_like(x, seed=1234, dtype=dtype)
    s = g.random_uniform_like(x, seed=-5, dtype=dtype)
    types = {x: ((3, 37), "int32")}
    feed = [np.zeros((3, 37), np.int32)]

    def draws(device, n=3):
        exe = _on_metal(lambda: g.compile(types, [r, s], device=device))
        return [[_to_numpy(t) for t in _on_metal(lambda: exe.run(feed))] for _ in range(n)]

    cpu, met = draws(CPU), draws(METAL)
    for k, (cr, mr) in enumerate(zip(cpu, met)):
        for want, got in zip(cr, mr):
            if dtype == "float32":
                np.testing.assert_array_equal(got, want, err_msg=f"run {k}")
            else:  # one rounding of the same float32 value
                _assert_same(got, want, dtype, f"run {k}")
            f = got.astype(np.float32)
            assert f.min() >= 0 and f.max() < 1
    assert not np.array_equal(met[0][0], met[1][0]), "each run must draw fresh numbers"
    again = draws(METAL, 1)[0]
    np.testing.assert_array_equal(again[0].astype(np.float32), met[0][0].astype(np.float32))


def test_random_composites_and_dropout_match_cpu():
    g = mg.Graph()
    x = g.placeholder((4, 50), "float32")
    outs = [g.dropout(x, rate=0.3, seed=7), g.random_normal_like(x, seed=2), g.random_uniform((5, 3), seed=9),
            g.random_bernoulli((6, 7), probability=0.25, seed=1), g.random_truncated_normal((40,), seed=4)]
    a = _rand((4, 50), seed=8)
    res = {}
    for name, dev in (("cpu", CPU), ("metal", METAL)):
        exe = _on_metal(lambda: g.compile({x: ((4, 50), "float32")}, outs, device=dev))
        res[name] = [_to_numpy(t) for t in _on_metal(lambda: exe.run([a]))]
    for k, (want, got) in enumerate(zip(res["cpu"], res["metal"])):
        _assert_same(got, want, _dtype_name(want), f"output {k}", (1e-5, 1e-5))


_CONV_CASES = [  # (source, weights, attrs): 1-D, 2-D (groups, dilation, asymmetric padding, same styles), 3-D
    ((2, 3, 9), (4, 3, 3), dict(strides=[2], padding=[1, 2])),
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(strides=[1, 2], dilation_rates=[2, 1], padding=[1, 0, 2, 1], groups=2)),
    ((1, 3, 8, 8), (5, 3, 3, 3), dict(strides=[2, 2], padding_style="same")),
    ((1, 2, 5, 6), (2, 1, 2, 3), dict(padding_style="same_lower", groups=2)),
    ((2, 3, 6, 5), (4, 3, 1, 1), dict(strides=[3, 2])),
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), dict(strides=[1, 2, 1], padding=[1, 0, 0, 1, 1, 1])),  # 3-D: macOS 13.2
]


@pytest.mark.parametrize("xs,ws,attrs", _CONV_CASES, ids=[f"conv{len(c[0]) - 2}d-{i}" for i, c in enumerate(_CONV_CASES)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_convolution_primitives(xs, ws, attrs, dtype):
    x, w = _rand(xs, dtype, 11, -1, 1), _rand(ws, dtype, 12, -1, 1)
    dy = _rand(_shape_of(lambda g, a, b: g.convolution(a, b, **attrs), x, w), dtype, 13, -1, 1)
    _check(lambda g, a, b, d: [g.convolution(a, b, **attrs), g.convolution_data_gradient(d, b, a, **attrs),
                               g.convolution_weights_gradient(d, a, b, **attrs)], [x, w, dy], _TOL16[dtype])


def test_convolution_front_ends_and_gradients():
    x, w = _rand((2, 6, 5, 4), seed=14, lo=-1, hi=1), _rand((3, 3, 4, 5), seed=15, lo=-1, hi=1)
    dw = _rand((3, 3, 4, 2), seed=16, lo=-1, hi=1)  # HWIO: (kh, kw, C, multiplier)

    def build(g, a, b, c):
        y = g.convolution_2d(a, b, strides=[2, 1], padding_style="same")
        t = g.convolution_transpose_2d(y, b, strides=[2, 1], padding_style="same", output_shape=[2, 6, 5, 4])
        d = g.depthwise_convolution_2d(a, c, padding=[1, 1, 0, 1])
        loss = g.reduction_sum(y * y, keep_dims=False) + g.reduction_sum(t * t, keep_dims=False) + \
            g.reduction_sum(d * d, keep_dims=False)
        grads = g.gradients(loss, [a, b, c])
        return [y, t, d] + [grads[v] for v in (a, b, c)]
    _check(build, [x, w, dw], (1e-4, 1e-3))


_POOL_CASES = [  # (source, attrs)
    ((2, 3, 7, 6), dict(kernel_sizes=[3, 2], strides=[2, 2], padding=[1, 1, 0, 1])),
    ((2, 3, 7, 6), dict(kernel_sizes=[3, 3], strides=[2, 1], dilation_rates=[2, 1], padding=[2, 1, 1, 1],
                        ceil_mode=True)),
    ((3, 10), dict(kernel_sizes=[4], strides=[3], padding=[2, 3], ceil_mode=True)),  # 1-D
    ((1, 2, 4, 5, 6), dict(kernel_sizes=[2, 3, 2], strides=[1, 2, 2], padding_style="same")),  # 3-D
    ((2, 5, 5), dict(kernel_sizes=[2, 2], strides=[3, 3], padding=[4, 4, 4, 4])),  # windows of padding only
    ((1, 2, 3, 2, 3), dict(kernel_sizes=[2, 2, 2, 2], strides=[1, 1, 2, 1], padding_style="same_lower")),  # 4-D
    ((2, 2, 8, 8), dict(kernel_sizes=[2, 2], strides=[2, 2])),  # the common case
]


@pytest.mark.parametrize("shape,attrs", _POOL_CASES, ids=[f"pool{len(c[1]['kernel_sizes'])}d-{i}"
                                                          for i, c in enumerate(_POOL_CASES)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pooling_primitives(shape, attrs, dtype):
    """Ties (first maximum), signed zeros, NaN (the last one wins), -inf, windows of padding only
    (-inf and index -1), ceil_mode, dilation, the padding styles, and every gradient op."""
    x = _special(shape, dtype, 21)
    dy = _rand(_shape_of(lambda g, a: g.max_pooling_nd(a, **attrs), x), dtype, 22, -2, 2)
    clean = _as(np.nan_to_num(x.astype(np.float32), nan=0.5, neginf=-7.0), dtype)

    def build(g, a, b, d):
        vals, idx = g.max_pooling_nd_return_indices(a, **attrs)
        return [vals, idx, g.max_pooling_nd(a, **attrs), g.max_pooling_nd_gather(a * 2.0, a, **attrs),
                g.max_pooling_nd_gradient(d, a, **attrs),
                g.avg_pooling_nd(b, **attrs), g.avg_pooling_nd(b, include_zero_pad=True, **attrs),
                g.sum_pooling_nd(b, **attrs), g.avg_pooling_nd_gradient(d, b, **attrs),
                g.avg_pooling_nd_gradient(d, b, include_zero_pad=True, **attrs), g.sum_pooling_nd_gradient(d, b, **attrs)]
    _check(build, [x, clean, dy], _TOL16[dtype])
    # the maximum's sign of zero is the first maximum's, as on the CPU
    g = mg.Graph()
    p = g.placeholder(x.shape, dtype)
    y = g.max_pooling_nd(p, **attrs)
    cpu, met = _run_both(g, {p: x}, [y])
    want, got = _to_numpy(cpu[y]).astype(np.float32), _to_numpy(met[y]).astype(np.float32)
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[keep]), np.signbit(want[keep]))


def test_pooling_front_ends_and_second_order_gradients():
    x = _rand((2, 6, 6, 3), seed=23)

    def build(g, a):
        m = g.max_pooling_2d(a, kernel_sizes=[2, 2], strides=[2, 2])
        v = g.avg_pooling_2d(a, kernel_sizes=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1], include_zero_pad=True)
        l2 = g.l2_norm_pooling_2d(a, kernel_sizes=[2, 3], strides=[2, 1])
        loss = g.reduction_sum(m * m, keep_dims=False) + g.reduction_sum(v * v * v, keep_dims=False) + \
            g.reduction_sum(l2, keep_dims=False)
        (gx,) = [g.gradients(loss, [a])[a]]
        gg = g.gradients(g.reduction_sum(gx * gx, keep_dims=False), [a])[a]
        return [m, v, l2, gx, gg, g.global_max_pooling_2d(a), g.global_average_pooling_2d(a)]
    _check(build, [x], (1e-4, 1e-4))


_RESIZE_CASES = [  # (layout, source shape, size, mode, center_result, align_corners, nearest_rounding_mode)
    ("NHWC", (2, 4, 6, 3), (8, 3), "bilinear", True, False, "round_prefer_ceil"),
    ("NCHW", (1, 2, 5, 4), (2, 9), "bilinear", False, True, "round_prefer_ceil"),
    ("NHWC", (1, 5, 3, 2), (1, 6), "bilinear", False, False, "round_prefer_ceil"),
    ("CHW", (2, 4, 4), (2, 2), "nearest", True, False, "round_prefer_ceil"),  # exact ties at x.5
    ("CHW", (2, 4, 4), (2, 2), "nearest", True, False, "round_prefer_floor"),
    ("HW", (6, 5), (3, 10), "nearest", False, False, "floor"),
    ("HWC", (3, 4, 2), (7, 1), "nearest", True, False, "round_to_even"),
    ("NCHW", (1, 1, 4, 4), (6, 6), "nearest", False, True, "round_to_odd"),
    ("NHWC", (1, 6, 6, 1), (3, 4), "nearest", False, False, "ceil"),
]


@pytest.mark.parametrize("case", _RESIZE_CASES, ids=[f"{c[0]}-{c[3]}-{c[6]}-{i}" for i, c in enumerate(_RESIZE_CASES)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_resize_and_its_gradient(case, dtype):
    layout, shape, size, mode, center, align, rounding = case
    attrs = dict(size=list(size), mode=mode, center_result=center, align_corners=align, data_layout=layout,
                 nearest_rounding_mode=rounding)
    x = _rand(shape, dtype, 31, -2, 2)
    dy = _rand(_shape_of(lambda g, a: g.resize(a, **attrs), x), dtype, 32, -2, 2)
    _check(lambda g, a, d: [g.resize(a, **attrs), g.resize_gradient(d, a, **attrs)], [x, dy], _TOL16[dtype])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_pad_modes_and_pad_gradient(dtype):
    g0 = mg.Graph()
    if not hasattr(g0, "pad_gradient"):
        pytest.skip("pad_gradient is not registered in this build")
    x = _rand((3, 4, 5), dtype, 41, -9, 9)
    lo, hi = [2, 0, 3], [1, 3, 4]
    for mode in ("constant", "reflect", "symmetric", "edge", "wrap"):
        l, h = ([min(v, 2) for v in lo], [min(v, 2) for v in hi]) if mode == "reflect" else (lo, hi)
        if mode in ("symmetric", "wrap"):
            l, h = [min(v, 3) for v in lo], [min(v, 3) for v in hi]
        dy = _rand(_shape_of(lambda g, a: g.pad(a, left_padding=l, right_padding=h, mode=mode), x), dtype, 42, -9, 9)
        _check(lambda g, a, d: [g.pad(a, left_padding=l, right_padding=h, mode=mode, constant_value=1.5),
                                g.pad_gradient(d, a, left_padding=l, right_padding=h, mode=mode)], [x, dy],
               _TOL16.get(dtype))


def test_non_zero_indices_and_its_consumers_in_stages():
    """The op runs between stages (its own small MPSGraph on Metal); the stages around it are
    ordinary programs. Values before it feed the later stage; two counts reuse the cache."""
    def build(g, a):
        e = g.exponent(a)
        nz = g.non_zero_indices(g.greater_than(e, 1.2))
        f = g.cast(nz, "float32")
        nz2 = g.non_zero_indices(g.greater_than(nz, 1))
        return [nz, g.matrix_multiplication(g.transpose(f, [1, 0]), f), g.shape_of(nz),
                g.reduction_sum(e, keep_dims=False) + g.reduction_sum(f, keep_dims=False), nz2]
    for seed in (61, 62):
        _check(build, [_rand((3, 4, 5), "float32", seed=seed)])
    _check(lambda g, a: [g.non_zero_indices(a)], [np.array(np.nan, np.float32)])


def test_band_part_one_hot_space_to_depth():
    g0 = mg.Graph()
    if not all(hasattr(g0, n) for n in ("band_part", "one_hot", "space_to_depth_2d", "depth_to_space_2d")):
        pytest.skip("the newer shape ops are not registered in this build")
    m = _special((2, 5, 4), "float32", 51)
    _check(lambda g, a: [g.band_part(a, num_lower=lo, num_upper=up) for lo, up in
                         [(-1, 0), (0, -1), (0, 0), (1, 2), (7, -1), (-1, -1), (2, 9)]], [m])
    idx = np.array([[0, 3, -1, 5], [2, 4, 1, -7]], np.int8)
    _check(lambda g, a: [g.one_hot(a, depth=4), g.one_hot(a, depth=5, axis=0, dtype="int32", on_value=7, off_value=-2),
                         g.one_hot(a, depth=3, axis=1, dtype="bool"), g.one_hot(a, depth=0)], [idx])
    _check(lambda g, a: [g.one_hot(a, depth=300, dtype="int64", on_value=2.0 ** 40 + 1)],
           [np.array([0, 299, 300, 2 ** 31 - 1], np.int32)])
    _check(lambda g, a: [g.one_hot(a, depth=260)], [np.array([0, 255, 7], np.uint8)])
    for layout, shape in (("NHWC", (2, 4, 6, 3)), ("NCHW", (2, 3, 4, 6))):
        x = _rand(shape, seed=52)
        for pixel in (True, False):
            _check(lambda g, a: [g.space_to_depth_2d(a, block_size=2, data_layout=layout, use_pixel_shuffle_order=pixel),
                                 g.depth_to_space_2d(g.space_to_depth_2d(a, block_size=2, data_layout=layout,
                                                                         use_pixel_shuffle_order=pixel),
                                                     block_size=2, data_layout=layout, use_pixel_shuffle_order=pixel)],
                   [x])
        d = _rand((2, 8, 3, 2) if layout == "NHWC" else (2, 8, 3, 2), seed=53)
        _check(lambda g, a: [g.depth_to_space_2d(a, block_size=2, data_layout="NCHW", use_pixel_shuffle_order=False)],
               [d])


_SPARSE_PARTS = {  # a 3 x 4 matrix; coo has a duplicate at (row 2, column 3) and is not symmetric in its order
    "coo": ([1.5, -2.0, 0.5, 3.0, 4.0], [1, 3, 3, 0, 2], [0, 2, 2, 0, 1]),
    "csr": ([1.5, -2.0, 0.5, 3.0], [1, 0, 3, 0], [0, 2, 2, 4]),
    "csc": ([1.5, -2.0, 0.5, 3.0], [0, 2, 1, 2], [0, 1, 2, 2, 4]),
}


@pytest.mark.parametrize("storage", ["coo", "csr", "csc"])
@pytest.mark.parametrize("dtype,idx", [("float32", "int32"), ("float16", "int64"), ("int32", "int32")])
def test_sparse_tensor_and_sparse_matmul(storage, dtype, idx):
    """sparseTensorWithType's order of the parts (coo: x = column first, then y = row), duplicate
    entries, and the densify-then-matmul lowering of sparse_matmul, against the CPU kernels."""
    v, i0, i1 = _SPARSE_PARTS[storage]
    parts = [np.array(v, dtype), np.array(i0, idx), np.array(i1, idx)]

    def build(g, pv, p0, p1, d):
        s = g.sparse_tensor(storage, (pv, p0, p1), (3, 4))
        outs = [s.to_dense(), s.T.to_dense()]
        if dtype != "int32":
            outs += [g.sparse_matmul(s, d), g.sparse_matmul(g.transpose(d), s.T)]
        return outs

    _check(build, parts + [_rand((4, 5), dtype, 61, -2, 2)], _TOL16.get(dtype))
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int32", "bool"])
def test_gather_and_scatter_in_every_form(dtype):
    """Negative and repeated indices, batch dims (the axis scatter's broadcast-index view), every
    mode where the dtype takes it, narrow dtypes computed in int32 / float32 and cast back. 'set'
    gets indices without repeats: MPSGraph does not say which repeated update it keeps."""
    rng = np.random.default_rng(60)
    if dtype == "bool":
        x, up = rng.random((3, 5, 4)) < 0.5, rng.random((3, 6, 4)) < 0.5
    else:
        x, up = _rand((3, 5, 4), dtype, 60, -3, 3), _rand((3, 6, 4), dtype, 61, 1, 3)
    i1 = np.array([0, -1, 2, 2, -5, 4], np.int32)
    ib = np.array([[0, 1, 1, -1, 3, 0], [4, 4, 4, 2, -2, 1], [2, 0, 1, 3, 3, 3]], np.int64)
    it = np.array([[0, -1], [2, 4], [-3, 0], [2, 4]], np.int32)
    ia = np.array(rng.integers(-5, 5, (3, 6, 4)), np.int32)
    # without repeats (per column for the along-axis form)
    u1 = np.array([4, -5, 2], np.int32)
    ub = np.array([[0, -1], [2, 3], [4, 1]], np.int32)
    ut = np.array([[0, -1], [2, 3], [-1, 0]], np.int32)
    ua = np.stack([np.add.outer(np.arange(3), np.arange(4)) % 5, np.add.outer(np.arange(3), np.arange(4)) % 5 - 3],
                  axis=1).astype(np.int32)
    modes = ["set"] if dtype == "bool" else ["set", "add", "sub", "mul", "div", "min", "max"]

    def build(g, a, u, j1, jb, jt, ja, v1, vb, vt, va):
        outs = [g.gather(a, j1, axis=1), g.gather(a, jb, axis=1, batch_dims=1), g.gather_nd(a, jt),
                g.gather_along_axis(a, ja, axis=1), g.gather(a, g.constant(np.array([3, -4, -1], np.int32)), axis=-1)]
        for m in modes:
            k1, kb, kt, ka = (v1, vb, vt, va) if m == "set" else (j1, jb, jt, ja)
            n1, nb, na = k1.shape[0], kb.shape[1], ka.shape[1]
            ut = g.gather_nd(u, kt)
            outs += [g.scatter_with_data(a, u[:, :n1], k1, axis=1, mode=m),
                     g.scatter(u[:, :nb], kb, shape=(3, 5, 4), axis=1, batch_dims=1, mode=m),
                     g.scatter_along_axis_with_data(a, u[:, :na], ka, axis=1, mode=m),
                     g.scatter_nd_with_data(a, ut, kt, mode=m), g.scatter_nd(ut, kt, shape=(3, 5, 4), mode=m)]
        return outs

    _check(build, [x, up, i1, ib, it, ia, u1, ub, ut, ua], _TOL16.get(dtype))


def test_a_cnn_training_step_matches_cpu():
    """The demo's CNN (convolution, bias, relu, max pooling, dropout, dense, softmax cross entropy)
    and its gradients: dropout draws the same numbers on both devices."""
    g = mg.Graph()
    x = g.placeholder((4, 8, 8, 1), "float32")
    labels = g.placeholder((4, 10), "float32")
    w1 = g.placeholder((3, 3, 1, 4), "float32")
    b1 = g.placeholder((4,), "float32")
    w2 = g.placeholder((64, 10), "float32")
    h = g.relu(g.convolution_2d(x, w1, padding_style="same") + b1)
    h = g.max_pooling_2d(h, kernel_sizes=[2, 2], strides=[2, 2])
    h = g.dropout(g.reshape(h, (4, 64)), rate=0.25, seed=11)
    loss = g.softmax_cross_entropy(g.matrix_multiplication(h, w2), labels)
    loss = g.mean(loss)
    grads = g.gradients(loss, [w1, b1, w2])
    targets = [loss] + [grads[v] for v in (w1, b1, w2)]
    ins = [x, labels, w1, b1, w2]
    vals = [_rand((4, 8, 8, 1), seed=61, lo=0, hi=1), np.eye(10, dtype=np.float32)[[1, 3, 5, 7]],
            _rand((3, 3, 1, 4), seed=62, lo=-0.5, hi=0.5), _rand((4,), seed=63, lo=-0.1, hi=0.1),
            _rand((64, 10), seed=64, lo=-0.3, hi=0.3)]
    types = {p: (v.shape, "float32") for p, v in zip(ins, vals)}
    res = {}
    for name, dev in (("cpu", CPU), ("metal", METAL)):
        exe = _on_metal(lambda: g.compile(types, targets, device=dev))
        res[name] = [_to_numpy(t) for t in _on_metal(lambda: exe.run(vals))]
    for k, (want, got) in enumerate(zip(res["cpu"], res["metal"])):
        _assert_same(got, want, "float32", f"target {k}", (1e-4, 1e-5))


# ---------------------------------------------------------------------------------------
# control flow: MPSGraph's if / while / for blocks, each region lowered into its block


def _run_each(g, feeds_list, targets):
    for feeds in feeds_list:
        cpu, met = _run_both(g, feeds, targets)
        for k, t in enumerate(targets):
            want, got = _to_numpy(cpu[t]), _to_numpy(met[t])
            _assert_same(got, want, _dtype_name(want), f"target {k} with feeds {list(feeds.values())}")


def test_if_with_captured_values_nested_and_rank0():
    g = mg.Graph()
    x = g.placeholder((2, 3), "float32")
    y = g.placeholder((3,), "float32")
    a = g.placeholder((), "bool")
    b = g.placeholder((), "bool")
    e = g.placeholder((0, 3), "float32")
    s = g.reduction_sum(x, keep_dims=False)  # rank 0, captured by both branches

    def then():
        inner = g.if_then_else(b, lambda: (x * y + 1.0, s * 2.0), lambda: (x - y, s - 1.0))
        return inner[0] * 2.0, inner[1], e * 3.0, g.cast(s > 0.0, "int32")

    out = g.if_then_else(a, then, lambda: (g.exponent(x * 0.1), s, e + 1.0, g.constant(7, "int32")))
    xv, yv = _rand((2, 3), seed=71), _rand((3,), seed=72)
    ev = np.zeros((0, 3), np.float32)
    _run_each(g, [{x: xv, y: yv, e: ev, a: np.array(av), b: np.array(bv)} for av in (True, False)
                  for bv in (True, False)], list(out))


def test_for_loop_with_tensor_bounds_and_nested_if():
    g = mg.Graph()
    lo = g.placeholder((), "int32")
    hi = g.placeholder((), "int32")
    st = g.placeholder((), "int32")
    x = g.placeholder((4,), "float32")
    e = g.placeholder((0, 2), "float32")

    def body(i, v, cnt, z):
        odd = g.equal(g.modulo(i, 2), 1)
        w = g.if_then_else(odd, lambda: g.tanh(v) + x, lambda: v * 0.5 - g.cast(i, "float32"))
        return [w, cnt + 1, z * 2.0]

    v, cnt, z = g.for_loop(lo, hi, st, [x, g.constant(0, "int32"), e], body)
    xv = _rand((4,), seed=73, lo=-1, hi=1)
    ev = np.zeros((0, 2), np.float32)
    bounds = [(0, 7, 2), (1, 6, 1), (3, 3, 1), (5, 1, 1), (-2, 4, 3), (4, 2, -1)]  # the last: step < 0, no trip
    _run_each(g, [{lo: np.int32(a), hi: np.int32(b), st: np.int32(c), x: xv, e: ev} for a, b, c in bounds],
              [v, cnt, z])


def test_while_loop_with_passed_values_and_captures():
    """before passes on values of other types than the carried ones; after maps them back."""
    g = mg.Graph()
    x = g.placeholder((3,), "float32")
    limit = g.placeholder((), "float32")
    scale = g.placeholder((3,), "float32")

    def before(v, i):
        total = g.reduction_sum(g.absolute(v), keep_dims=False)
        return total < limit, [v * scale, i, total]

    def after(w, i, total):
        inner = g.for_loop(2, [w], lambda j, u: [u + g.cast(j, "float32") * 0.25])[0]
        return [inner + total * 0.01, i + 1]

    w, i, total = g.while_loop([x, g.constant(0, "int32")], before, after)
    xv = np.array([0.5, -0.25, 0.125], np.float32)
    sv = np.array([1.0, 0.5, -1.0], np.float32)
    _run_each(g, [{x: xv, scale: sv, limit: np.float32(lv)} for lv in (0.1, 3.0, 40.0)], [w, i, total])


def test_assign_inside_a_loop_and_a_branch_lands_after_the_run():
    results = {}
    for name, dev in (("cpu", CPU), ("metal", METAL)):
        g = mg.Graph()
        v = g.variable(np.float32(1.0))
        u = g.variable(np.zeros(2, np.float32))
        p = g.placeholder((), "bool")

        def body(i, acc):
            g.assign(v, acc + g.cast(i, "float32"))
            return [acc * 2.0]

        (acc,) = g.for_loop(4, [g.constant(np.float32(1.0))], body)

        def then():
            g.assign(u, u + acc)
            return u * 1.0  # the value from before the run

        out = g.if_then_else(p, then, lambda: u * 2.0)
        runs = [_on_metal(lambda: g.run({p: np.array(pv)}, [acc, out], device=dev)) for pv in (True, False, True)]
        results[name] = [_to_numpy(r[t]) for r in runs for t in (acc, out)] + [
            _to_numpy(g.variable_data(v)), _to_numpy(g.variable_data(u))]
    for k, (want, got) in enumerate(zip(results["cpu"], results["metal"])):
        _assert_same(got, want, "float32", f"value {k} with variables assigned inside control flow")


def test_loop_gradients_run_as_loops_on_metal():
    """Metal has no while_loop_vjp kernel: the op's decomposition (loops that recompute each
    iteration's state) is lowered onto MPSGraph's own loops."""
    g = mg.Graph()
    x = g.placeholder((3,), "float32")
    w = g.placeholder((3,), "float32")
    (y,) = g.for_loop(3, [x], lambda i, v: [g.tanh(v * w) + g.cast(i, "float32") * 0.1])
    (z,) = g.while_loop([y], lambda v: g.reduction_sum(v * v, keep_dims=False) < 20.0, lambda v: [v * 1.5 + 0.5])
    loss = g.reduction_sum(z * z, keep_dims=False)
    grads = g.gradients(loss, [x, w])
    feeds = {x: _rand((3,), seed=74, lo=-1, hi=1), w: _rand((3,), seed=75, lo=0.5, hi=1.5)}
    cpu = g.run(feeds, [loss, grads[x], grads[w]], device=CPU)
    met = _on_metal(lambda: g.run(feeds, [loss, grads[x], grads[w]], device=METAL))
    _assert_same(_to_numpy(met[loss]), _to_numpy(cpu[loss]), "float32", "forward through the loops")
    for t in (grads[x], grads[w]):  # tests/test_control_flow.py checks the CPU's values against PyTorch
        _assert_same(_to_numpy(met[t]), _to_numpy(cpu[t]), "float32", "gradient through the loops")


@metal_only
def test_random_numbers_inside_a_loop_are_refused():
    """One run counter per program: every iteration would draw the same numbers on Metal."""
    g = mg.Graph()
    x = g.placeholder((3,), "float32")
    (y,) = g.for_loop(2, [x], lambda i, v: [v + g.random_uniform_like(v, seed=1)])
    with pytest.raises(mg.GraphNotImplementedError, match=r"\[random_uniform_like\] inside the body of for_loop"):
        g.run({x: np.ones(3, np.float32)}, [y], device=METAL)


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
def test_what_metal_cannot_do_says_so():
    """Every registered primitive is lowered or decomposed now; a convolution over 4 spatial
    dims (MPSGraph has 2-D and 3-D ones only) still raises, naming the op and the reason."""
    g = mg.Graph()
    x = g.placeholder((1, 1, 2, 2, 2, 2), "float32")
    w = g.placeholder((1, 1, 1, 1, 1, 1), "float32")
    y = g.convolution(x, w)
    with pytest.raises(mg.GraphNotImplementedError, match=r"\[convolution\] 4-d convolutions are not implemented on "
                                                          r"the metal backend"):
        g.run({x: np.ones((1, 1, 2, 2, 2, 2), np.float32), w: np.ones((1,) * 6, np.float32)}, [y], device=METAL)


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


# ---------------------------------------------------------------------------------------
# issue 12: composites lowered to MPSGraph's own ops, narrow dtypes cast around MPSGraph's
# reductions, casts without int64, exact integer division, the convolution size limit


def _int_edges(dtype):
    info = np.iinfo(dtype)
    vals = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2, 3, 7, 255, 256, 65535, 65536,
            2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1, 2 ** 53 + 1, 2 ** 62 + 3, 2 ** 63 - 2]
    vals += [-v for v in vals]
    return sorted({v for v in vals if info.min <= v <= info.max})


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_integer_division_and_modulo_are_exact_at_the_limits(dtype):
    """Every pair of edge values (near 2**31 and 2**63, INT_MIN / -1, division by 0) and random
    operands of every magnitude, so |x / y| spans 0 to the whole range: the lowering must not rely
    on MPSGraph's integer division being within one of the truth."""
    e = np.array(_int_edges(dtype), dtype)
    x, y = np.repeat(e, len(e)), np.tile(e, len(e))
    info = np.iinfo(dtype)
    rng = np.random.default_rng(120)
    rx = rng.integers(info.min, info.max, size=3000, dtype=dtype, endpoint=True)
    ry = np.concatenate([rng.integers(info.min, info.max, size=1000, dtype=dtype, endpoint=True),
                         rng.integers(max(info.min, -300), 300, size=1000).astype(dtype),
                         rng.integers(1, min(2 ** 20, int(info.max)), size=1000).astype(dtype)])
    x, y = np.concatenate([x, rx]), np.concatenate([y, ry])
    _check(lambda g, a, b: [g.division(a, b), g.floor_division(a, b), g.modulo(a, b)], [x, y])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_modulo_with_large_quotients(dtype):
    """|x / y| up to 2**100 (float32) where x - trunc(x / y) * y loses every digit: fmod is exact."""
    rng = np.random.default_rng(121)
    big = 2.0 ** rng.uniform(0, 100 if dtype == "float32" else 14, 400)
    small = 2.0 ** rng.uniform(-20 if dtype == "float32" else -6, 4, 400)
    edge_x = [3e38, -3e38, 16777217.0, 1e10] if dtype == "float32" else [65504.0, -65504.0, 2049.0, 1000.0]
    x = np.concatenate([big * rng.choice([-1, 1], 400), edge_x]).astype(dtype)
    y = np.concatenate([small * rng.choice([-1, 1], 400), [7.0, -0.1, 3.0, 0.3]]).astype(dtype)
    _check(lambda g, a, b: [g.modulo(a, b), g.floor_division(a, b)], [x, y], (0, 0))


_INT32_OR_LESS = ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32"]


@pytest.mark.parametrize("src", _INT32_OR_LESS[1:])
def test_narrow_integer_casts_wrap_without_int64(src):
    """Every cast between integer dtypes of at most 32 bits (the macOS 13.0-13.2 path: no int64
    inside), at the limits: numpy's two's-complement wrap."""
    x = np.array(_int_edges(src), src)
    _check(lambda g, a: [g.cast(a, d) for d in _INT32_OR_LESS], [x])


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "uint8", "uint16", "uint32", "int32", "float16", "bfloat16"])
def test_reductions_on_narrow_dtypes(dtype):
    """Sums and products that wrap, extremes at the dtype's limits (uint32 above 2**31), arg
    extremes with ties, all / any; float16 / bfloat16 sums, means and variances in float32."""
    rng = np.random.default_rng(122)
    if dtype == "bool":
        x = rng.random((5, 7, 3)) < 0.5
    elif dtype in ("float16", "bfloat16"):
        x = _as(rng.uniform(-4, 4, (5, 7, 3)).astype(np.float32), dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, size=(5, 7, 3), dtype=dtype, endpoint=True)
        x[0, :3, 0] = [info.max, info.min, info.max]  # ties at the limits

    def build(g, a):
        outs = [g.reduction_maximum(a, axes=[1]), g.reduction_minimum(a, axes=[0, 2]),
                g.reduction_and(a, axes=[1]), g.reduction_or(a, axes=[2])]
        if dtype != "bool":  # the arg and sum reductions take numbers only
            outs += [g.reduction_arg_maximum(a, axis=1), g.reduction_arg_minimum(a, axis=0),
                     g.reduction_sum(a, axes=[1]), g.reduction_sum(a), g.reduction_product(a, axes=[2])]
        if dtype in ("float16", "bfloat16"):
            outs += [g.mean(a, axes=[0, 1]), g.variance(a, axes=[1])]
        return outs
    _check(build, [x], _TOL16.get(dtype))


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16", "uint32"])
def test_integer_matmul_on_narrow_dtypes_wraps_like_the_cpu(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(123)
    a = rng.integers(info.min, info.max, size=(2, 3, 9), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(9, 4), dtype=dtype, endpoint=True)
    _check(lambda g, x, y: g.matrix_multiplication(x, y), [a, b])


def test_bool_comparisons():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    _check(lambda g, x, y: [g.equal(x, y), g.not_equal(x, y), g.less_than(x, y), g.less_than_or_equal_to(x, y),
                            g.greater_than(x, y), g.greater_than_or_equal_to(x, y)], [a, b])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_softmax_and_cross_entropy_native_forms_and_gradients(dtype):
    """softmax over every axis, softmax_cross_entropy with each reduction and broadcast labels,
    and their gradients (built from the decompositions)."""
    x = _as(_rand((3, 4, 5), seed=124, lo=-6, hi=6), dtype)
    lab = _as(np.random.default_rng(125).dirichlet(np.ones(5), (3, 4)).astype(np.float32), dtype)
    lab1 = _as(np.eye(5, dtype=np.float32)[[1, 3, 0, 2]], dtype)  # (4, 5): broadcast over the batch

    def build(g, a, l, l1):
        outs = [g.softmax(a, axis=ax) for ax in (0, 1, -1)]
        outs += [g.softmax_cross_entropy(a, l, reduction=r) for r in ("none", "sum", "mean")]
        outs += [g.softmax_cross_entropy(a, l1, axis=-1, reduction="none"),
                 g.softmax_cross_entropy(g.transpose(a, [0, 2, 1]), g.transpose(l, [0, 2, 1]), axis=1, reduction="mean")]
        loss = g.reduction_sum(outs[0] * outs[2], keep_dims=False) + outs[4] + outs[5]
        outs.append(g.gradients(loss, [a])[a])
        return outs
    _check(build, [x, lab, lab1], _TOL16[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_normalizations_native_forms_and_gradients(dtype):
    x = _as(_rand((2, 6, 4, 3), seed=126), dtype)
    gamma, beta = _as(_rand((6,), seed=127, lo=0.5, hi=1.5), dtype), _as(_rand((6,), seed=128), dtype)
    g3, b3 = _as(_rand((3,), seed=129, lo=0.5, hi=1.5), dtype), _as(_rand((3,), seed=130), dtype)
    rm, rv = _as(_rand((3,), seed=131), dtype), _as(_rand((3,), seed=132, lo=0.5, hi=2), dtype)

    def build(g, a, ga, be, ga3, be3, m, v):
        outs = [g.batch_normalization(a, ga3, be3), g.batch_normalization(a, ga, be, channel_axis=1),
                g.batch_normalization(a, ga3, be3, m, v, training=False), g.batch_normalization(a),
                g.layer_normalization(a), g.layer_normalization(a, ga3, be3, axes=[-1]),
                g.layer_normalization(a, axes=[1, 2, 3], epsilon=1e-3),
                g.instance_normalization(a, ga3, be3), g.instance_normalization(a, ga, be, data_layout="NCHW"),
                g.group_normalization(a, ga, be, num_groups=3, data_layout="NCHW"),
                g.group_normalization(a, ga3, be3, num_groups=3), g.group_normalization(a, num_groups=1),
                g.normalization(a, g.mean(a, axes=[0], keep_dims=True), g.variance(a, axes=[0], keep_dims=True), ga3, be3),
                g.normalization(a, m, v)]
        loss = g.reduction_sum(outs[0] * outs[4] + outs[7] * outs[10], keep_dims=False)
        grads = g.gradients(loss, [a, ga3, be3])
        return outs + [grads[t] for t in (a, ga3, be3)]
    _check(build, [x, gamma, beta, g3, b3, rm, rv], (2e-2, 2e-2) if dtype == "float16" else (1e-4, 1e-4))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gradient_composites_native_forms(dtype):
    """The gradient composites Metal claims (softmax, cross entropy, batch normalisation in
    training, instance normalisation, plain average pooling) with non-constant incoming
    gradients, every reduction and layout, labels broadcast, gamma / beta present or absent; and
    next to them a case left to the decomposition (batch normalisation with running statistics),
    an x broadcast against larger labels, and a second order through softmax_gradient."""
    x = _as(_rand((2, 4, 6, 3), seed=140), dtype)
    lab = _as(np.random.default_rng(141).dirichlet(np.ones(3), (2, 4, 6)).astype(np.float32), dtype)
    lab0 = _as(np.random.default_rng(142).dirichlet(np.ones(2), (4, 6, 3)).transpose(3, 0, 1, 2)
               .astype(np.float32), dtype)  # probabilities along axis 0
    c = _as(_rand((2, 4, 6, 3), seed=143), dtype)
    gamma, beta = _as(_rand((3,), seed=144, lo=0.5, hi=1.5), dtype), _as(_rand((3,), seed=145), dtype)
    g4, b4 = _as(_rand((4,), seed=146, lo=0.5, hi=1.5), dtype), _as(_rand((4,), seed=147), dtype)
    rm, rv = _as(_rand((3,), seed=148), dtype), _as(_rand((3,), seed=149, lo=0.5, hi=2), dtype)

    def build(g, a, l, l0, w, ga, be, ga4, be4, m, v):
        def dot(y):  # a loss whose incoming gradient is w (or its broadcast) rather than ones
            return g.reduction_sum(y * w, keep_dims=False)
        ys = [g.softmax(a, axis=ax) for ax in (-1, 1)]
        ys += [g.softmax_cross_entropy(a, l, reduction=r) for r in ("none", "sum", "mean")]
        ys += [g.softmax_cross_entropy(a, l0, axis=0, reduction="none"),
               g.softmax_cross_entropy(a, g.slice(l, axis=0, start=0, length=1), reduction="mean"),  # labels broadcast
               g.softmax_cross_entropy(g.slice(a, axis=1, start=0, length=1), l, reduction="sum")]  # x broadcast
        bn = [g.batch_normalization(a, ga, be, epsilon=1e-3), g.batch_normalization(a, ga4, be4, channel_axis=1),
              g.batch_normalization(a), g.batch_normalization(a, ga, be, m, v, training=False)]
        inn = [g.instance_normalization(a, ga, be), g.instance_normalization(a, ga4, None, data_layout="NCHW"),
               g.instance_normalization(a)]
        pools = [g.avg_pooling_2d(a, kernel_sizes=[2, 3], strides=[2, 3]),
                 g.avg_pooling_2d(a, kernel_sizes=[2, 2], strides=[1, 2], data_layout="NCHW"),
                 g.avg_pooling_4d(a, kernel_sizes=[1, 2, 3, 1], strides=[1, 2, 3, 1])]
        loss = dot(ys[0] * ys[1]) + g.reduction_sum(ys[2] * ys[2], keep_dims=False) + ys[3] * ys[4] + \
            g.reduction_sum(ys[5] * ys[5], keep_dims=False) + ys[6] + ys[7] * ys[7]
        for y in bn + inn:
            loss = loss + dot(y * y)
        for p in pools:
            loss = loss + g.reduction_sum(p * p, keep_dims=False)
        grads = g.gradients(loss, [a, ga, be, ga4, be4])
        sm_gx = g.gradients(g.softmax(a), [a], dy=w)[a]
        second = g.gradients(g.reduction_sum(sm_gx * sm_gx, keep_dims=False), [a])[a]
        return [grads[t] for t in (a, ga, be, ga4, be4)] + [second]
    _check(build, [x, lab, lab0, c, gamma, beta, g4, b4, rm, rv], (5e-2, 5e-2) if dtype == "float16" else (2e-4, 2e-4))


def test_leaky_relu_native_range_and_outside_it():
    x = _special((4, 9), "float32", 133)
    _check(lambda g, a: [g.leaky_relu(a), g.leaky_relu(a, alpha=0.0), g.leaky_relu(a, alpha=1.0),
                         g.leaky_relu(a, alpha=3.0), g.leaky_relu(a, alpha=-0.5)], [x])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_optimizer_updates_native_forms(dtype):
    rng = np.random.default_rng(134)
    w, m, v, vmax, grad = (_as(rng.uniform(lo, 1, (4, 3)).astype(np.float32), dtype)
                           for lo in (-1, -1, 0, 0, -1))
    s = lambda val: _as(np.array(val, np.float32), dtype)  # noqa: E731
    ins = [s(0.01), s(0.9), s(0.999), s(1e-3), s(0.9 ** 3), s(0.999 ** 3), w, m, v, vmax, grad]

    def build(g, lr, b1, b2, eps, b1p, b2p, wv, mv, vv, vm, gr):
        outs = [g.stochastic_gradient_descent(lr, wv, gr)]
        outs += list(g.adam(lr, b1, b2, eps, b1p, b2p, wv, mv, vv, gradient=gr))
        outs += list(g.adam(lr, b1, b2, eps, b1p, b2p, wv, mv, vv, vm, gr))
        outs += list(g.adamw(lr, b1, b2, eps, b1p, b2p, wv, mv, vv, gradient=gr, weight_decay=0.1))
        outs += list(g.adamw(lr, b1, b2, eps, b1p, b2p, wv, mv, vv, vm, gr))
        return outs
    _check(build, ins, _TOL16[dtype])


def test_convolution_outputs_above_65536():
    """A 1-D convolution mapped to (N, C, 1, W) with W > 65536: before macOS 15.1 the Metal
    backend refuses it (NotImplemented, 'needs macOS 15.1': skipped here), from 15.1 it runs."""
    x, w = _rand((1, 2, 70000), seed=135, lo=-1, hi=1), _rand((3, 2, 5), seed=136, lo=-1, hi=1)
    dy = _rand((1, 3, 69996), seed=137, lo=-1, hi=1)
    _check(lambda g, a, b, d: [g.convolution(a, b), g.convolution_data_gradient(d, b, a),
                               g.convolution_weights_gradient(d, a, b)], [x, w, dy], (1e-4, 1e-3))


@metal_only
def test_convolution_output_limit_says_which_macos():
    g = mg.Graph()
    x = g.placeholder((1, 1, 70000), "float32")
    w = g.placeholder((1, 1, 3), "float32")
    y = g.convolution(x, w)
    try:
        g.run({x: np.ones((1, 1, 70000), np.float32), w: np.ones((1, 1, 3), np.float32)}, [y], device=METAL)
    except mg.GraphNotImplementedError as e:
        assert "needs macOS 15.1" in str(e) and "65536" in str(e)


def test_zero_copy_inputs_with_a_page_aligned_start_and_any_length():
    """An input whose start is page-aligned but whose length is not a whole number of pages is
    wrapped with its page-rounded length (no copy); the results must not change."""
    n = 16384 // 4 + 3
    a = _page_aligned(n * 4 + 16384, np.float32)[:n]
    a[:] = np.arange(n, dtype=np.float32)
    _check(lambda g, x: [x * 2.0 + 1.0, g.reduction_sum(x)], [a])


def test_softmax_cross_entropy_with_zero_size_operands():
    """No positions (sum 0, mean NaN): non-empty results from zero-size inputs, which the native
    lowering produces itself."""
    x = np.zeros((0, 4), np.float32)
    _check(lambda g, a, b: [g.softmax_cross_entropy(a, b, reduction=r) for r in ("sum", "mean")], [x, x])


_FRONT_CASES = [  # (source, weights, attrs) in the front ends' layouts
    ((2, 7, 6, 4), (3, 2, 4, 6), dict(strides=[2, 1], padding_style="same")),  # NHWC / HWIO
    ((2, 7, 6, 4), (3, 3, 2, 6), dict(groups=2, dilation_rates=[1, 2], padding_style="same_lower")),
    ((1, 4, 9, 8), (6, 4, 3, 2), dict(data_layout="NCHW", weights_layout="OIHW", strides=[3, 2],
                                      padding=[2, 0, 1, 3])),
    ((1, 9, 8, 4), (6, 4, 3, 2), dict(weights_layout="OIHW", padding_style="valid")),
    ((1, 4, 5, 6, 2), (2, 3, 2, 2, 4), dict(strides=[1, 2, 1], padding_style="same")),  # NDHWC / DHWIO: 13.2
    ((1, 2, 4, 5, 6), (4, 2, 2, 3, 2), dict(data_layout="NCDHW", weights_layout="OIDHW", padding=[1, 0, 0, 1, 1, 1])),
]


@pytest.mark.parametrize("xs,ws,attrs", _FRONT_CASES, ids=[f"front{len(c[0]) - 2}d-{i}" for i, c in enumerate(_FRONT_CASES)])
def test_convolution_front_ends_native_layouts(xs, ws, attrs):
    """convolution_2d / convolution_3d run as one MPSGraph convolution in the user's layouts;
    every padding style, groups, dilation; their gradients through the primitives."""
    x, w = _rand(xs, seed=140, lo=-1, hi=1), _rand(ws, seed=141, lo=-1, hi=1)
    conv = "convolution_3d" if len(xs) == 5 else "convolution_2d"

    def build(g, a, b):
        y = getattr(g, conv)(a, b, **attrs)
        grads = g.gradients(g.reduction_sum(y * y, keep_dims=False), [a, b])
        return [y, grads[a], grads[b]]
    _check(build, [x, w], (1e-4, 1e-3))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_avg_pooling_2d_native_and_composed_forms(dtype):
    """Without padding, ceil_mode or dilation avg_pooling_2d is MPSGraph's avgPooling2D (NaN
    included); with any of them it is the composition. Gradients through avg_pooling_nd_gradient."""
    x = _as(np.nan_to_num(_special((2, 7, 6, 3), "float32", 142), neginf=-5.0), dtype)
    x.flat[5] = np.nan
    xc = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))

    def build(g, a, b):
        outs = [g.avg_pooling_2d(a, kernel_sizes=[2, 3], strides=[2, 1]),
                g.avg_pooling_2d(a, kernel_sizes=[3, 3], strides=[2, 2], padding_style="valid"),
                g.avg_pooling_2d(b, kernel_sizes=[2, 2], strides=[1, 2], data_layout="NCHW"),
                g.avg_pooling_2d(a, kernel_sizes=[3, 2], strides=[2, 2], padding=[1, 1, 0, 1]),  # composed
                g.avg_pooling_2d(a, kernel_sizes=[2, 2], strides=[2, 2], ceil_mode=True)]  # composed
        clean = g.select(g.isnan(a), g.constant(_as(np.array(0.5, np.float32), dtype)), a)
        y = g.avg_pooling_2d(clean, kernel_sizes=[2, 3], strides=[2, 1])
        return outs + [g.gradients(g.reduction_sum(y * y, keep_dims=False), [a])[a]]
    _check(build, [x, xc], _TOL16[dtype])


def test_avg_pooling_4d_native_and_composed_forms():
    x = _rand((3, 6, 5, 4), seed=143)
    _check(lambda g, a: [g.avg_pooling_4d(a, kernel_sizes=[1, 2, 3, 2], strides=[1, 2, 1, 2]),
                         g.avg_pooling_4d(a, kernel_sizes=[2, 2, 2, 2], padding_style="valid"),
                         g.avg_pooling_4d(a, kernel_sizes=[1, 3, 3, 1], padding=[0, 0, 1, 1, 1, 1, 0, 0])],  # composed
           [x], (1e-5, 1e-6))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_max_pooling_native_and_composed_forms(dtype):
    """max_pooling_2d / _4d are MPSGraph's maxPooling2D / 4D plus a NaN fix-up where no window
    is padding only (padding, symmetric for 4-D, dilation, 'same', ceil_mode that keeps the
    floor size); otherwise the composition. Ties, NaN (windows of NaN only too), -inf windows
    and signed zeros."""
    x = _special((2, 7, 6, 3), dtype, 144)
    x[1, :2, :2, :] = np.nan  # windows of NaN only
    x[0, 4:, 3:, :] = -np.inf  # windows of -inf only
    xc = np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))

    def build(g, a, b):
        return [g.max_pooling_2d(a, kernel_sizes=[2, 2], strides=[2, 2]),
                g.max_pooling_2d(a, kernel_sizes=[3, 2], strides=[2, 1], padding=[1, 1, 0, 1]),
                g.max_pooling_2d(a, kernel_sizes=[3, 3], strides=[1, 2], dilation_rates=[2, 1], padding=[2, 1, 1, 1]),
                g.max_pooling_2d(a, kernel_sizes=[2, 3], strides=[2, 2], padding_style="same"),
                g.max_pooling_2d(a, kernel_sizes=[3, 3], strides=[2, 2], padding_style="valid"),
                g.max_pooling_2d(b, kernel_sizes=[2, 3], strides=[1, 2], padding=[1, 0, 1, 1], data_layout="NCHW"),
                g.max_pooling_2d(a, kernel_sizes=[3, 2], strides=[2, 2], ceil_mode=True),  # 7, 6: same as floor
                g.max_pooling_2d(a, kernel_sizes=[2, 2], strides=[2, 2], ceil_mode=True),  # composed: a larger H
                g.max_pooling_2d(a, kernel_sizes=[2, 2], strides=[1, 1], padding=[2, 0, 0, 2]),  # composed: padding only
                g.max_pooling_4d(a, kernel_sizes=[1, 2, 3, 2], strides=[1, 2, 1, 2], padding=[0, 0, 1, 1, 1, 1, 0, 0]),
                g.max_pooling_4d(a, kernel_sizes=[1, 2, 3, 2], strides=[1, 2, 1, 2], padding=[0, 0, 1, 0, 1, 1, 0, 1]),  # composed: asymmetric
                g.max_pooling_4d(a, kernel_sizes=[2, 3, 3, 1], strides=[1, 3, 2, 1], dilation_rates=[1, 2, 1, 1]),
                g.max_pooling_4d(a, kernel_sizes=[1, 1, 2, 2], strides=[1, 1, 1, 1], padding=[0, 0, 0, 0, 2, 0, 0, 0])]  # composed
    _check(build, [x, xc], _TOL16[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_inverse_and_solve(dtype):
    a = (_rand((3, 4, 4), "float64", 11, -0.2, 0.2) + np.eye(4)).astype(dtype)
    b, v = _rand((3, 4, 2), dtype, 12), _rand((4,), dtype, 13)
    _check(lambda g, x, y, z: [g.matrix_inverse(x), g.solve(x, y), g.solve(g.slice(x, 0, 0, 1), z)], [a, b, v],
           dtype_tol={"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-2)}[dtype])


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_hamming_distance(dtype):
    x, y = _rand((2, 3, 5), dtype, 14, 0, 200), _rand((4, 5), dtype, 15, 0, 200)
    _check(lambda g, a, b: [g.hamming_distance(a, b), g.hamming_distance(a, b, dtype="uint16")], [x, y])


def test_quantization_and_sample_grid_compositions():
    x, grid = _rand((2, 3, 5, 4), "float32", 16), _rand((2, 3, 6, 2), "float32", 17, -1.2, 1.2)
    scale = np.array([0.05, 0.1, 0.02], np.float32)
    lut = _rand((256,), "float32", 18)
    _check(lambda g, a, gr, s, t: [g.quantize(a, s, 3.0, axis=1), g.fake_quantize(a, 0.05, 0.0),
                                  g.dequantize(g.quantize(a, s, 120.0, dtype="uint8", axis=1), s, 120.0, axis=1),
                                  g.dequantize_lut(g.cast(g.quantize(a, 0.05, 0.0, dtype="uint8"), "uint8"), t),
                                  g.sample_grid(a, gr), g.sample_grid(a, gr, mode="nearest", padding_mode="reflection")],
           [x, grid, scale, lut])


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_im_to_col_col_to_im_compositions(dtype):
    """The decompositions (pad, a strided slice per kernel tap, slice_gradient) against the CPU kernels."""
    x = _rand((2, 3, 7, 6), dtype, 22, -20, 20)
    win = {"kernel_sizes": (3, 2), "strides": (2, 1), "dilation_rates": (1, 2), "padding": (1, 2, 0, 1)}
    cols = _rand((2, 18, 20), dtype, 23, -20, 20)
    _check(lambda g, a, c: [g.im_to_col(a, **win), g.col_to_im(c, output_size=(7, 6), **win),
                            g.im_to_col_gradient(c, a, **win), g.im_to_col(a, kernel_sizes=(2, 2))], [x, cols])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dequantize_native_and_composed_forms(dtype):
    """int8 / uint8 x with a zero point of its own dtype is MPSGraph's dequantize (per axis and per
    tensor); a float zero point or an int32 x is the decomposition's arithmetic."""
    rng = np.random.default_rng(21)
    q8 = rng.integers(-128, 128, size=(2, 3, 5)).astype(np.int8)
    u8 = rng.integers(0, 256, size=(4, 3)).astype(np.uint8)
    i32 = rng.integers(-1000, 1000, size=(3, 4)).astype(np.int32)
    scale = np.array([0.05, 0.1, 0.02], np.float32)
    z8, zu = np.array([3, -7, 0], np.int8), np.array([120], np.uint8)

    def build(g, a, b, c, s, z, w):
        return [g.dequantize(a, s, z, axis=1, dtype=dtype), g.dequantize(a, g.slice(s, 0, 1, 1), g.slice(z, 0, 0, 1),
                                                                         dtype=dtype),
                g.dequantize(b, s, w, axis=-1, dtype=dtype), g.dequantize(b, g.constant(np.array([0.25], np.float32)), w, dtype=dtype),
                g.dequantize(a, s, 2.5, axis=1, dtype=dtype), g.dequantize(c, 0.01, 4.0, dtype=dtype)]
    _check(build, [q8, u8, i32, scale, z8, zu], {"float32": (1e-6, 1e-7), "float16": (1e-3, 1e-3)}[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("align", [False, True])
def test_sample_grid_native_and_composed_forms(dtype, align):
    """zeros padding (bilinear, nearest) is MPSGraph's sampleGrid; border and reflection are the
    decomposition. The grid reaches past [-1, 1] and lands on pixel centres and halves."""
    x = _rand((2, 3, 5, 4), dtype, 22)
    grid = _rand((2, 4, 6, 2), "float32", 23, -1.3, 1.3)
    grid[0, 0, :, 0] = np.linspace(-1, 1, 6)  # exact centres / edges for either align_corners
    grid = grid.astype(dtype)
    _check(lambda g, a, gr: [g.sample_grid(a, gr, align_corners=align),
                             g.sample_grid(a, gr, mode="nearest", align_corners=align),
                             g.sample_grid(a, gr, padding_mode="border", align_corners=align),
                             g.sample_grid(a, gr, mode="nearest", padding_mode="reflection", align_corners=align)],
           [x, grid], _TOL16[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_linalg_decompositions_match_lapack(dtype):
    """cholesky, triangular_solve, determinant and log_determinant run on Metal as their unrolled
    decompositions (the CPU keeps LAPACK)."""
    rng = np.random.default_rng(24)
    m = rng.uniform(-1, 1, (3, 5, 5))
    spd = (m @ np.swapaxes(m, -1, -2) + 5 * np.eye(5)).astype(dtype)
    a = (rng.uniform(-0.3, 0.3, (3, 5, 5)) + np.eye(5) * np.array([1, -1, 1, 1, -1])).astype(dtype)
    b = rng.uniform(-1, 1, (5, 2)).astype(dtype)
    _check(lambda g, s, x, y: [g.cholesky(s), g.cholesky(s, upper=True), g.triangular_solve(x, y, upper=False),
                               g.triangular_solve(x, g.swap_axes(y, 0, 1), upper=True, left=False),
                               g.determinant(x), *g.log_determinant(x)],
           [spd, a, b], {"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-2)}[dtype])


@pytest.mark.parametrize("boundary", ["zero", "clamp_to_edge", "reflect", "symmetric", "periodic"])
def test_stencil(boundary):
    x, w = _rand((2, 1, 3, 6, 7), "float32", 19), _rand((1, 2, 3, 2), "float32", 20, 0.5, 1.5)
    _check(lambda g, a, b: [g.stencil(a, b, padding=(0, 0, 0, 1, 1, 1, 2, 0), boundary_mode=boundary),
                            g.stencil(a, b, reduction_mode="max", padding_style="same", boundary_mode=boundary)],
           [x, w])
