"""The recurrent layers beyond the conformance table (tests/conformance_rnn.py): bad input (clear
errors naming the op, the graph left usable), the documented limits of the unrolled expansion, and
gradients of a PyTorch-weighted LSTM and GRU against torch.autograd."""
import numpy as np
import pytest

import mpsgraph as mg
from test_pad_space_band_one_hot import expect


def _ph(g, shape, dtype="float32"):
    return g.placeholder(shape, dtype)


@pytest.mark.parametrize("op, G", [("single_gate_rnn", 1), ("lstm", 4), ("gru", 3)])
def test_bad_shapes(op, G):
    g = mg.Graph()
    x, R = _ph(g, (5, 2, 3)), _ph(g, (G * 4, 4))
    f = getattr(g, op)
    expect(mg.GraphValueError, lambda: f(_ph(g, (5, 3)), R), f"[{op}]", "source must be (T, N, I)")
    expect(mg.GraphValueError, lambda: f(x, _ph(g, (G * 4 + 1, 4))), f"[{op}]", f"must have {G * 4} rows")
    expect(mg.GraphValueError, lambda: f(x, R), f"[{op}]", f"without input_weight the source's last dim must be {G * 4}")
    expect(mg.GraphValueError, lambda: f(x, R, input_weight=_ph(g, (G * 4, 2))), f"[{op}]", "input_weight must be")
    W = _ph(g, (G * 4, 3))
    expect(mg.GraphValueError, lambda: f(x, R, input_weight=W, bias=_ph(g, (4,))) if G > 1 else
           f(x, R, input_weight=W, bias=_ph(g, (5,))), f"[{op}]", "bias must be")
    expect(mg.GraphValueError, lambda: f(x, R, input_weight=W, init_state=_ph(g, (3, 4))), f"[{op}]",
           "init_state must be (2, 4)")
    expect(mg.GraphValueError, lambda: f(x, R, input_weight=W, bidirectional=True), f"[{op}]",
           "recurrent_weight must be (2, G*H, H)")
    expect(mg.GraphValueError, lambda: f(x, R, input_weight=W, mask=_ph(g, (2, 3))), f"[{op}]",
           "mask (2, 3) must broadcast to the state (N, 4)")
    expect(mg.GraphTypeError, lambda: f(x, _ph(g, (G * 4, 4), "float16")), f"[{op}]", "float16")
    expect(mg.GraphTypeError, lambda: f(_ph(g, (5, 2, 3), "int32"), R), f"[{op}]", "floating-point")
    y = f(x, R, input_weight=W)  # still usable
    assert (y[0] if isinstance(y, tuple) else y).shape == (5, 2, 4)


def test_bad_activation():
    g = mg.Graph()
    x, R = _ph(g, (5, 2, 4)), _ph(g, (4, 4))
    expect(mg.GraphValueError, lambda: g.single_gate_rnn(x, R, activation="gelu"), "[single_gate_rnn]",
           "activation must be 'none', 'relu', 'tanh', 'sigmoid' or 'hard_sigmoid', not 'gelu'")
    expect(mg.GraphValueError, lambda: g.gru(_ph(g, (5, 2, 12)), _ph(g, (12, 4)), reset_gate_activation="x"),
           "[gru]", "reset_gate_activation")


def test_lstm_outputs_and_static_shapes():
    g = mg.Graph()
    x, R, W = _ph(g, (None, 2, 3)), _ph(g, (16, 4)), _ph(g, (32, 3))
    h = g.lstm(x, _ph(g, (2, 16, 4)), input_weight=W, bidirectional=True)
    assert h.shape == (None, 2, 8)
    h, c = g.lstm(x, R, input_weight=_ph(g, (16, 3)), produce_cell=True)
    assert h.shape == c.shape == (None, 2, 4)


@pytest.mark.parametrize("op, G", [("single_gate_rnn", 1), ("lstm", 4), ("gru", 3)])
@pytest.mark.parametrize("T, H", [(None, 4), (5, None)])
def test_gradient_needs_a_known_sequence_length_and_hidden_size(op, G, T, H):
    """gradients() unrolls the layer when it is called: T and H must be known then (documented);
    the error names the op, both dims and what to do, and the graph stays usable."""
    g = mg.Graph()
    x, R = _ph(g, (T, 2, G * 4)), _ph(g, (G * 4, H))
    y = getattr(g, op)(x, R)
    loss = g.reduction_sum(y, axes=[0, 1, 2])
    with pytest.raises(mg.GraphValueError, match=rf"\[{op}\].*sequence length \(dim 0 of source \({T}, 2, {G * 4}\)\)"
                       rf".*hidden size.*must be known.*gradients\(\) unrolls"):
        g.gradients(loss, [R])
    x2, R2 = _ph(g, (5, 2, G * 4)), _ph(g, (G * 4, 4))
    d = g.gradients(g.reduction_sum(getattr(g, op)(x2, R2), axes=[0, 1, 2]), [R2])[R2]
    assert d.shape == (G * 4, 4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_training_gradients_against_torch(kind):
    """Gradients of every parameter of a PyTorch layer, mapped onto the op, with a loss on the
    whole sequence (float64)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    T, N, I, H = 7, 3, 5, 4
    mod = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(I, H).double()
    x = torch.randn(T, N, I, dtype=torch.float64)
    out, _ = mod(x)
    (out.sin().sum()).backward()
    p = {k: v.detach().numpy() for k, v in mod.named_parameters()}
    g = mg.Graph()
    xs = g.placeholder((T, N, I), "float64")
    wih, whh = g.placeholder((p["weight_ih_l0"].shape), "float64"), g.placeholder(p["weight_hh_l0"].shape, "float64")
    bih, bhh = g.placeholder((p["bias_ih_l0"].shape), "float64"), g.placeholder(p["bias_hh_l0"].shape, "float64")
    if kind == "lstm":
        y = g.lstm(xs, whh, input_weight=wih, bias=bih + bhh)
    else:
        bias = g.concat([bih[:2 * H] + bhh[:2 * H], bih[2 * H:]], axis=0)
        y = g.gru(xs, whh, input_weight=wih, bias=bias, secondary_bias=bhh[2 * H:], reset_gate_first=True,
                  reset_after=True)
    loss = g.reduction_sum(g.sin(y), axes=[0, 1, 2])
    ps = [wih, whh, bih, bhh]
    grads = g.gradients(loss, ps)
    feeds = {xs: x.numpy(), wih: p["weight_ih_l0"], whh: p["weight_hh_l0"], bih: p["bias_ih_l0"],
             bhh: p["bias_hh_l0"]}
    r = g.run(feeds, [y] + [grads[t] for t in ps])
    got = [r[y]] + [r[grads[t]] for t in ps]
    np.testing.assert_allclose(got[0].numpy(), out.detach().numpy(), rtol=1e-10, atol=1e-12)
    for name, gv in zip(["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"], got[1:]):
        want = dict(mod.named_parameters())[name].grad.numpy()
        np.testing.assert_allclose(gv.numpy(), want, rtol=1e-9, atol=1e-11, err_msg=name)
