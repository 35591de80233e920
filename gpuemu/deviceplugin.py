"""The NVIDIA device plugin and GPU Feature Discovery as they show on the Node object.

- After a MIG change: mig-manager restores ``nvidia.com/gpu.deploy.device-plugin`` and
  ``gpu-feature-discovery`` to ``"true"``, the DaemonSet controller starts their pods again
  and, some seconds later, the device plugin registers the new devices with the kubelet
  (NVIDIA/k8s-device-plugin ``internal/plugin/server.go`` ``Register``/``ListAndWatch``; the
  kubelet then writes ``status.capacity``/``allocatable`` for ``nvidia.com/gpu`` and, under
  the mixed strategy, ``nvidia.com/mig-<profile>``) and GFD relabels the node
  (``gpu-feature-discovery``: ``nvidia.com/gpu.product``, ``gpu.count``, the
  ``mig-<profile>.*`` labels). :meth:`DevicePlugin.restart` does both
  ``device_plugin_restart_s`` after ``success``: the status through ``nodes/status`` (as the
  kubelet), the labels with a merge patch (as GFD), computed by the simulator's
  :func:`simcluster.fleet.gpu_node_state` so a reconfigured node looks exactly like a freshly
  loaded one (port of simcluster/migmanager.py ``_publish``).
- Health: the device plugin reports a device that fails its health check as Unhealthy in
  ``ListAndWatch`` and the kubelet lowers ``allocatable`` (``pkg/kubelet/cm/devicemanager``
  ``GetCapacity``: capacity counts all devices, allocatable the healthy ones). Here the
  fleet's ``simcluster.io/unhealthy-gpus`` annotation (``UNHEALTHY_ANNOTATION``) is the
  number of failed GPUs: when it changes, ``allocatable["nvidia.com/gpu"]`` becomes
  ``capacity - unhealthy x replicas`` (the simulator's rule, fleet.py ``gpu_node_state``).
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from gpuemu.watch import Event
from simcluster.errors import ApiError
from simcluster.fleet import UNHEALTHY_ANNOTATION, gpu_node_state
from simcluster.gpu import is_mig_label

if TYPE_CHECKING:
    from gpuemu.emulator import Emulator

log = logging.getLogger("gpuemu.device-plugin")
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
GPU_KEYS = ("nvidia.com/gpu", "nvidia.com/mig-")


def unhealthy_of(node: dict[str, Any] | None) -> int:
    raw = ((node or {}).get("metadata") or {}).get("annotations", {}).get(UNHEALTHY_ANNOTATION)
    try:
        return max(0, int(raw or 0))
    except ValueError:
        return 0


class DevicePlugin:
    """Publishes a node's GPU resources and GFD labels after a restart or a health change."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.api = emu.api
        self._seq = itertools.count()

    # ---------------------------------------------------------------- events
    def on_node(self, ev: Event) -> None:
        if ev.new is None or ev.initial or self.emu.options.dra:
            return
        if ev.old is not None and unhealthy_of(ev.old) == unhealthy_of(ev.new):
            return
        name = ev.new["metadata"]["name"]
        self.emu.queue.add(("health", name), lambda: self.health(name), 0.0)

    def restart(self, name: str, config: str, configs: dict[str, Any]) -> None:
        """The pods restart after ``success``: publish ``device_plugin_restart_s`` later."""
        delay = self.emu.options.device_plugin_restart_s
        self.emu.queue.add(
            ("publish", name, next(self._seq)), lambda: self.publish(name, config, configs), delay
        )

    # -------------------------------------------------------------- writing
    def health(self, name: str) -> None:
        """allocatable = capacity - unhealthy devices (nvidia.com/gpu, time-slicing replicas)."""
        node = self.api.get_or_none("nodes", name)
        if node is None:
            return
        status = node.get("status") or {}
        cap = (status.get("capacity") or {}).get("nvidia.com/gpu")
        if cap is None:
            return
        replicas = int(
            (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.replicas", 1) or 1
        )
        want = str(max(0, int(cap) - unhealthy_of(node) * replicas))
        if (status.get("allocatable") or {}).get("nvidia.com/gpu") == want:
            return
        log.info("%s: allocatable nvidia.com/gpu %s (health)", name, want)
        body = {"status": {"allocatable": {"nvidia.com/gpu": want}}}
        self.api.patch("nodes", name, body, subresource="status")

    def publish(self, name: str, config: str, configs: dict[str, Any]) -> None:
        """New capacity/allocatable and MIG labels for ``config`` (port of ``_publish``)."""
        phys = self.emu.mig.physical.get(name)
        node = self.api.get_or_none("nodes", name)
        if phys is None or node is None:
            return
        labels = node["metadata"].get("labels") or {}
        strategy = self.emu.operator.settings()["strategy"]
        gpu = {
            "product": phys["product"],
            "count": phys["count"],
            "driver": phys["driver"],
            "cudaRuntime": phys["cudaRuntime"],
            "unhealthy": unhealthy_of(node),
            "sharing": {"strategy": phys["sharing"], "replicas": phys["replicas"]},
            "mig": {"strategy": labels.get("nvidia.com/mig.strategy", strategy), "config": config},
        }
        try:
            caps, alloc, new_labels = gpu_node_state(gpu, configs)
        except (ApiError, ValueError) as exc:
            log.info("%s: cannot publish %s: %s", name, config, exc)
            return
        status = node.get("status") or {}
        cap_patch: dict[str, Any] = {
            k: None for k in status.get("capacity") or {} if k.startswith(GPU_KEYS)
        }
        alloc_patch: dict[str, Any] = {
            k: None for k in status.get("allocatable") or {} if k.startswith(GPU_KEYS)
        }
        cap_patch.update({k: str(v) for k, v in caps.items()})
        alloc_patch.update({k: str(v) for k, v in alloc.items()})
        if self.emu.options.dra:  # no device plugin: the DRA driver republishes the devices
            self.emu.queue.add(("dra", name), lambda: self.emu.dra.publish(name), 0.0)
        else:
            log.info("%s: device plugin restarted with %s: %s", name, config, caps)
            self.api.patch(
                "nodes",
                name,
                {"status": {"capacity": cap_patch, "allocatable": alloc_patch}},
                subresource="status",
            )
        label_patch: dict[str, str | None] = {k: None for k in labels if is_mig_label(k)}
        for k, v in new_labels.items():
            if k.startswith("nvidia.com/gpu.deploy.") or k in (CONFIG_LABEL, STATE_LABEL):
                continue
            label_patch[k] = v
        self.api.patch("nodes", name, {"metadata": {"labels": label_patch}})
