"""CPU fast paths of the CNN layers around the convolutions, against PyTorch and against the
same graph with the path's switch off (read at compile):
  * 2-d float32 max pooling by rows (MPSGRAPH_CPU_POOL_ROWS=0 keeps the streaming loop): the
    window's source rows reduced to one row with elementwise maxima, then the strided taps;
    strides 1, 2 and 3, padding (symmetric and not), dilation, ceil mode, narrow planes, NaN
    and infinities, batches, one and two threads; 2x2 windows at stride 2 along the row in one
    pass over each pair of rows (MPSGRAPH_CPU_POOL_PAIRS=0 keeps the general row): the same bits,
    signed zeros included; other stride-2 windows of 2 to 4 taps along the row (ResNet's padded
    3x3 pool) as 8 outputs a vector from a row padded with -infinity (MPSGRAPH_CPU_POOL_S2=0
    keeps the general row): the same bits, 16 outputs a vector on AVX-512 CPUs
    (MPSGRAPH_CPU_POOL_S2_AVX512=0 keeps 8); one image's rows split over the threads in bands of
    output rows of every plane (MPSGRAPH_CPU_POOL_BANDS=0 splits planes): the same bits."""
import numpy as np
import pytest

import mpsgraph as mg
from test_cpu_conv_fast import _compile, _run, _threads

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _pool(x, kw, env, monkeypatch):
    def build(g):
        px = g.placeholder(x.shape, mg.float32)
        return [g.max_pooling_2d(px, data_layout="NCHW", **kw)], [px]
    return _run(_compile(build, [x], env, monkeypatch), [x])[0]


# (N, C, H, W), kernel, stride, padding (top, bottom, left, right), dilation, ceil mode
POOLS = [((2, 3, 16, 16), 2, 2, 0, 1, False), ((1, 4, 112, 112), 3, 2, 1, 1, False),  # small CNN, ResNet-18
         ((2, 3, 15, 17), 3, 1, 1, 1, False), ((1, 2, 13, 11), 3, 2, 1, 1, True), ((1, 3, 19, 23), 2, 3, 0, 1, True),
         ((1, 2, 14, 15), 3, 2, 1, 2, False), ((3, 2, 9, 1), (2, 1), (2, 1), 0, 1, False),
         ((1, 2, 10, 12), (3, 2), 2, (1, 0, 0, 1), 1, False), ((1, 1, 5, 40), (1, 3), (1, 2), 0, 1, False)]


@pytest.mark.parametrize("case", POOLS, ids=[f"pool{i}" for i in range(len(POOLS))])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_rows_against_streaming_and_torch(case, threads, monkeypatch):
    shape, k, s, pad, dil, ceil = case
    rng = np.random.default_rng(41)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[rng.integers(0, x.size, 3)] = np.nan
    x.flat[rng.integers(0, x.size, 2)] = np.inf
    x.flat[rng.integers(0, x.size, 2)] = -np.inf
    kw = dict(kernel_sizes=k, strides=s, dilation_rates=dil, padding=pad, ceil_mode=ceil)
    with _threads(threads):
        y = _pool(x, kw, {}, monkeypatch)
        stream = _pool(x, kw, {"MPSGRAPH_CPU_POOL_ROWS": "0"}, monkeypatch)
    np.testing.assert_array_equal(y, stream)  # NaN where NaN
    if isinstance(pad, int):  # torch pads symmetrically (-inf)
        ref = F.max_pool2d(torch.from_numpy(x), k, s, pad, dil, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(y, ref)


def test_max_pool_rows_finite_random(monkeypatch):
    """Without special values, over many shapes: the same values as the streaming loop."""
    rng = np.random.default_rng(42)
    for _ in range(20):
        h, w = rng.integers(1, 30, 2)
        k = (int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1)))
        s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        kw = dict(kernel_sizes=k, strides=s)
        np.testing.assert_array_equal(_pool(x, kw, {}, monkeypatch),
                                      _pool(x, kw, {"MPSGRAPH_CPU_POOL_ROWS": "0"}, monkeypatch))


def _special_source(seed, shape):
    """A normal source with NaN, infinities and, in an eighth of its places, signed zeros (where
    the first of equal values wins)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[rng.integers(0, x.size, 4)] = np.nan
    x.flat[rng.integers(0, x.size, 2)] = np.inf
    x.flat[rng.integers(0, x.size, 2)] = -np.inf
    z = rng.integers(0, x.size, x.size // 8)
    x.flat[z] = np.where(rng.random(z.size) < 0.5, np.float32(0.0), np.float32(-0.0))
    return x


def _same_bits_and_torch(x, kw, switch, threads, monkeypatch, torch_args):
    """The pool with its fast path and with `switch` off: the same bits, signed zeros included;
    both against torch's max_pool2d(x, *torch_args) (NaN where NaN)."""
    with _threads(threads):
        y = _pool(x, kw, {}, monkeypatch)
        other = _pool(x, kw, {switch: "0"}, monkeypatch)
    np.testing.assert_array_equal(y, other)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(other))
    if torch_args is not None:
        ref = F.max_pool2d(torch.from_numpy(x), *torch_args).numpy()
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
        np.testing.assert_array_equal(y[~np.isnan(y)], ref[~np.isnan(ref)])


