"""The examples in examples/ run and their claims hold: each is run as a script (exit status,
its OK line) and through its run() function, whose numbers are checked here against
references computed in the test (numpy, the implicit function theorem)."""
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_script(name, *args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], capture_output=True, text=True,
                       timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr


# ---------------------------------------------------------------- newton_solver


def test_newton_script_succeeds():
    rc, out = run_script("newton_solver")
    assert rc == 0, out
    assert "OK:" in out


@pytest.mark.parametrize("checkpoint", [False, True])
def test_newton_gradients_match_the_implicit_function_theorem(checkpoint):
    newton = load("newton_solver")
    rng = np.random.default_rng(3)
    a = rng.uniform(0.2, 5.0, 6)
    b = rng.uniform(-50.0, 50.0, 6)
    x, iters, dxa, dxb = newton.solve(a, b, tol=1e-12, checkpoint=checkpoint)
    # the roots: numpy's companion-matrix solver, the real root of each cubic
    for ai, bi, xi in zip(a, b, x):
        roots = np.roots([1.0, 0.0, ai, -bi])
        real = roots[np.abs(roots.imag) < 1e-9].real
        assert len(real) == 1
        np.testing.assert_allclose(xi, real[0], rtol=1e-10)
    fp = 3 * x * x + a
    np.testing.assert_allclose(dxa, -x / fp, rtol=1e-8)
    np.testing.assert_allclose(dxb, 1.0 / fp, rtol=1e-8)
    assert 1 < iters < 100


def test_newton_trip_count_depends_on_the_data_and_tolerance():
    newton = load("newton_solver")
    a, b = np.array([1.0, 2.0]), np.array([0.5, -0.25])
    counts = {}
    for tol in (1e-2, 1e-12):
        counts[tol] = newton.solve(a, b, tol=tol)[1]
    far = newton.solve(a, b * 1e4, tol=1e-12)[1]
    assert counts[1e-2] < counts[1e-12] < far


# ---------------------------------------------------------------- char_rnn


def test_char_rnn_loss_falls_by_the_stated_factor():
    rnn = load("char_rnn")
    rep = rnn.run(quiet=True)  # the default settings: the claim is made for them
    vocab = len(set(rnn.TEXT))
    # an untrained network predicts about uniformly: loss near ln(vocabulary)
    assert abs(rep["initial"] - math.log(vocab)) < 0.5
    assert rep["final"] <= rep["initial"] / rnn.FACTOR
    assert len(rep["losses"]) == 200
    # the sample continues the primer with characters of the text
    assert rep["sample"].startswith("the ") and set(rep["sample"]) <= set(rnn.TEXT)
    assert len(rep["sample"]) == len("the ") + 120


def test_char_rnn_script_fails_when_the_loss_does_not_fall():
    rc, out = run_script("char_rnn", "--steps", "2", "--seq", "4", "--batch", "2", "--hidden", "8")
    assert rc == 1, out
    assert "FAILED" in out and "sample:" in out


# ---------------------------------------------------------------- pagerank


def test_pagerank_script_succeeds():
    rc, out = run_script("pagerank")
    assert rc == 0, out
    assert "OK:" in out


def test_pagerank_against_a_linear_solve():
    pr = load("pagerank")
    rng = np.random.default_rng(5)
    n, k, damping = 30, 4, 0.7
    ev = pr.random_edges(n, 80, rng)
    g, (e, d, w), (r, iters, top_v, top_i, dr_dd) = pr.build(n, k, 1e-13, 1000)
    wv = rng.standard_normal(n)
    out = g.run({e: ev, d: np.float64(damping), w: wv}, [r, top_v, top_i, dr_dd])
    counts = np.zeros((n, n))
    for s, t in ev:
        counts[s, t] += 1
    m = (counts / counts.sum(1, keepdims=True)).T
    a = np.eye(n) - damping * m
    want = np.linalg.solve(a, np.full(n, (1 - damping) / n))
    np.testing.assert_allclose(out[r].numpy(), want, rtol=1e-10)
    np.testing.assert_array_equal(out[top_i].numpy(), np.argsort(-want, kind="stable")[:k])
    np.testing.assert_allclose(out[top_v].numpy(), np.sort(want)[::-1][:k], rtol=1e-10)
    np.testing.assert_allclose(float(out[dr_dd].numpy()), wv @ np.linalg.solve(a, m @ want - 1.0 / n), rtol=1e-8)


def numpy_gru(params, ids, h):
    """The example's GRU cell in numpy: (new h, logits)."""
    emb, w_x, w_h, b, w_out, b_out = params
    hid = h.shape[1]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    gx, gh = emb[ids] @ w_x + b, h @ w_h
    z = sig(gx[:, :hid] + gh[:, :hid])
    r = sig(gx[:, hid:2 * hid] + gh[:, hid:2 * hid])
    n = np.tanh(gx[:, 2 * hid:] + r * gh[:, 2 * hid:])
    h = (1 - z) * n + z * h
    return h, h @ w_out + b_out


