"""Runs the conformance table (tests/conformance.py, tests/conformance_nn.py): every row x dtype x
available device, with static placeholder shapes and again with every placeholder dim None; and
the finite-difference gradient checks of every row with a Grad spec (float64, CPU)."""
import numpy as np
import pytest

import mpsgraph as mg
import conformance as cf

DEVICES = [str(d) for d in mg.devices()]


def _skip_reason(row, dev):
    for kind, reason in row.skip_devices.items():
        if dev.startswith(kind):
            return f"{row.name} does not run on {dev}: {reason}"
    return None


def _params():
    for r in cf.ROWS:
        variants = ["static"] + (["none"] if r.none_variant and r.nin > 0 else [])
        for dt in r.dtypes:
            for dev in DEVICES:
                if dt == "float64" and not dev.startswith("cpu"):
                    continue  # float64 is CPU-only: test_float64_is_refused_off_cpu checks the refusal
                reason = _skip_reason(r, dev)
                marks = [pytest.mark.skip(reason=reason)] if reason else []
                if dt in r.known_bugs:
                    marks.append(pytest.mark.xfail(strict=True, reason=r.known_bugs[dt]))
                for v in variants:
                    yield pytest.param(r, dt, dev, v, id=f"{r.name}-{dt}-{dev}-{v}", marks=marks)


@pytest.mark.parametrize("row,dtype,device,variant", list(_params()))
def test_op(row, dtype, device, variant):
    try:
        cf.check_row(row, dtype, device, none_dims=variant == "none")
    except mg.GraphNotImplementedError as e:
        if device.startswith("cpu"):
            raise
        # counted apart from failures and skips: `pytest -rx` lists what a GPU backend lacks
        pytest.xfail(f"not implemented on {device}: {str(e).splitlines()[0]}")


def _grad_params():
    for r in cf.ROWS:
        if r.grad is None:
            continue
        for entry, unknown in cf.grad_entries(r):
            yield pytest.param(r, entry, unknown, id=f"{r.name}-{entry}{'-none' if unknown else ''}")


@pytest.mark.parametrize("row,entry,unknown_dims", list(_grad_params()))
def test_gradient(row, entry, unknown_dims):
    """Finite differences (float64, CPU) of the row's Grad cases."""
    cf.check_row_gradient(row, entry, unknown_dims=unknown_dims)


@pytest.mark.parametrize("device", DEVICES)
def test_float64_is_refused_off_cpu(device):
    """float64 is CPU-only: other backends must refuse it, never fall back silently."""
    g = mg.Graph()
    x = g.placeholder((3,), mg.float64)
    y = x * 2.0
    xv = np.array([1.0, 2.0, 1e300])
    if device.startswith("cpu"):
        np.testing.assert_array_equal(np.asarray(g.run({x: xv}, [y], device=device)[y]), xv * 2)
    else:
        with pytest.raises(mg.GraphError):
            g.run({x: xv}, [y], device=device)


def test_table_covers_required_ops():
    missing = sorted(set(cf.REQUIRED_OPS) - cf.covered_ops())
    assert not missing, f"ops of issue 2 without a conformance row: {missing}"


def test_required_ops_exist():
    """Every op the table requires is a Graph method (fails until the helpers land them)."""
    absent = [n for n in cf.REQUIRED_OPS if not callable(getattr(mg.Graph, n, None))]
    assert not absent, f"ops required by issue 2 that mpsgraph does not have yet: {absent}"


def test_every_registered_elementwise_op_has_a_row():
    """A new elementwise op must come with its row."""
    covered = cf.covered_ops()
    names = {s["name"] for s in mg.op_schemas() if s.get("family") == "elementwise" and s["python_method"]}
    missing = sorted(n for n in names if n not in covered)
    assert not missing, f"elementwise ops without a conformance row: {missing}"


# the families whose ops are all rows of the table, with gradient checks where differentiable
NN_FAMILIES = ("activation", "nn", "normalization", "convolution", "pooling", "resize", "optimizer", "random",
               "attention", "rnn", "linalg", "image", "fft")


def _family_ops(families):
    return [s for s in mg.op_schemas() if s["family"] in families and s["python_method"]]


