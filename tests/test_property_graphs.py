"""Property-based tests (issue 13, item 9): random graphs of elementwise, broadcasting,
reduction, shape, matmul, pooling and gather ops, with unknown (None) and zero-size dims,
compared with numpy (float64 references), and their gradients with central finite
differences. Bounded: each property runs a fixed number of examples without deadlines."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpsgraph as mg

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)

DTYPES = {"float32": (mg.float32, np.float32, 1e-5), "float64": (mg.float64, np.float64, 1e-12)}

# op -> (numpy reference, input map keeping it in its domain)
UNARY = {
    "negative": (np.negative, None),
    "absolute": (np.abs, None),
    "exponent": (np.exp, None),
    "sin": (np.sin, None),
    "cos": (np.cos, None),
    "tanh": (np.tanh, None),
    "square": (np.square, None),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), None),
    "relu": (lambda x: np.maximum(x, 0), None),
    "softplus": (lambda x: np.log1p(np.exp(x)), None),
    "square_root": (np.sqrt, "abs"),
    "logarithm": (np.log, "abs + 0.5"),
    "floor": (np.floor, None),
}
BINARY = {
    "addition": np.add,
    "subtraction": np.subtract,
    "multiplication": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
REDUCTIONS = {
    "reduction_sum": (np.sum, True),
    "reduction_product": (np.prod, True),
    "reduction_maximum": (np.max, False),  # no identity: needs a non-empty reduced extent
    "reduction_minimum": (np.min, False),
    "mean": (np.mean, True),  # over nothing: NaN, as numpy
}

dims = st.integers(0, 4)
shapes = st.lists(dims, min_size=0, max_size=3).map(tuple)


def _values(rng, shape, np_dtype):
    return (rng.standard_normal(shape) * 1.5).astype(np_dtype)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast (numpy's rule), each dim possibly 1 or 0."""
    out = draw(st.lists(dims, min_size=0, max_size=3))
    a, b = [], []
    for d in out:
        a.append(draw(st.sampled_from([d, 1])))
        b.append(draw(st.sampled_from([d, 1])))
    a = a[draw(st.integers(0, len(a))):]  # lower ranks broadcast too
    return tuple(a), tuple(b)


def _unknown(shape, mask):
    return tuple(None if m else d for d, m in zip(shape, mask))


def _run(g, feeds, targets, unknown_masks):
    """Runs through Graph.run and through an executable compiled with None dims."""
    outs = g.run(feeds, targets)
    types = {t: (_unknown(v.shape, m), t.dtype) for (t, v), m in zip(feeds.items(), unknown_masks)}
    exe = g.compile(types, targets)
    outs2 = exe.run([feeds[t] for t in exe.feed_tensors])
    return [np.asarray(outs[t]) for t in targets], [np.asarray(o) for o in outs2]


def _close(got, want, tol):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol * 100, atol=tol * 100, equal_nan=True)


@SETTINGS
@given(ops=st.lists(st.sampled_from(sorted(UNARY)), min_size=1, max_size=4), shape=shapes,
       dtype=st.sampled_from(sorted(DTYPES)), seed=st.integers(0, 2**16), mask=st.lists(st.booleans(), max_size=3))
def test_unary_chains_match_numpy(ops, shape, dtype, seed, mask):
    mgd, npd, tol = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    a = _values(rng, shape, npd)
    g = mg.Graph()
    x = g.placeholder(_unknown(shape, mask + [False] * 3), mgd, name="x")
    t, ref = x, a.astype(np.float64)
    for op in ops:
        fn, domain = UNARY[op]
        if domain is not None:  # keep the chain in the op's domain, in both worlds
            shift = 0.5 if op == "logarithm" else 0.0
            t = g.absolute(t) + shift
            ref = np.abs(ref) + shift
        t = getattr(g, op)(t)
        ref = fn(ref)
    got1, got2 = _run(g, {x: a}, [t], [mask + [False] * 3])
    _close(got1[0], ref.astype(npd), tol)
    _close(got2[0], ref.astype(npd), tol)


