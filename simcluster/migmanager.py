"""Emulation of NVIDIA mig-manager, one agent per MIG-capable node (GPU-FACTS.md section 3).

Follows NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go`` and
``pkg/mig/reconfigure/reconfigure.go`` (file paths in docs/simcluster.md, "GPU operator
emulation"):

- ``SyncableMigConfig``: the agent reads ``nvidia.com/mig.config`` only when it CHANGED
  since its last read (``Get`` blocks while ``lastRead == current``); a value changed and
  changed back before the agent reads it is not seen, and after an error the agent waits for
  the next change: it never retries on its own. A (re)started mig-manager pod reads the
  current value once (``lastRead`` starts empty).
- ``Run()``: read the node's labels; the config must be in the mounted file (else state
  ``failed`` without ``pending``); already applied (same per-GPU layout): ``success``;
  ``pending``; the GPU clients' deploy labels to ``paused-for-mig-change`` (a ``"false"``
  stays ``"false"``; ``gpu.deploy.client`` only when present); wait, up to
  ``client_pause_timeout_s`` each, for the operand pods (``app=nvidia-device-plugin-daemonset``,
  ``app=gpu-feature-discovery``, ``app=nvidia-dcgm-exporter``, ``app=nvidia-dcgm``) on the
  node and for DaemonSet-owned pods whose nodeSelector has the key
  ``nvidia.com/gpu.deploy.client``: on timeout it stops WITHOUT a state (``pending``, paused);
  the MIG mode change (fault ``mig_reboot`` makes it fail: with ``WITH_REBOOT`` the state
  becomes ``rebooting``, the node reboots and mig-manager starts again, without it the
  apply fails); apply (fault ``mig_fail``, or GPU pods still running: ``failed``, which
  restores the client labels); clients back to ``"true"``; ``success``. The device plugin
  and GFD then restart: capacity, allocatable and the MIG GFD labels change
  ``device_plugin_restart_s`` (sim clock) after ``success``.
- Fault ``mig_stuck``: the run stops right after pausing the clients (``pending`` forever).

The mounted config file comes from :mod:`simcluster.gpuoperator` (custom ConfigMap with the
kubelet's lag, or configs generated from the hardware).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError
from simcluster.fleet import UNHEALTHY_ANNOTATION, gpu_node_state
from simcluster.gpu import PRODUCTS, is_mig_label, layout_from_entries, product
from simcluster.gpuoperator import generated_configs, parse_configs
from simcluster.patch import MERGE
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

log = logging.getLogger("simcluster.mig")
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
# reconfigure.go shutdownKubernetesGPUClients (gpu.deploy.client only when present)
PAUSED_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
# reconfigure.go waitForPodsToBeDeleted, in this order, then the nodeSelector-key wait
OPERAND_APPS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-dcgm",
)
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")
MANAGER = "nvidia-mig-manager"
NOT_RUNNING = object()  # the agent's pod cannot start (mig-manager disabled, volume missing)


class _Agent:
    """One node's mig-manager pod: SyncableMigConfig plus the pod's start time."""

    __slots__ = ("busy", "current", "last_read", "name", "started_at")

    def __init__(self, name: str, label: str) -> None:
        self.name = name
        self.current = label
        self.last_read = label  # the fleet's state: the startup run already happened
        self.busy = False
        self.started_at: float | None = float("-inf")


class MigManager:
    """The mig-manager DaemonSet: an agent per MIG-capable node, each run on its own thread."""

    def __init__(self, cluster: SimCluster, step_s: float = 0.2) -> None:
        self.cluster = cluster
        self.step_s = step_s
        self.applied: dict[str, Any] = {}  # node -> per-GPU layout now on the hardware
        self.physical: dict[str, dict[str, Any]] = {}
        self.rebooted: set[str] = set()  # nodes whose pending mode change a reboot applied
        self._agents: dict[str, _Agent] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: set[threading.Thread] = set()

    # ------------------------------------------------------------- loading
    def load(self, nodes: list[dict[str, Any]]) -> None:
        ctx = self._load_context()
        for node in nodes:
            self._remember(node, ctx)

    def _load_context(self) -> tuple[float | None, dict[str, Any]]:
        """(pod start time, custom configs) for nodes that appear: computed once per load."""
        op = self.cluster.gpu_operator
        cfg = op.settings().get("config_name") if op.installed else ""
        custom: dict[str, Any] = {}
        if cfg:
            rec = self.cluster.store.get("configmaps", op.namespace, cfg)
            if rec is not None:
                text = (rec.obj().get("data") or {}).get("config.yaml")
                custom = parse_configs(text) or {}
        return self._pod_start(float("-inf")), custom

    def _remember(
        self, node: dict[str, Any], ctx: tuple[float | None, dict[str, Any]] | None = None
    ) -> None:
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
        started, custom = ctx or self._load_context()
        config = labels.get(CONFIG_LABEL, "all-disabled")
        self._agents[name] = agent = _Agent(name, config)
        agent.started_at = started
        # the fleet built the node from the stock names or the operator's file: its layout
        configs = {**(generated_configs(product(base)) or {}), **custom}
        self.applied[name] = self._layout_of(name, config, configs)

    def _layout_of(self, name: str, config: str, configs: dict[str, Any]) -> Any:
        phys = self.physical[name]
        if config not in configs:
            return None
        try:
            return layout_from_entries(product(phys["product"]), configs[config], phys["count"])
        except ValueError:
            return None

    def _pod_start(self, now: float) -> float | None:
        """When a mig-manager pod starting now runs: ``now``, or None while its volume's
        custom ConfigMap does not exist (the pod stays ContainerCreating)."""
        op = self.cluster.gpu_operator
        name = op.settings()["config_name"]
        if name and not op.configmap_exists(name):
            return None
        return now

    # ------------------------------------------------------------ the file
    def config_file(self, name: str) -> Any:
        """``mig-configs`` of the file this node's mig-manager reads; None for a file it
        cannot parse; NOT_RUNNING when its pod cannot start."""
        op = self.cluster.gpu_operator
        settings = op.settings()
        if not settings["enabled"]:
            return NOT_RUNNING
        agent = self._agents[name]
        if agent.started_at is None:
            return NOT_RUNNING
        if settings["config_name"]:
            exists, text = op.mounted_text(settings["config_name"], agent.started_at)
            if not exists:
                return NOT_RUNNING  # ContainerCreating: the volume's ConfigMap is missing
            return parse_configs(text)
        prod = product(self.physical[name]["product"])
        generated = generated_configs(prod)
        if generated is not None:
            return generated
        _, text = op.mounted_text("default-mig-parted-config", agent.started_at)  # fallback
        return parse_configs(text)

    # ------------------------------------------------------------- events
    def on_node_write(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """The informer's UpdateFunc (under the store lock): Set() on a label change."""
        self._remember(new)
        name = new["metadata"]["name"]
        agent = self._agents.get(name)
        if agent is None:
            return
        before = ((old or {}).get("metadata") or {}).get("labels") or {}
        after = new["metadata"].get("labels") or {}
        value = after.get(CONFIG_LABEL, "")
        if value != before.get(CONFIG_LABEL, "") or old is None:
            with self._lock:
                agent.current = value
            if value:
                self._kick(agent)

    def restart_all(self) -> None:
        """The DaemonSet's pods restart (ClusterPolicy change): each reads its label again."""
        started = self._pod_start(self.cluster.clock.now())
        for agent in list(self._agents.values()):
            with self._lock:
                agent.last_read = ""
                agent.started_at = started
            self._kick(agent)

    def volume_changed(self) -> None:
        """A ConfigMap in the operator's namespace changed: pods waiting for their volume
        start now and read their label once."""
        started = self._pod_start(self.cluster.clock.now())
        if started is None:
            return
        for agent in list(self._agents.values()):
            with self._lock:
                waiting = agent.started_at is None
                if waiting:
                    agent.started_at = started
                    agent.last_read = ""
            if waiting:
                self._kick(agent)

    def _kick(self, agent: _Agent) -> None:
        with self._lock:
            if agent.busy or agent.current == agent.last_read or not agent.current:
                return
            agent.busy = True
        t = threading.Thread(target=self._loop, args=(agent,), name=f"mig-manager-{agent.name}")
        t.daemon = True
        self._threads.add(t)
        t.start()

    def _loop(self, agent: _Agent) -> None:
        try:
            while not self._stop.is_set():
                if self.config_file(agent.name) is NOT_RUNNING:
                    return  # labels still change; volume_changed()/restart_all() start it
                with self._lock:
                    if agent.current == agent.last_read or not agent.current:
                        agent.busy = False
                        return
                    agent.last_read = value = agent.current  # SyncableMigConfig.Get
                try:
                    self.run(agent.name, value)
                except Exception:
                    log.exception("mig-manager emulation failed for %s", agent.name)
        finally:
            with self._lock:
                agent.busy = False
            self._threads.discard(threading.current_thread())

    def stop(self) -> None:
        self._stop.set()

    def idle(self) -> bool:
        with self._lock:
            return not any(a.busy for a in self._agents.values())

    # ------------------------------------------------------------------ Run
    def _labels(self, name: str, labels: dict[str, str | None]) -> None:
        body = json.dumps({"metadata": {"labels": labels}}).encode()
        self.cluster.op_patch(RT["nodes"], "", name, "", body, MERGE, {}, MANAGER)

    def _sleep(self) -> bool:
        return not self._stop.wait(self.step_s)

    def run(self, name: str, config: str) -> None:
        """reconfigure.go ``Run()`` for one label value."""
        try:
            node = self.cluster.get("nodes", name)
        except ApiError:
            return
        labels = node["metadata"].get("labels") or {}
        clients = {
            f"nvidia.com/gpu.deploy.{op}": labels.get(f"nvidia.com/gpu.deploy.{op}", "")
            for op in PAUSED_OPERANDS
        }
        if labels.get(CLIENT_LABEL):
            clients[CLIENT_LABEL] = labels[CLIENT_LABEL]
        current_state = labels.get(STATE_LABEL, "")
        configs = self.config_file(name)
        if configs is NOT_RUNNING:
            return
        if not configs or config not in configs:  # validateMigConfig
            log.info("mig-manager %s: config %r not in the mounted file", name, config)
            self._set_state(name, clients, "failed")
            return
        phys = self.physical[name]
        prod = product(phys["product"])
        try:
            layout = layout_from_entries(prod, configs[config], phys["count"])
        except ValueError as exc:
            layout, layout_error = None, str(exc)
        else:
            layout_error = ""
        if layout is not None and layout == self.applied.get(name):  # isConfigAlreadyApplied
            self._set_state(name, clients, "success")
            return
        mode_change = _mode(layout, phys["count"]) != _mode(self.applied.get(name), phys["count"])
        if mode_change and current_state == "rebooting" and name not in self.rebooted:
            self._set_state(name, clients, "failed")  # "did not take effect after rebooting"
            return
        self._labels(name, {STATE_LABEL: "pending"})
        if not self._sleep():
            return
        self._labels(name, {k: (v if v == "false" else PAUSED) for k, v in clients.items()})
        if self.cluster.faults.config.mig_stuck:
            return
        if not self._wait_for_clients(name):
            log.info("mig-manager %s: GPU clients did not shut down; left pending", name)
            return
        self._delete_validators(name)
        if mode_change and name not in self.rebooted and self.cluster.faults.config.mig_reboot:
            if self.cluster.gpu_operator.settings()["with_reboot"]:
                self._labels(name, {STATE_LABEL: "rebooting"})
                self._reboot(name)
                return
            layout_error = "MIG mode change failed (a node reboot is needed; WITH_REBOOT off)"
        self.rebooted.discard(name)
        if self.cluster.faults.consume("mig_fail"):
            layout_error = "simcluster: injected mig-parted failure (fault mig_fail)"
        busy = self._gpu_pods_on(name)
        if not layout_error and busy:
            layout_error = f"{busy} GPU pod(s) still running on the node"
        if layout_error or layout is None:
            log.info("mig-manager %s -> %s failed: %s", name, config, layout_error)
            self._set_state(name, clients, "failed")
            return
        if not self._sleep():
            return
        self.applied[name] = layout
        self._set_state(name, clients, "success")
        delay = self.cluster.gpu_operator.device_plugin_restart_s
        self.cluster.timer.call_after(delay, lambda: self._publish(name, config, configs))

    def _set_state(self, name: str, clients: dict[str, str], state: str) -> None:
        """``setState``: the clients back to ``"true"`` (``"false"`` stays), then the state."""
        self._labels(name, {k: ("false" if v == "false" else "true") for k, v in clients.items()})
        self._labels(name, {STATE_LABEL: state})

    def _reboot(self, name: str) -> None:
        """The node reboots; the mode change takes effect and mig-manager starts again."""
        self._sleep()
        self.rebooted.add(name)
        agent = self._agents[name]
        with self._lock:
            agent.last_read = ""
            agent.started_at = self.cluster.clock.now()

    # ---------------------------------------------------------- the pods
    def _node_pods(self, name: str) -> list[dict[str, Any]]:
        st = self.cluster.store
        with st.lock:
            return [
                rec.obj()
                for rec in st.objects["pods"].values()
                if rec.fields.get("spec.nodeName") == name
            ]

    def _blocking(self, name: str) -> int:
        ns = self.cluster.gpu_operator.namespace
        n = 0
        for pod in self._node_pods(name):
            meta = pod.get("metadata") or {}
            if (
                meta.get("namespace") == ns
                and (meta.get("labels") or {}).get("app") in OPERAND_APPS
            ):
                n += 1
                continue
            owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            if owner.get("kind") == "DaemonSet" and CLIENT_LABEL in selector:
                n += 1
        return n

    def _wait_for_clients(self, name: str) -> bool:
        """waitForPodsToBeDeleted: True once gone, False after the timeout (sim clock)."""
        clock = self.cluster.clock
        deadline = clock.now() + self.cluster.gpu_operator.client_pause_timeout_s
        while self._blocking(name):
            if clock.now() >= deadline or not clock.sleep(0.1, self._stop):
                return False
        return True

    def _delete_validators(self, name: str) -> None:
        ns = self.cluster.gpu_operator.namespace
        for pod in self._node_pods(name):
            meta = pod.get("metadata") or {}
            if meta.get("namespace") == ns and (meta.get("labels") or {}).get("app") in (
                *VALIDATOR_APPS,
                "nvidia-operator-validator",
            ):
                with contextlib.suppress(ApiError):
                    self.cluster.op_delete(RT["pods"], ns, meta["name"], None, {})

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

    # ------------------------------------------- device plugin + GFD restart
    def _publish(self, name: str, config: str, configs: dict[str, Any]) -> None:
        """The restarted device plugin and GFD: new capacity/allocatable and MIG labels."""
        phys = self.physical[name]
        try:
            node = self.cluster.get("nodes", name)
        except ApiError:
            return
        labels = node["metadata"].get("labels") or {}
        unhealthy = int((node["metadata"].get("annotations") or {}).get(UNHEALTHY_ANNOTATION, 0))
        strategy = self.cluster.gpu_operator.settings()["strategy"]
        gpu = {
            "product": phys["product"],
            "count": phys["count"],
            "driver": phys["driver"],
            "cudaRuntime": phys["cudaRuntime"],
            "unhealthy": unhealthy,
            "sharing": {"strategy": phys["sharing"], "replicas": phys["replicas"]},
            "mig": {"strategy": labels.get("nvidia.com/mig.strategy", strategy), "config": config},
        }
        try:
            caps, alloc, new_labels = gpu_node_state(gpu, configs)
        except (ApiError, ValueError) as exc:
            log.info("mig-manager %s: cannot publish %s: %s", name, config, exc)
            return
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
        body = json.dumps({"metadata": {"labels": label_patch}}).encode()
        self.cluster.op_patch(RT["nodes"], "", name, "", body, MERGE, {}, "gpu-feature-discovery")


def _mode(layout: Any, count: int) -> tuple[bool, ...] | None:
    """Per-GPU MIG mode of a layout (None: unknown)."""
    if layout is None:
        return None
    return tuple(per_gpu is not None for per_gpu in layout)