def test_every_nn_family_op_has_a_row():
    covered = cf.covered_ops()
    missing = sorted(s["name"] for s in _family_ops(NN_FAMILIES) if s["name"] not in covered)
    assert not missing, f"ops of {NN_FAMILIES} without a conformance row: {missing}"


def test_every_differentiable_nn_family_op_has_a_gradient_check():
    """A row with finite-difference cases (random draws have no inputs to differentiate: their
    gradient behaviour has its own tests in test_gradients.py)."""
    checked = {n for r in cf.ROWS if r.grad is not None and r.grad.cases
               for n in ((r.op,) if isinstance(r.op, str) else ()) + r.covers}
    missing = sorted(s["name"] for s in _family_ops(NN_FAMILIES) if s["family"] != "random"
                     and s["differentiable"] == "yes" and s["name"] not in checked)
    assert not missing, f"differentiable ops without finite-difference rows: {missing}"


def test_rows_are_well_formed():
    names = [r.name for r in cf.ROWS]
    assert len(names) == len(set(names)), "row names must be unique (they are test ids)"
    for r in cf.ROWS:
        assert r.dtypes, r.name
        assert r.cases, r.name
        for d in r.dtypes:
            assert d in cf.ALL, (r.name, d)
            assert cf.cases_for(r, d), f"{r.name}: no case for {d}"
        if r.grad is not None:
            assert "float64" in r.dtypes, f"{r.name}: gradient checks run in float64"
            for entry, _ in cf.grad_entries(r):
                cf._grad_case(r, entry)  # every entry names exactly one case
            assert r.grad.cases or (r.grad.vjp and isinstance(r.ref, cf.TorchRef)), \
                f"{r.name}: a Grad spec that checks nothing"


def test_reference_helpers_are_independent_of_mpsgraph():
    """Spot checks of the Python-int references against hand-computed values."""
    i8 = np.int8
    div = cf.int_ref(cf._tdiv)
    np.testing.assert_array_equal(div(np.array([-7, 7, -128, 5], i8), np.array([2, -2, -1, 0], i8)),
                                  np.array([-3, -3, -128, 0], i8))
    fdiv = cf.int_ref(cf._fdiv)
    np.testing.assert_array_equal(fdiv(np.array([-7, 7, 5], i8), np.array([2, -2, 0], i8)), np.array([-4, -4, 0], i8))
    mod = cf.int_ref(cf._imod)
    np.testing.assert_array_equal(mod(np.array([-7, 7, 5], i8), np.array([2, -2, 0], i8)), np.array([1, -1, 0], i8))
    shl = cf.int_ref(cf._shl)
    np.testing.assert_array_equal(shl(np.array([1, 1, 1, 3], i8), np.array([7, 8, -1, 6], i8)),
                                  np.array([-128, 0, 0, -64], i8))
    shr = cf.int_ref(cf._shr)
    np.testing.assert_array_equal(shr(np.array([-128, -128, 64, 64], i8), np.array([7, 9, 9, -1], i8)),
                                  np.array([-1, -1, 0, 0], i8))
    pw = cf.int_ref(cf._ipow)
    np.testing.assert_array_equal(pw(np.array([2, 3, -1, 2, 1], i8), np.array([7, 5, -3, -1, -9], i8)),
                                  np.array([-128, -13, -1, 0, 1], i8))


