"""A character-level recurrent network whose time loop is a for_loop, trained with Adam.

The network is a GRU cell built from ops. The input is a placeholder of shape (T, batch)
of int32 character ids; the for_loop's body reads step t's ids with gather at the loop
index, looks up their embeddings with gather, updates the hidden state and adds the
step's cross-entropy to a carried sum. g.gradients differentiates that loop (backward
through time), and mg.optimizers.Adam turns the gradients into variable assigns. The text is
built in (no downloads).

After training, a second graph in the same Graph reads a primer through another
for_loop, then samples characters one at a time (Gumbel-max on noise fed in), writing each
sampled id into a carried buffer with scatter_with_data.

    python examples/char_rnn.py [--steps 200] [--hidden 64] [--seq 24] [--batch 32] [--checkpoint]

The claim: the mean loss of the last 10 steps is at most 1/8 (1/FACTOR) of the first step's
loss (the first is about ln(vocabulary size): chance). With the defaults it takes a few
seconds on two CPU cores. Exits with status 1 if the claim fails.
"""
import argparse
import sys
import time

import numpy as np

import mpsgraph as mg

TEXT = (
    "the quick brown fox jumps over the lazy dog. "
    "a stitch in time saves nine. "
    "all that glitters is not gold. "
    "the early bird catches the worm. "
    "where there is a will there is a way. "
    "actions speak louder than words. "
    "the pen is mightier than the sword. "
    "when in rome do as the romans do. "
)

FACTOR = 8.0  # the claim: final loss <= initial loss / FACTOR


class CharRNN:
    """A GRU over character ids: embedding -> GRU(hidden) -> logits over the vocabulary."""

    def __init__(self, g, vocab, hidden, seed=0):
        rng = np.random.default_rng(seed)
        self.g, self.vocab, self.hidden = g, vocab, hidden

        def var(shape, scale, name):
            return g.variable((rng.standard_normal(shape) * scale).astype(np.float32), name=name)

        emb = hidden
        self.embedding = var((vocab, emb), 0.3, "embedding")
        # the three gates' input and recurrent weights side by side: z (update), r (reset), n (new)
        self.w_x = var((emb, 3 * hidden), 1.0 / np.sqrt(emb), "w_x")
        self.w_h = var((hidden, 3 * hidden), 1.0 / np.sqrt(hidden), "w_h")
        self.b = g.variable(np.zeros(3 * hidden, np.float32), name="b")
        self.w_out = var((hidden, vocab), 1.0 / np.sqrt(hidden), "w_out")
        self.b_out = g.variable(np.zeros(vocab, np.float32), name="b_out")
        self.params = [self.embedding, self.w_x, self.w_h, self.b, self.w_out, self.b_out]

    def cell(self, ids, h):
        """One GRU step: ids (batch,) int32, h (batch, hidden) -> (new h, logits)."""
        g, H = self.g, self.hidden
        gx = g.gather(self.embedding, ids, axis=0) @ self.w_x + self.b
        gh = h @ self.w_h
        z = g.sigmoid(gx[:, :H] + gh[:, :H])
        r = g.sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
        n = g.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (1.0 - z) * n + z * h
        return h, h @ self.w_out + self.b_out

    def loss(self, inputs, targets, seq_len, batch, checkpoint=False):
        """Mean cross-entropy of predicting targets[t] from inputs[:t+1], over a for_loop in t."""
        g = self.g

        def step(t, h, total):
            x_t = g.gather(inputs, t, axis=0)  # (batch,) ids at the loop index
            y_t = g.gather(targets, t, axis=0)
            h, logits = self.cell(x_t, h)
            ce = g.softmax_cross_entropy(logits, g.one_hot(y_t, self.vocab), axis=-1, reduction="sum")
            return [h, total + ce]

        h0 = g.zeros((batch, self.hidden), mg.float32)
        _, total = g.for_loop(seq_len, [h0, g.constant(0.0, dtype=mg.float32)], step, name="time_loop",
                                 checkpoint=checkpoint)
        return total / float(seq_len * batch)

    def sampler(self, primer_len, length, temperature):
        """Reads a primer (for_loop), then samples `length` ids (another for_loop) with Gumbel-max
        on fed uniform noise; returns (primer placeholder, noise placeholder, sampled ids)."""
        g, V = self.g, self.vocab
        primer = g.placeholder((primer_len,), mg.int32, name="primer")
        noise = g.placeholder((length, V), mg.float32, name="noise")

        def read(t, h):
            h, _ = self.cell(g.reshape(g.gather(primer, t, axis=0), (1,)), h)
            return [h]

        (h,) = g.for_loop(primer_len - 1, [g.zeros((1, self.hidden), mg.float32)], read, name="read_primer")
        last = g.gather(primer, primer_len - 1, axis=0)

        def sample(t, h, c, out):
            h, logits = self.cell(g.reshape(c, (1,)), h)
            u = g.gather(noise, t, axis=0)  # (V,) noise row t
            gumbel = -g.log(-g.log(u))
            c = g.reduction_arg_maximum(g.reshape(logits, (V,)) / temperature + gumbel, axis=0,
                                        keep_dims=False, dtype=mg.int32)
            out = g.scatter_with_data(out, g.reshape(c, (1,)), g.reshape(t, (1,)), axis=0, mode="set")
            return [h, c, out]

        _, _, out = g.for_loop(length, [h, last, g.zeros((length,), mg.int32)], sample, name="sample_loop")
        return primer, noise, out


