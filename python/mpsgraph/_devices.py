"""Devices: mg.cpu(), mg.metal(), mg.cuda(), mg.default_device(), mg.devices().

MPSGRAPH_DEVICE (e.g. "cpu") overrides the default device: set it to force the CPU on a
machine with a GPU."""
import os

from . import _core

_KINDS = ("cpu", "metal", "cuda")


class Device:
    """A compute device, e.g. Device("cpu"), Device("metal"), Device("cuda:0").

    Constructing names a device; using one that is not present raises GraphRuntimeError
    saying why (for example, a build without the Metal backend). The cuda backend drives one
    GPU per process, cuda:0 (the first visible one; CUDA_VISIBLE_DEVICES selects it)."""

    __slots__ = ("kind", "index")

    def __init__(self, kind="cpu", index=None):
        if isinstance(kind, Device):
            kind, index = kind.kind, kind.index
        kind = str(kind)
        if ":" in kind and index is None:
            kind, _, idx = kind.partition(":")
            try:
                index = int(idx)
            except ValueError:
                raise _core.GraphValueError(f"[device] bad device index in '{kind}:{idx}'") from None
        kind = {"mps": "metal", "gpu": "cuda"}.get(kind, kind)
        if kind not in _KINDS:
            raise _core.GraphValueError(f"[device] unknown device '{kind}'; known kinds are cpu, metal and cuda")
        self.kind = kind
        self.index = 0 if index is None else int(index)
        if kind == "cpu" and self.index != 0:
            raise _core.GraphValueError(f"[device] there is only one cpu device, not 'cpu:{self.index}'")

    def __str__(self):
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    def __repr__(self):
        return f"Device('{self}')"

    def __eq__(self, other):
        try:
            other = Device(other)
        except Exception:
            return NotImplemented
        return (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self):
        return hash((self.kind, self.index))

    @property
    def available(self):
        return bool(_core.device_status(str(self))[0])

    @property
    def unavailable_reason(self):
        """Why this device cannot be used here ('' when it can)."""
        return _core.device_status(str(self))[1]

    @property
    def description(self):
        """The hardware behind the device, e.g. 'NVIDIA H200 (sm_90, 132 SMs)' ('' if unknown)."""
        return _core.device_status(str(self))[2]


def _point_at_pip_cuda_libraries():
    """The cuda backend opens NVRTC and cuBLASLt with dlopen when it first needs them; where
    they come from NVIDIA's pip wheels (as PyTorch installs them) rather than a system CUDA,
    tell it where (MPSGRAPH_NVRTC / MPSGRAPH_CUBLASLT / MPSGRAPH_CUDNN / MPSGRAPH_CUFFT, unless already set). Finds,
    never imports."""
    import importlib.util
    wanted = {"MPSGRAPH_NVRTC": "libnvrtc.so", "MPSGRAPH_CUBLASLT": "libcublasLt.so", "MPSGRAPH_CUDNN": "libcudnn.so",
              "MPSGRAPH_CUFFT": "libcufft.so"}
    wanted = {k: v for k, v in wanted.items() if not os.environ.get(k)}
    if not wanted:
        return
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        for sub in ("cu13/lib", "cuda_nvrtc/lib", "cublas/lib", "cudnn/lib", "cufft/lib", "cu12/lib"):
            d = os.path.join(root, sub)
            if not os.path.isdir(d):
                continue
            for f in sorted(os.listdir(d)):
                for var, stem in list(wanted.items()):
                    if f.startswith(stem + "."):
                        os.environ[var] = os.path.join(d, f)
                        del wanted[var]
            if not wanted:
                return


if os.name == "posix":
    _point_at_pip_cuda_libraries()


def cpu():
    return Device("cpu")


def metal(index=0):
    return Device("metal", index)


def cuda(index=0):
    return Device("cuda", index)


def devices():
    """Devices usable in this process, the default first."""
    return [Device(d) for d in _core.devices()]


def default_device():
    """Metal on Apple silicon, else CUDA where a GPU is present, else the CPU; the environment
    variable MPSGRAPH_DEVICE (e.g. "cpu") overrides it."""
    forced = os.environ.get("MPSGRAPH_DEVICE")
    if forced:
        return Device(forced)
    return Device(_core.default_device())


def resolve(device):
    d = default_device() if device is None else Device(device)
    _core.check_device(str(d))  # raises naming the device and why it is absent
    return str(d)
