"""CPU convolution fast paths against the generic path (their switches off at compile) and
PyTorch in float64:
  * constant weights prepared at compile (MPSGRAPH_CPU_CONST_WEIGHTS=0 turns it off): Winograd's
    filter transform done once, used by every run, also for batches too small to pay per run;
    the transformed weights packed for the 16 products (MPSGRAPH_CPU_WINOGRAD_PACKED=0: BLAS);
    the input and output transforms' AVX2 loops (MPSGRAPH_CPU_WINOGRAD_AVX2=0: scalar) and their
    16-tile AVX-512 form (MPSGRAPH_CPU_WINOGRAD_AVX512=0: the AVX2 loops);
  * the depthwise 3x3 rows (MPSGRAPH_CPU_DW3=0 turns them off): strides 1 and 2, paddings,
    vertical dilation, odd sizes, channel multipliers, the fused bias + ReLU/ReLU6 epilogues,
    every ISA path (MPSGRAPH_CPU_ISA), float16 through float32; stride 2 on narrow planes
    through the bordered plane's four phases (MPSGRAPH_CPU_DW3_PHASES=0: one flat loop); the
    bordered planes' rows copied one plane a call (MPSGRAPH_CPU_DW3_COPY_ROWS=0: a row a call);
    AVX2 stride-1 rows ending in a vector step by hand (MPSGRAPH_CPU_DW3_S1_AVX2=0: the
    compiler's scalar remainder), the same bits; stride-1 bordered planes as pairs of output rows
    written straight into the output (MPSGRAPH_CPU_DW3_ROW_PAIRS=0: one flat loop, copied out),
    and stride-2 ones from the phases the same way (MPSGRAPH_CPU_DW3_PHASE_PAIRS=0), rows of 4
    to 7 outputs included (MPSGRAPH_CPU_DW3_NARROW_ROWS=0: 8 and more only), the same bits;
  * constant weights packed at compile for the GEMM (MPSGRAPH_CPU_PACKED=0 keeps BLAS): 1x1
    convolutions on the source planes, im2col ones (stem, 7x7), images side by side, row and
    column tails, fused epilogues, multi-threaded splits, every ISA path; depths up to 256 read
    the columns in place (MPSGRAPH_CPU_PACKED_READ_B=0 copies them into blocks), prefetched
    ahead of the kernel (MPSGRAPH_CPU_PACKED_PREFETCH=0: not);
  * the packed layout vectorised along the output channels for products of few columns
    (MPSGRAPH_CPU_PACKED_CHANNELS=0 keeps BLAS there): 7x7 and 14x14 planes, odd channel counts,
    column tails, stride 2 with padding, images side by side; its full blocks stored a row at a
    time after a transpose in registers (MPSGRAPH_CPU_PACKED_ROW_STORE=0: a float at a time
    through the stack), the same bits; its columns in blocks of as equal widths as 6 allows
    (MPSGRAPH_CPU_PACKED_EVEN_BLOCKS=0: blocks of 6 and a narrow tail), the same bits; on
    AVX-512 two panels at a time in 16-channel vectors (MPSGRAPH_CPU_PACKED_CHANNELS512=0: the
    AVX2 kernel), the same bits;
  * the bias and clamp folded into the packed kernels' store (relu, relu6, maximum/minimum,
    a bias only before a residual add, NaN bounds left to the clamp kernel), and a residual add
    after them (MPSGRAPH_CPU_PACKED_RESIDUAL=0: its own pass): the same bits as the epilogue ops
    applied to the product; the clamp as max and min (MPSGRAPH_CPU_PACKED_MINMAX=0: compares
    and blends), the same bits, NaN, infinities and zero signs included; outputs larger than
    32 MiB stored past the caches (MPSGRAPH_CPU_PACKED_STREAM=0: plain stores), the same bits;
  * 1x1 products of many weights as (image, tile) units over the pool, each on one thread
    (MPSGRAPH_CPU_DIRECT_UNITS=0: one image at a time, its product split over the pool);
  * (image, tile) units of whole 16-column blocks where that keeps their number
    (MPSGRAPH_CPU_CONV_TILE16=0: tiles as cut): the same bits;
  * the packed kernels' column blocks copied with inline moves (MPSGRAPH_CPU_PACKED_COPY=0: a
    memcpy call per row), a last panel of fewer than 6 rows computing only those
    (MPSGRAPH_CPU_PACKED_TAIL_ROWS=0: all 6), and column tails of at most half a block (8 on
    AVX2, 16 on AVX-512) in one vector a row (MPSGRAPH_CPU_PACKED_HALF_TAIL=0: two): the same
    bits; the last 6 + 1..3 rows as two
    panels of about equal height (MPSGRAPH_CPU_PACKED_SPLIT_TAIL=0: 6 and the rest), the same bits;
    B's columns in chunks of about 8 KiB, not 256 KiB, from depth 64 at up to 32768 weights
    (MPSGRAPH_CPU_PACKED_L1_CHUNK=0), the same bits; copied columns in chunks of 128 KiB
    (MPSGRAPH_CPU_PACKED_HALF_CHUNK=0: 256 KiB), the same bits; the AVX-512 planes kernel over
    the depth in blocks of 128 (MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS=0: all of it at once), the same
    bits;
  * matrix products of 2 to 16 rows by constant weights (a classifier) on the weights packed at
    compile, a bias folded into the store (MPSGRAPH_CPU_PACKED_MATMUL=0: BLAS);
  * (image, tile) units and Winograd's units claimed from each thread's own contiguous share
    first (MPSGRAPH_CPU_UNIT_SHARES=0: in turn from one counter): the same bits;
  * projections of one image over few positions with each thread summing its part of the depth
    over every position, the parts added after (MPSGRAPH_CPU_DEPTH_PARTS=0: halves of the
    positions): other bits (another order of the sum), both within float32 rounding of PyTorch's
    float64 result, the epilogues included."""
import os
import subprocess
import sys

import numpy as np
import pytest
from fusion_helpers import threads as _threads

import mpsgraph as mg

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _compile(build, feeds, env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        g = mg.Graph()
        outs, phs = build(g)
        return g.compile({p: v for p, v in zip(phs, feeds)}, outs, device="cpu")
    finally:
        for k in env:
            monkeypatch.delenv(k)


def _run(exe, feeds):
    return [np.asarray(r) for r in exe.run([mg.TensorData(f) for f in feeds])]


def _ref(x, w, stride, pads, dil=1, groups=1, absolute=False):
    f = np.abs if absolute else (lambda a: a)
    xt = F.pad(torch.from_numpy(f(x)).double(), (pads[2], pads[3], pads[0], pads[1]))
    return F.conv2d(xt, torch.from_numpy(f(w)).double(), stride=stride, dilation=dil, groups=groups).numpy()


# ---------------- constant weights: Winograd's transform at compile ----------------

# (N, C, H, W), O, pads: the first two have too few tiles to pay a per-run transform (so
# Winograd runs only with constant weights), the last is ResNet-18's layer-4 shape at batch 1.
# At batch 1 with an odd number of tile rows, several threads split the output channels.
CONST = [((1, 64, 14, 14), 24, (1, 1, 1, 1)), ((1, 80, 13, 11), 16, (1, 0, 2, 1)), ((1, 64, 14, 14), 64, (1, 1, 1, 1)),
         ((2, 72, 20, 18), 20, (1, 1, 1, 1)),  # 90 tiles per unit: the packed planes layout (else channels)
         ((1, 64, 18, 30), 40, (1, 1, 1, 1))]  # planes, the output channels split (7 panels of 6)


def _conv3x3_case(seed, shape, o):
    """The generator (for later draws), a source, 3x3 weights to o channels and a bias."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    return rng, x, w, rng.standard_normal((o, 1, 1)).astype(np.float32)


@pytest.mark.parametrize("shape,o,pads", CONST)
def test_constant_weights_winograd(shape, o, pads, monkeypatch):
    rng, x, w, bias = _conv3x3_case(3, shape, o)

    def build(g):
        px = g.placeholder(shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=1, padding=pads)
        return [y, g.relu(y + g.constant(bias))], [px]

    fast = _compile(build, [x], {}, monkeypatch)
    plain = _compile(build, [x], {"MPSGRAPH_CPU_CONST_WEIGHTS": "0"}, monkeypatch)
    generic = _compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD": "0"}, monkeypatch)
    # BLAS on the transformed weights
    unpacked = _compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD_PACKED": "0"}, monkeypatch)
    ref, scale = _ref(x, w, 1, pads), _ref(x, w, 1, pads, absolute=True)
    y, yb = _run(fast, [x])
    for out in (y, _run(plain, [x])[0], _run(generic, [x])[0], _run(unpacked, [x])[0]):
        assert out.shape == ref.shape
        assert np.all(np.abs(out - ref) <= 2e-6 * scale)
    assert not np.array_equal(y, _run(generic, [x])[0])  # Winograd ran, not im2col
    np.testing.assert_array_equal(yb, np.maximum(y + bias, 0))
    x2 = rng.standard_normal(shape).astype(np.float32)  # the transform is reused, not stale
    y2 = _run(fast, [x2])[0]
    assert np.all(np.abs(y2 - _ref(x2, w, 1, pads)) <= 2e-6 * _ref(x2, w, 1, pads, absolute=True))


# (N, C, H, W), O, pads: 16 to 35 tiles an image (7x7 and 8x8 outputs: ResNet-18's last layers),
# which take Winograd on AVX-512 only; at batch 1 the threads split the channels
CONST_WIDE = [((1, 64, 7, 7), 32, (1, 1, 1, 1)), ((2, 64, 7, 7), 32, (1, 1, 1, 1)), ((1, 256, 7, 7), 64, (1, 1, 1, 1)),
              ((1, 48, 8, 8), 24, (1, 1, 1, 1)), ((3, 64, 10, 9), 40, (1, 1, 1, 1))]


@pytest.mark.parametrize("shape,o,pads", CONST_WIDE)
def test_constant_weights_winograd_few_tiles_avx512(shape, o, pads, monkeypatch):
    """On AVX-512 images of 16 to 35 tiles take Winograd too (at batch 1 split over the
    channels): within the error bound of the float64 reference, not the im2col path's bits."""
    if mg._core._cpu_isa() != "avx512" or os.environ.get("MPSGRAPH_CPU_PACKED_CHANNELS512") == "0":
        pytest.skip("the few-tiles Winograd path is AVX-512's (this CPU runs another)")
    rng, x, w, bias = _conv3x3_case(5, shape, o)

    def build(g):
        px = g.placeholder(shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=1, padding=pads)
        return [y, g.relu(y + g.constant(bias))], [px]

    ref, scale = _ref(x, w, 1, pads), _ref(x, w, 1, pads, absolute=True)
    for threads in (1, 2):
        with _threads(threads):
            fast = _compile(build, [x], {}, monkeypatch)
            generic = _compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD": "0"}, monkeypatch)
            y, yb = _run(fast, [x])
            yg = _run(generic, [x])[0]
        assert np.all(np.abs(y - ref) <= 2e-6 * scale)
        assert not np.array_equal(y, yg)  # Winograd ran, not im2col
        np.testing.assert_array_equal(yb, np.maximum(y + bias, 0))


# (N, C, H, W), O, pads (top, bottom, left, right): tile rows of 8k tiles and of 8k + 1..7 (the
# vector loops and the scalar rest), odd output sizes (a last tile half outside), paddings 0
# to 2 and uneven, the small CNN's 16x16 layer and ResNet-18's 28x28 one
WINO_AVX2 = [((2, 64, 16, 16), 24, (1, 1, 1, 1)), ((1, 64, 28, 28), 16, (1, 1, 1, 1)),
             ((1, 64, 33, 37), 17, (1, 1, 1, 1)), ((1, 72, 21, 19), 18, (0, 2, 2, 0)),
             ((2, 64, 18, 34), 16, (0, 0, 0, 0)), ((1, 64, 14, 45), 20, (2, 1, 1, 2)),
             ((2, 32, 32, 32), 64, (1, 1, 1, 1)), ((1, 41, 15, 23), 19, (1, 1, 1, 1))]  # < 64 channels


def _relu_conv3x3_build(shape, w, bias, pads):
    """A graph of relu(convolution(x, w) + bias), unit strides, for _compile."""
    def build(g):
        px = g.placeholder(shape, mg.float32)
        return [g.relu(g.convolution(px, g.constant(w), strides=1, padding=pads) + g.constant(bias))], [px]
    return build


def _assert_near_relu_conv3x3(y, x, w, bias, pads):
    """y within Winograd's bound of PyTorch's float64 relu(convolution + bias)."""
    ref, scale = _ref(x, w, 1, pads), _ref(x, w, 1, pads, absolute=True)
    assert np.all(np.abs(y - np.maximum(ref + bias, 0)) <= 2e-6 * scale + 1e-6)


@pytest.mark.parametrize("shape,o,pads", WINO_AVX2)
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_avx2_transforms_same_bits_as_scalar(shape, o, pads, threads, monkeypatch):
    """The transforms' AVX2 loops (MPSGRAPH_CPU_WINOGRAD_AVX2=0: the scalar ones) do the same
    adds and subtracts: the same bits, and within Winograd's bound of PyTorch's result. From 32
    to 63 source channels only the AVX2 loops take Winograd (the switch off: im2col)."""
    rng, x, w, bias = _conv3x3_case(6, shape, o)
    build = _relu_conv3x3_build(shape, w, bias, pads)
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        scalar = _run(_compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD_AVX2": "0"}, monkeypatch), [x])[0]
        generic = _run(_compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD": "0"}, monkeypatch), [x])[0]
    if shape[1] >= 64:
        np.testing.assert_array_equal(y, scalar)
    else:
        np.testing.assert_array_equal(scalar, generic)
    assert not np.array_equal(y, generic)  # Winograd ran, not im2col
    _assert_near_relu_conv3x3(y, x, w, bias, pads)


WINO_AVX512 = WINO_AVX2 + [((1, 64, 56, 56), 64, (1, 1, 1, 1)), ((2, 64, 37, 71), 32, (1, 1, 1, 1)),
                            ((1, 64, 9, 66), 16, (0, 2, 1, 0))]  # 28, 35 and 33 tiles a row; odd widths


@pytest.mark.parametrize("shape,o,pads", WINO_AVX512)
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_avx512_transforms_same_bits_as_avx2(shape, o, pads, threads, monkeypatch):
    """On AVX-512 CPUs the transforms take 16 tiles a vector (MPSGRAPH_CPU_WINOGRAD_AVX512=0: the
    AVX2 loops' 8): the same adds and subtracts, so the same bits, with rows of tiles that are
    not whole vectors and output widths whose last tile has one column. Elsewhere both settings
    run the AVX2 loops."""
    rng, x, w, bias = _conv3x3_case(8, shape, o)
    build = _relu_conv3x3_build(shape, w, bias, pads)
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        avx2 = _run(_compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD_AVX512": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, avx2)
    _assert_near_relu_conv3x3(y, x, w, bias, pads)


def _as_generic_path(shape, w, pads, x, monkeypatch):
    """The convolution's result, checked bit for bit against the generic (im2col) path's."""
    def build(g):
        px = g.placeholder(shape, mg.float32)
        return [g.convolution(px, g.constant(w), strides=1, padding=pads)], [px]

    y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
    generic = _run(_compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, generic)
    return y


@pytest.mark.parametrize("where", [(0, 3, 0, 0), (1, 7, 15, 33), (0, 60, 8, 17), (1, 11, 2, 20), (0, 13, 3, 1)])
def test_winograd_avx2_non_finite_source(where, monkeypatch):
    """An infinity or NaN in the source (first column, last, inside; rows 2 and 3, which the
    second tile row reuses from the first) is seen by the vector loops too: the run goes to the
    generic path, which keeps it to the outputs that read it."""
    shape, o, pads = (2, 64, 16, 34), 16, (1, 1, 1, 1)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    x[where] = np.nan if where[1] % 2 else np.inf
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    _as_generic_path(shape, w, pads, x, monkeypatch)


def test_constant_non_finite_weights_take_the_generic_path(monkeypatch):
    shape, o, pads = CONST[2]
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, shape[1], 3, 3)).astype(np.float32)
    w[3, 5, 1, 1] = np.inf
    y = _as_generic_path(shape, w, pads, x, monkeypatch)
    with np.errstate(invalid="ignore"):
        ref = _ref(x, w, 1, pads)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))


