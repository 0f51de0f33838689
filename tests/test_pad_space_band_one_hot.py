"""Issue 4 shape ops (pad modes 'reflect'/'symmetric'/'edge'/'wrap' and pad_gradient,
space_to_depth_2d / depth_to_space_2d, band_part, one_hot): what is not per-op values. Their
values (against numpy and PyTorch, every dtype, static and unknown dims, zero-size tensors) and
gradients (finite differences to second order, torch.autograd) are rows of the conformance table
(tests/conformance.py); here: static shapes with some dims unknown, errors, differentiability
marks and the schema docs."""
import ml_dtypes
import numpy as np
import pytest

import mpsgraph as mg
from conformance import _space_to_depth_ref

RNG = np.random.default_rng(44)


def expect(kind, fn, *fragments):
    with pytest.raises(kind) as ei:
        fn()
    for f in fragments:
        assert f in str(ei.value), str(ei.value)
    return str(ei.value)


def np_pad(x, left, right, mode):
    return np.pad(x, list(zip(left, right)), mode=mode)


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


def test_space_depth_static_shapes_with_unknown_dims():
    """Unknown batch and width stay unknown; the known dims are divided / multiplied."""
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
        np.testing.assert_array_equal(res[y].numpy(), _space_to_depth_ref(xv, 2))


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


def test_band_part_errors():
    g = mg.Graph()
    expect(mg.GraphValueError, lambda: g.band_part(g.placeholder((3,)), 0, 0),
           "[band_part] needs a tensor of rank >= 2 (matrices in the last two dims), got float32(3,)")


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
