"""``--device``: the one place a device name is parsed and checked against this machine.

Device-agnostic: any torch device type (``cpu``, ``cuda[:N]``, ``mps``, ``xpu[:N]``, ...) is parsed
by torch and checked through its backend module (``torch.<type>.is_available()`` and
``device_count()``), so a device this machine lacks is one line, exit 2, before anything starts.

>>> resolve_device("cpu")
device(type='cpu')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odsd.errors import ConfigError

if TYPE_CHECKING:
    import torch


class DeviceError(ConfigError):
    """A ``--device`` that is not a device name, or names one this machine does not have."""


def resolve_device(name: str) -> torch.device:
    """The torch device ``name`` names, checked to exist here (:class:`DeviceError` otherwise)."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise DeviceError(f"--device {name!r} is not a device: {str(exc).splitlines()[0]}") from None
    if device.type in ("cpu", "meta"):
        return device
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if is_available is None:
        raise DeviceError(f"--device {name!r}: torch has no {device.type} backend to check it with")
    if not is_available():
        raise DeviceError(f"--device {name!r}: no {device.type} device is available on this machine")
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        raise DeviceError(f"--device {name!r}: this machine has {count()} {device.type} device(s)")
    return device


def check_device(name: str) -> str:
    """``name`` unchanged, once :func:`resolve_device` accepts it (for validators and CLI callbacks)."""
    resolve_device(name)
    return name
