"""2-D convolution through the FFT, checked against the direct convolution.

A batch of images (N, H, W) is convolved with a (kh, kw) kernel, "full" output
(N, H + kh - 1, W + kw - 1), two ways in one graph:

  * FFT: zero-pad both to the output size, real_to_hermitean_fft over the two image axes,
    multiply the half spectra (complex64), hermitean_to_real_fft back (inverse, scaled by 1/size;
    round_to_odd_hermitean when the output width is odd);
  * direct: convolution_2d (a cross-correlation) with the flipped kernel and kh-1 / kw-1 zeros
    of padding on each side.

It also differentiates a loss through both paths with respect to the kernel: the FFT path's
gradient flows through the complex multiply and both transforms. Checks: the two outputs
agree, and agree with a numpy reference (a sum of shifted copies, no FFT); the two kernel
gradients agree.

    python examples/fft_convolution.py [--batch 4] [--height 37] [--width 45] [--kernel 7 5]

Exits with status 1 on a mismatch.
"""
import argparse
import sys

import numpy as np

import mpsgraph as mg


def build(n, h, w, kh, kw):
    g = mg.Graph()
    images = g.placeholder((n, h, w), mg.float32, name="images")
    kernel = g.placeholder((kh, kw), mg.float32, name="kernel")
    oh, ow = h + kh - 1, w + kw - 1

    # FFT path: pad to the full output size, transform, multiply, transform back
    xp = g.pad(images, (0, 0, 0), (0, kh - 1, kw - 1))
    kp = g.pad(kernel, (0, 0), (oh - kh, ow - kw))
    xf = g.real_to_hermitean_fft(xp, axes=(1, 2))
    kf = g.real_to_hermitean_fft(kp, axes=(0, 1))
    fft_out = g.hermitean_to_real_fft(xf * kf, axes=(1, 2), inverse=True, scaling_mode="size",
                                      round_to_odd_hermitean=ow % 2 == 1)

    # direct path: NHWC / HWIO cross-correlation with the flipped kernel
    flipped = g.reverse(kernel, axes=(0, 1))
    direct = g.convolution_2d(g.expand_dims(images, 3), g.reshape(flipped, (kh, kw, 1, 1)),
                              padding=(kh - 1, kh - 1, kw - 1, kw - 1))
    direct_out = g.reshape(direct, (n, oh, ow))

    # the same loss through each path, differentiated w.r.t. the kernel
    target = g.placeholder((n, oh, ow), mg.float32, name="target")
    (fft_grad,) = g.gradients(g.reduction_sum(g.square(fft_out - target)), [kernel]).values()
    (direct_grad,) = g.gradients(g.reduction_sum(g.square(direct_out - target)), [kernel]).values()
    return g, (images, kernel, target), (fft_out, direct_out, fft_grad, direct_grad)


def numpy_full_convolution(x, k):
    n, h, w = x.shape
    kh, kw = k.shape
    out = np.zeros((n, h + kh - 1, w + kw - 1))
    for i in range(kh):
        for j in range(kw):
            out[:, i:i + h, j:j + w] += k[i, j] * x
    return out


def run(batch=4, height=37, width=45, kernel=(7, 5), seed=0, quiet=False):
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    x = rng.standard_normal((batch, height, width)).astype(np.float32)
    k = rng.standard_normal((kh, kw)).astype(np.float32)
    t = rng.standard_normal((batch, height + kh - 1, width + kw - 1)).astype(np.float32)
    g, (xi, ki, ti), outs = build(batch, height, width, kh, kw)
    res = g.run({xi: x, ki: k, ti: t}, list(outs))
    fft_out, direct_out, fft_grad, direct_grad = (np.asarray(res[o], np.float64) for o in outs)
    want = numpy_full_convolution(x.astype(np.float64), k.astype(np.float64))
    scale = np.max(np.abs(want))
    err_fft = float(np.max(np.abs(fft_out - want)) / scale)
    err_direct = float(np.max(np.abs(direct_out - want)) / scale)
    err_grad = float(np.max(np.abs(fft_grad - direct_grad)) / np.max(np.abs(direct_grad)))
    ok = err_fft < 1e-5 and err_direct < 1e-5 and err_grad < 1e-4
    if not quiet:
        print(f"{batch} images {height}x{width}, kernel {kh}x{kw}: full output {height + kh - 1}x{width + kw - 1}")
        print(f"max error vs numpy: fft {err_fft:.2e}, direct {err_direct:.2e}; "
              f"kernel gradients fft vs direct {err_grad:.2e}")
        print("OK: the FFT convolution matches the direct one" if ok else "MISMATCH")
    return {"fft": fft_out, "direct": direct_out, "fft_grad": fft_grad, "direct_grad": direct_grad,
            "reference": want, "ok": ok}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--height", type=int, default=37)
    p.add_argument("--width", type=int, default=45)
    p.add_argument("--kernel", type=int, nargs=2, default=(7, 5))
    a = p.parse_args(argv)
    return 0 if run(a.batch, a.height, a.width, tuple(a.kernel))["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
