"""Issue 4 shape ops (CPU): pad modes 'reflect'/'symmetric'/'edge'/'wrap' and pad_gradient,
space_to_depth_2d / depth_to_space_2d, band_part and one_hot, against numpy and PyTorch, with
static and unknown dims, zero-size tensors, every dtype class, errors, and gradients (finite
differences to second order). The conformance table has a row per op as well."""
import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg
from gradcheck import check_op_gradient

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(44)
MODES = ("reflect", "symmetric", "edge", "wrap")


def normal(*shape):
    return RNG.standard_normal(shape)


def run(build, arrays, unknown=False):
    g = mg.Graph()
    phs = [g.placeholder(tuple(None for _ in a.shape) if unknown else a.shape, mg.as_dtype(a.dtype.name))
           for a in arrays]
    out = build(g, *phs)
    res = g.run(dict(zip(phs, arrays)), [out])
    return res[out].numpy(), out


def expect(kind, fn, *fragments):
    with pytest.raises(kind) as ei:
        fn()
    for f in fragments:
        assert f in str(ei.value), str(ei.value)
    return str(ei.value)


# ---------------------------------------------------------------------------------------
# pad modes


def np_pad(x, left, right, mode):
    return np.pad(x, list(zip(left, right)), mode=mode)


def np_pad_gradient(dy, shape, left, right, mode):
    """Independent reference: numpy pads the element numbers, then dy is summed per source."""
    n = int(np.prod(shape))
    kw = {"constant_values": n} if mode == "constant" else {}  # constant padding reads the sentinel n
    src = np.pad(np.arange(n).reshape(shape), list(zip(left, right)), mode=mode, **kw)
    return np.bincount(src.ravel(), weights=dy.ravel(), minlength=n + 1)[:n].reshape(shape)


PAD_CASES = [
    ((5,), (2,), (3,)), ((5,), (0,), (4,)), ((4,), (3,), (0,)), ((3, 4), (1, 2), (2, 3)), ((3, 4), (0, 3), (2, 0)),
    ((2, 3, 4), (1, 0, 2), (1, 2, 3)), ((2, 3, 4), (0, 0, 0), (0, 0, 0)), ((1, 2, 3, 5), (0, 1, 2, 4), (0, 1, 1, 3)),
    ((6, 70), (5, 40), (4, 69)), ((2, 1), (0, 1), (0, 0)), ((0, 3), (0, 2), (0, 1)), ((3, 0), (2, 0), (1, 0)),
]


def _fits(shape, left, right, mode):
    lim = {"reflect": lambda n: n - 1, "symmetric": lambda n: n, "wrap": lambda n: n,
           "edge": lambda n: 10 ** 9 if n else 0}[mode]
    return all(l <= lim(n) and r <= lim(n) for n, l, r in zip(shape, left, right))


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_against_numpy(mode, unknown):
    for shape, left, right in PAD_CASES:
        if not _fits(shape, left, right, mode):
            continue
        x = normal(*shape).astype(np.float32)
        got, out = run(lambda g, t: g.pad(t, left, right, mode=mode), [x], unknown)
        np.testing.assert_array_equal(got, np_pad(x, left, right, mode), err_msg=f"{shape} {left} {right}")
        if not unknown:
            assert out.shape == np_pad(x, left, right, mode).shape


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint16", "int64", "bool"])
def test_pad_modes_dtypes(dtype):
    x = (RNG.integers(-50, 50, (3, 4, 5)) if dtype != "bool" else RNG.random((3, 4, 5)) < 0.5).astype(dtype)
    for mode in MODES:
        got, _ = run(lambda g, t: g.pad(t, (2, 0, 1), (1, 3, 4), mode=mode), [x])
        np.testing.assert_array_equal(got, np_pad(x, (2, 0, 1), (1, 3, 4), mode))