@SETTINGS
@given(pair=broadcast_pair(), op=st.sampled_from(sorted(BINARY)), dtype=st.sampled_from(sorted(DTYPES)),
       seed=st.integers(0, 2**16), ma=st.lists(st.booleans(), min_size=3, max_size=3),
       mb=st.lists(st.booleans(), min_size=3, max_size=3))
def test_broadcast_binary_ops_match_numpy(pair, op, dtype, seed, ma, mb):
    mgd, npd, tol = DTYPES[dtype]
    sa, sb = pair
    rng = np.random.default_rng(seed)
    a, b = _values(rng, sa, npd), _values(rng, sb, npd)
    g = mg.Graph()
    x = g.placeholder(sa, mgd, name="a")
    y = g.placeholder(sb, mgd, name="b")
    z = getattr(g, op)(x, y)
    assert z.shape == np.broadcast_shapes(sa, sb)
    got1, got2 = _run(g, {x: a, y: b}, [z], [ma, mb])
    want = BINARY[op](a.astype(np.float64), b.astype(np.float64)).astype(npd)
    _close(got1[0], want, tol)
    _close(got2[0], want, tol)


@SETTINGS
@given(shape=st.lists(dims, min_size=1, max_size=3).map(tuple), data=st.data(), op=st.sampled_from(sorted(REDUCTIONS)),
       keep=st.booleans(), seed=st.integers(0, 2**16), mask=st.lists(st.booleans(), min_size=3, max_size=3))
def test_reductions_match_numpy(shape, data, op, keep, seed, mask):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                              unique_by=lambda a: a % len(shape)))
    fn, has_identity = REDUCTIONS[op]
    reduced = int(np.prod([shape[a % len(shape)] for a in axes]))
    a = _values(np.random.default_rng(seed), shape, np.float64)
    g = mg.Graph()
    x = g.placeholder(shape, mg.float64, name="x")
    if reduced == 0 and not has_identity:
        # max/min/mean over nothing: refused (at build time or at run time), never garbage
        with pytest.raises(mg.GraphError):
            y = getattr(g, op)(x, axes=axes, keep_dims=keep)
            g.run({x: a}, [y])
        return
    y = getattr(g, op)(x, axes=axes, keep_dims=keep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of nothing
        want = fn(a, axis=tuple(ax % len(shape) for ax in axes), keepdims=keep)
    got1, got2 = _run(g, {x: a}, [y], [mask])
    _close(got1[0], np.asarray(want), 1e-12)
    _close(got2[0], np.asarray(want), 1e-12)


@SETTINGS
@given(shape=st.lists(dims, min_size=1, max_size=4).map(tuple), data=st.data(), seed=st.integers(0, 2**16),
       mask=st.lists(st.booleans(), min_size=4, max_size=4))
def test_shape_ops_match_numpy(shape, data, seed, mask):
    a = _values(np.random.default_rng(seed), shape, np.float32)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    g = mg.Graph()
    x = g.placeholder(shape, mg.float32, name="x")
    tr = g.transpose(x, perm)
    flat = g.reshape(x, (-1,))
    rev = g.reverse(x, axes=[0])
    cat = g.concat([x, x * 2.0], axis=len(shape) - 1)
    sq = g.expand_dims(x, 0)
    got1, got2 = _run(g, {x: a}, [tr, flat, rev, cat, sq], [mask])
    wants = [np.transpose(a, perm), a.reshape(-1), a[::-1], np.concatenate([a, a * 2], axis=-1), a[None]]
    for got in (got1, got2):
        for g_, w in zip(got, wants):
            _close(g_, w, 1e-6)


@SETTINGS
@given(m=dims, k=dims, n=dims, batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
       dtype=st.sampled_from(sorted(DTYPES)), seed=st.integers(0, 2**16), mask=st.lists(st.booleans(), min_size=4,
                                                                                         max_size=4))
def test_matmul_matches_numpy(m, k, n, batch, dtype, seed, mask):
    mgd, npd, tol = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    a, b = _values(rng, batch + (m, k), npd), _values(rng, (k, n), npd)
    g = mg.Graph()
    x = g.placeholder(a.shape, mgd, name="a")
    y = g.placeholder(b.shape, mgd, name="b")
    z = x @ y
    got1, got2 = _run(g, {x: a, y: b}, [z], [mask, mask[:2]])
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(npd)
    _close(got1[0], want, tol * 10)
    _close(got2[0], want, tol * 10)


@SETTINGS
@given(h=st.integers(1, 6), w=st.integers(1, 6), c=st.integers(1, 3), k=st.integers(1, 3), s=st.integers(1, 2),
       seed=st.integers(0, 2**16))
def test_max_pooling_matches_numpy(h, w, c, k, s, seed):
    if k > h or k > w:
        return
    a = _values(np.random.default_rng(seed), (1, h, w, c), np.float32)
    g = mg.Graph()
    x = g.placeholder((1, None, None, c), mg.float32, name="x")
    y = g.max_pooling_2d(x, kernel_sizes=(k, k), strides=(s, s), data_layout="NHWC")
    out = np.asarray(g.run({x: a}, [y])[y])
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    want = np.empty((1, oh, ow, c), np.float32)
    for i in range(oh):
        for j in range(ow):
            want[0, i, j] = a[0, i * s:i * s + k, j * s:j * s + k].max(axis=(0, 1))
    _close(out, want, 1e-6)


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data(),
       seed=st.integers(0, 2**16))
