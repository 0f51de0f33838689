"""PageRank by power iteration in a while_loop, with scatter_nd and top_k.

A random directed graph is given as an edge list (E, 2) of int32 (source, target). The graph
builds the column-stochastic link matrix with scatter_nd (repeated edges add up), iterates
r <- (1 - d) / n + d M r in a while_loop until the L1 change is below a tolerance (a
data-dependent trip count), and returns the k highest-ranked nodes with top_k. It also
differentiates the ranks through the loop w.r.t. the damping factor d.

Checks, against numpy with no loop: the ranks solve (I - d M) r = (1 - d) / n, the top_k
nodes are numpy's argsort of them, and by the implicit function theorem
dr/dd = (I - d M)^-1 (M r - 1 / n).

    python examples/pagerank.py [--nodes 200] [--edges 1000] [--k 5] [--damping 0.85]

Exits with status 1 on a mismatch.
"""
import argparse
import sys

import numpy as np

import mpsgraph as mg


def build(n, k, tol, max_iter):
    g = mg.Graph()
    edges = g.placeholder((None, 2), mg.int32, name="edges")  # rows: (source, target)
    d = g.placeholder((), mg.float64, name="damping")
    w = g.placeholder((n,), mg.float64, name="weights")  # for a scalar to differentiate: sum(w * r)
    ones = g.cast(g.reshape(edges[:, 0], (-1,)) * 0 + 1, mg.float64)
    counts = g.scatter_nd(ones, edges, shape=(n, n), mode="add")  # counts[s, t]: edges s -> t
    out_degree = g.reduction_sum(counts, axes=1, keep_dims=True)
    m = g.transpose(counts / out_degree)  # m[t, s] = share of s's rank that goes to t
    teleport = (1.0 - d) / float(n)
    r0 = g.full((n,), 1.0 / n, dtype=mg.float64)
    k0 = g.constant(0, dtype=mg.int32)
    big = g.constant(np.inf, dtype=mg.float64)

    def before(r, change, it):
        return g.logical_and(change > tol, it < max_iter)

    def after(r, change, it):
        nxt = teleport + d * g.reshape(m @ g.reshape(r, (n, 1)), (n,))
        return [nxt, g.reduction_sum(g.absolute(nxt - r), keep_dims=False), it + 1]

    r, _, iters = g.while_loop([r0, big, k0], before, after, name="power_iteration")
    top_values, top_nodes = g.top_k(r, k)
    (dr_dd,) = g.gradients(g.reduction_sum(w * r, keep_dims=False), [d]).values()
    return g, (edges, d, w), (r, iters, top_values, top_nodes, dr_dd)


def random_edges(n, e, rng):
    """e random edges plus a ring (every node links somewhere: no dangling nodes)."""
    src = rng.integers(0, n, e)
    dst = (src + rng.integers(1, n, e)) % n  # no self-loops
    ring = np.arange(n)
    return np.stack([np.concatenate([src, ring]), np.concatenate([dst, (ring + 1) % n])], 1).astype(np.int32)


def run(nodes=200, edges=1000, k=5, damping=0.85, tol=1e-13, seed=0, quiet=False):
    rng = np.random.default_rng(seed)
    ev = random_edges(nodes, edges, rng)
    wv = rng.standard_normal(nodes)
    g, (e, d, w), (r, iters, top_v, top_i, dr_dd) = build(nodes, k, tol, 1000)
    out = g.run({e: ev, d: np.float64(damping), w: wv}, [r, iters, top_v, top_i, dr_dd])
    rv, it, tv, ti, grad = (out[t].numpy() for t in (r, iters, top_v, top_i, dr_dd))

    # the reference: a linear solve
    counts = np.zeros((nodes, nodes))
    np.add.at(counts, (ev[:, 0], ev[:, 1]), 1.0)
    m = (counts / counts.sum(1, keepdims=True)).T
    a = np.eye(nodes) - damping * m
    want = np.linalg.solve(a, np.full(nodes, (1 - damping) / nodes))
    want_grad = float(wv @ np.linalg.solve(a, m @ want - 1.0 / nodes))
    order = np.argsort(-want, kind="stable")[:k]
    rank_err = float(np.max(np.abs(rv - want)) / np.max(want))
    grad_err = abs(float(grad) - want_grad) / abs(want_grad)
    top_ok = bool(np.array_equal(ti, order) and np.allclose(tv, want[order], rtol=1e-9))
    if not quiet:
        print(f"{nodes} nodes, {len(ev)} edges, damping {damping}: converged in {int(it)} power iterations")
        print(f"top {k} nodes (top_k): {ti.tolist()}  ranks {np.array2string(tv, precision=5)}")
        print(f"numpy's linear solve:  {order.tolist()}  ranks {np.array2string(want[order], precision=5)}")
        print(f"max rank error {rank_err:.1e} (relative to the largest rank)")
        print(f"d(sum w*r)/d(damping) through the loop {float(grad):.10f}, implicit function theorem "
              f"{want_grad:.10f} (relative error {grad_err:.1e})")
    return {"iterations": int(it), "rank_error": rank_err, "grad_error": grad_err, "top_k_ok": top_ok}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--edges", type=int, default=1000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--damping", type=float, default=0.85)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rep = run(args.nodes, args.edges, args.k, args.damping, seed=args.seed)
    ok = rep["rank_error"] < 1e-10 and rep["grad_error"] < 1e-8 and rep["top_k_ok"]
    print(f"{'OK' if ok else 'FAILED'}: ranks, top_k and the damping gradient match numpy "
          f"(rank error {rep['rank_error']:.1e}, gradient error {rep['grad_error']:.1e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