def test_weights_fed_at_run_time_still_work(monkeypatch):
    """Weights as a placeholder are transformed per run (each run uses its new value)."""
    shape, o, pads = (2, 64, 40, 40), 16, (1, 1, 1, 1)  # 800 tiles: Winograd pays per run
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)

    def build(g):
        px, pw = g.placeholder(shape, mg.float32), g.placeholder((o, 64, 3, 3), mg.float32)
        return [g.convolution(px, pw, strides=1, padding=pads)], [px, pw]

    w = rng.standard_normal((o, 64, 3, 3)).astype(np.float32)
    exe = _compile(build, [x, w], {}, monkeypatch)
    for _ in range(2):
        w = rng.standard_normal((o, 64, 3, 3)).astype(np.float32)
        y = _run(exe, [x, w])[0]
        assert np.all(np.abs(y - _ref(x, w, 1, pads)) <= 2e-6 * _ref(x, w, 1, pads, absolute=True))


# ---------------- depthwise 3x3 ----------------

# (N, C, H, W), multiplier, stride (h, w), pads (top, bottom, left, right), dilation (h, w)
DW = [((1, 8, 14, 14), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
      ((8, 5, 13, 17), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
      ((2, 4, 9, 31), 1, (1, 2), (0, 2, 2, 0), (1, 1)),
      ((1, 3, 7, 5), 2, (2, 1), (0, 0, 0, 0), (2, 1)),
      ((1, 6, 3, 3), 1, (1, 1), (2, 2, 2, 2), (1, 1)),
      ((2, 16, 1, 2), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
      ((1, 32, 112, 112), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
      ((1, 24, 56, 56), 1, (2, 2), (0, 1, 0, 1), (1, 1)),
      ((2, 4, 9, 31), 1, (1, 1), (0, 2, 2, 0), (1, 1)),
      ((1, 3, 10, 12), 2, (1, 1), (2, 0, 0, 2), (1, 1)),
      ((3, 5, 7, 7), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
      ((1, 4, 20, 75), 1, (2, 2), (1, 1, 1, 1), (1, 1)),  # stride 2 on rows of 38: AVX2's 8-wide loop and tail
      ((2, 3, 9, 64), 1, (2, 2), (1, 0, 1, 0), (1, 1)),
      ((1, 6, 40, 45), 1, (1, 1), (1, 1, 1, 1), (1, 1)),  # stride 1, 32 to 63 wide: bordered too
      ((2, 5, 33, 50), 1, (1, 1), (0, 2, 2, 0), (1, 1)),
      ((1, 3, 12, 131), 1, (2, 2), (1, 1, 1, 1), (1, 1)),  # stride 2, rows of 66: the last 8 redone
      ((1, 4, 9, 140), 1, (1, 1), (1, 1, 1, 1), (1, 1))]  # stride 1, 128 or more wide: the flat rows

# stride 2 on narrow planes (the bordered plane's four phases): MobileNetV2's 28x28 and 7x7
# outputs, odd sizes, paddings 0 to 2 on either side, a multiplier, outputs that a source
# row or column past the padding does not reach
DW_PHASES = [((1, 12, 56, 56), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
             ((2, 9, 14, 14), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
             ((1, 5, 15, 13), 2, (2, 2), (0, 2, 1, 0), (1, 1)),
             ((3, 4, 8, 11), 1, (2, 2), (2, 0, 0, 2), (1, 1)),
             ((1, 3, 20, 9), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
             ((1, 7, 4, 3), 1, (2, 2), (2, 2, 2, 2), (1, 1))]


def _dw_setup(case, seed):
    shape, mult, _, _, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1] * mult, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal((shape[1] * mult, 1, 1)).astype(np.float32)
    return x, w, bias


def _dw_build(case, w, bias, chain, dtype=mg.float32):
    shape, _, stride, pads, dil = case

    def build(g):
        px = g.placeholder(shape, dtype)
        wc = g.constant(w.astype(np.float16) if dtype == mg.float16 else w)
        y = g.convolution(px, wc, strides=stride, padding=pads, dilation_rates=dil, groups=shape[1])
        if chain == "bias_relu":
            y = g.relu(y + g.constant(bias))
        elif chain == "bias_relu6":
            y = g.clamp(y + g.constant(bias), g.constant(np.float32(0)), g.constant(np.float32(6)))
        elif chain == "bias_max_min":
            y = g.minimum(g.maximum(g.constant(bias) + y, g.constant(np.float32(0))), g.constant(np.float32(6)))
        elif chain == "bias_res":
            y = y + g.constant(bias) + g.constant(np.float32(0.5))
        return [y], [px]
    return build


def _dw_ref(x, w, bias, case, chain):
    _, _, stride, pads, dil = case
    y = _ref(x, w, stride, pads, dil, groups=x.shape[1])
    if chain == "bias_relu":
        y = np.maximum(y + bias, 0)
    elif chain in ("bias_relu6", "bias_max_min"):
        y = np.clip(y + bias, 0, 6)
    elif chain == "bias_res":
        y = y + bias + 0.5
    return y


def _dw_agree(case, x, w, bias, chain, *outs):
    """Each result agrees with PyTorch's depthwise convolution and the chain after it."""
    ref = _dw_ref(x, w, bias, case, chain)
    scale = _ref(x, w, case[2], case[3], case[4], groups=x.shape[1], absolute=True) + 1
    for out in outs:
        assert out.shape == ref.shape
        assert np.all(np.abs(out - ref) <= 1e-6 * scale)


@pytest.mark.parametrize("case", DW, ids=[f"dw{i}" for i in range(len(DW))])
@pytest.mark.parametrize("chain", ["none", "bias_relu", "bias_relu6", "bias_max_min", "bias_res"])
def test_depthwise3x3_against_generic_and_torch(case, chain, monkeypatch):
    x, w, bias = _dw_setup(case, 7)
    build = _dw_build(case, w, bias, chain)
    y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
    generic = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3": "0"}, monkeypatch), [x])[0]
    _dw_agree(case, x, w, bias, chain, y, generic)


@pytest.mark.parametrize("case", DW_PHASES, ids=[f"ph{i}" for i in range(len(DW_PHASES))])
@pytest.mark.parametrize("chain", ["none", "bias_relu6", "bias_res"])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise3x3_stride2_phases(case, chain, threads, monkeypatch):
    x, w, bias = _dw_setup(case, 11)
    build = _dw_build(case, w, bias, chain)
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        flat = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_PHASES": "0"}, monkeypatch), [x])[0]
    _dw_agree(case, x, w, bias, chain, y, flat)


@pytest.mark.parametrize("case", DW_PHASES + [DW[i] for i in (0, 1, 2, 10, 13, 14)] +
                         [((2, 6, 56, 56), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
                          ((1, 5, 9, 8), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
                          ((2, 3, 17, 130), 1, (2, 2), (1, 1, 1, 1), (1, 1))],
                         ids=lambda c: "x".join(map(str, c[0])) + f"s{c[2][0]}")
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise3x3_copy_rows_same_bits(case, threads, monkeypatch):
    """The bordered planes' rows copied by one call per plane (MPSGRAPH_CPU_DW3_COPY_ROWS=0: a
    call per row): the same bits; rows of 3 to 131 floats."""
    x, w, bias = _dw_setup(case, 13)
    build = _dw_build(case, w, bias, "bias_relu6")
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        per_row = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_COPY_ROWS": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, per_row)
    _dw_agree(case, x, w, bias, "bias_relu6", y)


# case: (N, C, H, W), multiplier, stride, pads, dilation: planes whose rows are read in place
# (stride 2 from 32 outputs wide, stride 1 from 128): MobileNetV2's 112x112 -> 56x56 layer, odd
# widths and heights, one plane per image and several images (the prefetch crosses images), and
# a padding that leaves a row in the zeros.
DW_PREFETCH = [((2, 6, 112, 112), 1, (2, 2), (1, 1, 1, 1), (1, 1)), ((3, 1, 67, 71), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
               ((1, 5, 9, 130), 1, (1, 1), (1, 1, 1, 1), (1, 1)), ((2, 3, 17, 130), 1, (2, 2), (0, 2, 1, 1), (1, 1))]


@pytest.mark.parametrize("case", DW_PREFETCH, ids=lambda c: "x".join(map(str, c[0])) + f"s{c[2][0]}")
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise3x3_prefetch_same_bits(case, threads, monkeypatch):
    """Rows read in place prefetch the next channel's source plane (MPSGRAPH_CPU_DW3_PREFETCH=0:
    not): the same bits, and PyTorch's values."""
    x, w, bias = _dw_setup(case, 19)
    build = _dw_build(case, w, bias, "bias_relu6")
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        plain = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_PREFETCH": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, plain)
    _dw_agree(case, x, w, bias, "bias_relu6", y)


@pytest.mark.parametrize("idx", [1, 0, 6, 16])
def test_depthwise3x3_non_finite_source(idx):
    """An infinity or NaN reaches only the outputs that read it (the padding is not multiplied
    in): the strided rows, the bordered narrow planes and the flat wide ones."""
    case = DW[idx]
    shape, _, stride, pads, _ = case
    x, w, bias = _dw_setup(case, 8)
    x[0, 1, 0, 0], x[-1, 2, shape[2] // 2, shape[3] - 1] = np.inf, np.nan
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    y = g.convolution(px, g.constant(w), strides=stride, padding=pads, groups=x.shape[1])
    out = np.asarray(g.compile({px: x}, [y], device="cpu").run([mg.TensorData(x)])[0])
    with np.errstate(invalid="ignore"):
        ref = _ref(x, w, stride, pads, groups=x.shape[1])
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", DW + DW_PHASES, ids=lambda c: "x".join(map(str, c[0])) + f"s{c[2][0]}p{c[3]}")
@pytest.mark.parametrize("chain", ["none", "bias_relu6", "bias_res"])
def test_depthwise3x3_avx512_rows_same_bits(case, chain, monkeypatch):
    """The 16-lane planes and stride-2 rows on AVX-512 (MPSGRAPH_CPU_DW3_AVX512=0: the 8-lane
    ones): the same taps in the same order, their last vector of a row masked, so the same bits;
    and PyTorch. On a CPU without AVX-512 both run the 8-lane ones."""
    x, w, bias = _dw_setup(case, 19)
    build = _dw_build(case, w, bias, chain)
    with _threads(2):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        narrow = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_AVX512": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, narrow)
    _dw_agree(case, x, w, bias, chain, y)


# 16 channels at once (AVX-512, rows of at most 7 outputs): MobileNetV2's 7x7 and 14x14 -> 7x7
# layers, channel counts with a remainder of 8 (40) and of 3 (35) taken one at a time, two
# images (a block never spans them), odd planes, paddings 0 to 2 on either side, a 1x1 output.
DW_BLOCK16 = [((1, 48, 7, 7), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
              ((2, 40, 14, 14), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
              ((1, 35, 5, 7), 1, (1, 1), (0, 2, 2, 0), (1, 1)),
              ((2, 32, 9, 11), 1, (2, 2), (2, 0, 1, 1), (1, 1)),
              ((1, 16, 3, 3), 1, (2, 2), (0, 0, 0, 0), (1, 1))]


@pytest.mark.parametrize("case", DW_BLOCK16, ids=lambda c: "x".join(map(str, c[0])) + f"s{c[2][0]}")
@pytest.mark.parametrize("chain", ["none", "bias_relu6", "bias_res"])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise3x3_block16_same_bits(case, chain, threads, monkeypatch):
    """16 channels' planes transposed into pixels of 16 channels, summed with the rows' taps in
    their order (MPSGRAPH_CPU_DW3_BLOCK16=0: a channel at a time): the same bits, the bias and
    clamp folded or left to their own kernels; and PyTorch. An infinity and a NaN in the source
    reach the same outputs."""
    x, w, bias = _dw_setup(case, 17)
    bad = [3, x.shape[1] - 1]  # in a block, and last (in the remainder where there is one)
    x[0, bad[0], 0, 1], x[-1, bad[1], -1, -1] = np.inf, np.nan
    build = _dw_build(case, w, bias, chain)
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        one = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_BLOCK16": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, one)
    fin = np.ones(x.shape[1], bool)
    fin[bad] = False  # the channels with a non-finite source: against PyTorch's NaNs only
    with np.errstate(invalid="ignore"):
        ref = _dw_ref(x, w, bias, case, chain)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    _dw_agree(case, x[:, fin], w[fin], bias[fin], chain, y[:, fin])


def test_depthwise3x3_float16(monkeypatch):
    case = DW[1]
    x, w, bias = _dw_setup(case, 9)
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    build = _dw_build(case, w16, bias, "none", dtype=mg.float16)
    y = _run(_compile(build, [x16], {}, monkeypatch), [x16])[0]
    generic = _run(_compile(build, [x16], {"MPSGRAPH_CPU_DW3": "0"}, monkeypatch), [x16])[0]
    ref = _ref(x16.astype(np.float32), w16.astype(np.float32), 2, case[3], groups=x.shape[1])
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y.astype(np.float64), generic.astype(np.float64), rtol=2e-3, atol=2e-3)


ISA_SCRIPT = """
import os, platform, sys
import numpy as np, mpsgraph as mg, torch
rng = np.random.default_rng(1)
def run(x, w, b, stride):
    g = mg.Graph()
    px = g.placeholder(x.shape, mg.float32)
    y = g.convolution(px, g.constant(w), strides=stride, padding=1, groups=x.shape[1])
    y = g.clamp(y + g.constant(b), g.constant(np.float32(0)), g.constant(np.float32(6)))
    return np.asarray(g.compile({px: x}, [y], device="cpu").run([mg.TensorData(x)])[0])
for shape, stride in (((2, 8, 19, 37), 1), ((2, 8, 19, 37), 2), ((2, 8, 9, 9), 1), ((2, 8, 9, 9), 2)):
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal((8, 1, 1)).astype(np.float32)
    out = run(x, w, b, stride)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=stride,
                                     padding=1, groups=8).numpy()
    assert np.abs(out - np.clip(ref + b, 0, 6)).max() < 1e-5, "mismatch"
    os.environ["MPSGRAPH_CPU_DW3"] = "0"
    generic = run(x, w, b, stride)
    del os.environ["MPSGRAPH_CPU_DW3"]
    # without FMA (x86's baseline) the rows add the taps in the generic loop's order: the same bits
    if sys.argv[1] == "generic" and platform.machine().lower() in ("x86_64", "amd64"):
        assert np.array_equal(out, generic), "generic ISA: not the generic loop's bits"
print("ok")
"""


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_depthwise3x3_every_isa_path(isa):
    """Each compiled row loop (the CPU may not have the wider ISAs: then a narrower one runs)."""
    env = dict(os.environ, MPSGRAPH_CPU_ISA=isa)
    r = subprocess.run([sys.executable, "-c", ISA_SCRIPT, isa], env=env, capture_output=True, text=True, timeout=300)
    # the last line: an editable install that rebuilds on import prints its build log first
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == ["ok"], r.stderr


# ---------------- images side by side (few output positions per image) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: deep-layer shapes whose images share one product
WIDE = [((8, 32, 7, 7), (48, 3, 3), 1, 1), ((5, 16, 14, 13), (24, 3, 3), 2, 1), ((3, 3, 20, 18), (8, 7, 7), 2, 3),
        ((9, 8, 5, 6), (12, 3, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", WIDE)
def test_images_side_by_side(shape, wshape, stride, pad, monkeypatch):
    """Against PyTorch and against each image run alone; with a bias + residual + ReLU epilogue."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((wshape[0], shape[1]) + wshape[1:]).astype(np.float32)
    bias = rng.standard_normal((wshape[0], 1, 1)).astype(np.float32)
    ref = _ref(x, w, stride, (pad,) * 4)
    scale = _ref(x, w, stride, (pad,) * 4, absolute=True) + 1
    res = rng.standard_normal(ref.shape).astype(np.float32)

    def build_for(n, fused):
        def build(g):
            px = g.placeholder((n,) + shape[1:], mg.float32)
            pr = g.placeholder((n,) + ref.shape[1:], mg.float32)
            y = g.convolution(px, g.constant(w), strides=stride, padding=pad)
            return [g.relu(y + g.constant(bias) + pr) if fused else y], [px, pr]  # fused: the epilogue joins
        return build

    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    y = _run(_compile(build_for(shape[0], False), [x, res], env, monkeypatch), [x, res])[0]
    fused = _run(_compile(build_for(shape[0], True), [x, res], env, monkeypatch), [x, res])[0]
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 1e-6 * scale)
    np.testing.assert_allclose(fused, np.maximum(ref + bias + res, 0), rtol=1e-5, atol=1e-5 * scale.max())
    for flag, got in ((False, y), (True, fused)):
        one = _compile(build_for(1, flag), [x[:1], res[:1]], env, monkeypatch)
        for n in range(shape[0]):
            np.testing.assert_allclose(got[n:n + 1], _run(one, [x[n:n + 1], res[n:n + 1]])[0], rtol=1e-5,
                                       atol=1e-5 * scale.max())


# ---------------- packed constant weights (the GEMM without BLAS's per-call packing) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: MobileNetV2's 1x1 layers (direct: the source planes are
# the columns), its stem and ResNet-18's 7x7 (im2col), O not a multiple of the 8-row panels and
# planes that leave column tails, a strided layer of 3 images in 6 units of (image, tile); then
# products of too few columns, which keep BLAS (deep layers, images side by side).
PACKED = [((1, 32, 56, 56), (144, 1, 1), 1, 0), ((2, 24, 23, 25), (13, 1, 1), 1, 0),
          ((1, 3, 64, 70), (32, 3, 3), 2, 1), ((1, 3, 45, 47), (64, 7, 7), 2, 3), ((1, 40, 30, 29), (9, 3, 3), 1, 1),
          ((3, 16, 33, 35), (100, 3, 3), 2, 1),
          ((1, 160, 7, 7), (960, 1, 1), 1, 0), ((4, 64, 7, 7), (20, 3, 3), 1, 1), ((3, 5, 9, 1), (7, 1, 1), 1, 0)]


def _packed_build(shape, w, bias, stride, pad):
    def build(g):
        px = g.placeholder(shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=stride, padding=pad)
        six = g.constant(np.float32(6))
        return [y, g.clamp(y + g.constant(bias), g.constant(np.float32(0)), six)], [px]
    return build


def _packed_case(seed, shape, wshape, stride, pad):
    """The generator (for later draws), source, weights, bias and the product + ReLU6 graph."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((wshape[0], shape[1]) + wshape[1:]).astype(np.float32)
    bias = rng.standard_normal((wshape[0], 1, 1)).astype(np.float32)
    return rng, x, w, bias, _packed_build(shape, w, bias, stride, pad)


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_weights_against_blas_and_torch(shape, wshape, stride, pad, threads, monkeypatch):
    rng, x, w, bias, build = _packed_case(21, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        packed = _compile(build, [x], env, monkeypatch)
        blas = _compile(build, [x], dict(env, MPSGRAPH_CPU_PACKED="0"), monkeypatch)
        y, yr6 = _run(packed, [x])
        yb, ybr6 = _run(blas, [x])
        x2 = rng.standard_normal(shape).astype(np.float32)  # a second run reads the same packed weights
        y2 = _run(packed, [x2])[0]
    ref, scale = _ref(x, w, stride, (pad,) * 4), _ref(x, w, stride, (pad,) * 4, absolute=True)
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 2e-6 * scale)
    assert np.all(np.abs(yb - ref) <= 2e-6 * scale)
    assert np.all(np.abs(y2 - _ref(x2, w, stride, (pad,) * 4)) <= 2e-6 * _ref(x2, w, stride, (pad,) * 4, absolute=True))
    # the epilogue sees the product as written: its float32 ops on y exactly
    np.testing.assert_array_equal(yr6, np.clip(y + bias, 0, 6))
    np.testing.assert_array_equal(ybr6, np.clip(yb + bias, 0, 6))


def _packed_switch_same_bits(seed, shape, wshape, stride, pad, threads, monkeypatch, switch):
    """A packed convolution (plain and with ReLU6) gives the same bits with `switch`=0 as without,
    and agrees with the float64 reference."""
    rng, x, w, bias, build = _packed_case(seed, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        y, yr6 = _run(_compile(build, [x], env, monkeypatch), [x])
        yo, yor6 = _run(_compile(build, [x], dict(env, **{switch: "0"}), monkeypatch), [x])
    np.testing.assert_array_equal(y, yo)
    np.testing.assert_array_equal(yr6, yor6)
    ref, scale = _ref(x, w, stride, (pad,) * 4), _ref(x, w, stride, (pad,) * 4, absolute=True)
    assert np.all(np.abs(y - ref) <= 2e-6 * scale)


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED[:6] + [((2, 250, 9, 21), (14, 1, 1), 1, 0),
                                                                   ((1, 29, 17, 19), (11, 3, 3), 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_planes_read_in_place_or_copied(shape, wshape, stride, pad, threads, monkeypatch):
    """Depths up to 256 read the columns in place (MPSGRAPH_CPU_PACKED_READ_B=0 copies them into
    blocks first, as deeper products do): the same sums, so the same bits."""
    _packed_switch_same_bits(22, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_READ_B")


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED[:6] + [((2, 144, 28, 30), (24, 1, 1), 1, 0),
                                                                   ((3, 32, 23, 41), (16, 1, 1), 1, 0)])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_planes_prefetch_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """Columns read in place are prefetched (MPSGRAPH_CPU_PACKED_PREFETCH=0: not): the same bits."""
    _packed_switch_same_bits(23, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_PREFETCH")


@pytest.mark.parametrize("shape,wshape,stride,pad", [((1, 160, 7, 7), (960, 1, 1), 1, 0),
                                                    ((1, 600, 7, 5), (21, 1, 1), 1, 0),
                                                    ((4, 120, 7, 7), (19, 3, 3), 1, 1),
                                                    ((1, 288, 7, 7), (80, 3, 3), 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_prefetch_a_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The channels layout prefetches the weights' next slice (the next depth block, else the next
    panels'; MPSGRAPH_CPU_PACKED_PREFETCH_A=0: not): the same bits, at one and several depth
    blocks and at odd panel counts."""
    _packed_switch_same_bits(24, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_PREFETCH_A")


PACKED_ISA_SCRIPT = """
import os, sys
import numpy as np, mpsgraph as mg, torch
rng = np.random.default_rng(2)
for shape, wshape, stride, pad in (((1, 24, 29, 31), (19, 1, 1), 1, 0), ((2, 3, 50, 47), (10, 3, 3), 2, 1),
                                   ((1, 40, 7, 7), (19, 1, 1), 1, 0)):
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((wshape[0], shape[1]) + wshape[1:]).astype(np.float32)
    g = mg.Graph()
    px = g.placeholder(shape, mg.float32)
    y = g.convolution(px, g.constant(w), strides=stride, padding=pad)
    out = np.asarray(g.compile({px: x}, [y], device="cpu").run([mg.TensorData(x)])[0])
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    ref = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad).numpy()
    scale = torch.nn.functional.conv2d(xt.abs(), wt.abs(), stride=stride, padding=pad).numpy()
    assert np.all(np.abs(out - ref) <= 2e-6 * scale), "mismatch"
print("ok")
"""


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_packed_weights_every_isa_path(isa):
    """Each micro-kernel (generic: BLAS; the CPU may lack the wider ISAs: then a narrower one runs)."""
    env = dict(os.environ, MPSGRAPH_CPU_ISA=isa, MPSGRAPH_CPU_WINOGRAD="0")
    r = subprocess.run([sys.executable, "-c", PACKED_ISA_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    # the last line: an editable install that rebuilds on import prints its build log first
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == ["ok"], r.stderr


# ---------------- packed along the output channels (products of few columns) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: MobileNetV2's 7x7 and 14x14 1x1 layers (the 14x14 ones
# of moderate depth take the planes layout: both are compared with BLAS), O below one
# 16-row panel and odd, planes that leave every column tail (1..5 of 6), stride 2 with padding
# (im2col), batch > 1 (one product per image; 3x3 ones side by side), a 1-wide plane, depths
# past one 256-deep block.
CHANNELS = [((1, 160, 7, 7), (960, 1, 1), 1, 0), ((2, 37, 7, 7), (13, 1, 1), 1, 0),
            ((1, 24, 14, 14), (35, 1, 1), 1, 0), ((3, 17, 5, 4), (33, 1, 1), 1, 0),
            ((1, 16, 13, 13), (20, 3, 3), 2, 1), ((4, 64, 7, 7), (20, 3, 3), 1, 1), ((2, 9, 11, 1), (7, 1, 1), 1, 0),
            ((2, 96, 14, 14), (576, 1, 1), 1, 0), ((1, 600, 7, 5), (21, 1, 1), 1, 0),
            ((4, 120, 7, 7), (19, 3, 3), 1, 1)]  # deep (1080) with 196 columns: channels, not planes

# epilogues: each output alone (the chain fuses), then what numpy makes of the product
EPILOGUES = {
    "relu": (lambda g, y, b, r: g.relu(y + g.constant(b)), lambda y, b, r: np.maximum(y + b, 0)),
    "relu6": (lambda g, y, b, r: g.clamp(y + g.constant(b), g.constant(np.float32(0)), g.constant(np.float32(6))),
              lambda y, b, r: np.clip(y + b, 0, 6)),
    "max_min": (lambda g, y, b, r: g.minimum(g.maximum(y, g.constant(np.float32(-0.5))), g.constant(np.float32(1.5))),
                lambda y, b, r: np.minimum(np.maximum(y, np.float32(-0.5)), np.float32(1.5))),
    "bias_residual": (lambda g, y, b, r: g.relu(y + g.constant(b) + r), lambda y, b, r: np.maximum(y + b + r, 0)),
    "bias_then_residual": (lambda g, y, b, r: y + g.constant(b) + r, lambda y, b, r: y + b + r),
    "residual_first": (lambda g, y, b, r: r + (g.constant(b) + y), lambda y, b, r: r + (b + y)),
    "residual": (lambda g, y, b, r: y + r, lambda y, b, r: y + r),
    "relu6_residual": (lambda g, y, b, r: g.clamp(y + g.constant(b), g.constant(np.float32(0)),
                                                  g.constant(np.float32(6))) + r,
                       lambda y, b, r: np.clip(y + b, 0, 6) + r),
    "scalar_bias": (lambda g, y, b, r: y + g.constant(np.float32(0.25)), lambda y, b, r: y + np.float32(0.25)),
    "nan_bound": (lambda g, y, b, r: g.clamp(y + g.constant(b), g.constant(np.float32(np.nan)),
                                             g.constant(np.float32(6))), None),
}


def _epilogue_build(shape, w, b, res, stride, pad, epilogue):
    def build(g):
        px, pr = g.placeholder(shape, mg.float32), g.placeholder(res.shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=stride, padding=pad)
        return [EPILOGUES[epilogue][0](g, y, b, pr) if epilogue else y], [px, pr]
    return build


def _epilogue_case(seed, shape, wshape, stride, pad):
    """Source, weights, per-channel bias, residual, the PyTorch reference and its magnitude."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((wshape[0], shape[1]) + wshape[1:]).astype(np.float32)
    ref, scale = _ref(x, w, stride, (pad,) * 4), _ref(x, w, stride, (pad,) * 4, absolute=True)
    b = rng.standard_normal((wshape[0], 1, 1)).astype(np.float32)
    res = rng.standard_normal(ref.shape).astype(np.float32)
    return x, w, b, res, ref, scale


@pytest.mark.parametrize("shape,wshape,stride,pad", CHANNELS)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_against_blas_and_torch(shape, wshape, stride, pad, threads, monkeypatch):
    x, w, b, res, ref, scale = _epilogue_case(31, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        def run(epilogue, extra):
            build = _epilogue_build(shape, w, b, res, stride, pad, epilogue)
            return _run(_compile(build, [x, res], dict(env, **extra), monkeypatch), [x, res])[0]
        y, yb = run(None, {}), run(None, {"MPSGRAPH_CPU_PACKED_CHANNELS": "0"})
        for name, (_, numpy_of) in EPILOGUES.items():
            fused, fused_blas = run(name, {}), run(name, {"MPSGRAPH_CPU_PACKED_CHANNELS": "0"})
            if numpy_of is None:  # left to the clamp kernel: as the BLAS path's
                np.testing.assert_array_equal(fused, np.where(np.isnan(fused_blas), fused_blas, fused))
                np.testing.assert_array_equal(np.isnan(fused), np.isnan(fused_blas))
                continue
            np.testing.assert_array_equal(fused, numpy_of(y, b, res), err_msg=name)
            np.testing.assert_array_equal(fused_blas, numpy_of(yb, b, res), err_msg=name)
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 2e-6 * scale)
    assert np.all(np.abs(yb - ref) <= 2e-6 * scale)


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED + CHANNELS[:4])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_store_residual_against_its_own_pass(shape, wshape, stride, pad, threads, monkeypatch):
    """The residual add read in the packed store (MPSGRAPH_CPU_PACKED_RESIDUAL=0: its own pass
    over the output) gives the same bits, and agrees with PyTorch."""
    x, w, b, res, ref, scale = _epilogue_case(33, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        for name in ("bias_then_residual", "residual", "relu6_residual"):
            build = _epilogue_build(shape, w, b, res, stride, pad, name)
            fused = _run(_compile(build, [x, res], env, monkeypatch), [x, res])[0]
            apart = _run(_compile(build, [x, res], dict(env, MPSGRAPH_CPU_PACKED_RESIDUAL="0"), monkeypatch),
                         [x, res])[0]
            np.testing.assert_array_equal(fused, apart, err_msg=name)
            want = EPILOGUES[name][1](ref, b.astype(np.float64), res.astype(np.float64))
            assert np.all(np.abs(fused - want) <= 2e-6 * scale + 1e-6 * np.abs(want)), name


# (N, C, H, W), (O, kh, kw), stride, pad: planes products whose columns end in a tail of one,
# two and three 16-column vectors of a 48-column block (110 = 2 x 48 + 14, 72 = 48 + 24,
# 81 = 48 + 33), depths of one and several 128-deep blocks, partial last panels, im2col columns
# (870), rows far enough apart to prefetch (56x56) and images side by side.
PACKED48 = [((1, 200, 10, 11), (20, 1, 1), 1, 0), ((1, 64, 8, 9), (24, 1, 1), 1, 0),
            ((1, 150, 9, 9), (13, 1, 1), 1, 0), ((1, 40, 30, 29), (9, 3, 3), 1, 1),
            ((1, 24, 56, 56), (16, 1, 1), 1, 0), ((1, 576, 28, 28), (24, 1, 1), 1, 0),
            ((2, 300, 7, 7), (40, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED48)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_planes_48_columns_same_bits_as_32(shape, wshape, stride, pad, threads, monkeypatch):
    """AVX-512 planes blocks of 48 columns (MPSGRAPH_CPU_PACKED_48=0: 32) sum every output in the
    same order: the same bits, plain, with the store's bias and clamp, and with a residual; and
    they agree with PyTorch."""
    _epilogues_same_bits(34, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_48",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_products_48_columns_same_bits_as_32(threads, monkeypatch):
    """Winograd's sixteen products per tile batch run on the planes kernel too: the same bits
    with 48- and 32-column blocks, and PyTorch's values."""
    _winograd_switch_same_bits(35, (1, 64, 30, 26), 40, (1, 1, 1, 1), threads, monkeypatch, "MPSGRAPH_CPU_PACKED_48")


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED[:5])
def test_packed_planes_fused_store(shape, wshape, stride, pad, monkeypatch):
    """The planes layout's store folds the same epilogues (same bits as the ops on the product)."""
    x, w, b, res, ref, _ = _epilogue_case(32, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}

    def run(epilogue):
        build = _epilogue_build(shape, w, b, res, stride, pad, epilogue)
        return _run(_compile(build, [x, res], env, monkeypatch), [x, res])[0]
    y = run(None)
    for name, (_, numpy_of) in EPILOGUES.items():
        if numpy_of is not None:
            np.testing.assert_array_equal(run(name), numpy_of(y, b, res), err_msg=name)


# ---------------- 1x1 products as (image, tile) units (MPSGRAPH_CPU_DIRECT_UNITS) ----------------

# (N, C, H, W), (O, 1, 1): 1x1 products of more than 8192 weights (MobileNetV2's 14x14 and 7x7
# layers), each (image, tile) unit on one thread instead of one image at a time split over the
# pool: odd planes and channel counts, units that do not divide among the threads, planes of
# one tile and of several, both packed layouts.
DIRECT_UNITS = [((8, 64, 14, 14), (384, 1, 1)), ((3, 576, 7, 7), (160, 1, 1)), ((2, 96, 14, 14), (576, 1, 1)),
                ((5, 97, 9, 11), (101, 1, 1)), ((2, 33, 41, 37), (300, 1, 1)), ((1, 320, 7, 7), (1280, 1, 1))]


@pytest.mark.parametrize("shape,wshape", DIRECT_UNITS)
@pytest.mark.parametrize("threads", [1, 2])
def test_direct_units_against_one_image_at_a_time(shape, wshape, threads, monkeypatch):
    x, w, b, res, ref, scale = _epilogue_case(41, shape, wshape, 1, 0)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        for name in (None, "relu6", "relu6_residual"):
            build = _epilogue_build(shape, w, b, res, 1, 0, name)
            y = _run(_compile(build, [x, res], env, monkeypatch), [x, res])[0]
            apart = _run(_compile(build, [x, res], dict(env, MPSGRAPH_CPU_DIRECT_UNITS="0"), monkeypatch),
                         [x, res])[0]
            want = EPILOGUES[name][1](ref, b.astype(np.float64), res.astype(np.float64)) if name else ref
            for out in (y, apart):
                assert out.shape == want.shape
                assert np.all(np.abs(out - want) <= 2e-6 * scale + 1e-6 * np.abs(want)), name


# ---------------- tiles of whole 16-column blocks (MPSGRAPH_CPU_CONV_TILE16) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: products of few weights cut into (image, tile) units,
# their tiles rounded up to whole 16-column blocks where that keeps their number: MobileNetV2's
# 28x28 and 56x56 1x1 layers (tiles of 157 -> 160, 286 -> 288), planes that are no multiple of
# 16, a 3x3 stride-2 stem (im2col tiles), one image and several.
TILE16 = [((2, 32, 28, 28), (192, 1, 1), 1, 0), ((2, 192, 28, 28), (32, 1, 1), 1, 0),
          ((1, 144, 56, 56), (24, 1, 1), 1, 0), ((3, 24, 37, 29), (40, 1, 1), 1, 0),
          ((1, 3, 97, 101), (32, 3, 3), 2, 1), ((2, 16, 45, 45), (30, 1, 1), 1, 0),
          ((1, 192, 28, 28), (32, 1, 1), 1, 0)]  # batch 1: 6 tiles of 144, the planes layout from 128 columns


def _epilogues_same_bits(seed, shape, wshape, stride, pad, threads, monkeypatch, switch, names):
    """The product with each epilogue of `names` (None: none), `switch` on and off: the same bits,
    and the float64 reference."""
    x, w, b, res, ref, scale = _epilogue_case(seed, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    with _threads(threads):
        for name in names:
            build = _epilogue_build(shape, w, b, res, stride, pad, name)
            y = _run(_compile(build, [x, res], env, monkeypatch), [x, res])[0]
            off = _run(_compile(build, [x, res], dict(env, **{switch: "0"}), monkeypatch), [x, res])[0]
            np.testing.assert_array_equal(y, off, err_msg=str(name))
            want = EPILOGUES[name][1](ref, b.astype(np.float64), res.astype(np.float64)) if name else ref
            assert np.all(np.abs(y - want) <= 2e-6 * scale + 1e-6 * np.abs(want)), name


@pytest.mark.parametrize("shape,wshape,stride,pad", TILE16)
@pytest.mark.parametrize("threads", [1, 2])
def test_tiles_of_whole_blocks_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    _epilogues_same_bits(43, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_CONV_TILE16",
                         (None, "relu6", "relu6_residual"))


# ---------------- column blocks copied inline (MPSGRAPH_CPU_PACKED_COPY) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: products whose columns are copied into blocks: planes
# deeper than 256 (MobileNetV2's 14x14 1x1 layers of depth 384 and 576, a 3x3 im2col of depth
# 288) with column tails, and the channels layout's blocks of 6 (7x7 planes: 8 full blocks and
# a tail of one; images side by side).
PACKED_COPY = [((2, 576, 14, 14), (96, 1, 1), 1, 0), ((1, 384, 14, 14), (64, 1, 1), 1, 0),
               ((2, 300, 9, 21), (14, 1, 1), 1, 0), ((1, 32, 19, 23), (40, 3, 3), 1, 1),
               ((2, 160, 7, 7), (40, 1, 1), 1, 0), ((3, 64, 7, 7), (20, 3, 3), 1, 1), ((1, 29, 5, 3), (35, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", PACKED_COPY)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_column_copy_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The full column blocks copied with inline moves (MPSGRAPH_CPU_PACKED_COPY=0: a memcpy call
    per row): the same bits, and agrees with PyTorch."""
    _packed_switch_same_bits(24, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_COPY")


# ---------------- products of few rows by constant weights (MPSGRAPH_CPU_PACKED_MATMUL) ----------------

# x's shape, K, N, y given transposed (a classifier's (N, K) weights): 2 to 16 rows (x's batches
# stacked) on the packed weights; 1 row (gemv) and 17 rows keep BLAS.
MATMUL = [((8, 1280), 1000, True), ((2, 300), 37, True), ((16, 77), 50, False), ((3, 4, 130), 19, True),
          ((5, 33), 1, False), ((1, 64), 40, True), ((17, 64), 40, True), ((2, 7, 9), 13, False)]


def _matmul_build(xshape, y, transposed, epilogue, b):
    def build(g):
        px = g.placeholder(xshape, mg.float32)
        w = g.constant(y)
        out = g.matrix_multiplication(px, g.transpose(w, [1, 0]) if transposed else w)
        if epilogue == "bias":
            out = out + g.constant(b)
        elif epilogue == "bias_relu":
            out = g.relu(g.constant(b) + out)
        elif epilogue == "scale":
            out = out * g.constant(np.float32(0.5))
        return [out], [px]
    return build


@pytest.mark.parametrize("xshape,n,transposed", MATMUL)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_matmul_against_blas_and_numpy(xshape, n, transposed, threads, monkeypatch):
    rng = np.random.default_rng(51)
    k = xshape[-1]
    x = rng.standard_normal(xshape).astype(np.float32)
    y = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    w64 = (y.T if transposed else y).astype(np.float64)
    ref, scale = x.astype(np.float64) @ w64, np.abs(x.astype(np.float64)) @ np.abs(w64)
    with _threads(threads):
        def run(epilogue, env):
            return _run(_compile(_matmul_build(xshape, y, transposed, epilogue, b), [x], env, monkeypatch), [x])[0]
        p, pb = run(None, {}), run(None, {"MPSGRAPH_CPU_PACKED_MATMUL": "0"})
        for got in (p, pb):
            assert got.shape == ref.shape
            assert np.all(np.abs(got - ref) <= 2e-6 * scale)
        # the bias folded into the store and the ops after it: the epilogue ops on the product exactly
        np.testing.assert_array_equal(run("bias", {}), p + b)
        np.testing.assert_array_equal(run("bias_relu", {}), np.maximum(b + p, 0))
        np.testing.assert_array_equal(run("scale", {}), p * np.float32(0.5))


# ---------------- each thread's own share of the units first (MPSGRAPH_CPU_UNIT_SHARES) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: products split into (image, tile) units over the pool:
# 1x1 layers of many weights (one unit per image, and units that do not divide among the
# threads), tiles of few weights, an im2col stem; then Winograd's units (3x3, stride 1).
SHARES = [((8, 64, 14, 14), (384, 1, 1), 1, 0), ((3, 576, 7, 7), (160, 1, 1), 1, 0),
          ((5, 97, 9, 11), (101, 1, 1), 1, 0), ((2, 32, 28, 28), (192, 1, 1), 1, 0),
          ((3, 24, 37, 29), (40, 1, 1), 1, 0), ((1, 3, 97, 101), (32, 3, 3), 2, 1)]
SHARES_WINOGRAD = [((2, 64, 16, 16), 24, (1, 1, 1, 1)), ((3, 72, 21, 19), 18, (0, 2, 2, 0))]


@pytest.mark.parametrize("shape,wshape,stride,pad", SHARES)
@pytest.mark.parametrize("threads", [1, 2])
def test_unit_shares_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """Units claimed from each thread's own share first (MPSGRAPH_CPU_UNIT_SHARES=0: in turn from
    one counter): every unit is computed the same way, so the same bits, epilogues included."""
    _epilogues_same_bits(45, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_UNIT_SHARES",
                         (None, "relu6_residual"))


@pytest.mark.parametrize("shape,o,pads", SHARES_WINOGRAD)
@pytest.mark.parametrize("threads", [1, 2])
def test_unit_shares_winograd_same_bits(shape, o, pads, threads, monkeypatch):
    _winograd_switch_same_bits(46, shape, o, pads, threads, monkeypatch, "MPSGRAPH_CPU_UNIT_SHARES")


def _winograd_switch_same_bits(seed, shape, o, pads, threads, monkeypatch, switch):
    """A 3x3 convolution by Winograd, alone and with a bias + ReLU after it, `switch` on and off:
    the same bits; Winograd ran (not im2col); and PyTorch's float64 result."""
    _, x, w, bias = _conv3x3_case(seed, shape, o)

    def build(g):
        px = g.placeholder(shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=1, padding=pads)
        return [y, g.relu(y + g.constant(bias))], [px]
    with _threads(threads):
        y, yr = _run(_compile(build, [x], {}, monkeypatch), [x])
        yo, yor = _run(_compile(build, [x], {switch: "0"}, monkeypatch), [x])
        generic = _run(_compile(build, [x], {"MPSGRAPH_CPU_WINOGRAD": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, yo)
    np.testing.assert_array_equal(yr, yor)
    assert not np.array_equal(y, generic)  # Winograd ran, not im2col
    ref, scale = _ref(x, w, 1, pads), _ref(x, w, 1, pads, absolute=True)
    assert np.all(np.abs(y - ref) <= 2e-6 * scale)


# ------- a last panel of fewer rows (MPSGRAPH_CPU_PACKED_TAIL_ROWS), column tails of at most 8 in one -------
# ------- vector (MPSGRAPH_CPU_PACKED_HALF_TAIL) -------

# (N, C, H, W), (O, kh, kw), stride, pad: output channels that leave 1 to 5 rows in the last
# panel of 6 (AVX2 planes): columns read in place (prefetched on wide planes) and copied (depth
# above 256), column tails, an im2col product.
TAIL_ROWS = [((2, 24, 23, 25), (13, 1, 1), 1, 0), ((1, 192, 28, 28), (32, 1, 1), 1, 0),
             ((1, 32, 40, 40), (16, 1, 1), 1, 0), ((2, 384, 14, 14), (64, 1, 1), 1, 0),
             ((1, 300, 9, 21), (9, 1, 1), 1, 0), ((1, 17, 30, 29), (5, 3, 3), 1, 1)]

# (N, C, H, W), (O, kh, kw), stride, pad: planes layout products whose last column block has 1 to
# 8 columns (AVX2's blocks of 16; 14x14: 196 = 12 x 16 + 4; 15x15: a tail of 1; 10x13: 8) or 1
# to 16 (AVX-512's blocks of 32; 13x13: 9, 12x4: 16), columns read in place and copied (depth
# above 256), with the residual; tails of 9 on AVX2 and 17 (9x9 = 2 x 32 + 17) on AVX-512 (two
# vectors) as controls.
HALF_TAIL = [((2, 96, 14, 14), (576, 1, 1), 1, 0), ((1, 576, 14, 14), (96, 1, 1), 1, 0),
             ((2, 40, 15, 15), (13, 1, 1), 1, 0), ((1, 300, 10, 13), (20, 1, 1), 1, 0),
             ((1, 24, 13, 13), (7, 1, 1), 1, 0), ((1, 16, 18, 18), (12, 3, 3), 2, 1),
             ((2, 40, 12, 4), (10, 1, 1), 1, 0)]


@pytest.mark.parametrize("switch,case", [("MPSGRAPH_CPU_PACKED_TAIL_ROWS", c) for c in TAIL_ROWS] +
                         [("MPSGRAPH_CPU_PACKED_HALF_TAIL", c) for c in HALF_TAIL])
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_tail_kernels_same_bits(switch, case, threads, monkeypatch):
    """A last panel of fewer than 6 rows runs a kernel of that many rows (PACKED_TAIL_ROWS=0: all
    6, the rest zeros); a column tail of at most half a block runs one vector a row (PACKED_HALF_TAIL=0: two,
    the second masked off). The same multiply-adds for what is stored, so the same bits, also
    with the relu6-and-residual epilogue for the column tails."""
    shape, wshape, stride, pad = case
    _packed_switch_same_bits(25, shape, wshape, stride, pad, threads, monkeypatch, switch)
    if switch == "MPSGRAPH_CPU_PACKED_HALF_TAIL":
        _epilogues_same_bits(27, shape, wshape, stride, pad, threads, monkeypatch, switch, ("relu6_residual",))


# ---------------- the last 6 + 1..3 rows as two panels (MPSGRAPH_CPU_PACKED_SPLIT_TAIL) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: planes products (over 512 columns a unit, with 1 and 2
# threads) of 6k + 1, 2 or 3 output channels (32: 4 + 4 after 4 x 6, 13: 4 + 3, 9: 5 + 4, 21,
# 128), columns read in place (prefetched on 28x28) and copied (depth above 256), column tails,
# odd widths, the stem's 3x3 stride-2 im2col.
SPLIT_TAIL = [((1, 192, 28, 28), (32, 1, 1), 1, 0), ((2, 24, 23, 25), (13, 1, 1), 1, 0),
              ((4, 40, 23, 25), (9, 1, 1), 1, 0), ((4, 300, 23, 23), (21, 1, 1), 1, 0),
              ((4, 3, 47, 47), (32, 3, 3), 2, 1), ((4, 64, 23, 23), (128, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", SPLIT_TAIL)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_split_tail_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The last 6 + r rows (r 1 to 3) as two panels of about equal height (PACKED_SPLIT_TAIL=0: a
    panel of 6 and one of r): each output's sum is the same multiply-adds in the same order, so
    the same bits, with the bias, clamp and residual in the store; within 2e-6 of sum |w||x| of
    the float64 reference."""
    _epilogues_same_bits(65, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_SPLIT_TAIL",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


# ---------------- B's columns in chunks that stay in L1 (MPSGRAPH_CPU_PACKED_L1_CHUNK) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: planes products of depth 64 or more and at most 32768
# weights: columns read in place on 28x28 planes (the residual projections 144 and 192 to 32, 37
# outputs), copied at depth 384 and 300 (14x14: a column tail of 4 after each chunk's 16; odd
# widths), 6k + 2 and odd output channels, an im2col 3x3 (depth 72); as controls (the 256 KiB
# chunks still) a 56x56 plane (rows 4 lines apart) and a 27x29 one (rows that straddle lines).
L1_CHUNK = [((1, 192, 28, 28), (32, 1, 1), 1, 0), ((2, 144, 28, 28), (32, 1, 1), 1, 0),
            ((4, 384, 14, 14), (64, 1, 1), 1, 0), ((3, 300, 13, 15), (21, 1, 1), 1, 0),
            ((2, 72, 28, 28), (37, 1, 1), 1, 0), ((2, 8, 28, 28), (24, 3, 3), 1, 1),
            ((1, 96, 56, 56), (24, 1, 1), 1, 0), ((2, 72, 27, 29), (13, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", L1_CHUNK)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_l1_chunk_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """B's columns in chunks of about 8 KiB, every panel over one before the next
    (PACKED_L1_CHUNK=0: chunks of about 256 KiB): each output's sum is the same multiply-adds in
    the same order, so the same bits, with the bias, clamp and residual in the store; within
    2e-6 of sum |w||x| of the float64 reference."""
    _epilogues_same_bits(66, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_L1_CHUNK",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


# (N, C, H, W), (O, kh, kw), stride, pad: planes products whose columns are copied (depth above
# 256) in chunks of 128 KiB: MobileNetV2's 576- and 384-deep projections to 96 (at depth 576 an
# image's 196 columns in 3 x 56 + 28, not 112 + 84), odd widths and channels, an im2col 3x3
# (depth 288).
HALF_CHUNK = [((2, 576, 14, 14), (96, 1, 1), 1, 0), ((1, 384, 14, 14), (96, 1, 1), 1, 0),
              ((2, 300, 23, 25), (21, 1, 1), 1, 0), ((2, 32, 19, 23), (40, 3, 3), 1, 1)]


@pytest.mark.parametrize("shape,wshape,stride,pad", HALF_CHUNK)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_half_chunk_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """Copied columns in chunks of 128 KiB (PACKED_HALF_CHUNK=0: 256 KiB): each output's sum is
    the same multiply-adds in the same order, so the same bits, with the bias, clamp and
    residual in the store; within 2e-6 of sum |w||x| of the float64 reference."""
    _epilogues_same_bits(67, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_HALF_CHUNK",
                         (None, "relu6", "relu6_residual"))


# ---------------- AVX-512 planes in depth blocks (MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: planes products deeper than one block of 128: MobileNetV2's
# 14x14 projections (384 and 576 deep: 3 and 5 blocks, an image's 196 columns end in a tail of 4),
# a 28x28 one (192: 2 blocks of 96), a 56x56 one (144, rows read with prefetches), a depth that
# blocks unevenly (300: 100 each), odd channels and widths, a 3x3 im2col (depth 288) with
# padding and stride 2; and a depth of one block (128) as a control.
DEPTH_BLOCKS = [((1, 384, 14, 14), (64, 1, 1), 1, 0), ((2, 576, 14, 14), (96, 1, 1), 1, 0),
                ((1, 192, 28, 28), (32, 1, 1), 1, 0), ((1, 144, 56, 56), (24, 1, 1), 1, 0),
                ((2, 300, 9, 21), (13, 1, 1), 1, 0), ((1, 32, 19, 23), (37, 3, 3), 2, 1),
                ((1, 128, 14, 14), (40, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", DEPTH_BLOCKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_depth_blocks_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The AVX-512 planes kernel over the depth in blocks of 128, the partial sums kept in the
    output between blocks (PACKED_DEPTH_BLOCKS=0: the whole depth at once): each output's sum is
    the same multiply-adds in the same order, so the same bits, with the bias, clamp and residual
    applied after the last block only; within 2e-6 of sum |w||x| of the float64 reference. (Depth
    parts, which need the blocks, are off in both.)"""
    monkeypatch.setenv("MPSGRAPH_CPU_DEPTH_PARTS", "0")
    _epilogues_same_bits(68, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_DEPTH_BLOCKS",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


# ---------------- depthwise 3x3 stride-1 rows ending in a vector step (MPSGRAPH_CPU_DW3_S1_AVX2) ----------------

@pytest.mark.parametrize("case", [DW[i] for i in (0, 2, 4, 6, 8, 9, 10, 13, 14, 16)] +
                         [((2, 6, 56, 56), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
                          ((3, 16, 7, 7), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
                          ((1, 5, 9, 8), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
                          ((1, 4, 2, 5), 1, (1, 1), (1, 1, 1, 1), (1, 1))],
                         ids=lambda c: "x".join(map(str, c[0])) + f"s{c[2][1]}")
@pytest.mark.parametrize("chain", ["none", "bias_relu6", "bias_res"])
def test_depthwise3x3_s1_vector_end_same_bits(case, chain, monkeypatch):
    """Stride-1 rows whose length is no multiple of 8 end with the last 8 outputs redone by hand
    (MPSGRAPH_CPU_DW3_S1_AVX2=0: the compiler's scalar remainder): the same sums, so the same
    bits; bordered 7x7 to 112x112 planes, flat 140-wide rows, rows shorter than 8."""
    x, w, bias = _dw_setup(case, 17)
    build = _dw_build(case, w, bias, chain)
    y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
    compiled = _run(_compile(build, [x], {"MPSGRAPH_CPU_DW3_S1_AVX2": "0"}, monkeypatch), [x])[0]
    np.testing.assert_array_equal(y, compiled)
    _dw_agree(case, x, w, bias, chain, y)


# ------------- depthwise 3x3 bordered planes in row pairs (MPSGRAPH_CPU_DW3_ROW_PAIRS, _PHASE_PAIRS) -------------

DW_PAIRS = [(c, "MPSGRAPH_CPU_DW3_ROW_PAIRS") for c in
            [DW[i] for i in (0, 4, 8, 9, 10)] +
            [((2, 6, 56, 56), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 5, 9, 8), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((2, 3, 8, 13), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 4, 1, 9), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 4, 6, 40), 1, (1, 1), (0, 2, 1, 1), (1, 1)),
             ((2, 3, 13, 112), 1, (1, 1), (1, 1, 1, 1), (1, 1)),  # switched off: the flat path
             ((1, 2, 5, 127), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 2, 5, 128), 1, (1, 1), (1, 1, 1, 1), (1, 1))]] + \
           [(c, "MPSGRAPH_CPU_DW3_PHASE_PAIRS") for c in
            DW_PHASES +
            [((2, 3, 17, 17), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
             ((1, 4, 2, 31), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
             ((2, 5, 33, 20), 1, (2, 2), (0, 1, 2, 1), (1, 1))]] + \
           [(c, "MPSGRAPH_CPU_DW3_NARROW_ROWS") for c in  # rows of 4 to 7 outputs (3: the flat loop still)
            [((2, 9, 7, 7), 1, (1, 1), (1, 1, 1, 1), (1, 1)),  # MobileNetV2's 7x7
             ((1, 4, 6, 4), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 3, 1, 6), 2, (1, 1), (1, 1, 1, 1), (1, 1)),
             ((1, 5, 9, 5), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
             ((1, 5, 9, 7), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
             ((1, 4, 6, 5), 1, (1, 1), (0, 2, 1, 1), (1, 1)),
             ((2, 9, 14, 14), 1, (2, 2), (1, 1, 1, 1), (1, 1)),  # MobileNetV2's 14x14 to 7x7
             ((1, 4, 9, 9), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
             ((1, 3, 2, 13), 2, (2, 2), (1, 1, 1, 1), (1, 1)),
             ((1, 5, 15, 13), 2, (2, 2), (0, 2, 1, 0), (1, 1)),
             ((3, 4, 8, 11), 1, (2, 2), (2, 0, 0, 2), (1, 1))]]


@pytest.mark.parametrize("case,switch", DW_PAIRS,
                         ids=lambda c: c.split("_")[-2].lower() if isinstance(c, str) else
                         "x".join(map(str, c[0])) + f"s{c[2][0]}p" + "".join(map(str, c[3])))
@pytest.mark.parametrize("chain", ["none", "bias_relu6", "bias_res"])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise3x3_row_pairs_same_bits(case, switch, chain, threads, monkeypatch):
    """Bordered planes as pairs of output rows sharing their source rows, written straight into the
    output (the switch off: one flat loop over the bordered plane, copied out): the same sums,
    so the same bits (from 64 wide, in the columns inside the edges). Stride 1
    (MPSGRAPH_CPU_DW3_ROW_PAIRS) and stride 2 through the bordered plane's phases
    (MPSGRAPH_CPU_DW3_PHASE_PAIRS); odd and even row counts, one row, rows of 8 to 128 (from 64
    the switch off takes the unbordered flat path; 128 is too wide to be bordered), uneven
    padding, rows of fewer than 8. Rows of 4 to 7 as one vector each, its lanes past the row
    overwritten by the next row (MPSGRAPH_CPU_DW3_NARROW_ROWS=0: the flat loop), at both
    strides; rows of 3 stay on the flat loop."""
    x, w, bias = _dw_setup(case, 19)
    build = _dw_build(case, w, bias, chain)
    with _threads(threads):
        y = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        flat = _run(_compile(build, [x], {switch: "0"}, monkeypatch), [x])[0]
    # from 64 wide the switch off takes the unbordered flat path, whose edge columns sum only
    # the taps inside the plane (an ulp apart): those columns agree with PyTorch only
    inner = np.s_[..., 1:-1] if case[0][3] >= 64 else np.s_[...]
    np.testing.assert_array_equal(y[inner], flat[inner])
    _dw_agree(case, x, w, bias, chain, y, flat)


# ---------------- the channels kernel's blocks stored a row at a time (MPSGRAPH_CPU_PACKED_ROW_STORE) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: products in the channels layout, full blocks of 6
# columns stored as rows after a transpose in registers: MobileNetV2's 7x7 expansion (depth 160)
# and projections (depth 576, 960: depth blocks, a residual), panels of fewer than 16 rows,
# column tails (7x7: a tail of one), an im2col 3x3, several images.
ROW_STORE = CHANNELS[:6] + [((2, 960, 7, 7), (160, 1, 1), 1, 0), ((3, 576, 7, 7), (37, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", ROW_STORE)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_row_store_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The same values stored by rows (MPSGRAPH_CPU_PACKED_ROW_STORE=0: through the stack a float
    at a time): the same bits, with the bias, clamp and residual folded into the store."""
    _epilogues_same_bits(61, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_ROW_STORE",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


@pytest.mark.parametrize("xshape,n,transposed", MATMUL[:5])
def test_packed_matmul_row_store_same_bits(xshape, n, transposed, monkeypatch):
    """A classifier's product on the channels layout stores its blocks by rows too: the same bits."""
    _matmul_switch_same_bits(62, xshape, n, transposed, "MPSGRAPH_CPU_PACKED_ROW_STORE", monkeypatch)


def _matmul_switch_same_bits(seed, xshape, n, transposed, switch, monkeypatch):
    """The product with and without `switch` (plain and with a bias + ReLU epilogue): the same
    bits, and float64 numpy within float32 rounding."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xshape).astype(np.float32)
    y = rng.standard_normal((n, xshape[-1]) if transposed else (xshape[-1], n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    for epilogue in (None, "bias_relu"):
        build = _matmul_build(xshape, y, transposed, epilogue, b)
        on = _run(_compile(build, [x], {}, monkeypatch), [x])[0]
        off = _run(_compile(build, [x], {switch: "0"}, monkeypatch), [x])[0]
        np.testing.assert_array_equal(on, off)
        ref = x.astype(np.float64) @ (y.T if transposed else y).astype(np.float64)
        if epilogue:
            ref = np.maximum(ref + b, 0)
        assert np.allclose(on, ref, rtol=1e-5, atol=1e-4)


# ---------------- the channels layout's AVX-512 kernel (MPSGRAPH_CPU_PACKED_CHANNELS512) ----------------

# ROW_STORE's products (pairs of 16-row panels, a last single panel, partial panels, depth
# blocks, column tails) and 53 rows: two full panels as a pair, then a pair whose second is partial.
WIDE_CHANNELS = ROW_STORE + [((1, 40, 7, 7), (53, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", WIDE_CHANNELS)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_avx512_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """On AVX-512 CPUs the channels layout runs two panels at a time in 16-channel vectors
    (MPSGRAPH_CPU_PACKED_CHANNELS512=0: the AVX2 kernel, one panel at a time): each output's sum
    runs over the same k in the same order, so the same bits with every epilogue folded into the
    store. Where the CPU lacks AVX-512 both runs take the AVX2 kernel."""
    _epilogues_same_bits(65, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_CHANNELS512",
                         (None, "relu6", "bias_then_residual", "relu6_residual", "max_min"))


# Winograd's 16 products on 28x28 planes (ResNet-18's 28x28 layers: 98 tiles per unit at batch
# 1), which take the channels layout on AVX-512 and the planes one with the switch off, and on a
# 14x14 plane (channels either way).
WIDE_WINOGRAD = [((1, 128, 28, 28), 128, (1, 1, 1, 1)), ((2, 64, 28, 28), 96, (1, 1, 1, 1)),
                 ((1, 40, 14, 14), 37, (1, 1, 1, 1))]


@pytest.mark.parametrize("shape,o,pads", WIDE_WINOGRAD)
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_avx512_channels_same_bits(shape, o, pads, threads, monkeypatch):
    """Winograd's products on AVX-512 take the channels layout below 256 tiles per unit
    (MPSGRAPH_CPU_PACKED_CHANNELS512=0: the planes layout from 64): both sum each output over k in
    order, so the same bits."""
    _winograd_switch_same_bits(47, shape, o, pads, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_CHANNELS512")


@pytest.mark.parametrize("xshape,n,transposed", MATMUL)
def test_packed_matmul_avx512_same_bits(xshape, n, transposed, monkeypatch):
    """A classifier's product on the channels layout, AVX-512 kernel against AVX2's: the same bits."""
    _matmul_switch_same_bits(66, xshape, n, transposed, "MPSGRAPH_CPU_PACKED_CHANNELS512", monkeypatch)


# ---------------- the channels kernel's columns in blocks of even widths (MPSGRAPH_CPU_PACKED_EVEN_BLOCKS) -------

# (N, C, H, W), (O, kh, kw), stride, pad: channels-layout products whose columns split into
# blocks of 6 and a narrow tail: 49 (4 x 6 + 5 x 5, MobileNetV2's 7x7 expansion and projection,
# depth blocks and a residual), 25 (5 x 5), 13 (5, 4, 4), 7 (4, 3), 4 at depth 300 (one block,
# two depth blocks), 35 (5 x 6 + 5), an im2col 3x3 on 7x7 planes; batch 1, odd channel counts.
EVEN_BLOCKS = [((1, 160, 7, 7), (960, 1, 1), 1, 0), ((2, 960, 7, 7), (160, 1, 1), 1, 0),
               ((1, 37, 5, 5), (13, 1, 1), 1, 0), ((3, 17, 13, 1), (33, 1, 1), 1, 0), ((2, 9, 7, 1), (7, 1, 1), 1, 0),
               ((1, 300, 2, 2), (21, 1, 1), 1, 0), ((1, 600, 7, 5), (21, 1, 1), 1, 0),
               ((4, 64, 7, 7), (20, 3, 3), 1, 1)]


@pytest.mark.parametrize("shape,wshape,stride,pad", EVEN_BLOCKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_even_blocks_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The columns in blocks of as equal widths as 6 allows (MPSGRAPH_CPU_PACKED_EVEN_BLOCKS=0:
    blocks of 6 and a tail): each output's sum runs over the same k in the same order, so the
    same bits, with the bias, clamp and residual folded into the store (widths 5 stored by rows
    too); within 2e-6 of sum |w||x| of the float64 reference."""
    _epilogues_same_bits(63, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_EVEN_BLOCKS",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


@pytest.mark.parametrize("xshape,n,transposed", MATMUL)
def test_packed_matmul_even_blocks_same_bits(xshape, n, transposed, monkeypatch):
    """A classifier's rows (2 to 16) as the channels layout's columns, in blocks of even widths
    (8 rows: 4 + 4, not 6 + 2): the same bits as blocks of 6, and float64 numpy."""
    _matmul_switch_same_bits(64, xshape, n, transposed, "MPSGRAPH_CPU_PACKED_EVEN_BLOCKS", monkeypatch)


# ---------------- the packed store's clamp as max and min (MPSGRAPH_CPU_PACKED_MINMAX) ----------------

# the planes layout (1x1, im2col stems, column tails, AVX2 row tails) and the channels layout
MINMAX = PACKED[:4] + PACKED[6:] + CHANNELS[1:3] + [((2, 96, 7, 7), (40, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", MINMAX)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_minmax_clamp_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The clamp folded into the packed store as max(lo, v) then min(hi, v)
    (MPSGRAPH_CPU_PACKED_MINMAX=0: compares and blends): the same bits (a sum from +0 is never
    -0, so only a bound of -0 could tell them apart), with relu, relu6, other bounds and a
    residual after the clamp."""
    _epilogues_same_bits(63, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_MINMAX",
                         ("relu", "relu6", "max_min", "bias_residual", "relu6_residual"))


@pytest.mark.parametrize("shape,wshape,stride,pad", [MINMAX[0], MINMAX[2], CHANNELS[1]])
@pytest.mark.parametrize("lo", [0.0, -0.0, -np.inf])
def test_packed_minmax_non_finite_and_signed_zero(shape, wshape, stride, pad, lo, monkeypatch):
    """NaN and infinite sums pass max and min as the compares pass them, and a -0 bound (where
    they would differ) keeps the compares: the same bits as the switch off, zero signs included."""
    rng = np.random.default_rng(64)
    x = rng.standard_normal(shape).astype(np.float32)
    x[:, :, -2:] = 0.0  # sums of zeros: +0 (and -0 products)
    x.reshape(-1)[[3, 40, 77]] = [np.nan, np.inf, -np.inf]
    w = rng.standard_normal((wshape[0], shape[1]) + wshape[1:]).astype(np.float32)

    def build(g):
        px = g.placeholder(shape, mg.float32)
        y = g.convolution(px, g.constant(w), strides=stride, padding=(pad,) * 4)
        return [g.clamp(y, g.constant(np.float32(lo)), g.constant(np.float32(6)))], [px]
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    on = _run(_compile(build, [x], env, monkeypatch), [x])[0]
    off = _run(_compile(build, [x], dict(env, MPSGRAPH_CPU_PACKED_MINMAX="0"), monkeypatch), [x])[0]
    np.testing.assert_array_equal(on, off)
    np.testing.assert_array_equal(np.signbit(on), np.signbit(off))
    assert np.isnan(on).any() and (on == 6).any()


# ---------------- outputs larger than L3 stored past the caches (MPSGRAPH_CPU_PACKED_STREAM) ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: outputs of more than 32 MiB (MobileNetV2's
# 8x96x112x112 is 38.5 MB): rows 32-byte aligned (streamed) and odd planes (rows that are not:
# plain stores), a 1x1 and an im2col 3x3.
STREAM = [((2, 8, 260, 260), (64, 1, 1), 1, 0), ((1, 8, 181, 181), (256, 1, 1), 1, 0),
          ((1, 3, 360, 360), (264, 3, 3), 2, 1)]


@pytest.mark.parametrize("shape,wshape,stride,pad", STREAM)
def test_packed_stream_large_outputs_same_bits(shape, wshape, stride, pad, monkeypatch):
    """Full blocks stored with streaming stores where the output exceeds the last-level cache
    (32 MiB on the development machine): the same bits as plain stores (the switch off), with the
    bias and clamp, a residual, and an epilogue op left after the store (then nothing is
    streamed: it would read the output back)."""
    _epilogues_same_bits(65, shape, wshape, stride, pad, 2, monkeypatch, "MPSGRAPH_CPU_PACKED_STREAM",
                         (None, "relu6", "relu6_residual", "max_min"))


# ---------------- packed weights in Buffers: huge-page mappings from 4 MiB ----------------

# (N, C, H, W), (O, kh, kw), stride, pad: ResNet-18's 7x7 512-channel layer (9.4 MB of packed
# weights, channels layout: mapped), a 256-channel 3x3 stride-2 one on 24x24 outputs (2.4 MB,
# planes) and one of 2.0 MB (both from the heap)
HUGE = [((1, 512, 7, 7), (512, 3, 3), 1, 1), ((1, 256, 48, 48), (256, 3, 3), 2, 1), ((1, 224, 9, 9), (256, 3, 3), 1, 1)]


@pytest.mark.parametrize("shape,o", [((1, 512, 7, 7), 512), ((2, 256, 14, 14), 256)])
def test_winograd_packed_group_in_huge_pages(shape, o, monkeypatch):
    """Winograd's 16 packed products share one allocation (16 MiB for 512 channels, 4 MiB for
    256): compiled, dropped and compiled again, the results stay within the error bound."""
    rng, x, w, bias = _conv3x3_case(11, shape, o)

    def build(g):
        px = g.placeholder(shape, mg.float32)
        return [g.convolution(px, g.constant(w), strides=1, padding=1)], [px]

    ref, scale = _ref(x, w, 1, (1,) * 4), _ref(x, w, 1, (1,) * 4, absolute=True)
    for _ in range(2):
        exe = _compile(build, [x], {}, monkeypatch)
        assert np.all(np.abs(_run(exe, [x])[0] - ref) <= 2e-6 * scale)
        del exe


@pytest.mark.parametrize("shape,wshape,stride,pad", HUGE)
def test_packed_weights_in_huge_pages(shape, wshape, stride, pad, monkeypatch):
    """Packed weights live in a Buffer (from 4 MiB a 2 MiB-aligned huge-page mapping), freed
    when the executable goes: executables compiled and dropped in turn keep agreeing with the
    float64 reference, as does the last one run again."""
    rng, x, w, bias, build = _packed_case(91, shape, wshape, stride, pad)
    ref, scale = _ref(x, w, stride, (pad,) * 4), _ref(x, w, stride, (pad,) * 4, absolute=True)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    for _ in range(3):
        exe = _compile(build, [x], env, monkeypatch)
        y, yr6 = _run(exe, [x])
        assert np.all(np.abs(y - ref) <= 2e-6 * scale)
        np.testing.assert_array_equal(yr6, np.clip(y + bias, 0, 6))
        del exe
    exe = _compile(build, [x], env, monkeypatch)
    for _ in range(2):
        assert np.all(np.abs(_run(exe, [x])[0] - ref) <= 2e-6 * scale)


@pytest.mark.parametrize("shape,wshape,stride,pad", EVEN_BLOCKS)
@pytest.mark.parametrize("threads", [1, 2])
def test_packed_channels_own_copies_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """The channels layout's column blocks packed by every task for itself, in chunks of rows
    (MPSGRAPH_CPU_PACKED_OWN_COPIES=0: one copy by the calling thread): the same packed columns,
    so the same bits, and the float64 reference."""
    _epilogues_same_bits(65, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_PACKED_OWN_COPIES",
                         (None, "relu6", "relu6_residual"))


# (N, C, H, W), (O, 1, 1): one image through a 1x1 expansion (O >= 4 C) in the planes layout,
# whose threads split the output channels: MobileNetV2's 56x56 and 28x28 shapes, column tails
# (1480 and 725 positions), output channels not a multiple of the panel's 8 (100, 44).
SPLIT_CHANNELS = [((1, 24, 56, 56), (144, 1, 1), 1, 0), ((1, 32, 28, 28), (192, 1, 1), 1, 0),
                  ((1, 16, 40, 37), (100, 1, 1), 1, 0), ((1, 8, 25, 29), (44, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", SPLIT_CHANNELS)
@pytest.mark.parametrize("threads", [1, 2])
def test_split_channels_same_bits(shape, wshape, stride, pad, threads, monkeypatch):
    """Output channels over the threads (MPSGRAPH_CPU_SPLIT_CHANNELS=0: positions): every output
    is the same sum, so the same bits, with the bias, clamp and residual in the store; and the
    float64 reference."""
    _epilogues_same_bits(66, shape, wshape, stride, pad, threads, monkeypatch, "MPSGRAPH_CPU_SPLIT_CHANNELS",
                         (None, "relu6", "bias_then_residual", "relu6_residual"))


# (N, C, H, W), (O, 1, 1): one image through a 1x1 projection (C >= 2 O, C >= 256) of at most 256
# positions, whose threads each sum a part of the depth. In planes (128 positions or more):
# MobileNetV2's 14x14 shapes, an odd depth (parts of 151 and 150), a full 16x16 plane, output
# channels not a multiple of the panel's 8, and column tails of 1 to 3 vectors (143 and 130
# positions). In the channels layout, each part's weights packed on their own: MobileNetV2's 7x7
# shapes, and 99 positions (blocks of 6 and a tail) to 100 output channels (a last panel of 4).
DEPTH_PARTS = [((1, 384, 14, 14), (64, 1, 1), 1, 0), ((1, 576, 14, 14), (96, 1, 1), 1, 0),
               ((1, 301, 11, 13), (37, 1, 1), 1, 0), ((1, 256, 16, 16), (128, 1, 1), 1, 0),
               ((1, 512, 10, 13), (20, 1, 1), 1, 0), ((1, 960, 7, 7), (160, 1, 1), 1, 0),
               ((1, 576, 7, 7), (160, 1, 1), 1, 0), ((1, 512, 9, 11), (100, 1, 1), 1, 0)]


@pytest.mark.parametrize("shape,wshape,stride,pad", DEPTH_PARTS)
@pytest.mark.parametrize("threads", [1, 2])
def test_depth_parts_match_reference(shape, wshape, stride, pad, threads, monkeypatch):
    """Each thread's part of the depth over every position, the parts added in order, then the
    epilogue (MPSGRAPH_CPU_DEPTH_PARTS=0: halves of the positions): both paths agree with PyTorch's
    float64 result within float32 rounding, with the bias, clamp and residual after the sum; on
    two threads of an AVX-512 CPU the parts ran (the plain product's bits differ, the sum's order
    being another); run on one thread, a plan made for two still gives that result (the same bits
    where the packed kernels run, x86 with AVX2 or AVX-512: BLAS's products elsewhere may block
    differently for a different split)."""
    x, w, b, res, ref, scale = _epilogue_case(67, shape, wshape, stride, pad)
    env = {"MPSGRAPH_CPU_WINOGRAD": "0"}
    for name in (None, "relu6", "bias_then_residual", "relu6_residual", "max_min"):
        build = _epilogue_build(shape, w, b, res, stride, pad, name)
        want = EPILOGUES[name][1](ref, b.astype(np.float64), res.astype(np.float64)) if name else ref
        with _threads(threads):
            exe = _compile(build, [x, res], env, monkeypatch)
            y = _run(exe, [x, res])[0]
            off = _run(_compile(build, [x, res], dict(env, MPSGRAPH_CPU_DEPTH_PARTS="0"), monkeypatch), [x, res])[0]
        with _threads(1):
            y1 = _run(exe, [x, res])[0]
        if mg._core._cpu_isa() in ("avx2", "avx512"):
            np.testing.assert_array_equal(y1, y, err_msg=str(name))
        for got in (y, y1, off):
            assert np.all(np.abs(got - want) <= 2e-6 * scale + 1e-6 * np.abs(want)), name
        if name is None and threads == 2 and mg._core._cpu_isa() == "avx512":
            assert not np.array_equal(y, off)  # the parts ran
