"""numpy references of the FFT family with MPSGraph's conventions (tests/conformance_fft.py,
tests/test_cuda_complex.py): the sign of the exponent is '+' when inverse, and the scaling is 1,
1/N or 1/sqrt(N) (N the product of the real signal's lengths) whatever the sign; the halved axis
of the real transforms is the highest of `axes`. Results are complex128 / float64."""
import numpy as np


def _axes(shape, axes):
    rank = len(shape)
    return tuple(range(rank)) if axes is None else tuple(sorted(a % rank for a in axes))


def _scale(n, mode):
    return {"none": 1.0, "size": 1.0 / n, "unitary": 1.0 / np.sqrt(n)}[mode]


def fft_ref(z, axes=None, inverse=False, scaling_mode="none"):
    ax = _axes(z.shape, axes)
    n = int(np.prod([z.shape[a] for a in ax]))
    unscaled = np.fft.ifftn(z, axes=ax, norm="forward") if inverse else np.fft.fftn(z, axes=ax)
    return unscaled * _scale(n, scaling_mode)


def rfft_ref(x, axes=None, inverse=False, scaling_mode="none"):
    x = np.asarray(x, np.float64)
    ax = _axes(x.shape, axes)
    n = int(np.prod([x.shape[a] for a in ax]))
    y = np.fft.rfftn(x, axes=ax)
    return (np.conj(y) if inverse else y) * _scale(n, scaling_mode)  # x real: the '+' sign conjugates


def irfft_ref(h, axes=None, inverse=False, scaling_mode="none", round_to_odd_hermitean=False):
    ax = _axes(h.shape, axes)
    s = [h.shape[a] for a in ax]
    s[-1] = 2 * (s[-1] - 1) + (1 if round_to_odd_hermitean else 0)
    n = int(np.prod(s))
    # the '-' sign is the '+' transform of the conjugate spectrum (the result is real)
    unscaled = np.fft.irfftn(h if inverse else np.conj(h), s=s, axes=ax, norm="forward")
    return unscaled * _scale(n, scaling_mode)
