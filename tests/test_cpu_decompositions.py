"""The CPU's composite kernels against their decompositions (the reference each kernel keeps)."""
import numpy as np

import mpsgraph as mg
from conftest import cpu_decompositions


def _attention_graph():
    g = mg.Graph()
    q = g.placeholder((2, 3, 37, 16), mg.float32)
    k = g.placeholder((2, 3, 53, 16), mg.float32)
    v = g.placeholder((2, 3, 53, 16), mg.float32)
    out = g.scaled_dot_product_attention(q, k, v, causal=True)
    return g, (q, k, v), out


def test_attention_kernel_matches_its_decomposition():
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 37, 16), (2, 3, 53, 16), (2, 3, 53, 16))]
    g, ins, out = _attention_graph()
    kernel = np.asarray(g.run(dict(zip(ins, feeds)), [out])[out])
    with cpu_decompositions():
        g2, ins2, out2 = _attention_graph()
        decomposed = np.asarray(g2.run(dict(zip(ins2, feeds)), [out2])[out2])
    np.testing.assert_allclose(kernel, decomposed, rtol=1e-5, atol=1e-6)
