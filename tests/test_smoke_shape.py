"""Smoke tests for the shape family and Tensor.__getitem__ against numpy (CPU): static and
unknown dims, rank 0, zero-size dims, negative steps, errors, and gradients (first and
second order, also with unknown dims). The conformance table covers the ops in depth."""
import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient

RNG = np.random.default_rng(7)


def normal(*shape):
    return RNG.standard_normal(shape)


def run(build, arrays, unknown=False, dtype=mg.float32):
    g = mg.Graph()
    phs = [g.placeholder(tuple(None for _ in a.shape) if unknown else a.shape, dtype) for a in arrays]
    out = build(g, *phs)
    outs = list(out) if isinstance(out, tuple) else [out]
    res = g.run(dict(zip(phs, arrays)), outs)
    return [res[o].numpy() for o in outs], outs


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = [
    ("reshape", lambda g, x: g.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), [f32(2, 3, 4)]),
    ("reshape_rank0", lambda g, x: g.reshape(x, ()), lambda x: x.reshape(()), [f32(1, 1)]),
    ("reshape_zero", lambda g, x: g.reshape(x, (3, 0)), lambda x: x.reshape(3, 0), [f32(0, 3)]),
    ("reshape_like", lambda g, x, y: g.reshape_like(x, y), lambda x, y: x.reshape(y.shape), [f32(2, 6), f32(3, 4)]),
    ("transpose", lambda g, x: g.transpose(x, (1, 2, 0)), lambda x: x.transpose(1, 2, 0), [f32(2, 3, 4)]),
    ("transpose_default", lambda g, x: x.T, lambda x: x.T, [f32(2, 3, 4)]),
    ("permute_neg", lambda g, x: g.permute(x, (-1, 0, 1)), lambda x: x.transpose(2, 0, 1), [f32(2, 3, 4)]),
    ("swap_axes", lambda g, x: g.swap_axes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1), [f32(2, 3, 4)]),
    ("expand_dims", lambda g, x: g.expand_dims(x, (0, -1)), lambda x: np.expand_dims(x, (0, -1)), [f32(2, 3)]),
    ("expand_dims_rank0", lambda g, x: g.expand_dims(x, 0), lambda x: np.expand_dims(x, 0), [f32()]),
    ("squeeze_axes", lambda g, x: g.squeeze(x, (0, 2)), lambda x: np.squeeze(x, (0, 2)), [f32(1, 3, 1, 2)]),
    ("broadcast_to", lambda g, x: g.broadcast_to(x, (4, 2, 3)), lambda x: np.broadcast_to(x, (4, 2, 3)), [f32(2, 1)]),
    ("broadcast_zero", lambda g, x: g.broadcast(x, (0, 3)), lambda x: np.broadcast_to(x, (0, 3)), [f32(3)]),
    ("slice", lambda g, x: g.slice(x, 1, 1, 2), lambda x: x[:, 1:3], [f32(2, 4)]),
    ("slice_negative_start", lambda g, x: g.slice(x, -1, -3, 2), lambda x: x[..., -3:-1], [f32(2, 4)]),
    ("slice_to_end", lambda g, x: g.slice(x, 0, -2, 2), lambda x: x[-2:], [f32(5, 2)]),
    ("strided_slice", lambda g, x: g.strided_slice(x, (4, 0), (0, 3), (-2, 1), end_mask=2),
     lambda x: x[4:0:-2, 0:], [f32(6, 3)]),
    ("strided_slice_squeeze", lambda g, x: g.strided_slice(x, (-1, 0), (0, 0), (1, 1), end_mask=2, squeeze_mask=1),
     lambda x: x[-1, 0:], [f32(6, 3)]),
    ("concat", lambda g, x, y: g.concat([x, y, x], axis=-1), lambda x, y: np.concatenate([x, y, x], -1),
     [f32(2, 3), f32(2, 0)]),
    ("concatenate", lambda g, x, y: g.concatenate([x, y]), lambda x, y: np.concatenate([x, y]), [f32(2, 3), f32(1, 3)]),
    ("split_num", lambda g, x: g.split(x, num_splits=3, axis=1), lambda x: tuple(np.split(x, 3, 1)), [f32(2, 6)]),
    ("split_sizes", lambda g, x: g.split(x, split_sizes=(1, 0, 3)), lambda x: tuple(np.split(x, [1, 1])), [f32(4, 2)]),
    ("stack", lambda g, x, y: g.stack([x, y], axis=-1), lambda x, y: np.stack([x, y], -1), [f32(2, 3), f32(2, 3)]),
    ("stack_rank0", lambda g, x, y: g.stack([x, y]), lambda x, y: np.stack([x, y]), [f32(), f32()]),
    ("pad", lambda g, x: g.pad(x, (1, 0), (2, 3), constant_value=-1.5),
     lambda x: np.pad(x, [(1, 2), (0, 3)], constant_values=-1.5), [f32(2, 3)]),
    ("pad_zero_size", lambda g, x: g.pad(x, (1, 1), (0, 1)), lambda x: np.pad(x, [(1, 0), (1, 1)]), [f32(0, 2)]),
    ("tile", lambda g, x: g.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), [f32(2, 3, 2)]),
    ("tile_zero", lambda g, x: g.tile(x, (0, 2)), lambda x: np.tile(x, (0, 2)), [f32(2, 3)]),
    ("reverse_all", lambda g, x: g.reverse(x), lambda x: np.flip(x), [f32(3, 4)]),
    ("reverse_axes", lambda g, x: g.flip(x, (0, 2)), lambda x: np.flip(x, (0, 2)), [f32(3, 4, 2)]),
    ("flatten_2d", lambda g, x: g.flatten_2d(x, 2), lambda x: x.reshape(6, -1), [f32(2, 3, 4, 5)]),
    ("flatten_2d_zero", lambda g, x: g.flatten_2d(x, 0), lambda x: x.reshape(1, -1), [f32(2, 3)]),
    ("flatten_2d_rank", lambda g, x: g.flatten_2d(x, -1), lambda x: x.reshape(6, 4), [f32(2, 3, 4)]),
    ("flatten", lambda g, x: g.flatten(x), lambda x: x.reshape(-1), [f32(2, 3, 4)]),
    ("flatten_rank0", lambda g, x: g.flatten(x), lambda x: x.reshape(-1), [f32()]),
    ("shape_of", lambda g, x: g.shape_of(x), lambda x: np.array(x.shape, np.int32), [f32(2, 0, 5)]),
]


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
@pytest.mark.parametrize("name,build,ref,arrays", CASES, ids=[c[0] for c in CASES])
def test_against_numpy(name, build, ref, arrays, unknown):
    got, outs = run(build, arrays, unknown)
    want = ref(*arrays)
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want)
    for t, a, b in zip(outs, got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
        if not unknown:
            assert t.shape == b.shape  # static shape inference


def test_unknown_dims_in_inference():
    g = mg.Graph()
    x = g.placeholder((None, 3, 4))
    assert g.reshape(x, (-1, 4)).shape == (None, 4)
    assert g.reshape(x, (2, 6, -1)).shape == (2, 6, None)
    assert g.transpose(x).shape == (4, 3, None)
    assert g.slice(x, 0, 1, 2).shape == (2, 3, 4)
    assert x[1:, 0].shape == (None, 4)
    assert x[0].shape == (3, 4)
    assert g.concat([x, x], axis=0).shape == (None, 3, 4)
    assert g.concat([x, x], axis=1).shape == (None, 6, 4)
    assert g.tile(x, (0, 2, 1)).shape == (0, 6, 4)
    assert g.flatten_2d(x, 1).shape == (None, 12)
    assert g.pad(x, (1, 0, 0), (1, 0, 0)).shape == (None, 3, 4)
    assert [t.shape for t in g.split(x, split_sizes=(1, 2), axis=1)] == [(None, 1, 4), (None, 2, 4)]
    assert g.shape_of(x).shape == (3,)
    y = g.placeholder((None, 1))
    assert g.squeeze(y).shape == (None,)  # only dims statically 1 are squeezed
    assert g.broadcast_to(y, (2, -1, 5)).shape == (2, None, 5)


def test_specialisation_checks_unknown_dims():
    g = mg.Graph()
    x = g.placeholder((None, 3))
    y = g.squeeze(x, 0)
    assert y.shape == (3,)
    np.testing.assert_array_equal(g.run({x: np.ones((1, 3), np.float32)}, [y])[y].numpy(), np.ones(3))
    with pytest.raises(mg.GraphValueError, match="squeeze"):
        g.run({x: np.ones((2, 3), np.float32)}, [y])
    z = g.reshape(x, (2, 3))
    with pytest.raises(mg.GraphValueError, match=r"cannot reshape float32\(4, 3\) \(12 elements\) to \(2, 3\)"):
        g.run({x: np.ones((4, 3), np.float32)}, [z])
    w = x[5]
    with pytest.raises(mg.GraphIndexError, match="index 5 is out of range for dim 0 of size 2"):
        g.run({x: np.ones((2, 3), np.float32)}, [w])
    assert g.run({x: np.arange(18, dtype=np.float32).reshape(6, 3)}, [w])[w].numpy().tolist() == [15, 16, 17]


A = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)
INDICES = [np.s_[::-2], np.s_[5:1:-1], np.s_[..., None, 1], np.s_[1], np.s_[-1], np.s_[1:3], np.s_[:, 2],
           np.s_[None], np.s_[..., ::-1], np.s_[None, ..., None], np.s_[1, -2, 3], np.s_[::3, ::-3, 1:],
           np.s_[10:], np.s_[-10:2], np.s_[:, :, -100:100:7], np.s_[2:2], np.s_[4:1], np.s_[::-1, None, 0, ::2],
           np.s_[...], np.s_[()], np.s_[-6], np.s_[1:-1:-1], np.s_[-1:-7:-1], np.s_[np.int64(2), np.int32(1):],
           np.s_[:, None, :, None], np.s_[5::-2, 3::-1], np.s_[..., 3, None], np.s_[::(1 << 62)],
           np.s_[-(1 << 70):(1 << 70)]]


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
@pytest.mark.parametrize("index", INDICES, ids=[str(i) for i in range(len(INDICES))])
def test_getitem(index, unknown):
    (got,), (t,) = run(lambda g, x: x[index], [A], unknown)
    want = A[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if not unknown:
        assert t.shape == want.shape


@pytest.mark.parametrize("index", [np.s_[()], np.s_[None], np.s_[...], np.s_[None, ..., None]])
def test_getitem_rank0(index):
    a = np.array(2.5, np.float32)
    (got,), _ = run(lambda g, x: x[index], [a])
    np.testing.assert_array_equal(got, a[index])


def test_getitem_random_against_numpy():
    rng = np.random.default_rng(1)
    for _ in range(150):
        shape = tuple(int(v) for v in rng.integers(0, 5, rng.integers(1, 4)))
        a = rng.standard_normal(shape).astype(np.float32)
        index = []
        for d in shape:
            if rng.random() < 0.3 and d > 0:
                index.append(int(rng.integers(-d, d)))
            else:
                def bound():
                    return None if rng.random() < 0.3 else int(rng.integers(-7, 8))
                index.append(slice(bound(), bound(), None if rng.random() < 0.3 else int(rng.choice([-3, -1, 1, 2]))))
        if rng.random() < 0.3:
            index.insert(int(rng.integers(0, len(index) + 1)), None)
        index = tuple(index)
        for unknown in (False, True):
            (got,), _ = run(lambda g, x: x[index], [a], unknown)
            np.testing.assert_array_equal(got, a[index], err_msg=f"{shape} {index}")


@pytest.mark.parametrize("dtype,npdtype", [(mg.float16, np.float16), (mg.int8, np.int8), (mg.int64, np.int64),
                                           (mg.float64, np.float64), (mg.uint16, np.uint16)])
def test_dtypes(dtype, npdtype):
    a = (RNG.standard_normal((3, 4, 5)) * 10).astype(npdtype)
    for build, ref in [(lambda g, x: x[::-1, 1:3, ::2], lambda a: a[::-1, 1:3, ::2]),
                       (lambda g, x: g.transpose(x, (2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
                       (lambda g, x: g.tile(x, (2, 1, 2)), lambda a: np.tile(a, (2, 1, 2))),
                       (lambda g, x: g.pad(x, (1, 0, 2), (0, 1, 1), constant_value=3),
                        lambda a: np.pad(a, [(1, 0), (0, 1), (2, 1)], constant_values=3))]:
        (got,), _ = run(build, [a], dtype=dtype)
        np.testing.assert_array_equal(got, ref(a))


def test_large_copies_use_every_path():
    a = f32(130, 257, 7)
    for build, ref in [(lambda g, x: g.transpose(x, (2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
                       (lambda g, x: x[::-1, 3:-3, ::2], lambda a: a[::-1, 3:-3, ::2]),
                       (lambda g, x: g.tile(x, (2, 1, 3)), lambda a: np.tile(a, (2, 1, 3))),
                       (lambda g, x: g.pad(x, (1, 2, 0), (0, 1, 3)), lambda a: np.pad(a, [(1, 0), (2, 1), (0, 3)])),
                       (lambda g, x: g.concat([x, x], axis=1), lambda a: np.concatenate([a, a], 1)),
                       (lambda g, x: g.broadcast_to(x[:, :, :1], (130, 257, 70)),
                        lambda a: np.broadcast_to(a[:, :, :1], (130, 257, 70)))]:
        (got,), _ = run(build, [a])
        np.testing.assert_array_equal(got, ref(a))


def test_shape_of_is_folded_to_a_constant():
    g = mg.Graph()
    x = g.placeholder((None, 3))
    s = g.shape_of(x)
    assert s.dtype == mg.int32
    out = g.run({x: np.zeros((5, 3), np.float32)}, [s])[s].numpy()
    assert out.tolist() == [5, 3]


# ---------------- errors ----------------

def expect(exc, fn, *fragments):
    with pytest.raises(exc) as ei:
        fn()
    for f in fragments:
        assert f in str(ei.value), str(ei.value)
    return str(ei.value)


def test_errors():
    g = mg.Graph()
    x = g.placeholder((2, 3))
    x33, xi, x2, x32 = g.placeholder((3, 3)), g.placeholder((2, 3), mg.int32), g.placeholder((2,)), g.placeholder((3, 2))
    n = g.num_nodes
    expect(mg.GraphValueError, lambda: g.reshape(x, (4, 2)),
           "[reshape] cannot reshape float32(2, 3) (6 elements) to (4, 2) (8 elements)")
    expect(mg.GraphValueError, lambda: g.reshape(x, (-1, -1)), "more than one -1")
    expect(mg.GraphValueError, lambda: g.reshape(x, (4, -1)), "cannot reshape")
    expect(mg.GraphValueError, lambda: g.transpose(x, (0, 0)), "not a permutation")
    expect(mg.GraphValueError, lambda: g.transpose(x, (0,)), "permutation")
    expect(mg.GraphIndexError, lambda: g.expand_dims(x, 3), "out of range")
    expect(mg.GraphValueError, lambda: g.squeeze(x, 0), "cannot squeeze axis 0 of size 2")
    expect(mg.GraphValueError, lambda: g.broadcast_to(x, (4, 3, 3)), "cannot broadcast float32(2, 3) to (4, 3, 3)")
    expect(mg.GraphValueError, lambda: g.broadcast_to(x, (3,)), "cannot broadcast")
    expect(mg.GraphIndexError, lambda: g.slice(x, 1, 2, 2), "out of range")
    expect(mg.GraphIndexError, lambda: g.slice(x, 2, 0, 1), "axis 2")
    expect(mg.GraphIndexError, lambda: g.strided_slice(x, (0, 5), (1, 6), (1, 1), squeeze_mask=2),
           "[strided_slice] index 5 is out of range for dim 1 of size 3")
    expect(mg.GraphValueError, lambda: g.strided_slice(x, (0, 0), (1, 1), (1, 0)), "stride of dim 1 is 0")
    expect(mg.GraphValueError, lambda: g.strided_slice(x, (0,), (1,), (1,)), "one entry per dim")
    expect(mg.GraphValueError, lambda: g.concat([x, x33], axis=1), "match")
    expect(mg.GraphTypeError, lambda: g.concat([x, xi]), "dtypes differ")
    expect(mg.GraphValueError, lambda: g.concat([x, x2]), "rank")
    expect(mg.GraphValueError, lambda: g.concat([]), "at least one")
    expect(mg.GraphValueError, lambda: g.split(x, num_splits=2, axis=1), "cannot be split into 2")
    expect(mg.GraphValueError, lambda: g.split(x, split_sizes=(1, 1), axis=1), "sum to 2")
    expect(mg.GraphValueError, lambda: g.split(x), "exactly one")
    expect(mg.GraphValueError, lambda: g.stack([x, x32]), "match")
    expect(mg.GraphValueError, lambda: g.pad(x, (0, -1), (0, 0)), "negative padding")
    expect(mg.GraphNotImplementedError, lambda: g.pad(x, (1, 1), (1, 1), mode="antiperiodic"),
           "[pad] mode 'antiperiodic' is not implemented")
    expect(mg.GraphValueError, lambda: g.pad(x, (2, 1), (1, 1), mode="reflect"), "needs padding smaller than the dim")
    expect(mg.GraphValueError, lambda: g.pad(x, (1, 1), (1, 1), mode="bogus"), "unknown mode")
    expect(mg.GraphValueError, lambda: g.tile(x, (2,)), "one entry per dim")
    expect(mg.GraphValueError, lambda: g.tile(x, (2, -1)), "negative")
    expect(mg.GraphIndexError, lambda: g.flatten_2d(x, 3), "out of range")
    expect(mg.GraphValueError, lambda: g.reverse(x, (0, 0)), "repeated")
    assert g.num_nodes == n  # failed builds leave no nodes


def test_getitem_errors():
    g = mg.Graph()
    x = g.placeholder((2, 3))
    mask = x > 0
    n = g.num_nodes
    expect(mg.GraphIndexError, lambda: x[0, 0, 0], "too many indices", "rank 2")
    expect(mg.GraphIndexError, lambda: x[..., ...], "single ellipsis")
    expect(mg.GraphIndexError, lambda: x[2], "index 2 is out of range for dim 0 of size 2")
    expect(mg.GraphIndexError, lambda: x[:, -4], "index -4 is out of range for dim 1 of size 3")
    expect(mg.GraphNotImplementedError, lambda: x[[0, 1]], "advanced (array) indexing is not supported; use gather")
    expect(mg.GraphNotImplementedError, lambda: x[np.array([0, 1])], "advanced")
    expect(mg.GraphNotImplementedError, lambda: x[mask], "advanced")
    expect(mg.GraphNotImplementedError, lambda: x[True], "advanced")
    expect(mg.GraphTypeError, lambda: x["a"], "str")
    expect(mg.GraphValueError, lambda: x[::0], "zero")
    assert g.num_nodes == n
    assert issubclass(mg.GraphNotImplementedError, NotImplementedError)


# ---------------- gradients (float64 finite differences) ----------------

GRADS = [
    ("reshape", lambda g, x: g.reshape(x, (3, -1)), [normal(2, 3)], True),
    ("reshape_like", lambda g, x, y: g.reshape_like(x, y), [normal(2, 3), normal(3, 2)], True),
    ("transpose", lambda g, x: g.transpose(x, (2, 0, 1)), [normal(2, 3, 4)], True),
    ("swap_axes", lambda g, x: g.swap_axes(x, 0, 2), [normal(2, 3, 4)], True),
    ("expand_dims", lambda g, x: g.expand_dims(x, (0, -1)), [normal(2, 3)], True),
    ("squeeze", lambda g, x: g.squeeze(x, 1), [normal(2, 1, 3)], True),
    ("broadcast_to", lambda g, x: g.broadcast_to(x, (4, 2, 3)), [normal(2, 1)], True),
    ("slice", lambda g, x: g.slice(x, 1, -3, 2), [normal(2, 4)], True),
    ("slice_to_end", lambda g, x: g.slice(x, 1, -2, 2), [normal(2, 4)], True),
    ("strided_slice", lambda g, x: x[::-1, 1::2], [normal(3, 5)], True),
    ("strided_slice_int_none", lambda g, x: x[1, None, ..., -1], [normal(3, 4, 5)], True),
    ("slice_gradient", lambda g, dy, x: g.slice_gradient(dy, x, (0, 3), (0, 0), (1, -2), start_mask=1, end_mask=3),
     [normal(3, 2), normal(3, 5)], True),
    ("concat", lambda g, a, b: g.concat([a, b, a], axis=1), [normal(2, 3), normal(2, 1)], True),
    ("split", lambda g, x: (lambda s: s[0] * 2.0 + s[2])(g.split(x, split_sizes=(1, 2, 1), axis=1)),
     [normal(2, 4)], True),
    ("split_like", lambda g, x, a, b: (lambda s: s[0] * 3.0 + g.reduction_sum(s[1], axes=1))(g.split_like(x, [a, b], axis=1)),
     [normal(2, 5), normal(2, 1), normal(2, 4)], True),
    ("stack", lambda g, a, b: g.stack([a, b], axis=1), [normal(2, 3), normal(2, 3)], True),
    ("pad", lambda g, x: g.pad(x, (1, 0), (2, 1), constant_value=0.5), [normal(2, 3)], True),
    ("tile", lambda g, x: g.tile(x, (2, 3)), [normal(2, 3)], True),
    ("tile_gradient", lambda g, dy, x: g.tile_gradient(dy, x, (2, 1, 3)), [normal(4, 3, 3), normal(2, 3, 1)], True),
    ("reverse", lambda g, x: g.reverse(x, axes=(1,)), [normal(2, 3)], True),
    ("flatten_2d", lambda g, x: g.flatten_2d(x, 2), [normal(2, 3, 2)], True),
    ("flatten", lambda g, x: g.flatten(x), [normal(2, 3)], True),
]


@pytest.mark.parametrize("name,build,arrays,second", GRADS, ids=[r[0] for r in GRADS])
def test_gradient(name, build, arrays, second):
    check_op_gradient(build, [a.copy() for a in arrays], second_order=second)


@pytest.mark.parametrize("name,build,arrays,second", GRADS, ids=[r[0] for r in GRADS])
def test_gradient_unknown_dims(name, build, arrays, second):
    check_op_gradient(build, [a.copy() for a in arrays], unknown_dims=True)


def test_gradient_of_getitem_with_unknown_dims_second_order():
    check_op_gradient(lambda g, x: g.square(x[1:, ::-2]), [normal(3, 5)], unknown_dims=True, second_order=True)


@pytest.mark.parametrize("dtype,npdtype", [(mg.int8, np.int8), (mg.float16, np.float16), (mg.float32, np.float32),
                                           (mg.float64, np.float64)])
def test_tiled_transposes(dtype, npdtype):
    import itertools
    a = (RNG.standard_normal((9, 33, 70)) * 50).astype(npdtype)
    for p in itertools.permutations(range(3)):
        (got,), _ = run(lambda g, x: g.transpose(x, p), [a], dtype=dtype)
        np.testing.assert_array_equal(got, a.transpose(p))
    (got,), _ = run(lambda g, x: g.transpose(x, (2, 1, 0))[::-3, 1:, 5:60:2], [a], dtype=dtype)
    np.testing.assert_array_equal(got, a.transpose(2, 1, 0)[::-3, 1:, 5:60:2])
    (got,), _ = run(lambda g, x: g.reverse(g.transpose(x[1:, ::2], (0, 2, 1)), (1,)), [a], dtype=dtype)
    np.testing.assert_array_equal(got, np.flip(a[1:, ::2].transpose(0, 2, 1), 1))
