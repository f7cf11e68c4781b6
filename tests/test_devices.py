"""``resolve_device``: one place parses ``--device`` and checks it against this machine, for any torch backend."""

from __future__ import annotations

import pytest
import torch

from odsd.devices import DeviceError, resolve_device


def test_cpu_is_always_there() -> None:
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["cuda:abc", "gpu", "", "cuda:-1"])
def test_a_name_that_is_not_a_device_is_exit_2(name: str) -> None:
    with pytest.raises(DeviceError) as err:
        resolve_device(name)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)


@pytest.mark.parametrize("backend", ["cuda", "mps", "xpu"])
def test_an_unavailable_backend_is_exit_2_naming_it(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(getattr(torch, backend), "is_available", lambda: False)
    with pytest.raises(DeviceError, match=f"no {backend} device is available"):
        resolve_device(backend)


@pytest.mark.parametrize("backend", ["cuda", "xpu"])
def test_an_index_beyond_the_machines_devices_is_exit_2(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = getattr(torch, backend)
    monkeypatch.setattr(module, "is_available", lambda: True)
    monkeypatch.setattr(module, "device_count", lambda: 2)
    assert resolve_device(f"{backend}:1") == torch.device(backend, 1)
    with pytest.raises(DeviceError, match="has 2"):
        resolve_device(f"{backend}:2")