def batches(ids, seq_len, batch, rng):
    """Random windows of the text: inputs (T, batch) and the next characters as targets."""
    starts = rng.integers(0, len(ids) - seq_len - 1, batch)
    win = np.stack([ids[s:s + seq_len + 1] for s in starts], axis=1)
    return np.ascontiguousarray(win[:-1]), np.ascontiguousarray(win[1:])


def run(steps=200, hidden=64, seq_len=24, batch=32, lr=0.02, seed=0, sample_len=120, checkpoint=False, quiet=False):
    """Trains; returns a dict: losses (per step), initial, final (mean of the last 10), sample."""
    chars = sorted(set(TEXT))
    index = {c: i for i, c in enumerate(chars)}
    ids = np.array([index[c] for c in TEXT], np.int32)
    V = len(chars)
    g = mg.Graph()
    model = CharRNN(g, V, hidden, seed)
    inputs = g.placeholder((seq_len, batch), mg.int32, name="inputs")
    targets = g.placeholder((seq_len, batch), mg.int32, name="targets")
    loss = model.loss(inputs, targets, seq_len, batch, checkpoint)
    updates = mg.optimizers.Adam(lr=lr).minimize(g, loss, model.params)
    train = g.compile({inputs: mg.ShapedType((seq_len, batch), mg.int32),
                       targets: mg.ShapedType((seq_len, batch), mg.int32)}, [loss], target_operations=updates)
    if not quiet:
        print(f"GRU char-RNN: vocabulary {V}, hidden {hidden}, sequences of {seq_len}, batch {batch}; "
              f"text of {len(TEXT)} characters; graph of {g.num_nodes} nodes")
    rng = np.random.default_rng(seed + 1)
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        xb, yb = batches(ids, seq_len, batch, rng)
        (lv,) = train.run([xb, yb])
        losses.append(float(lv.numpy()))
        if not quiet and (step % max(1, steps // 15) == 0 or step == steps - 1):
            print(f"  step {step:4d}  loss {losses[-1]:.4f}")
    elapsed = time.perf_counter() - t0
    initial, final = losses[0], float(np.mean(losses[-10:]))

    primer_text = "the "
    primer, noise, out = model.sampler(len(primer_text), sample_len, temperature=0.5)
    u = np.random.default_rng(seed + 2).uniform(1e-6, 1.0, (sample_len, V)).astype(np.float32)
    r = g.run({primer: np.array([index[c] for c in primer_text], np.int32), noise: u}, [out])
    sample = primer_text + "".join(chars[i] for i in r[out].numpy())
    if not quiet:
        print(f"trained {steps} steps in {elapsed:.1f} s; loss {initial:.4f} -> {final:.4f} "
              f"(mean of the last 10), {initial / final:.2f}x lower")
        print(f"sample: {sample!r}")
    return {"losses": losses, "initial": initial, "final": final, "sample": sample, "seconds": elapsed}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seq", type=int, default=24, help="time steps per sequence")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", action="store_true",
                    help="backward through time keeps ~sqrt(T) hidden states and recomputes the rest")
    args = ap.parse_args(argv)
    rep = run(args.steps, args.hidden, args.seq, args.batch, args.lr, args.seed, checkpoint=args.checkpoint)
    ok = rep["final"] <= rep["initial"] / FACTOR
    print(f"{'OK' if ok else 'FAILED'}: final loss {rep['final']:.4f} "
          f"{'<=' if ok else '>'} initial loss {rep['initial']:.4f} / {FACTOR:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
