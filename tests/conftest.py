"""Shared pytest setup: the tests import the installed mpsgraph package (build it with
pip install first); the header says which one and which devices it sees."""
import os
import sys

# Tests that name no device test the CPU, also on a machine with a GPU (where the default
# device would be the GPU): the device-parametrised tests (the conformance table, test_cuda*)
# cover the GPU. Set MPSGRAPH_DEVICE to run the rest on another device.
os.environ.setdefault("MPSGRAPH_DEVICE", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # conformance.py and gradcheck.py are imported by name
    sys.path.insert(0, HERE)


def pytest_report_header(config):
    try:
        import mpsgraph as mg
        return [f"mpsgraph {mg.__version__} from {os.path.dirname(mg.__file__)}; "
                f"devices: {', '.join(str(d) for d in mg.devices())}"]
    except Exception as e:  # pragma: no cover - shows why every test will fail
        return [f"mpsgraph cannot be imported: {e!r}"]


import contextlib  # noqa: E402


@contextlib.contextmanager
def cpu_decompositions():
    """Graphs compiled inside run every composite on the CPU as its decomposition, even where the
    CPU has a kernel for it: the decomposition is the reference a composite kernel is tested against."""
    from mpsgraph import _core
    _core._set_cpu_composite_kernels(False)
    try:
        yield
    finally:
        _core._set_cpu_composite_kernels(True)
