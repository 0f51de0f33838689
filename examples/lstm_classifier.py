"""An LSTM sequence classifier trained with Adam, checked against PyTorch's same model.

The model is g.lstm over (time, batch, features) followed by a linear layer on the last
step's state; the task is to tell whether a noisy sequence's first feature drifts up or down
(random data made on the fly, no downloads). The same model is built in PyTorch (nn.LSTM +
nn.Linear) with the same initial weights (PyTorch's, mapped onto MPSGraph's layout: the gate
order [i, f, z, o] is PyTorch's [i, f, g, o]; bias = b_ih + b_hh) and trained on the same
batches with torch.optim.Adam.

    python examples/lstm_classifier.py [--steps 40] [--hidden 16] [--seq 12]

The claims: the accuracy on fresh sequences is at least ACCURACY, and where PyTorch is
installed, every step's loss matches PyTorch's within LOSS_RTOL (relative) and the final
weights match within WEIGHT_ATOL. Exits with status 1 if a claim fails.
"""
import argparse
import sys
import time

import numpy as np

import mpsgraph as mg

ACCURACY = 0.9
# float32 on both sides; Adam's normalised steps carry rounding differences into the weights
LOSS_RTOL = 1e-2
WEIGHT_ATOL = 2e-2


def make_batch(rng, T, batch, features):
    """Sequences whose feature 0 drifts up (class 1) or down (class 0), with noise everywhere."""
    y = rng.integers(0, 2, batch)
    slope = np.where(y == 1, 1.0, -1.0) * rng.uniform(0.05, 0.2, batch)
    x = rng.normal(0, 0.5, (T, batch, features))
    x[:, :, 0] += slope[None, :] * np.arange(T)[:, None]
    return x.astype(np.float32), y.astype(np.int32)


def initial_weights(features, hidden, classes, seed):
    """PyTorch's default initialisation, drawn with numpy: U(-1/sqrt(H), 1/sqrt(H))."""
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(hidden)
    u = lambda *s: rng.uniform(-k, k, s).astype(np.float32)  # noqa: E731
    return {"w_ih": u(4 * hidden, features), "w_hh": u(4 * hidden, hidden), "b_ih": u(4 * hidden),
            "b_hh": u(4 * hidden), "w_fc": u(classes, hidden), "b_fc": u(classes)}


def build(w, T, batch, features, classes, lr):
    g = mg.Graph()
    v = {name: g.variable(a, name=name) for name, a in w.items()}
    x = g.placeholder((T, batch, features), mg.float32, name="x")
    y = g.placeholder((batch,), mg.int32, name="y")
    h = g.lstm(x, v["w_hh"], input_weight=v["w_ih"], bias=v["b_ih"] + v["b_hh"])
    last = g.squeeze(g.slice(h, axis=0, start=T - 1, length=1), axes=[0])
    logits = last @ g.transpose(v["w_fc"]) + v["b_fc"]
    loss = g.softmax_cross_entropy(logits, g.one_hot(y, classes), axis=-1, reduction="mean")
    updates = mg.optimizers.Adam(lr=lr).minimize(g, loss, list(v.values()))
    spec = {x: mg.ShapedType((T, batch, features), mg.float32), y: mg.ShapedType((batch,), mg.int32)}
    train = g.compile(spec, [loss], target_operations=updates)
    predict = g.compile({x: spec[x]}, [g.reduction_arg_maximum(logits, axis=-1, keep_dims=False, dtype=mg.int32)])
    return train, predict, (lambda: {name: g.variable_data(t).numpy() for name, t in v.items()}), list(v)


