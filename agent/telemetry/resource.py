"""Who is speaking: the OpenTelemetry resource of the doctor, and what it knows of the NPUs.

The ``hw.*`` attributes follow the semantic conventions for hardware: per device they go on
the device's metric points and on the spans about that device; the resource lists every
known device (``hw.id`` and friends as arrays, in the same order).
"""

from __future__ import annotations

import os
import platform
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource

from ascend_doctor import __version__
from ascend_doctor.core.events import Sample
from ascend_doctor.core.store import Store
from ascend_doctor.metrics.devices import device_attributes

INSTANCE_KEY = "telemetry.instance_id"


def instance_id(store: Store) -> str:
    """A stable ``service.instance.id`` for this state dir (kept in the store's meta)."""
    value = store.meta(INSTANCE_KEY)
    if not isinstance(value, str):
        value = str(uuid.uuid4())
        store.set_meta(INSTANCE_KEY, value)
    return value


SERVER_KEY = "ascend_doctor.server.name"
"""Resource attribute naming the server, when the doctor runs several ([[servers]])."""


def build_resource(store: Store, devices: Sequence[Sample] = (), server: str = "") -> Resource:
    """The doctor's resource: service, host, process, and the NPUs the store has seen (or,
    on a first start, those of ``devices``: npu-smi samples taken for this); with several
    servers, which one (each has its own store, so its own ``service.instance.id``)."""
    attrs: dict[str, Any] = {
        "service.name": "ascend-doctor",
        "service.version": __version__,
        "service.instance.id": instance_id(store),
        "host.name": socket.gethostname(),
        "host.arch": _arch(platform.machine()),
        "process.pid": os.getpid(),
    }
    if server:
        attrs[SERVER_KEY] = server
    known = store.latest_samples("npu_smi") or {s.subject: s.values for s in devices}
    hw = [
        device_attributes(subject, sample)
        for subject, sample in sorted(known.items(), key=_device_order)
    ]
    if hw:
        for key in ("hw.id", "hw.type", "hw.model", "hw.driver_version"):
            attrs[key] = [d.get(key, "") for d in hw]
    return Resource.create(attrs)


def _device_order(item: tuple[str, Any]) -> tuple[int, str]:
    npu, _, chip = item[0].removeprefix("npu").partition(".")
    return (int(npu) if npu.isdigit() else 1 << 30, chip)


def _arch(machine: str) -> str:
    # semantic conventions' host.arch values
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine.lower())


__all__ = ["SERVER_KEY", "build_resource", "instance_id"]