def test_char_rnn_time_loop_and_sampler_match_numpy():
    import mpsgraph as mg
    rnn = load("char_rnn")
    vocab, hidden, seq, batch = 7, 5, 6, 3
    g = mg.Graph()
    model = rnn.CharRNN(g, vocab, hidden, seed=4)
    inputs = g.placeholder((seq, batch), mg.int32)
    targets = g.placeholder((seq, batch), mg.int32)
    loss = model.loss(inputs, targets, seq, batch)
    primer, noise, out = model.sampler(3, 10, temperature=0.7)
    params = [g.variable_data(v).numpy().astype(np.float64) for v in model.params]
    rng = np.random.default_rng(9)
    xv = rng.integers(0, vocab, (seq, batch)).astype(np.int32)
    yv = rng.integers(0, vocab, (seq, batch)).astype(np.int32)
    pv = rng.integers(0, vocab, 3).astype(np.int32)
    uv = rng.uniform(1e-6, 1.0, (10, vocab)).astype(np.float32)
    r = g.run({inputs: xv, targets: yv, primer: pv, noise: uv}, [loss, out])

    h, total = np.zeros((batch, hidden)), 0.0
    for t in range(seq):
        h, logits = numpy_gru(params, xv[t], h)
        logp = logits - logits.max(1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(1, keepdims=True))
        total -= logp[np.arange(batch), yv[t]].sum()
    np.testing.assert_allclose(float(r[loss].numpy()), total / (seq * batch), rtol=1e-5)

    h = np.zeros((1, hidden))
    for c in pv[:-1]:
        h, _ = numpy_gru(params, np.array([c]), h)
    c, want = pv[-1], []
    for t in range(10):
        h, logits = numpy_gru(params, np.array([c]), h)
        c = int(np.argmax(logits[0] / 0.7 - np.log(-np.log(uv[t].astype(np.float64)))))
        want.append(c)
    np.testing.assert_array_equal(r[out].numpy(), want)


def test_char_rnn_checkpointed_time_loop_trains_identically():
    rnn = load("char_rnn")
    kw = dict(steps=5, hidden=16, seq_len=12, batch=4, sample_len=5, quiet=True)
    plain = rnn.run(**kw)["losses"]
    ckpt = rnn.run(checkpoint=True, **kw)["losses"]
    assert plain[-1] < plain[0]
    np.testing.assert_allclose(ckpt, plain, rtol=1e-6)


# ---------------------------------------------------------------- fft_convolution


def test_fft_convolution_script_succeeds():
    rc, out = run_script("fft_convolution")
    assert rc == 0, out
    assert "OK:" in out


@pytest.mark.parametrize("shape", [(2, 16, 20, 3, 3), (3, 9, 11, 4, 6), (1, 5, 7, 5, 7)])
def test_fft_convolution_against_scipy_style_direct_sum(shape):
    fc = load("fft_convolution")
    n, h, w, kh, kw = shape
    r = fc.run(n, h, w, (kh, kw), seed=7, quiet=True)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, h, w)).astype(np.float32).astype(np.float64)
    k = rng.standard_normal((kh, kw)).astype(np.float32).astype(np.float64)
    # an independent reference: numpy's own FFT with the full sizes, per image
    want = np.fft.irfft2(np.fft.rfft2(x, s=(h + kh - 1, w + kw - 1)) * np.fft.rfft2(k, s=(h + kh - 1, w + kw - 1)),
                         s=(h + kh - 1, w + kw - 1))
    np.testing.assert_allclose(r["fft"], want, atol=1e-4)
    np.testing.assert_allclose(r["direct"], want, atol=1e-4)
    np.testing.assert_allclose(r["fft_grad"], r["direct_grad"], rtol=1e-3, atol=1e-3)
    assert r["ok"]


# ---------------------------------------------------------------- transformer


def test_transformer_reaches_the_stated_accuracy():
    tr = load("transformer")
    rep = tr.run(quiet=True)  # the default settings: the claim is made for them
    assert len(rep["losses"]) == 300
    # an untrained model is at chance: loss near ln(vocabulary)
    assert abs(rep["losses"][0] - math.log(10)) < 0.7
    assert rep["accuracy"] >= tr.ACCURACY


def test_transformer_script_fails_when_undertrained():
    rc, out = run_script("transformer", "--steps", "2")
    assert rc == 1, out
    assert "FAILED" in out and "accuracy" in out


def test_transformer_attention_block_matches_numpy():
    """The example's attention (reshapes, heads, scaled_dot_product_attention) against numpy."""
    import mpsgraph as mg
    tr = load("transformer")
    g = mg.Graph()
    model = tr.Encoder(g, vocab=5, length=6, dim=8, heads=2, layers=1, seed=3)
    x = g.placeholder((3, 6, 8), mg.float32)
    p = model.blocks[0]
    y = model.attention(x, p, 3)
    xv = np.random.default_rng(0).standard_normal((3, 6, 8)).astype(np.float32)
    got = g.run({x: xv}, [y])[y].numpy()
    w_qkv, w_o = (g.variable_data(p[k]).numpy().astype(np.float64) for k in ("w_qkv", "w_o"))
    qkv = (xv.astype(np.float64) @ w_qkv).reshape(3, 6, 3, 2, 4).transpose(2, 0, 3, 1, 4)
    s = qkv[0] @ np.swapaxes(qkv[1], -1, -2) / 2.0
    e = np.exp(s - s.max(-1, keepdims=True))
    a = (e / e.sum(-1, keepdims=True)) @ qkv[2]
    want = a.transpose(0, 2, 1, 3).reshape(3, 6, 8) @ w_o
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- lstm_classifier


def test_lstm_classifier_matches_pytorch_and_classifies():
    pytest.importorskip("torch")
    lc = load("lstm_classifier")
    rep = lc.run(quiet=True)  # the default settings: the claims are made for them
    assert rep["accuracy"] >= lc.ACCURACY
    assert rep["loss_rel_diff"] <= lc.LOSS_RTOL
    assert rep["weight_diff"] <= lc.WEIGHT_ATOL
    assert rep["losses"][-1] < rep["losses"][0] / 3


def test_lstm_classifier_script_succeeds():
    rc, out = run_script("lstm_classifier")
    assert rc == 0, out
    assert "OK:" in out
