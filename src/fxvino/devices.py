"""The OpenVINO Core and device checks.

One ``ov.Core`` per process: it only caches plugins, and fxvino never calls
``Core.set_property`` on it, so sharing it leaks no state between compiled models.
"""

from __future__ import annotations

import functools

import openvino as ov

VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")


@functools.cache
def core() -> ov.Core:
    return ov.Core()


def available_devices() -> list[str]:
    return list(core().available_devices)


def check_device(device: str) -> str:
    """Return ``device`` if OpenVINO can run on it, else raise naming the devices it has.

    Virtual devices (``AUTO:GPU,CPU``, ``HETERO:...``) are checked by the devices they list.
    """
    have = available_devices()
    name = device.strip()
    if not name:
        raise ValueError(f"option 'device' is empty; available devices: {', '.join(have)}")
    head, _, rest = name.partition(":")
    virtual = head.upper() in VIRTUAL_DEVICES
    wanted = [d.strip() for d in rest.split(",") if d.strip()] if virtual else [name]
    for d in wanted:
        if d not in have and d.split(".")[0] not in have:
            raise ValueError(
                f"option 'device' got {device!r}: OpenVINO has no device {d!r}; "
                f"available devices: {', '.join(have + list(VIRTUAL_DEVICES))}"
            )
    return name


@functools.cache
def supported_properties(device: str) -> frozenset[str]:
    """Properties the device accepts; used to drop mode defaults a device does not know."""
    try:
        return frozenset(str(p) for p in core().get_property(device.split(":")[0], "SUPPORTED_PROPERTIES"))
    except Exception:  # noqa: BLE001 - virtual devices may not answer; then pass everything
        return frozenset()
