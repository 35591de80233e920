"""Emulation of NVIDIA mig-manager's label protocol (GPU-FACTS.md section 3).

When ``nvidia.com/mig.config`` changes on a MIG-capable node the emulator, like the real
one: sets ``mig.config.state=pending``, pauses the GPU operands
(``nvidia.com/gpu.deploy.*=paused-for-mig-change``), applies the layout (new
``nvidia.com/mig-<profile>`` capacity and GFD labels), restores the operands and sets
``success``, or ``failed`` for an unknown config or while GPU pods still run on the node
(mig-manager never evicts workloads). Fault ``mig_stuck`` leaves the state ``pending``
forever, which is a known failure mode of the real component; ``mig_fail`` makes the next
reconfiguration end ``failed`` (as a mig-parted error would); ``mig_reboot`` passes through
state ``rebooting`` for one step before applying (GPUs that need a node reboot).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

import yaml

from simcluster.errors import ApiError
from simcluster.fleet import UNHEALTHY_ANNOTATION, gpu_node_state
from simcluster.gpu import PRODUCTS, is_mig_label
from simcluster.patch import MERGE
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

log = logging.getLogger("simcluster.mig")
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
PAUSED_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
CONFIGMAP_NAME = "default-mig-parted-config"


class MigManager:
    """Watches node writes and reconfigures MIG in a background worker."""

    def __init__(self, cluster: SimCluster, step_s: float = 0.2) -> None:
        self.cluster = cluster
        self.step_s = step_s
        self.applied: dict[str, str] = {}
        self.physical: dict[str, dict[str, Any]] = {}
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()

    def load(self, nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            self._remember(node)

    def _remember(self, node: dict[str, Any]) -> None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        name = node["metadata"]["name"]
        if labels.get("nvidia.com/mig.capable") != "true" or name in self.physical:
            return
        prod = labels.get("nvidia.com/gpu.product", "")
        base = next((p for p in sorted(PRODUCTS, key=len, reverse=True) if prod.startswith(p)), "")
        if not base:
            return
        self.physical[name] = {
            "product": base,
            "count": int(labels.get("nvidia.com/gpu.count", "0") or 0),
            "driver": labels.get("nvidia.com/cuda.driver-version.full", "550.107.02"),
            "cudaRuntime": labels.get("nvidia.com/cuda.runtime-version.full", "12.4"),
            "replicas": int(labels.get("nvidia.com/gpu.replicas", "1") or 1),
            "sharing": labels.get("nvidia.com/gpu.sharing-strategy", "none"),
        }
        self.applied[name] = labels.get(CONFIG_LABEL, "all-disabled")

    def on_node_write(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """Called under the store lock after every node write."""
        self._remember(new)
        name = new["metadata"]["name"]
        if name not in self.physical:
            return
        before = ((old or {}).get("metadata") or {}).get("labels") or {}
        after = new["metadata"].get("labels") or {}
        if after.get(CONFIG_LABEL) and after.get(CONFIG_LABEL) != before.get(CONFIG_LABEL):
            self._ensure_worker()
            self._queue.put((name, after[CONFIG_LABEL]))

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="sim-mig-manager", daemon=True)
            self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)

    def _run(self) -> None:
        while not self._stop.is_set():
            job = self._queue.get()
            if job is None:
                return
            try:
                self._reconfigure(*job)
            except Exception:
                log.exception("mig-manager emulation failed for %s", job[0])

    # ------------------------------------------------------------------ steps
    def _labels(self, name: str, labels: dict[str, str | None]) -> None:
        body = json.dumps({"metadata": {"labels": labels}}).encode()
        self.cluster.op_patch(RT["nodes"], "", name, "", body, MERGE, {}, "nvidia-mig-manager")

    def _current_config(self, name: str) -> str | None:
        try:
            node = self.cluster.get("nodes", name)
        except ApiError:
            return None
        return node["metadata"].get("labels", {}).get(CONFIG_LABEL)

    def _sleep(self) -> bool:
        return not self._stop.wait(self.step_s)

    def _reconfigure(self, name: str, config: str) -> None:
        if self._current_config(name) != config:
            return  # superseded by a later label change
        if self.applied.get(name) == config:
            self._labels(name, {STATE_LABEL: "success"})
            return
        self._labels(name, {STATE_LABEL: "pending"})
        if self.cluster.faults.config.mig_stuck:
            return
        if not self._sleep():
            return
        self._labels(name, {f"nvidia.com/gpu.deploy.{op}": PAUSED for op in PAUSED_OPERANDS})
        if not self._sleep():
            return
        if self.cluster.faults.config.mig_reboot:
            self._labels(name, {STATE_LABEL: "rebooting"})
            if not self._sleep():
                return
        if self.cluster.faults.consume("mig_fail"):
            error: str | None = "simcluster: injected mig-parted failure (fault mig_fail)"
        else:
            error = self._apply(name, config)
        restore: dict[str, str | None] = {
            f"nvidia.com/gpu.deploy.{op}": "true" for op in PAUSED_OPERANDS
        }
        restore[STATE_LABEL] = "failed" if error else "success"
        if error:
            log.info("mig-manager: %s -> %s failed: %s", name, config, error)
        else:
            self.applied[name] = config
        self._labels(name, restore)

    def _custom_configs(self) -> dict[str, Any]:
        st = self.cluster.store
        with st.lock:
            for rec in st.objects["configmaps"].values():
                if rec.name == CONFIGMAP_NAME:
                    data = rec.obj().get("data") or {}
                    try:
                        doc = yaml.safe_load(data.get("config.yaml", "")) or {}
                    except yaml.YAMLError:
                        return {}
                    return doc.get("mig-configs") or {}
        return {}

    def _gpu_pods_on(self, name: str) -> int:
        st = self.cluster.store
        n = 0
        with st.lock:
            for rec in st.objects["pods"].values():
                if rec.fields.get("spec.nodeName") != name or rec.info is None:
                    continue
                if rec.info.terminal:
                    continue
                if any(
                    k.startswith(("requests.nvidia.com/gpu", "requests.nvidia.com/mig-"))
                    for k in rec.info.usage
                ):
                    n += 1
        return n

    def _apply(self, name: str, config: str) -> str | None:
        phys = self.physical[name]
        busy = self._gpu_pods_on(name)
        if busy:
            return f"{busy} GPU pod(s) still running on the node"
        try:
            node = self.cluster.get("nodes", name)
        except ApiError:
            return "node deleted"
        labels = node["metadata"].get("labels") or {}
        unhealthy = int((node["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION, 0))
        gpu = {
            "product": phys["product"],
            "count": phys["count"],
            "driver": phys["driver"],
            "cudaRuntime": phys["cudaRuntime"],
            "unhealthy": unhealthy,
            "sharing": {"strategy": phys["sharing"], "replicas": phys["replicas"]},
            "mig": {"strategy": labels.get("nvidia.com/mig.strategy", "mixed"), "config": config},
        }
        try:
            caps, alloc, new_labels = gpu_node_state(gpu, self._custom_configs())
        except (ApiError, ValueError) as exc:
            return str(exc)
        status = node.get("status") or {}
        cap_patch: dict[str, Any] = {}
        alloc_patch: dict[str, Any] = {}
        for k in status.get("capacity") or {}:
            if k.startswith(("nvidia.com/gpu", "nvidia.com/mig-")):
                cap_patch[k] = None
        for k in status.get("allocatable") or {}:
            if k.startswith(("nvidia.com/gpu", "nvidia.com/mig-")):
                alloc_patch[k] = None
        cap_patch.update({k: str(v) for k, v in caps.items()})
        alloc_patch.update({k: str(v) for k, v in alloc.items()})
        body = json.dumps({"status": {"capacity": cap_patch, "allocatable": alloc_patch}}).encode()
        self.cluster.op_patch(RT["nodes"], "", name, "status", body, MERGE, {}, "kubelet")
        label_patch: dict[str, str | None] = {k: None for k in labels if is_mig_label(k)}
        for k, v in new_labels.items():
            if k.startswith("nvidia.com/gpu.deploy.") or k in (CONFIG_LABEL, STATE_LABEL):
                continue
            label_patch[k] = v
        self._labels(name, label_patch)
        return None