@pytest.mark.parametrize("mode,torch_mode", [("reflect", "reflect"), ("edge", "replicate"), ("wrap", "circular")])
def test_pad_modes_against_torch(mode, torch_mode):
    # torch pads the trailing dims: (W_left, W_right, H_left, H_right)
    x = normal(2, 3, 5, 6)
    got, _ = run(lambda g, t: g.pad(t, (0, 0, 2, 3), (0, 0, 4, 1), mode=mode), [x])
    want = F.pad(torch.from_numpy(x), (3, 1, 2, 4), mode=torch_mode).numpy()
    np.testing.assert_array_equal(got, want)


def test_pad_mode_aliases_are_stored_canonically():
    g = mg.Graph()
    x = g.placeholder((3, 4))
    for alias, canon in [("clamp_to_edge", "edge"), ("periodic", "wrap"), ("circular", "wrap")]:
        y = g.pad(x, (1, 2), (2, 1), mode=alias)
        xv = normal(3, 4).astype(np.float32)
        np.testing.assert_array_equal(g.run({x: xv}, [y])[y].numpy(), np_pad(xv, (1, 2), (2, 1), canon))


def test_pad_mode_errors():
    g = mg.Graph()
    x = g.placeholder((2, 3), name="x")
    e = g.placeholder((0, 3))
    n = g.num_nodes
    expect(mg.GraphValueError, lambda: g.pad(x, (0, 3), (0, 0), mode="reflect"),
           "[pad] mode 'reflect' needs padding smaller than the dim, but dim 1 of float32(2, 3) has size 3",
           "left_padding (0, 3)")
    expect(mg.GraphValueError, lambda: g.pad(x, (0, 0), (2, 0), mode="reflect"), "dim 0 of float32(2, 3) has size 2")
    expect(mg.GraphValueError, lambda: g.pad(x, (3, 0), (0, 0), mode="symmetric"),
           "[pad] mode 'symmetric' needs padding no larger than the dim, but dim 0 of float32(2, 3) has size 2")
    expect(mg.GraphValueError, lambda: g.pad(x, (0, 4), (0, 0), mode="wrap"), "mode 'wrap' needs padding no larger")
    expect(mg.GraphValueError, lambda: g.pad(e, (1, 0), (0, 0), mode="edge"),
           "[pad] mode 'edge' needs a non-empty dim to pad, but dim 0 of float32(0, 3) has size 0")
    expect(mg.GraphNotImplementedError, lambda: g.pad(x, (1, 1), (1, 1), mode="antiperiodic"), "[pad]")
    expect(mg.GraphValueError, lambda: g.pad(x, (1, 1), (1, 1), mode="bogus"), "[pad] unknown mode 'bogus'")
    expect(mg.GraphValueError, lambda: g.pad(x, (1,), (1, 1), mode="reflect"), "one entry per dim")
    expect(mg.GraphValueError, lambda: g.pad(x, (-1, 0), (0, 0), mode="edge"), "negative padding")
    assert g.num_nodes == n
    # the limits hold for what is known at build time, the rest at specialisation
    u = g.placeholder((None, 3))
    y = g.pad(u, (2, 1), (0, 2), mode="reflect")
    assert y.shape == (None, 6)
    np.testing.assert_array_equal(g.run({u: np.arange(9.0, dtype=np.float32).reshape(3, 3)}, [y])[y].numpy(),
                                  np_pad(np.arange(9.0).reshape(3, 3), (2, 1), (0, 2), "reflect"))
    expect(mg.GraphValueError, lambda: g.run({u: np.ones((2, 3), np.float32)}, [y]),
           "[pad] mode 'reflect' needs padding smaller than the dim, but dim 0 of float32(2, 3) has size 2")
    expect(mg.GraphValueError, lambda: g.pad(u, (0, 3), (0, 0), mode="reflect"), "dim 1 of float32(None, 3)")


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
@pytest.mark.parametrize("mode", MODES + ("constant",))
def test_pad_gradient_against_numpy(mode, unknown):
    for shape, left, right in PAD_CASES:
        if mode != "constant" and not _fits(shape, left, right, mode):
            continue
        x = normal(*shape)
        dy = normal(*np_pad(x, left, right, "constant").shape)
        got, out = run(lambda g, d, t: g.pad_gradient(d, t, left, right, mode=mode), [dy, x], unknown)
        np.testing.assert_allclose(got, np_pad_gradient(dy, shape, left, right, mode), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{shape} {left} {right}")
        if not unknown:
            assert out.shape == shape


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int32"])
def test_pad_gradient_dtypes(dtype):
    x = np.zeros((4, 5))
    dy = RNG.integers(-8, 8, (7, 11)).astype(np.float64)
    want = np_pad_gradient(dy, x.shape, (2, 3), (1, 3), "edge")
    g = mg.Graph()
    d = g.cast(g.constant(dy), dtype)
    y = g.pad_gradient(d, g.constant(x), (2, 3), (1, 3), mode="edge")
    assert y.dtype == mg.as_dtype(dtype)
    got = g.run({}, [y])[y].numpy().astype(np.float64)
    np.testing.assert_array_equal(got, want)  # small integers: exact in every dtype (sums in float32)


@pytest.mark.parametrize("mode,torch_mode", [("reflect", "reflect"), ("edge", "replicate"), ("wrap", "circular")])
def test_pad_gradient_against_torch_autograd(mode, torch_mode):
    x = normal(2, 2, 5, 4)
    g = mg.Graph()
    xp = g.placeholder(x.shape, mg.float64)
    y = g.pad(xp, (0, 0, 3, 2), (0, 0, 4, 3), mode=mode)
    w = normal(*y.shape)
    gx = g.gradients(g.reduction_sum(y * g.constant(w)), [xp])[xp]
    got = g.run({xp: x}, [gx])[gx].numpy()
    xt = torch.from_numpy(x).requires_grad_()
    (F.pad(xt, (2, 3, 3, 4), mode=torch_mode) * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_pad_gradient_errors():
    g = mg.Graph()
    dy, like = g.placeholder((5, 6)), g.placeholder((2, 3))
    expect(mg.GraphValueError, lambda: g.pad_gradient(dy, like, (1, 1), (1, 1), mode="reflect"),
           "[pad_gradient] dy float32(5, 6) is not the shape (4, 5) of like float32(2, 3) padded by left_padding (1, 1)")
    expect(mg.GraphValueError, lambda: g.pad_gradient(dy, like, (1, 2), (2, 1), mode="reflect"),
           "[pad_gradient] mode 'reflect' needs padding smaller than the dim, but dim 0 of float32(2, 3) has size 2")
    expect(mg.GraphValueError, lambda: g.pad_gradient(dy, g.placeholder((2,)), (1,), (1,)), "differ in rank")
    expect(mg.GraphTypeError, lambda: g.pad_gradient(g.placeholder((4, 5), mg.bool), like, (1, 1), (1, 1)),
           "[pad_gradient]")
    # like's unknown dims come from dy where dy knows them
    u = g.pad_gradient(dy, g.placeholder((None, None)), (1, 2), (2, 0), mode="symmetric")
    assert u.shape == (2, 4)


@pytest.mark.parametrize("mode", MODES + ("constant",))
def test_pad_gradients_finite_differences(mode):
    x = normal(3, 4)
    check_op_gradient(lambda g, t: g.pad(t, (2, 1), (1, 3), mode=mode), [x], second_order=True)
    check_op_gradient(lambda g, t: g.pad(t, (2, 1), (1, 3), mode=mode), [x], unknown_dims=True)
    dy = normal(6, 8)
    check_op_gradient(lambda g, d, t: g.pad_gradient(d, t, (2, 1), (1, 3), mode=mode), [dy, x], wrt=[0],
                      second_order=True)


# ---------------------------------------------------------------------------------------
# space_to_depth_2d / depth_to_space_2d


def np_space_to_depth(x, b, layout="NHWC", pixel_shuffle=True):
    """Independent reference by the index formula (loops), space -> depth."""
    if layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    out = np.zeros((n, h // b, w // b, c * b * b), x.dtype)
    for i in range(b):
        for j in range(b):
            for ch in range(c):
                d = (ch * b + i) * b + j if pixel_shuffle else (i * b + j) * c + ch
                out[:, :, :, d] = x[:, i::b, j::b, ch]
    return out.transpose(0, 3, 1, 2) if layout == "NCHW" else out


def np_depth_to_space(x, b, layout="NHWC", pixel_shuffle=True):
    if layout == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    n, h, w, cd = x.shape
    c = cd // (b * b)
    out = np.zeros((n, h * b, w * b, c), x.dtype)
    for i in range(b):
        for j in range(b):
            for ch in range(c):
                d = (ch * b + i) * b + j if pixel_shuffle else (i * b + j) * c + ch
                out[:, i::b, j::b, ch] = x[:, :, :, d]
    return out.transpose(0, 3, 1, 2) if layout == "NCHW" else out


SD_CASES = [((2, 4, 6, 3), 2), ((1, 6, 3, 2), 3), ((2, 2, 2, 5), 1), ((1, 8, 4, 1), 4), ((0, 4, 4, 2), 2),
            ((2, 0, 4, 3), 2), ((3, 64, 32, 2), 2)]


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
@pytest.mark.parametrize("pixel_shuffle", [True, False], ids=["pixel_shuffle", "tf_order"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_space_to_depth_and_back_against_numpy(layout, pixel_shuffle, unknown):
    for shape, b in SD_CASES:
        if layout == "NCHW":
            shape = (shape[0], shape[3], shape[1], shape[2])
        x = RNG.integers(-1000, 1000, shape).astype(np.int32)
        kw = dict(data_layout=layout, use_pixel_shuffle_order=pixel_shuffle)
        got, out = run(lambda g, t: g.space_to_depth_2d(t, b, **kw), [x], unknown)
        want = np_space_to_depth(x, b, layout, pixel_shuffle)
        np.testing.assert_array_equal(got, want, err_msg=f"{shape} {b}")
        assert out.shape == (want.shape if not unknown else (None,) * 4)
        back, out = run(lambda g, t: g.depth_to_space_2d(t, b, **kw), [want], unknown)
        np.testing.assert_array_equal(back, x)
        np.testing.assert_array_equal(back, np_depth_to_space(want, b, layout, pixel_shuffle))


def test_space_depth_against_torch_pixel_shuffle():
    # NCHW with the pixel-shuffle order is PyTorch's pixel_unshuffle / pixel_shuffle
    x = normal(2, 3, 6, 4)
    got, _ = run(lambda g, t: g.space_to_depth_2d(t, 2, data_layout="NCHW"), [x])
    np.testing.assert_array_equal(got, F.pixel_unshuffle(torch.from_numpy(x), 2).numpy())
    d = normal(2, 18, 2, 3)
    got, _ = run(lambda g, t: g.depth_to_space_2d(t, 3, data_layout="NCHW"), [d])
    np.testing.assert_array_equal(got, F.pixel_shuffle(torch.from_numpy(d), 3).numpy())
    # TensorFlow's order for NHWC (space_to_depth): blocks outermost, channels innermost
    x = np.arange(2 * 4 * 4 * 3).reshape(2, 4, 4, 3).astype(np.float32)
    got, _ = run(lambda g, t: g.space_to_depth_2d(t, 2, use_pixel_shuffle_order=False), [x])
    tf_ref = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 2, 2, 12)
    np.testing.assert_array_equal(got, tf_ref)


def test_space_depth_dtypes_and_shapes():
    for dt in ["float16", "bfloat16", "float64", "uint8", "int64", "bool"]:
        g = mg.Graph()
        x = g.placeholder((None, 4, None, 2), dt)
        y = g.space_to_depth_2d(x, 2)
        assert y.shape == (None, 2, None, 8) and y.dtype == mg.as_dtype(dt)
        z = g.depth_to_space_2d(y, 2)
        assert z.shape == (None, 4, None, 2)
        xv = RNG.integers(0, 2 if dt == "bool" else 100, (3, 4, 6, 2))
        xv = xv.astype(bool) if dt == "bool" else xv.astype(ml_dtypes.bfloat16 if dt == "bfloat16" else dt)
        res = g.run({x: xv}, [y, z])
        np.testing.assert_array_equal(res[z].numpy(), xv)
        np.testing.assert_array_equal(res[y].numpy(), np_space_to_depth(xv, 2))


def test_space_depth_errors():
    g = mg.Graph()
    x = g.placeholder((2, 5, 4, 3), name="x")
    n = g.num_nodes
    expect(mg.GraphValueError, lambda: g.space_to_depth_2d(x, 2),
           "[space_to_depth_2d] height 5 of float32(2, 5, 4, 3) (NHWC) is not a multiple of block_size 2")
    expect(mg.GraphValueError, lambda: g.space_to_depth_2d(x, 2, data_layout="NCHW"),
           "width 3 of float32(2, 5, 4, 3) (NCHW) is not a multiple of block_size 2")
    expect(mg.GraphValueError, lambda: g.space_to_depth_2d(x, 0), "[space_to_depth_2d] block_size must be positive")
    expect(mg.GraphValueError, lambda: g.space_to_depth_2d(x, 1, data_layout="HWC"), "data_layout must be")
    expect(mg.GraphValueError, lambda: g.space_to_depth_2d(g.placeholder((4, 4, 2)), 2),
           "needs a rank-4 NHWC tensor, got float32(4, 4, 2)")
    expect(mg.GraphValueError, lambda: g.depth_to_space_2d(x, 2),
           "[depth_to_space_2d] depth 3 of float32(2, 5, 4, 3) (NHWC) is not a multiple of block_size * block_size = 4")
    assert g.num_nodes == n + 1  # the rank-3 placeholder
    u = g.placeholder((1, None, 4, 1))
    y = g.space_to_depth_2d(u, 2)
    expect(mg.GraphValueError, lambda: g.run({u: np.ones((1, 3, 4, 1), np.float32)}, [y]),
           "height 3 of float32(1, 3, 4, 1) (NHWC) is not a multiple of block_size 2")


@pytest.mark.parametrize("pixel_shuffle", [True, False])
def test_space_depth_gradients(pixel_shuffle):
    kw = dict(use_pixel_shuffle_order=pixel_shuffle)
    check_op_gradient(lambda g, t: g.space_to_depth_2d(t, 2, **kw), [normal(1, 4, 2, 3)], second_order=True)
    check_op_gradient(lambda g, t: g.depth_to_space_2d(t, 2, data_layout="NCHW", **kw), [normal(2, 8, 1, 2)],
                      second_order=True)
    check_op_gradient(lambda g, t: g.space_to_depth_2d(t, 3, data_layout="NCHW", **kw), [normal(1, 2, 3, 6)],
                      unknown_dims=True)


# ---------------------------------------------------------------------------------------
# band_part


def np_band_part(x, num_lower, num_upper):
    m, n = x.shape[-2:]
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((num_lower < 0) | (i - j <= num_lower)) & ((num_upper < 0) | (j - i <= num_upper))
    return np.where(keep, x, np.zeros((), x.dtype))


BAND_ATTRS = [(-1, -1), (0, 0), (-1, 0), (0, -1), (1, 2), (2, 1), (3, 0), (0, 10), (100, 100), (1 << 62, -5)]


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
def test_band_part_against_numpy(unknown):
    for shape in [(4, 4), (3, 5), (6, 2), (2, 3, 4, 5), (1, 1), (0, 3), (2, 0, 4), (3, 4, 0), (40, 1100)]:
        x = normal(*shape).astype(np.float32)
        for lo, up in BAND_ATTRS:
            got, out = run(lambda g, t: g.band_part(t, lo, up), [x], unknown)
            np.testing.assert_array_equal(got, np_band_part(x, lo, up), err_msg=f"{shape} {lo} {up}")


def test_band_part_against_torch_triangles():
    x = torch.from_numpy(normal(2, 5, 7))
    g = mg.Graph()
    p = g.placeholder((2, 5, 7), mg.float64)
    outs = [g.band_part(p, -1, 0), g.band_part(p, 0, -1), g.band_part(p, 1, -1), g.band_part(p, -1, 2)]
    res = g.run({p: x.numpy()}, outs)
    for o, want in zip(outs, [torch.tril(x), torch.triu(x), torch.triu(x, -1), torch.tril(x, 2)]):
        np.testing.assert_array_equal(res[o].numpy(), want.numpy())


def test_band_part_dtypes_and_nan():
    for dt in ["float16", "bfloat16", "int8", "uint64", "bool"]:
        x = (RNG.random((3, 4, 4)) < 0.5) if dt == "bool" else RNG.integers(1, 100, (3, 4, 4))
        g = mg.Graph()
        c = g.cast(g.constant(x.astype(np.float64) if dt != "bool" else x), dt)
        y = g.matrix_band_part(c, 1, 0)
        got = g.run({}, [y])[y].numpy().astype(np.float64)
        np.testing.assert_array_equal(got, np_band_part(x.astype(np.float64), 1, 0))
    x = np.full((3, 3), np.nan, np.float32)
    got, _ = run(lambda g, t: g.band_part(t, 0, 0), [x])
    assert np.isnan(np.diag(got)).all() and (got[~np.eye(3, dtype=bool)] == 0).all()


def test_band_part_errors_and_gradient():
    g = mg.Graph()
    expect(mg.GraphValueError, lambda: g.band_part(g.placeholder((3,)), 0, 0),
           "[band_part] needs a tensor of rank >= 2 (matrices in the last two dims), got float32(3,)")
    check_op_gradient(lambda g, t: g.band_part(t, 1, 0), [normal(2, 3, 4)], second_order=True)
    check_op_gradient(lambda g, t: g.band_part(t, -1, 1), [normal(4, 3)], unknown_dims=True)


# ---------------------------------------------------------------------------------------
# one_hot


def np_one_hot(idx, depth, axis=-1, dtype="float32", on_value=1.0, off_value=0.0):
    idx = np.asarray(idx).astype(np.int64) if np.asarray(idx).dtype != np.uint64 else np.asarray(idx)
    hot = idx[..., None] == np.arange(depth)  # out of range: all False
    hot = np.moveaxis(hot, -1, axis if axis >= 0 else hot.ndim + axis)
    return np.where(hot, on_value, off_value).astype(dtype)


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "none"])
def test_one_hot_against_numpy(unknown):
    idx = RNG.integers(-2, 7, (3, 4)).astype(np.int32)  # -2, -1, 5, 6 are out of range for depth 5
    for axis in (-1, 0, 1, 2, -2, -3):
        got, out = run(lambda g, t: g.one_hot(t, 5, axis=axis), [idx], unknown)
        np.testing.assert_array_equal(got, np_one_hot(idx, 5, axis))
        if not unknown:
            assert out.shape == np_one_hot(idx, 5, axis).shape and out.dtype == mg.float32
    for idx, depth in [(np.array(3, np.int64), 4), (np.zeros((0, 2), np.int16), 3), (np.arange(4, dtype=np.uint8), 0),
                       (np.arange(40000, dtype=np.int32) % 9, 7)]:
        got, _ = run(lambda g, t: g.one_hot(t, depth), [idx], unknown)
        np.testing.assert_array_equal(got, np_one_hot(idx, depth))


def test_one_hot_against_torch():
    idx = RNG.integers(0, 6, (2, 3, 4))
    got, _ = run(lambda g, t: g.one_hot(t, 6, dtype=mg.int64), [idx])
    np.testing.assert_array_equal(got, F.one_hot(torch.from_numpy(idx), 6).numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "uint32", "int64", "bool"])
def test_one_hot_dtypes_and_values(dtype):
    for idt in ["int8", "uint8", "int16", "int32", "int64", "uint64"]:
        idx = np.array([0, 2, 1, 7, 3], dtype=idt)
        on, off = (1.0, 0.0) if dtype == "bool" else (5.0, -2.0 if dtype[0] != "u" else 3.0)
        g = mg.Graph()
        y = g.one_hot(g.constant(idx), 4, axis=0, dtype=dtype, on_value=on, off_value=off)
        assert y.dtype == mg.as_dtype(dtype) and y.shape == (4, 5)
        got = g.run({}, [y])[y].numpy().astype(np.float64)
        np.testing.assert_array_equal(got, np_one_hot(idx, 4, 0, "float64", on, off), err_msg=idt)
    big = np.array([np.iinfo(np.uint64).max, 1], np.uint64)
    g = mg.Graph()
    y = g.one_hot(g.constant(big), 3)
    np.testing.assert_array_equal(g.run({}, [y])[y].numpy(), [[0, 0, 0], [0, 1, 0]])
    big = np.array([np.iinfo(np.int64).min, 2], np.int64)
    y = g.one_hot(g.constant(big), 3)
    np.testing.assert_array_equal(g.run({}, [y])[y].numpy(), [[0, 0, 0], [0, 0, 1]])


def test_one_hot_errors_and_differentiability():
    g = mg.Graph()
    i = g.placeholder((2, 3), mg.int32, name="i")
    n = g.num_nodes
    expect(mg.GraphTypeError, lambda: g.one_hot(g.placeholder((2,)), 3), "[one_hot]", "float32")
    expect(mg.GraphTypeError, lambda: g.one_hot(g.placeholder((2,), mg.bool), 3), "[one_hot]")
    expect(mg.GraphValueError, lambda: g.one_hot(i, -1), "[one_hot] depth must be >= 0, got -1")
    expect(mg.GraphIndexError, lambda: g.one_hot(i, 3, axis=3),
           "[one_hot] axis 3 is out of range for the rank-3 result of one_hot on int32(2, 3)")
    expect(mg.GraphIndexError, lambda: g.one_hot(i, 3, axis=-4), "out of range")
    assert g.num_nodes == n + 2
    schema = {s["name"]: s for s in mg.op_schemas()}["one_hot"]
    assert schema["differentiable"] == "no"
    x = g.placeholder((3,), mg.float32)
    y = g.reduction_sum(g.one_hot(g.cast(x, mg.int32), 4) * 2.0 + x[:, None])
    gx = g.gradients(y, [x])[x]  # only the direct path carries a gradient
    np.testing.assert_array_equal(g.run({x: np.array([0.0, 1.0, 2.0], np.float32)}, [gx])[gx].numpy(), [4, 4, 4])


def test_schemas_document_the_new_ops():
    schema = {s["name"]: s for s in mg.op_schemas()}
    for name in ["pad", "pad_gradient", "space_to_depth_2d", "depth_to_space_2d", "band_part", "one_hot"]:
        assert schema[name]["doc"], name
    assert "pixel_shuffle" in schema["space_to_depth_2d"]["doc"]
    for name in ["pad_gradient", "space_to_depth_2d", "depth_to_space_2d", "band_part"]:
        assert schema[name]["differentiable"] == "yes"
