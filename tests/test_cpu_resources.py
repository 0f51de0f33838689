"""The CPU backend on a shared machine (issue 10, item 4): freed results give their memory back
past the result pool's bound, and an idle process with a compiled graph does not spin.
Each check runs in a fresh interpreter so that other tests' buffers and threads do not count."""
import subprocess
import sys
import textwrap

import pytest

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def run_py(code):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return [float(v) for v in p.stdout.strip().splitlines()[-1].split()]


@linux
def test_released_results_return_memory():
    # five live 64 MiB results, then all released: resident memory must come back down to
    # within the pool's bound (64 MiB) plus slack, not stay 5 x 64 MiB higher.
    base, peak, after = run_py("""
        import gc, os
        import numpy as np
        import mpsgraph as mg
        page = os.sysconf("SC_PAGE_SIZE")
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page / 2**20
        n = 1 << 24
        g = mg.Graph()
        p = g.placeholder((n,), mg.float32)
        exe = g.compile({p: ((n,), mg.float32)}, [p * 2.0 + 1.0])
        x = mg.TensorData(np.ones(n, np.float32))
        (r,) = exe.run([x]); assert float(np.asarray(r)[0]) == 3.0
        del r; gc.collect()
        base = rss()
        kept = [exe.run([x])[0] for _ in range(5)]
        for r in kept:
            np.asarray(r)[:] += 1  # touch every page
        peak = rss()
        del kept, r; gc.collect()
        print(base, peak, rss())
    """)
    assert peak - base > 4 * 64 * 0.9  # the five results were resident
    assert after - base < 64 + 48, (base, peak, after)


def test_idle_process_does_not_spin():
    # after parallel work (elementwise kernels and a GEMM on the pool), a second of idling
    # costs next to no CPU time: no worker busy-waits for the next job.
    (cpu,) = run_py("""
        import time
        import numpy as np
        import mpsgraph as mg
        mg.set_num_threads(2)
        g = mg.Graph()
        a, b = g.placeholder((512, 512)), g.placeholder((1 << 22,))
        exe = g.compile({a: ((512, 512), mg.float32), b: ((1 << 22,), mg.float32)}, [a @ a, g.sigmoid(b) * b])
        xa, xb = np.ones((512, 512), np.float32), np.ones(1 << 22, np.float32)
        for _ in range(5):
            exe.run([xa, xb])
        time.sleep(0.2)  # a pool may spin briefly before it sleeps
        t0 = time.process_time()
        time.sleep(1.0)
        print(time.process_time() - t0)
    """)
    assert cpu < 0.1, cpu
