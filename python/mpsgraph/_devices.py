"""Devices: mg.cpu(), mg.metal(), mg.cuda(), mg.default_device(), mg.devices()."""
from . import _core

_KINDS = ("cpu", "metal", "cuda")


class Device:
    """A compute device, e.g. Device("cpu"), Device("metal"), Device("cuda:0").

    Constructing names a device; using one that is not present raises GraphRuntimeError
    saying why (for example, a build without the Metal backend)."""

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
        return str(self) in _core.devices()


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
    """Metal on Apple silicon, else CUDA where a GPU is present, else the CPU."""
    return Device(_core.default_device())


def resolve(device):
    d = default_device() if device is None else Device(device)
    _core.check_device(str(d))  # raises naming the device and why it is absent
    return str(d)
