"""A small transformer encoder trained to reverse sequences, with Adam.

Token and position embeddings are looked up with gather; each of the encoder's blocks is
pre-norm: layer_normalization, multi-head self-attention (scaled_dot_product_attention over
(batch, heads, length, head size)), a residual, layer_normalization, a GELU MLP and a residual.
A linear head predicts, at every position i, the token at position L-1-i of the input, which
the model can only do by attending to the right position. The data are random token sequences
made on the fly (no downloads).

    python examples/transformer.py [--steps 300] [--dim 32] [--heads 4] [--layers 1]

The claim: after training, the per-token accuracy on fresh sequences is at least ACCURACY (with
the defaults it takes a few seconds on two CPU cores). Exits with status 1 if the claim fails.
"""
import argparse
import sys
import time

import numpy as np

import mpsgraph as mg

ACCURACY = 0.95  # the claim: per-token accuracy on fresh sequences


class Encoder:
    def __init__(self, g, vocab, length, dim, heads, layers, seed=0):
        rng = np.random.default_rng(seed)
        self.g, self.vocab, self.length, self.dim, self.heads = g, vocab, length, dim, heads
        self.params = []

        def var(shape, scale, name, const=None):
            v = np.full(shape, const, np.float32) if const is not None else \
                (rng.standard_normal(shape) * scale).astype(np.float32)
            t = g.variable(v, name=name)
            self.params.append(t)
            return t

        self.tok = var((vocab, dim), 0.5, "tok_embedding")
        self.pos = var((length, dim), 0.5, "pos_embedding")
        self.blocks = []
        for i in range(layers):
            s = 1 / np.sqrt(dim)
            self.blocks.append({
                "ln1_g": var((dim,), 0, f"b{i}.ln1_g", 1.0), "ln1_b": var((dim,), 0, f"b{i}.ln1_b", 0.0),
                "w_qkv": var((dim, 3 * dim), s, f"b{i}.w_qkv"), "w_o": var((dim, dim), s, f"b{i}.w_o"),
                "ln2_g": var((dim,), 0, f"b{i}.ln2_g", 1.0), "ln2_b": var((dim,), 0, f"b{i}.ln2_b", 0.0),
                "w_1": var((dim, 4 * dim), s, f"b{i}.w_1"), "b_1": var((4 * dim,), 0, f"b{i}.b_1", 0.0),
                "w_2": var((4 * dim, dim), 1 / np.sqrt(4 * dim), f"b{i}.w_2"), "b_2": var((dim,), 0, f"b{i}.b_2", 0.0),
            })
        self.ln_g, self.ln_b = var((dim,), 0, "ln_g", 1.0), var((dim,), 0, "ln_b", 0.0)
        self.w_out = var((dim, vocab), 1 / np.sqrt(dim), "w_out")

    def attention(self, x, p, batch):
        """Multi-head self-attention: (batch, L, dim) -> (batch, L, dim)."""
        g, L, E, Hn = self.g, self.length, self.dim, self.heads
        qkv = g.reshape(x @ p["w_qkv"], (batch, L, 3, Hn, E // Hn))
        qkv = g.transpose(qkv, permutation=[2, 0, 3, 1, 4])  # (3, batch, heads, L, head size)
        q, k, v = (g.squeeze(g.slice(qkv, axis=0, start=i, length=1), axes=[0]) for i in range(3))
        a = g.scaled_dot_product_attention(q, k, v)
        a = g.reshape(g.transpose(a, permutation=[0, 2, 1, 3]), (batch, L, E))
        return a @ p["w_o"]

    def logits(self, tokens, batch):
        """tokens (batch, L) int32 -> logits (batch, L, vocab)."""
        g = self.g
        x = g.gather(self.tok, tokens, axis=0) + self.pos
        for p in self.blocks:
            x = x + self.attention(g.layer_normalization(x, p["ln1_g"], p["ln1_b"]), p, batch)
            h = g.gelu(g.layer_normalization(x, p["ln2_g"], p["ln2_b"]) @ p["w_1"] + p["b_1"])
            x = x + h @ p["w_2"] + p["b_2"]
        return g.layer_normalization(x, self.ln_g, self.ln_b) @ self.w_out


def make_batch(rng, batch, length, vocab):
    x = rng.integers(0, vocab, (batch, length)).astype(np.int32)
    return x, np.ascontiguousarray(x[:, ::-1])


def run(steps=300, dim=32, heads=4, layers=1, length=8, vocab=10, batch=64, lr=0.01, seed=0, quiet=False):
    """Trains; returns a dict: losses (per step), accuracy (on fresh sequences), seconds."""
    g = mg.Graph()
    model = Encoder(g, vocab, length, dim, heads, layers, seed)
    tokens = g.placeholder((batch, length), mg.int32, name="tokens")
    targets = g.placeholder((batch, length), mg.int32, name="targets")
    logits = model.logits(tokens, batch)
    loss = g.softmax_cross_entropy(logits, g.one_hot(targets, vocab), axis=-1, reduction="mean")
    updates = mg.optimizers.Adam(lr=lr).minimize(g, loss, model.params)
    spec = {tokens: mg.ShapedType((batch, length), mg.int32), targets: mg.ShapedType((batch, length), mg.int32)}
    train = g.compile(spec, [loss], target_operations=updates)
    predict = g.compile({tokens: spec[tokens]}, [g.reduction_arg_maximum(logits, axis=-1, keep_dims=False,
                                                                         dtype=mg.int32)])
    if not quiet:
        print(f"transformer encoder: {layers} block(s), dim {dim}, {heads} heads, sequences of {length} over "
              f"{vocab} tokens, batch {batch}; task: reverse the sequence")
    rng = np.random.default_rng(seed + 1)
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        xb, yb = make_batch(rng, batch, length, vocab)
        (lv,) = train.run([xb, yb])
        losses.append(float(lv.numpy()))
        if not quiet and (step % max(1, steps // 10) == 0 or step == steps - 1):
            print(f"  step {step:4d}  loss {losses[-1]:.4f}")
    elapsed = time.perf_counter() - t0
    test_rng = np.random.default_rng(seed + 2)
    correct = total = 0
    for _ in range(4):
        xb, yb = make_batch(test_rng, batch, length, vocab)
        (pred,) = predict.run([xb])
        correct += int((pred.numpy() == yb).sum())
        total += yb.size
    acc = correct / total
    if not quiet:
        print(f"trained {steps} steps in {elapsed:.1f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
              f"accuracy on fresh sequences {acc:.3f}")
    return {"losses": losses, "accuracy": acc, "seconds": elapsed}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rep = run(args.steps, args.dim, args.heads, args.layers, seed=args.seed)
    ok = rep["accuracy"] >= ACCURACY
    print(f"{'OK' if ok else 'FAILED'}: accuracy {rep['accuracy']:.3f} {'>=' if ok else '<'} {ACCURACY}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