# (N, C, H, W), kernel, stride, ceil mode: the small CNN's pools, rows of 8k and 8k + 1..7
# outputs (the vector loop and its tail), odd heights and widths (ceil mode: a last window of
# one row or one column), strides 2 along the row only
PAIRS = [((2, 3, 64, 64), 2, 2, False), ((1, 2, 9, 34), 2, 2, False), ((1, 3, 11, 37), 2, 2, True),
         ((2, 2, 7, 31), 2, 2, True), ((1, 2, 6, 17), (3, 2), (1, 2), False), ((1, 1, 2, 2), 2, 2, False)]


@pytest.mark.parametrize("case", PAIRS, ids=[f"pairs{i}" for i in range(len(PAIRS))])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_pairs_against_general_row_and_torch(case, threads, monkeypatch):
    shape, k, s, ceil = case
    kw = dict(kernel_sizes=k, strides=s, ceil_mode=ceil)
    _same_bits_and_torch(_special_source(43, shape), kw, "MPSGRAPH_CPU_POOL_PAIRS", threads, monkeypatch,
                         (k, s, 0, 1, ceil))


# (N, C, H, W), kernel, stride, padding, ceil mode: ResNet-18's stem pool, rows of 8k and 8k +
# 1..7 outputs, taps 2 to 4 along the row, padding 0 to 3 (left and right apart), ceil mode
# (a last window past the row), row strides other than 2
S2 = [((1, 3, 112, 112), 3, 2, 1, False), ((2, 2, 9, 33), 3, 2, 1, False), ((1, 2, 8, 31), 3, 2, 0, True),
      ((1, 2, 7, 30), (3, 4), 2, (1, 1, 3, 2), False), ((1, 1, 6, 17), (2, 2), (1, 2), (0, 1, 1, 0), False),
      ((2, 1, 5, 16), (3, 3), (3, 2), (1, 1, 2, 2), True), ((1, 2, 4, 3), 3, 2, 1, False),
      ((1, 1, 3, 1), 3, 2, 1, False)]


@pytest.mark.parametrize("case", S2, ids=[f"s2_{i}" for i in range(len(S2))])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_s2_against_general_row_and_torch(case, threads, monkeypatch):
    shape, k, s, pad, ceil = case
    kw = dict(kernel_sizes=k, strides=s, padding=pad, ceil_mode=ceil)
    # torch pads symmetrically (-inf) only
    _same_bits_and_torch(_special_source(44, shape), kw, "MPSGRAPH_CPU_POOL_S2", threads, monkeypatch,
                         (k, s, pad, 1, ceil) if isinstance(pad, int) else None)


@pytest.mark.parametrize("case", S2 + [((1, 2, 9, 66), 3, 2, 1, False), ((1, 1, 5, 64), 4, 2, 2, True)],
                         ids=[f"s2_{i}" for i in range(len(S2) + 2)])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_s2_avx512_same_bits_as_avx2(case, threads, monkeypatch):
    """On AVX-512 CPUs the stride-2 rows take 16 outputs a vector (MPSGRAPH_CPU_POOL_S2_AVX512=0:
    the AVX2 loop's 8): the same choices in the same order, so the same bits, with rows of 16k and
    16k + 1..15 outputs and 2 to 4 taps. Elsewhere both settings run the AVX2 loop."""
    shape, k, s, pad, ceil = case
    kw = dict(kernel_sizes=k, strides=s, padding=pad, ceil_mode=ceil)
    _same_bits_and_torch(_special_source(45, shape), kw, "MPSGRAPH_CPU_POOL_S2_AVX512", threads, monkeypatch,
                         (k, s, pad, 1, ceil) if isinstance(pad, int) else None)


# (N, C, H, W), kernel, stride, padding: one image (bands) through each row path (ResNet-18's stem
# pool, 2x2 pairs, the general row), output heights that two bands do and do not split evenly
# (56, 7, 5, 4), more planes than rows and fewer; a batch of two (planes, as before)
BANDS = [((1, 8, 112, 112), 3, 2, 1), ((1, 5, 14, 30), 2, 2, 0), ((1, 3, 11, 9), 3, 2, 1), ((1, 40, 8, 8), 2, 2, 0),
         ((1, 2, 9, 13), 3, 1, 1), ((2, 3, 16, 16), 3, 2, 1)]


@pytest.mark.parametrize("case", BANDS, ids=[f"bands{i}" for i in range(len(BANDS))])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_row_bands_same_bits(case, threads, monkeypatch):
    shape, k, s, pad = case
    kw = dict(kernel_sizes=k, strides=s, padding=pad)
    _same_bits_and_torch(_special_source(45, shape), kw, "MPSGRAPH_CPU_POOL_BANDS", threads, monkeypatch, (k, s, pad))
