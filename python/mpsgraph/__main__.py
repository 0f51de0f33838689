"""python -m mpsgraph: a demo that builds, differentiates, compiles and runs graphs.

With scikit-learn installed (pip install "mpsgraph[demo]") it trains a multi-layer
perceptron and then a small convolutional network on the 8x8 handwritten digits that
scikit-learn ships, each with one graph built once and compiled once; otherwise it runs a
small graph and says how to get the rest."""
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


def _dense(g, rng, h, fan_in, fan_out, name):
    w = g.variable(rng.normal(0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32), name=f"{name}_w")
    b = g.variable(np.zeros(fan_out, np.float32), name=f"{name}_b")
    return h @ w + b, [w, b]


def build_mlp(g, rng, x, training):
    sizes = [64, 128, 64, 10]
    params, h = [], x
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        h, p = _dense(g, rng, h, fan_in, fan_out, f"dense{i}")
        params += p
        if i < len(sizes) - 2:
            h = g.relu(h)
    return h, params, "MLP 64-128-64-10"


def build_cnn(g, rng):
    """conv-conv-pool-conv-pool-dense-dense over 8x8x1 images (NHWC, MPSGraph's default)."""
    def conv(cin, cout, name):
        w = g.variable(rng.normal(0, np.sqrt(2.0 / (9 * cin)), (3, 3, cin, cout)).astype(np.float32), name=f"{name}_w")
        b = g.variable(np.zeros(cout, np.float32), name=f"{name}_b")
        return (lambda h: g.relu(g.convolution_2d(h, w, padding_style="same") + b)), [w, b]

    c1, p1 = conv(1, 32, "conv1")
    c2, p2 = conv(32, 32, "conv2")
    c3, p3 = conv(32, 64, "conv3")
    w4 = g.variable(rng.normal(0, np.sqrt(2.0 / 256), (256, 128)).astype(np.float32), name="dense1_w")
    b4 = g.variable(np.zeros(128, np.float32), name="dense1_b")
    w5 = g.variable(rng.normal(0, np.sqrt(2.0 / 128), (128, 10)).astype(np.float32), name="dense2_w")
    b5 = g.variable(np.zeros(10, np.float32), name="dense2_b")

    def forward(x, training):
        h = g.reshape(x, (-1, 8, 8, 1))
        h = g.max_pooling_2d(c2(c1(h)), kernel_sizes=(2, 2), strides=(2, 2))
        h = g.max_pooling_2d(c3(h), kernel_sizes=(2, 2), strides=(2, 2))
        h = g.relu(g.reshape(h, (-1, 256)) @ w4 + b4)
        if training:
            h = g.dropout(h, rate=0.3, seed=11)
        return h @ w5 + b5

    return forward, p1 + p2 + p3 + [w4, b4, w5, b5], "CNN conv3x3(32)-conv3x3(32)-maxpool-conv3x3(64)-maxpool-128-10"


def train(model, device, epochs, batch, lr, quiet=False):
    """Trains `model` ("mlp" or "cnn") on the digits; returns the test accuracy."""
    xtr, ytr, xte, yte = load_digits()
    rng = np.random.default_rng(1)
    g = mg.Graph()
    x = g.placeholder((None, 64), mg.float32, name="images")
    t = g.placeholder((None, 10), mg.float32, name="labels")
    if model == "cnn":
        forward, params, desc = build_cnn(g, rng)
        logits, eval_logits = forward(x, True), forward(x, False)
    else:
        logits, params, desc = build_mlp(g, rng, x, True)
        eval_logits = logits
    loss = g.softmax_cross_entropy(logits, t, axis=-1, reduction="mean", name="loss")
    updates = mg.optimizers.Adam(lr=lr).minimize(g, loss, params)
    train_exe = g.compile({x: mg.ShapedType((None, 64), mg.float32), t: mg.ShapedType((None, 10), mg.float32)},
                          [loss], target_operations=updates, device=device)
    predict = g.compile({x: mg.ShapedType((None, 64), mg.float32)},
                        [g.reduction_arg_maximum(eval_logits, axis=1)], device=device)
    print(f"{desc} on {device}: graph of {g.num_nodes} nodes (forward, gradients and Adam updates), "
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
            (lv,) = train_exe.run([xb, yb])
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
    print(f"test accuracy: {acc * 100:.2f}%  ({int(round(acc * len(yte)))}/{len(yte)})")
    print(f"time per training step (batch {batch}): median {np.median(step_times) * 1e3:.3f} ms, "
          f"{len(step_times)} steps")
    return acc


def train_mlp(device, epochs, batch, lr, quiet=False):
    return train("mlp", device, epochs, batch, lr, quiet)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mpsgraph", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cpu, metal or cuda (default: the best available)")
    ap.add_argument("--epochs", type=int, default=None, help="default: 30 for the MLP, 12 for the CNN")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
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
    accs = {}
    for model in (["mlp", "cnn"] if args.model == "both" else [args.model]):
        epochs = args.epochs or {"mlp": 30, "cnn": 12}[model]
        accs[model] = train(model, device, epochs, args.batch, args.lr, args.quiet)
        print()
    if len(accs) == 2:
        print(f"CNN {accs['cnn'] * 100:.2f}% vs MLP {accs['mlp'] * 100:.2f}% test accuracy")
    return 0 if min(accs.values()) >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
