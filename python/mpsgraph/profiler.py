"""Per-op profiling: time spent in each op across runs.

    with mg.profiler.profile() as prof:
        exe.run(inputs)
    print(prof.table())                 # per op of the graph you built (softmax, conv2d, ...)
    print(prof.table(kernels=True))     # per kernel that ran (a composite's pieces)
    print(prof.table(steps=True))       # per compiled step: node, kernel, operand types

Composite ops (softmax, the losses, the convolution and pooling front ends, the
normalisations, ...) are reported under their own names, whether the backend ran them as
one kernel or as their decomposition.

Where the CPU runs a batched network's front one image per thread, those steps are timed
once per image, on each thread at once: their calls count the images, their operand types
show one image, and their totals add the threads' times (more than the time that passed).
"""
import contextlib

from . import _core


class Profile:
    def __init__(self):
        self.ops = {}      # graph-level op -> (seconds, calls)
        self.kernels = {}  # kernel op -> (seconds, calls)
        self.steps = {}    # "node: kernel (operand types) -> result type" -> (seconds, calls)

    def table(self, top=20, kernels=False, steps=False):
        """The `top` entries by time: per graph-level op, per kernel, or per compiled step (one
        layer of a network: which of its convolutions takes the time)."""
        data = self.steps if steps else self.kernels if kernels else self.ops
        total = sum(s for s, _ in data.values()) or 1.0
        rows = sorted(data.items(), key=lambda kv: -kv[1][0])[:top]
        width = max([32] + [len(k) + 2 for k, _ in rows]) if steps else 32
        lines = [f"{'step' if steps else 'kernel' if kernels else 'op':<{width}}{'calls':>8}{'total ms':>12}{'share':>8}"]
        for op, (s, n) in rows:
            lines.append(f"{op:<{width}}{n:>8}{s * 1e3:>12.3f}{s / total * 100:>7.1f}%")
        return "\n".join(lines)


@contextlib.contextmanager
def profile():
    """Times every kernel run inside the block (CPU backend)."""
    prof = Profile()
    _core.take_profile()
    _core.set_profiling(True)
    try:
        yield prof
    finally:
        _core.set_profiling(False)
        graph_ops, kernels, steps = _core.take_profile()
        prof.ops, prof.kernels, prof.steps = dict(graph_ops), dict(kernels), dict(steps)
