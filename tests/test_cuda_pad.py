"""pad's non-constant modes on cuda:0 (borders copied within the output, dim by dim) against
numpy.pad, including corners and both sides at once; arange and eye against numpy. Skips
without a GPU."""
import numpy as np
import pytest

import mpsgraph as mg

HAS_GPU = mg.Device("cuda:0").available
pytestmark = pytest.mark.skipif(not HAS_GPU, reason=f"no CUDA GPU here: {mg.Device('cuda:0').unavailable_reason}")

NUMPY_MODE = {"reflect": "reflect", "symmetric": "symmetric", "edge": "edge", "wrap": "wrap"}


@pytest.mark.parametrize("mode", sorted(NUMPY_MODE))
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int8, np.int64])
@pytest.mark.parametrize("shape,left,right", [((5,), [2], [3]), ((4, 6), [1, 3], [2, 0]), ((3, 4, 5), [0, 2, 1], [2, 1, 3]),
                                              ((2, 0, 3), [1, 0, 2], [0, 0, 1])])
def test_pad_modes_match_numpy(mode, dt, shape, left, right):
    x = (np.arange(int(np.prod(shape))) * 3 % 17).reshape(shape).astype(dt)
    g = mg.Graph()
    p = g.placeholder(shape, mg.as_dtype(dt))
    y = g.pad(p, left, right, mode=mode)
    r = g.run({p: x}, [y], device="cuda")[y].numpy()
    # an empty dim is not padded, so the result is empty too (numpy refuses such pads)
    ref = np.pad(x, list(zip(left, right)), mode=NUMPY_MODE[mode]) if 0 not in shape else np.zeros(
        [s + a + b for s, a, b in zip(shape, left, right)], dt)
    np.testing.assert_array_equal(r, ref)


@pytest.mark.parametrize("dt", [mg.float32, mg.float16, mg.bfloat16, mg.int32, mg.int64, mg.uint8])
def test_arange_and_eye(dt):
    g = mg.Graph()
    a = g.arange(2, 40, 3, dtype=dt)
    e = [g.eye(4, 6, k, dtype=dt) for k in (-5, -1, 0, 2, 6)]
    r = g.run({}, [a] + e, device="cuda")
    nd = mg._dtypes.to_numpy_dtype(dt)
    np.testing.assert_array_equal(r[a].numpy(), np.arange(2, 40, 3).astype(nd))
    for t, k in zip(e, (-5, -1, 0, 2, 6)):
        np.testing.assert_array_equal(r[t].numpy(), np.eye(4, 6, k).astype(nd))
