"""The emulator's settings: the fleet's ``gpuOperator`` timings plus the pace of its own loops.

The three delays are the fleet keys the simulator reads (simcluster/fleet.py docstring,
docs/simcluster.md "GPU operator emulation"), here in real wall-clock seconds:

- ``configMountDelay``: the kubelet refreshes a ConfigMap volume on its periodic sync, so
  mig-manager reads its mounted ``config.yaml`` as it was about a minute ago (kubelet
  ``configMapAndSecretChangeDetectionStrategy``);
- ``devicePluginRestart``: after ``nvidia.com/mig.config.state=success`` the device plugin
  and GFD pods restart and publish the new resources and labels some seconds later;
- ``clientPauseTimeout``: NVIDIA/mig-parted ``pkg/mig/reconfigure/reconfigure.go``
  ``waitForPodsToBeDeleted`` waits up to 5 minutes for each GPU client to go.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from simcluster.fleet import Fleet, load_fleet

# simcluster/gpuoperator.py DEFAULTS: the real components' timings.
DEFAULT_NAMESPACE = "gpu-operator"
_FLEET_KEYS = {
    "config_mount_delay_s": ("configMountDelay", 60.0),
    "device_plugin_restart_s": ("devicePluginRestart", 5.0),
    "client_pause_timeout_s": ("clientPauseTimeout", 300.0),
}


@dataclass(frozen=True)
class Options:
    """What :class:`gpuemu.Emulator` needs besides the API connection."""

    namespace: str = DEFAULT_NAMESPACE  # the operator's namespace (operands, ConfigMaps)
    config_mount_delay_s: float = 60.0
    device_plugin_restart_s: float = 5.0
    client_pause_timeout_s: float = 300.0
    # Pace of each mig-manager step (simcluster's ``mig_step_s``): the time a real
    # mig-parted apply takes is not modelled, only that the steps are visible one by one.
    mig_step_s: float = 0.2
    # How often mig-manager lists the node's pods while it waits for the GPU clients to go
    # (reconfigure.go polls every second for the operands and every 5 s for the clients).
    poll_s: float = 1.0
    # Server-side timeout of each watch request; the informers re-watch after it.
    watch_timeout_s: int = 60
    # The fleet's ``dra`` key: NVIDIA's DRA driver publishes ResourceSlices (gpuemu/dra.py)
    # and the device plugin advertises nothing.
    dra: bool = False

    @classmethod
    def from_fleet(
        cls, fleet: Fleet | dict[str, Any] | str | Path | None = None, **overrides: Any
    ) -> Options:
        """Options from a fleet's ``gpuOperator`` key; keyword arguments win (None: ignored)."""
        dra = False
        if fleet is None:
            spec: dict[str, Any] = {}
        else:
            expanded = fleet if isinstance(fleet, Fleet) else load_fleet(fleet)
            spec = dict(expanded.gpu_operator or {})
            dra = expanded.dra
        values: dict[str, Any] = {
            "namespace": str(spec.get("namespace") or DEFAULT_NAMESPACE),
            "dra": dra,
        }
        for attr, (key, default) in _FLEET_KEYS.items():
            values[attr] = float(spec.get(key, default))
        known = {f.name for f in fields(cls)}
        for key, value in overrides.items():
            if key not in known:
                raise TypeError(f"unknown option {key!r}; known: {', '.join(sorted(known))}")
            if value is not None:
                values[key] = value
        return cls(**values)