def _all_finite_half_values(dtype):
    """Every finite value of the format with its bit pattern, from the bits (no library cast):
    float16 by numpy's exact widening, bfloat16 as the upper half of a float32."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # the NaN patterns
        return _sorted_finite(_half_bits_to_float64(bits, dtype), bits)


def _half_bits_to_float64(bits, dtype):
    if dtype == "float16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    return (bits << 16).view(np.float32).astype(np.float64)


def _sorted_finite(vals, bits):
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))  # one zero: +0.0
    order = np.argsort(vals[keep], kind="stable")
    return vals[keep][order], bits[keep][order]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_round_to_half_is_correctly_rounded(dtype):
    """The float64 -> float16/bfloat16 reference (conformance.round_to_half) against a search
    of all values of the format: nearest value, ties to the even bit pattern, overflow to inf at
    max + half an ulp, subnormals, signed zeros, NaN and inf."""
    vals, bits = _all_finite_half_values(dtype)
    rng = np.random.default_rng(5)
    mids = (vals[:-1] + vals[1:]) / 2  # exact in float64
    top = vals[-1] + (vals[-1] - vals[-2]) / 2  # the overflow threshold
    xs = np.concatenate([vals, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                         rng.uniform(-1, 1, 3000) * 10.0 ** rng.integers(-45, 40, 3000),
                         [top, np.nextafter(top, 0), 1e300, 5e-324, 2.0 ** -150, 2.0 ** -25, 2.0 ** -24 * 1.5]])
    xs = xs[np.abs(xs) < 1e300]
    xs = np.concatenate([xs, -xs, [1e300, -1e300]])
    want = np.empty(xs.shape)
    a = np.abs(xs)
    i = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)  # vals[i-1] < a <= vals[i] (non-negative part)
    lo, hi = vals[i - 1], vals[i]
    pick_hi = (hi - a < a - lo) | ((hi - a == a - lo) & (bits[i] % 2 == 0))
    want = np.where(pick_hi, hi, lo)
    want = np.where(a >= top, np.inf, np.where(a > vals[-1], vals[-1], want))
    want = np.where(a <= 0, 0.0, want)
    want = np.copysign(want, xs)
    got = cf.round_to_half(xs, dtype).astype(np.float64)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(xs))
    special = cf.round_to_half(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0]), dtype).astype(np.float64)
    assert np.isnan(special[0]) and list(special[1:3]) == [np.inf, -np.inf]
    assert np.signbit(special[3]) and not np.signbit(special[4])


def test_stat_checks_reject_wrong_distributions():
    """The random rows' checks have power: numpy draws of the right distribution pass them,
    slightly wrong ones (shifted, scaled, clipped, biased, repeated) fail."""
    import conformance_nn as nn
    rng = np.random.default_rng(0)
    n = 20000

    def ok(check, x, attrs, ins=(), dtype="float32"):
        check([np.asarray(x, np.float32)], [np.asarray(i) for i in ins], attrs, dtype)

    def bad(check, x, attrs, ins=(), dtype="float32"):
        with pytest.raises(AssertionError):
            ok(check, x, attrs, ins, dtype)

    u = rng.random(n)
    ok(nn._stat_uniform, u, {})
    ok(nn._stat_uniform, u * 5 - 2, {"minimum": -2.0, "maximum": 3.0})
    bad(nn._stat_uniform, u * 0.97, {})                    # never reaches the top 3%
    bad(nn._stat_uniform, u ** 1.1, {})                    # skewed
    bad(nn._stat_uniform, np.append(u[:-1], 1.0), {})      # the maximum itself
    bad(nn._stat_uniform, np.repeat(u[: n // 2], 2), {})   # neighbours equal
    z = rng.standard_normal(n)
    ok(nn._stat_normal, z * 2 + 1, {"mean": 1.0, "standard_deviation": 2.0})
    bad(nn._stat_normal, z * 2.1 + 1, {"mean": 1.0, "standard_deviation": 2.0})
    bad(nn._stat_normal, z + 0.05, {})
    bad(nn._stat_normal, rng.uniform(-1.7, 1.7, n), {})    # about the right variance, wrong shape
    t = z[np.abs(z) <= 2][:15000]
    ok(nn._stat_truncated_normal, t, {})
    bad(nn._stat_truncated_normal, np.clip(z, -2, 2)[:15000], {})  # clipped, not truncated
    bad(nn._stat_truncated_normal, z[:15000], {})
    b = (rng.random(n) < 0.3).astype(np.float32)
    ok(nn._stat_bernoulli, b, {"probability": 0.3})
    bad(nn._stat_bernoulli, b, {"probability": 0.33})
    bad(nn._stat_bernoulli, b * 2, {"probability": 0.3})
    x = rng.uniform(0.5, 2, n)
    keep = rng.random(n) >= 0.3
    ok(nn._stat_dropout, np.where(keep, x / 0.7, 0), {"rate": 0.3}, [x])
    bad(nn._stat_dropout, np.where(keep, x, 0), {"rate": 0.3}, [x])           # not rescaled
    bad(nn._stat_dropout, np.where(rng.random(n) >= 0.33, x / 0.7, 0), {"rate": 0.3}, [x])
