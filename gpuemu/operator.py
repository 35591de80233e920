"""The GPU Operator's part in MIG, as a controller over the API (port of simcluster/gpuoperator.py).

Sources, NVIDIA/gpu-operator v26.7.0:

- ``controllers/nodelabeling_controller.go`` ``updateGPUStateLabels`` with
  ``controllers/state_manager.go`` (``gpuStateLabels``, ``addGPUStateLabels``,
  ``removeGPUStateLabels``, ``removeAllGPUStateLabels``, ``hasMIGCapableGPU``,
  ``hasOperandsDisabled``): a GPU node (``nvidia.com/gpu.present=true``) gets every
  container-workload ``nvidia.com/gpu.deploy.*`` label that is missing or empty set to
  ``"true"`` (a present value, e.g. mig-manager's ``paused-for-mig-change``, is honoured),
  ``nvidia.com/gpu.deploy.mig-manager=true`` when MIG-capable, and the other workload
  configs' deploy labels removed; ``nvidia.com/gpu.deploy.operands=false`` or a node that
  is not a GPU node loses them all. While mig-manager is enabled and
  ``spec.migManager.config.default`` is ``all-disabled`` (the CRD default), a MIG-capable
  node without ``nvidia.com/mig.config`` is labelled ``all-disabled``. Nothing is labelled
  while no ClusterPolicy exists. Not ported: ``reconcileCommonGPULabel`` (it derives
  ``gpu.present`` from NFD's PCI labels, which fleet nodes do not carry; GFD's
  ``gpu.present`` stands for it), sandbox workloads and the DRA (GPUCluster) stack.
- ``controllers/object_controls.go`` ``createConfigMap``: ``default-mig-parted-config`` is
  created from the operator's copy and any edit or deletion is reverted; not while a custom
  ConfigMap is named (``spec.migManager.config.name``); deleted while mig-manager is
  disabled. ``TransformMIGManager``: a change of the settings the mig-manager pods are
  built from (enabled, config name, ``WITH_REBOOT``) restarts them.
- The ClusterPolicy in force is the oldest one (``controllers/clusterpolicy_controller.go``
  ignores the others); its mig-manager settings are read by
  :func:`simcluster.clusterpolicy.mig_settings`.

The mounted file: a ConfigMap volume is refreshed by the kubelet's sync, so mig-manager reads
a ConfigMap as it was ``config_mount_delay_s`` ago. Each version the informer sees is kept
with the (monotonic) time it arrived; objects of the first list count as old enough.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from devstack.kubeapi import KubeError
from gpuemu import operands
from gpuemu.watch import Event, Retry
from simcluster.clusterpolicy import mig_settings
from simcluster.gpuoperator import DEFAULT_CONFIGMAP, stock_config_text

if TYPE_CHECKING:
    from gpuemu.emulator import Emulator

log = logging.getLogger("gpuemu.operator")
MIG_CONFIG = "nvidia.com/mig.config"
GPU_PRESENT = "nvidia.com/gpu.present"
MIG_CAPABLE = "nvidia.com/mig.capable"
PRODUCT = "nvidia.com/gpu.product"
OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
MIG_MANAGER_LABEL = "nvidia.com/gpu.deploy.mig-manager"
_DEPLOY = "nvidia.com/gpu.deploy."
# state_manager.go gpuStateLabels
CONTAINER_STATE_LABELS = {
    _DEPLOY + op: "true"
    for op in (
        "driver",
        "gpu-feature-discovery",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "node-status-exporter",
        "operator-validator",
        "client",
    )
}
_SANDBOX_STATE_LABELS = {
    _DEPLOY + op
    for op in (
        "sandbox-device-plugin",
        "sandbox-validator",
        "vfio-manager",
        "kata-manager",
        "cc-manager",
        "vgpu-manager",
        "vgpu-device-manager",
        "kata-sandbox-device-plugin",
    )
}
ALL_STATE_LABELS = set(CONTAINER_STATE_LABELS) | _SANDBOX_STATE_LABELS | {MIG_MANAGER_LABEL}
_HISTORY = 64  # ConfigMap versions kept per name


def has_mig_capable_gpu(labels: dict[str, str]) -> bool:
    """state_manager.go ``hasMIGCapableGPU`` (without the vGPU host driver case)."""
    if MIG_CAPABLE in labels:
        return labels[MIG_CAPABLE] == "true"
    product = labels.get(PRODUCT, "").lower()
    return any(p in product for p in ("h100", "a100", "a30"))


def desired_labels(labels: dict[str, str], settings: dict[str, Any] | None) -> dict[str, str]:
    """The node's labels after the operator's node-labelling pass (``settings``: the
    ClusterPolicy's mig-manager settings)."""
    out = dict(labels)
    if out.get(GPU_PRESENT) != "true" or out.get(OPERANDS_LABEL) == "false":
        for key in ALL_STATE_LABELS:  # removeAllGPUStateLabels
            out.pop(key, None)
        return out
    for key in list(out):  # removeGPUStateLabels (mig-manager's label is left alone)
        if key in ALL_STATE_LABELS - set(CONTAINER_STATE_LABELS) - {MIG_MANAGER_LABEL}:
            del out[key]
    for key, value in CONTAINER_STATE_LABELS.items():  # addGPUStateLabels
        if not out.get(key):
            out[key] = value
    capable = has_mig_capable_gpu(out)
    if capable and MIG_MANAGER_LABEL not in out:
        out[MIG_MANAGER_LABEL] = "true"
    if (
        settings is not None
        and settings["enabled"]
        and capable
        and not out.get(MIG_CONFIG)
        and settings["default"] == "all-disabled"
    ):
        out[MIG_CONFIG] = "all-disabled"
    return out


class Operator:
    """Node labels, the default ConfigMap, and the history mig-manager's volume lags behind."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.api = emu.api
        self.namespace = emu.options.namespace
        self._lock = threading.Lock()
        # ConfigMap name -> [(monotonic time seen, config.yaml or None)]
        self._versions: dict[str, list[tuple[float, str | None]]] = {}
        self._settings_key: tuple[Any, ...] | None = None

    # --------------------------------------------------------------- reading
    def policy(self) -> dict[str, Any] | None:
        """The ClusterPolicy in force: the oldest one."""
        objs = self.emu.policies.items()
        if not objs:
            return None
        return min(
            objs,
            key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"]),
        )

    def installed(self) -> bool:
        return self.policy() is not None

    def settings(self) -> dict[str, Any]:
        """mig-manager's settings (``enabled`` False without a ClusterPolicy)."""
        pol = self.policy()
        if pol is None:
            return {**mig_settings(None), "enabled": False}
        return mig_settings(pol)

    def mounted_text(self, name: str, since: float | None = None) -> tuple[bool, str | None]:
        """``(exists, config.yaml)`` of ConfigMap ``name`` as a pod's volume shows it now: the
        version seen at least ``config_mount_delay_s`` ago, or the one the pod mounted when it
        started at ``since`` if newer. A deleted ConfigMap leaves its last content."""
        cutoff = time.monotonic() - self.emu.options.config_mount_delay_s
        if since is not None:
            cutoff = max(cutoff, since)
        with self._lock:
            seen = [v for t, v in self._versions.get(name, ()) if t <= cutoff]
        if not seen:
            return False, None
        return True, seen[-1]

    def configmap_exists(self, name: str) -> bool:
        return self.emu.configmaps.get(name, self.namespace) is not None

    def configmap_text(self, name: str) -> str | None:
        cm = self.emu.configmaps.get(name, self.namespace)
        return None if cm is None else (cm.get("data") or {}).get("config.yaml")

    # ---------------------------------------------------------------- events
    def on_node(self, ev: Event) -> None:
        if ev.new is None:
            return
        name = ev.new["metadata"]["name"]
        labels = ev.new["metadata"].get("labels") or {}
        if desired_labels(labels, self._settings_or_none()) != labels:
            self.emu.queue.add(("node-labels", name), lambda: self.label_node(name), 0.05)

    def on_configmap(self, ev: Event) -> None:
        name = ev.obj["metadata"]["name"]
        if ev.new is not None:
            text = (ev.new.get("data") or {}).get("config.yaml")
            when = float("-inf") if ev.initial else time.monotonic()
            with self._lock:
                hist = self._versions.setdefault(name, [])
                hist.append((when, text))
                del hist[:-_HISTORY]
        if name == DEFAULT_CONFIGMAP and not ev.initial:
            self._queue()
        if not ev.initial:
            self.emu.mig.volume_changed()

    def on_policy(self, ev: Event) -> None:
        self._queue()
        if not ev.initial:  # the default label may now apply to nodes it did not before
            for node in self.emu.nodes.items():
                self.on_node(Event("MODIFIED", node, node))

    def _settings_or_none(self) -> dict[str, Any] | None:
        pol = self.policy()
        return None if pol is None else mig_settings(pol)

    def _queue(self) -> None:
        self.emu.queue.add(("gpu-operator",), self.reconcile, 0.05)

    # ------------------------------------------------------------- reconcile
    def label_node(self, name: str) -> None:
        """One node's labelling pass (merge patch of the differences, as the operator's
        ``client.MergeFrom`` patch)."""
        pol = self.policy()
        node = self.emu.nodes.get(name)
        if pol is None or node is None:
            return
        labels = node["metadata"].get("labels") or {}
        want = desired_labels(labels, mig_settings(pol))
        patch: dict[str, str | None] = {k: v for k, v in want.items() if labels.get(k) != v}
        patch.update({k: None for k in labels if k not in want})
        if not patch:
            return
        log.info("node %s: labels %s", name, patch)
        try:
            self.api.patch("nodes", name, {"metadata": {"labels": patch}})
        except KubeError as exc:
            if exc.status != 404:
                raise

    def reconcile(self) -> None:
        """createConfigMap, and a restart of the mig-manager pods when their settings change."""
        settings = self.settings()
        key = (settings["enabled"], settings["config_name"], settings["with_reboot"])
        if self._settings_key is not None and key != self._settings_key:
            log.info(
                "mig-manager settings changed %s -> %s: restarting it", self._settings_key, key
            )
            self.emu.mig.restart_all()
        self._settings_key = key
        pol = self.policy()
        current = self.emu.configmaps.get(DEFAULT_CONFIGMAP, self.namespace)
        if pol is None or not settings["enabled"]:
            if current is not None:
                log.info("deleting %s (mig-manager disabled)", DEFAULT_CONFIGMAP)
                self.api.delete("configmaps", DEFAULT_CONFIGMAP, self.namespace)
            return
        if settings["config_name"]:
            return  # "Not creating resource, custom ConfigMap provided"
        want = operands.default_configmap(self.namespace, pol)
        if current is None:
            log.info("creating %s", DEFAULT_CONFIGMAP)
            try:
                self.api.create("configmaps", want, self.namespace)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                raise Retry("created meanwhile; the cache is behind") from exc
            return
        if current.get("data") == want["data"] and not current.get("binaryData"):
            return
        log.info("reverting an edit of %s", DEFAULT_CONFIGMAP)
        body = copy.deepcopy(current)
        body["data"] = {"config.yaml": stock_config_text()}
        body.pop("binaryData", None)
        path = self.api.resource("configmaps").path(self.namespace, DEFAULT_CONFIGMAP)
        self.api.request("PUT", path, body)  # a 409 (stale cache) is retried by the queue
