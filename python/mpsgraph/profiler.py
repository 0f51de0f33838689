"""Per-op profiling: time spent in each op kind across runs.

    with mg.profiler.profile() as prof:
        exe.run(inputs)
    print(prof.table())
"""
import contextlib

from . import _core


class Profile:
    def __init__(self):
        self.ops = {}  # op -> (seconds, calls)

    def table(self, top=20):
        total = sum(s for s, _ in self.ops.values()) or 1.0
        rows = sorted(self.ops.items(), key=lambda kv: -kv[1][0])[:top]
        lines = [f"{'op':<32}{'calls':>8}{'total ms':>12}{'share':>8}"]
        for op, (s, n) in rows:
            lines.append(f"{op:<32}{n:>8}{s * 1e3:>12.3f}{s / total * 100:>7.1f}%")
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
        prof.ops = dict(_core.take_profile())
