"""python -m mpsgraph: a demo that builds, differentiates, compiles and runs graphs.

With scikit-learn installed (pip install "mpsgraph[demo]") it trains a multi-layer
perceptron on the 8x8 handwritten digits that scikit-learn ships, with one graph built
once and compiled once; otherwise it runs a small graph and says how to get the rest."""
import argparse
import sys
import time

import numpy as np

import mpsgraph as mg


def basic_demo(device):
    g = mg.Graph()
    x = g.placeholder((None, 3), mg.float32, name="x")
    w = g.constant(np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25]], np.float32), name="w")
    y = g.relu(x @ w) + 1.0
    s = g.reduction_sum(y, axes=1, name="row_sum")
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = g.run({x: xv}, [y, s], device=device)
    print(f"graph of {g.num_nodes} nodes on {device}: relu(x @ w) + 1 and its row sums")
    print("x =\n", xv)
    print("y =\n", out[y].numpy())
    print("row sums =", out[s].numpy().ravel())
    ref = np.maximum(xv @ np.array([[1.0, -1.0], [0.5, 2.0], [-2.0, 0.25]], np.float32), 0) + 1
    print("matches numpy:", bool(np.allclose(out[y].numpy(), ref)))


def load_digits():
    from sklearn.datasets import load_digits as _load
    d = _load()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(x))
    split = int(0.8 * len(x))
    return x[idx[:split]], y[idx[:split]], x[idx[split:]], y[idx[split:]]


def one_hot(y, n=10):
    out = np.zeros((len(y), n), np.float32)
    out[np.arange(len(y)), y] = 1
    return out


def train_mlp(device, epochs, batch, lr, quiet=False):
    xtr, ytr, xte, yte = load_digits()
    rng = np.random.default_rng(1)
    g = mg.Graph()
    x = g.placeholder((None, 64), mg.float32, name="images")
    t = g.placeholder((None, 10), mg.float32, name="labels")
    sizes = [64, 128, 64, 10]
    params, h = [], x
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = g.variable(rng.normal(0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32), name=f"w{i}")
        b = g.variable(np.zeros(fan_out, np.float32), name=f"b{i}")
        params += [w, b]
        h = h @ w + b
        if i < len(sizes) - 2:
            h = g.relu(h)
    logits = h
    loss = g.softmax_cross_entropy(logits, t, axis=-1, reduction="mean", name="loss")
    updates = mg.optimizers.Adam(lr=lr).minimize(g, loss, params)
    train = g.compile({x: mg.ShapedType((None, 64), mg.float32), t: mg.ShapedType((None, 10), mg.float32)},
                      [loss], target_operations=updates, device=device)
    predict = g.compile({x: mg.ShapedType((None, 64), mg.float32)}, [g.reduction_arg_maximum(logits, axis=1)],
                        device=device)
    print(f"MLP 64-128-64-10 on {device}: graph of {g.num_nodes} nodes (forward, gradients and Adam updates), "
          f"compiled once; {len(xtr)} training and {len(xte)} test images")
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the demo extra
        tqdm = None
    steps_per_epoch = (len(xtr) + batch - 1) // batch
    total = epochs * steps_per_epoch
    # disable=None: tqdm draws only on a terminal; elsewhere a line per few epochs
    bar = tqdm(total=total, unit="step", disable=True if quiet else None, mininterval=0.2) if tqdm else None
    drawn = bar is not None and not bar.disable
    step_times = []
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        for s in range(steps_per_epoch):
            idx = order[s * batch:(s + 1) * batch]
            xb, yb = np.ascontiguousarray(xtr[idx]), one_hot(ytr[idx])
            t0 = time.perf_counter()
            (lv,) = train.run([xb, yb])
            step_times.append(time.perf_counter() - t0)
            if drawn:
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{float(lv.numpy()):.4f}", refresh=False)
        if not drawn and not quiet and ((epoch + 1) % 5 == 0 or epoch == 0):
            print(f"  epoch {epoch + 1:3d}/{epochs}  loss {float(lv.numpy()):.4f}")
    if bar is not None:
        bar.close()
    (pred,) = predict.run([xte])
    acc = float((pred.numpy().ravel() == yte).mean())
    print(f"test accuracy: {acc * 100:.2f}%  ({int(acc * len(yte))}/{len(yte)})")
    print(f"time per training step (batch {batch}): median {np.median(step_times) * 1e3:.3f} ms, "
          f"{len(step_times)} steps")
    return acc


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mpsgraph", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cpu, metal or cuda (default: the best available)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    device = str(mg.Device(args.device) if args.device else mg.default_device())
    print(f"mpsgraph {mg.__version__}; devices: {', '.join(str(d) for d in mg.devices())}")
    basic_demo(device)
    print()
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print('scikit-learn is not installed: pip install "mpsgraph[demo]" to train on the digits data set')
        return 0
    acc = train_mlp(device, args.epochs, args.batch, args.lr, args.quiet)
    return 0 if acc >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