def test_gather_matches_numpy(shape, data, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    idx = np.asarray(data.draw(st.lists(st.integers(0, shape[axis] - 1), max_size=5)), np.int32)
    a = _values(np.random.default_rng(seed), shape, np.float32)
    g = mg.Graph()
    x = g.placeholder(shape, mg.float32, name="x")
    i = g.placeholder((None,), mg.int32, name="i")
    y = g.gather(x, i, axis=axis)
    out = np.asarray(g.run({x: a, i: idx}, [y])[y])
    _close(out, np.take(a, idx, axis=axis), 1e-6)


# ---------------- gradients against finite differences ----------------

SMOOTH = ["sin", "tanh", "exponent", "square", "sigmoid", "softplus", "cos"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(ops=st.lists(st.sampled_from(SMOOTH), min_size=1, max_size=3), pair=broadcast_pair(),
       binop=st.sampled_from(["addition", "multiplication", "subtraction"]), seed=st.integers(0, 2**16),
       red=st.booleans())
def test_gradients_match_finite_differences(ops, pair, binop, seed, red):
    sa, sb = pair
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, sa), rng.uniform(-1, 1, sb)
    g = mg.Graph()
    x = g.placeholder(sa, mg.float64, name="x")
    y = g.placeholder(sb, mg.float64, name="y")
    t = getattr(g, binop)(x, y)
    for op in ops:
        t = getattr(g, op)(t)
    if red and t.ndim:
        t = g.reduction_sum(t * t, axes=list(range(t.ndim)))
    loss = g.reduction_sum(t, axes=list(range(t.ndim))) if t.ndim else t
    grads = g.gradients(loss, [x, y])

    def f(av, bv):
        return float(np.asarray(g.run({x: av, y: bv}, [loss])[loss]).sum())

    out = g.run({x: a, y: b}, [grads[x], grads[y]])
    for var, val, other, first in ((x, a, b, True), (y, b, a, False)):
        got = np.asarray(out[grads[var]])
        assert got.shape == val.shape
        num = np.zeros_like(val)
        eps = 1e-6
        for idx in np.ndindex(val.shape):
            p, m = val.copy(), val.copy()
            p[idx] += eps
            m[idx] -= eps
            fp = f(p, other) if first else f(other, p)
            fm = f(m, other) if first else f(other, m)
            num[idx] = (fp - fm) / (2 * eps)
        np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-6)
