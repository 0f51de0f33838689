"""Newton's method in a while_loop, differentiated through.

Solves x^3 + a x - b = 0 (a > 0, so the root is unique) for a batch of (a, b) pairs with
Newton's method, x <- x - (x^3 + a x - b) / (3 x^2 + a), looping until the largest update is
below a tolerance: the trip count depends on the data. g.gradients then differentiates the
root through every iteration of the loop, and the result is checked against the implicit
function theorem, which needs no loop at all:

    dx/da = -x / (3 x^2 + a),    dx/db = 1 / (3 x^2 + a).

The same gradients come out of the loop built with checkpoint=True (the backward pass keeps
only every ~sqrt(n)-th iteration's state and recomputes the rest).

    python examples/newton_solver.py [--n 8] [--tol 1e-12] [--seed 0]

Exits with status 1 if a root, a gradient or the checkpointed gradients do not match.
"""
import argparse
import sys

import numpy as np

import mpsgraph as mg


def build_solver(n, tol, max_iter, checkpoint):
    """A graph that solves the n cubics and differentiates sum(x) w.r.t. a and b.

    Each root depends only on its own (a_i, b_i), so the gradient of sum(x) is the
    elementwise derivative dx_i/da_i (and dx_i/db_i)."""
    g = mg.Graph()
    a = g.placeholder((n,), mg.float64, name="a")
    b = g.placeholder((n,), mg.float64, name="b")
    x0 = b / (a + 1.0)  # any start works for a > 0; this one depends on (a, b) too
    big = g.constant(np.inf, dtype=mg.float64)
    k0 = g.constant(0, dtype=mg.int32)

    def before(x, step, k):
        return g.logical_and(step > tol, k < max_iter)

    def after(x, step, k):
        dx = (x * x * x + a * x - b) / (3.0 * x * x + a)
        return [x - dx, g.reduction_maximum(g.absolute(dx), keep_dims=False), k + 1]

    x, _, iters = g.while_loop([x0, big, k0], before, after, checkpoint=checkpoint, name="newton")
    grads = g.gradients(g.reduction_sum(x, keep_dims=False), [a, b])
    return g, a, b, x, iters, grads[a], grads[b]


def solve(av, bv, tol=1e-12, max_iter=100, checkpoint=False):
    """Returns (x, iterations, dx/da, dx/db) as numpy arrays / an int."""
    g, a, b, x, iters, ga, gb = build_solver(len(av), tol, max_iter, checkpoint)
    r = g.run({a: av, b: bv}, [x, iters, ga, gb])
    return r[x].numpy(), int(r[iters].numpy()), r[ga].numpy(), r[gb].numpy()


def run(n=8, tol=1e-12, seed=0, quiet=False):
    """Solves two batches (small and large b, so different trip counts); returns a dict with
    the iteration counts and the worst relative errors of the roots and gradients."""
    rng = np.random.default_rng(seed)
    report = {"iterations": [], "residual": 0.0, "grad_error": 0.0, "checkpoint_diff": 0.0}
    for scale in (1.0, 1000.0):
        av = rng.uniform(0.5, 3.0, n)
        bv = rng.uniform(-1.0, 1.0, n) * scale
        x, iters, dxa, dxb = solve(av, bv, tol)
        xc, iters_c, dxa_c, dxb_c = solve(av, bv, tol, checkpoint=True)
        fp = 3 * x * x + av
        want_a, want_b = -x / fp, 1.0 / fp  # implicit function theorem
        residual = np.max(np.abs(x ** 3 + av * x - bv) / np.maximum(1.0, np.abs(bv)))
        grad_err = max(np.max(np.abs(dxa - want_a) / np.abs(want_a)),
                       np.max(np.abs(dxb - want_b) / np.abs(want_b)))
        ck = max(np.max(np.abs(dxa_c - dxa)), np.max(np.abs(dxb_c - dxb)), np.max(np.abs(xc - x)),
                 abs(iters_c - iters))
        report["iterations"].append(iters)
        report["residual"] = max(report["residual"], float(residual))
        report["grad_error"] = max(report["grad_error"], float(grad_err))
        report["checkpoint_diff"] = max(report["checkpoint_diff"], float(ck))
        if not quiet:
            print(f"b in [-{scale:g}, {scale:g}]: converged in {iters} Newton steps "
                  f"(checkpointed loop: {iters_c})")
            print(f"  a      = {np.array2string(av[:4], precision=4)} ...")
            print(f"  b      = {np.array2string(bv[:4], precision=4)} ...")
            print(f"  root x = {np.array2string(x[:4], precision=6)} ...  max relative residual {residual:.1e}")
            print(f"  dx/da through the loop  {np.array2string(dxa[:4], precision=8)} ...")
            print(f"  -x / (3x^2 + a)         {np.array2string(want_a[:4], precision=8)} ...")
            print(f"  dx/db through the loop  {np.array2string(dxb[:4], precision=8)} ...")
            print(f"  1 / (3x^2 + a)          {np.array2string(want_b[:4], precision=8)} ...")
            print(f"  max relative gradient error {grad_err:.1e}; checkpoint=True differs by {ck:.1e}")
    return report


GRAD_RTOL = 1e-8


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=8, help="cubics solved at once")
    ap.add_argument("--tol", type=float, default=1e-12, help="stop when every update is below this")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rep = run(args.n, args.tol, args.seed)
    ok = (rep["residual"] < 1e-10 and rep["grad_error"] < GRAD_RTOL and rep["checkpoint_diff"] < 1e-12
          and rep["iterations"][0] != rep["iterations"][1])
    print(f"{'OK' if ok else 'FAILED'}: iterations {rep['iterations']}, gradients match the implicit "
          f"function theorem to {rep['grad_error']:.1e} (bound {GRAD_RTOL:g}), checkpointed gradients "
          f"differ by {rep['checkpoint_diff']:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