def torch_run(w, batches, lr):
    """PyTorch's same model and optimizer on the same batches: (losses, final weights)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only contend
    try:
        return _torch_train(torch, w, batches, lr)
    finally:
        torch.set_num_threads(threads)


def _torch_train(torch, w, batches, lr):
    H = w["w_hh"].shape[1]
    lstm = torch.nn.LSTM(w["w_ih"].shape[1], H)
    fc = torch.nn.Linear(H, w["w_fc"].shape[0])
    with torch.no_grad():
        for p, name in ((lstm.weight_ih_l0, "w_ih"), (lstm.weight_hh_l0, "w_hh"), (lstm.bias_ih_l0, "b_ih"),
                        (lstm.bias_hh_l0, "b_hh"), (fc.weight, "w_fc"), (fc.bias, "b_fc")):
            p.copy_(torch.from_numpy(w[name]))
    params = list(lstm.parameters()) + list(fc.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    losses = []
    for xb, yb in batches:
        opt.zero_grad()
        out, _ = lstm(torch.from_numpy(xb))
        loss = torch.nn.functional.cross_entropy(fc(out[-1]), torch.from_numpy(yb).long())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    final = {"w_ih": lstm.weight_ih_l0, "w_hh": lstm.weight_hh_l0, "b_ih": lstm.bias_ih_l0, "b_hh": lstm.bias_hh_l0,
             "w_fc": fc.weight, "b_fc": fc.bias}
    return losses, {k: t.detach().numpy() for k, t in final.items()}


def run(steps=40, hidden=16, T=12, batch=32, features=3, lr=0.02, seed=0, compare=True, quiet=False):
    """Trains; returns a dict: losses, accuracy, and where PyTorch ran, its losses and the largest
    loss and weight differences."""
    classes = 2
    w = initial_weights(features, hidden, classes, seed)
    train, predict, read, names = build(w, T, batch, features, classes, lr)
    rng = np.random.default_rng(seed + 1)
    batches = [make_batch(rng, T, batch, features) for _ in range(steps)]
    losses = []
    t0 = time.perf_counter()
    for xb, yb in batches:
        (lv,) = train.run([xb, yb])
        losses.append(float(lv.numpy()))
    elapsed = time.perf_counter() - t0
    test_rng = np.random.default_rng(seed + 2)
    correct = total = 0
    for _ in range(4):
        xb, yb = make_batch(test_rng, T, batch, features)
        (pred,) = predict.run([xb])
        correct += int((pred.numpy() == yb).sum())
        total += yb.size
    rep = {"losses": losses, "accuracy": correct / total, "seconds": elapsed}
    if compare:
        try:
            t_losses, t_final = torch_run(w, batches, lr)
        except ImportError:
            t_losses = None
        if t_losses is not None:
            final = read()
            rep["torch_losses"] = t_losses
            rep["loss_rel_diff"] = float(np.max(np.abs(np.array(losses) - t_losses) / np.abs(t_losses)))
            rep["weight_diff"] = float(max(np.max(np.abs(final[k] - t_final[k])) for k in names))
    if not quiet:
        print(f"LSTM classifier: hidden {hidden}, sequences of {T} x {features}, batch {batch}; {steps} Adam steps "
              f"in {elapsed:.1f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f}; accuracy {rep['accuracy']:.3f}")
        if "torch_losses" in rep:
            print(f"PyTorch's same model: loss {rep['torch_losses'][0]:.4f} -> {rep['torch_losses'][-1]:.4f}; largest "
                  f"relative loss difference {rep['loss_rel_diff']:.2e}, largest weight difference "
                  f"{rep['weight_diff']:.2e}")
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--seq", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rep = run(args.steps, args.hidden, args.seq, seed=args.seed)
    ok = rep["accuracy"] >= ACCURACY
    msg = f"accuracy {rep['accuracy']:.3f} {'>=' if ok else '<'} {ACCURACY}"
    if "torch_losses" in rep:
        same = rep["loss_rel_diff"] <= LOSS_RTOL and rep["weight_diff"] <= WEIGHT_ATOL
        ok = ok and same
        msg += (f"; losses within {LOSS_RTOL:g} of PyTorch's and weights within {WEIGHT_ATOL:g}: "
                f"{'yes' if same else 'no'}")
    print(f"{'OK' if ok else 'FAILED'}: {msg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
