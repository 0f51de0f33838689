"""Finite-difference gradient checks (float64, CPU): the independent reference for every
gradient rule in the registry."""
import numpy as np

import mpsgraph as mg


def numeric_grad(f, arrays, i, eps=1e-6):
    """Central differences of the scalar f(*arrays) with respect to arrays[i]."""
    x = arrays[i]
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        fp = f(*arrays)
        flat[k] = old - eps
        fm = f(*arrays)
        flat[k] = old
        gflat[k] = (fp - fm) / (2 * eps)
    return g


def check_op_gradient(build, arrays, wrt=None, unknown_dims=False, rtol=1e-5, atol=1e-6, second_order=False, seed=0):
    """build(g, *tensors) -> tensor. Checks d(sum(w * out))/d(inputs) against finite
    differences, where w is a fixed random weight (so non-scalar outputs are covered).
    With second_order, also checks the gradient of sum(v * first_gradient)."""
    rng = np.random.default_rng(seed)
    wrt = list(range(len(arrays))) if wrt is None else wrt
    g = mg.Graph()
    phs = [g.placeholder(tuple(None for _ in a.shape) if unknown_dims else a.shape, mg.float64, name=f"in{i}")
           for i, a in enumerate(arrays)]
    out = build(g, *phs)
    w_np = rng.standard_normal(tuple(d for d in out_shape(g, out, phs, arrays)))
    w = g.constant(w_np)
    loss = g.reduction_sum(out * w, keep_dims=False)
    grads = g.gradients(loss, [phs[i] for i in wrt])
    feeds = {p: a for p, a in zip(phs, arrays)}
    exe = g.compile({p: (a.shape, mg.float64) for p, a in zip(phs, arrays)}, [loss])

    def f(*vals):
        return float(exe.run(list(vals))[0].numpy())

    got = g.run(feeds, [grads[phs[i]] for i in wrt])
    for i in wrt:
        num = numeric_grad(f, [a.copy() for a in arrays], i)
        np.testing.assert_allclose(got[grads[phs[i]]].numpy(), num, rtol=rtol, atol=atol,
                                   err_msg=f"first-order gradient wrt input {i}")
    if second_order:
        for i in wrt:
            gi = grads[phs[i]]
            v = g.constant(rng.standard_normal(arrays[i].shape))
            s = g.reduction_sum(gi * v, keep_dims=False)
            hv = g.gradients(s, [phs[j] for j in wrt])
            exe2 = g.compile({p: (a.shape, mg.float64) for p, a in zip(phs, arrays)}, [s])

            def f2(*vals):
                return float(exe2.run(list(vals))[0].numpy())

            got2 = g.run(feeds, [hv[phs[j]] for j in wrt])
            for j in wrt:
                num2 = numeric_grad(f2, [a.copy() for a in arrays], j, eps=1e-5)
                np.testing.assert_allclose(got2[hv[phs[j]]].numpy(), num2, rtol=1e-4, atol=1e-5,
                                           err_msg=f"second-order gradient d/d{j} of (v . d/d{i})")


def out_shape(g, out, phs, arrays):
    if all(d is not None for d in out.shape):
        return out.shape
    r = g.run({p: a for p, a in zip(phs, arrays)}, [out])
    return r[out].shape
