"""NVIDIA mig-manager, one agent per MIG-capable node, over the API.

A port of simcluster/migmanager.py (which works on the simulator's store) to watches and
requests.

Follows NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go`` and
``pkg/mig/reconfigure/reconfigure.go`` (GPU-FACTS.md section 3):

- ``SyncableMigConfig``: an agent reads ``nvidia.com/mig.config`` only when it CHANGED since
  its last read; a value changed and changed back before it reads is not seen; after an
  error it waits for the next change, never retrying on its own. A (re)started mig-manager
  pod reads the current value once. Nodes present when the emulator starts, or added later,
  count as already read (their fleet layout is what the GPUs hold), except one left
  ``pending`` (a run cut short by an emulator restart), which runs once more.
- ``Run()``: read the node's labels; the config must be in the mounted file (else state
  ``failed`` without ``pending``); the same per-GPU layout already applied: ``success``;
  ``pending``; the GPU clients' deploy labels (``device-plugin``, ``gpu-feature-discovery``,
  ``dcgm-exporter``, ``dcgm``, ``nvsm``, and ``client`` when present) to
  ``paused-for-mig-change`` (``"false"`` stays ``"false"``: ``maybeSetPaused``); wait, up to
  ``client_pause_timeout_s`` each (``waitForPodsToBeDeleted``), for the pods labelled
  ``app=nvidia-device-plugin-daemonset``, ``gpu-feature-discovery``, ``nvidia-dcgm-exporter``,
  ``nvidia-dcgm`` in the operator's namespace on the node, and (``waitForPodsWithNodeSelector``)
  for DaemonSet-controlled pods on the node whose nodeSelector has the key
  ``nvidia.com/gpu.deploy.client``; on timeout the run ends WITHOUT a state (``pending``,
  clients paused); the validator pods are deleted; the MIG mode change (fault ``mig_reboot``
  makes it fail: ``WITH_REBOOT`` then sets ``rebooting`` and the node "reboots", else the
  apply fails); the apply (``failed`` on fault ``mig_fail`` or while GPU pods run on the
  node: NVML refuses to change GPUs in use); clients back to ``"true"`` (``setState``,
  ``restartKubernetesGPUClients``); ``success``. The device plugin and GFD then restart:
  :mod:`gpuemu.deviceplugin` publishes the new layout ``device_plugin_restart_s`` later.
- Fault ``mig_stuck``: the run stops right after pausing the clients (``pending`` forever).

Faults are node annotations, ``gpuemu.gpu-portal.dev/fault: mig_fail[,mig_stuck,...]``, so
a test injects them through the API; ``mig_fail`` is consumed by the run it fails (removed
from the annotation), the others stay until removed.

Pods are read as mig-manager reads them: LIST with ``fieldSelector=spec.nodeName=<node>``,
polled every ``poll_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from gpuemu.watch import Event
from simcluster.gpu import PRODUCTS, layout_from_entries, product
from simcluster.gpuoperator import DEFAULT_CONFIGMAP, generated_configs, parse_configs

if TYPE_CHECKING:
    from gpuemu.emulator import Emulator
    from gpuemu.options import Options

log = logging.getLogger("gpuemu.mig-manager")
CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
PAUSED_OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
OPERAND_APPS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-dcgm-exporter",
    "nvidia-dcgm",
)
VALIDATOR_APPS = ("nvidia-cuda-validator", "nvidia-device-plugin-validator")
FAULT_ANNOTATION = "gpuemu.gpu-portal.dev/fault"
FAULTS = ("mig_fail", "mig_stuck", "mig_reboot")
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-")
NOT_RUNNING = object()  # the agent's pod cannot start (mig-manager disabled, volume missing)


class _Agent:
    """One node's mig-manager pod: SyncableMigConfig plus the pod's start time."""

    __slots__ = ("busy", "current", "last_read", "name", "started_at")

    def __init__(self, name: str, label: str) -> None:
        self.name = name
        self.current = label
        self.last_read = label
        self.busy = False
        self.started_at: float | None = float("-inf")


def faults_of(node: dict[str, Any] | None) -> set[str]:
    raw = ((node or {}).get("metadata") or {}).get("annotations", {}).get(FAULT_ANNOTATION, "")
    return {f.strip() for f in raw.split(",") if f.strip()}


def requests_gpus(pod: dict[str, Any]) -> bool:
    """Does any container ask for a GPU or a MIG device (requests or limits), or does the
    pod hold devices through DRA claims (on a DRA node the GPUs are claimed)?"""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            if any(k.startswith(GPU_RESOURCES) for k in res.get(part) or {}):
                return True
    return False


def _mode(layout: Any) -> tuple[bool, ...] | None:
    """Per-GPU MIG mode of a layout (None: unknown)."""
    if layout is None:
        return None
    return tuple(per_gpu is not None for per_gpu in layout)


class MigManager:
    """The mig-manager DaemonSet: an agent per MIG-capable node, each run on its own thread."""

    @property
    def options(self) -> Options:
        """The emulator's, read at each step (a test may change them while it runs)."""
        return self.emu.options

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.api = emu.api
        self.applied: dict[str, Any] = {}  # node -> per-GPU layout on the "hardware"
        self.physical: dict[str, dict[str, Any]] = {}
        self.rebooted: set[str] = set()
        self._agents: dict[str, _Agent] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # ------------------------------------------------------------- the nodes
    def _custom_configs(self) -> dict[str, Any]:
        name = self.emu.operator.settings().get("config_name")
        if not name:
            return {}
        return parse_configs(self.emu.operator.configmap_text(name)) or {}

    def _pod_start(self, now: float) -> float | None:
        """When a mig-manager pod starting now runs: ``now``, or None while its volume's
        custom ConfigMap does not exist (the pod stays ContainerCreating)."""
        op = self.emu.operator
        name = op.settings()["config_name"]
        if name and not op.configmap_exists(name):
            return None
        return now

    def remember(self, node: dict[str, Any]) -> None:
        """A MIG-capable node seen for the first time: its GPUs and their current layout."""
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
        config = labels.get(CONFIG_LABEL, "all-disabled")
        agent = _Agent(name, config)
        agent.started_at = self._pod_start(float("-inf"))
        configs = {**(generated_configs(product(base)) or {}), **self._custom_configs()}
        layout = self._layout_of(name, config, configs)
        if labels.get(STATE_LABEL) == "pending":
            # A run was under way when the emulator (the pod) went away: what the GPUs hold
            # is unknown, and the restarted pod reads its label once (main.go).
            agent.last_read, layout = "", None
        with self._lock:
            self._agents[name] = agent
            self.applied[name] = layout

    def _layout_of(self, name: str, config: str, configs: dict[str, Any]) -> Any:
        phys = self.physical[name]
        if config not in configs:
            return None
        try:
            return layout_from_entries(product(phys["product"]), configs[config], phys["count"])
        except ValueError:
            return None

    def config_file(self, name: str) -> Any:
        """``mig-configs`` of the file this node's mig-manager reads; None for a file it cannot
        parse; NOT_RUNNING when its pod cannot start (simcluster/gpuoperator.py documents
        which file: the custom ConfigMap, else configs generated from the hardware)."""
        op = self.emu.operator
        settings = op.settings()
        if not settings["enabled"]:
            return NOT_RUNNING
        agent = self._agents[name]
        if agent.started_at is None:
            return NOT_RUNNING
        if settings["config_name"]:
            exists, text = op.mounted_text(settings["config_name"], agent.started_at)
            if not exists:
                return NOT_RUNNING
            return parse_configs(text)
        generated = generated_configs(product(self.physical[name]["product"]))
        if generated is not None:
            return generated
        _, text = op.mounted_text(DEFAULT_CONFIGMAP, agent.started_at)
        return parse_configs(text)

    # --------------------------------------------------------------- events
    def on_node(self, ev: Event) -> None:
        """The informer's UpdateFunc: ``SyncableMigConfig.Set`` on a label change."""
        if ev.new is None:  # the node is gone, and its mig-manager pod with it
            name = ev.obj["metadata"]["name"]
            with self._lock:
                self._agents.pop(name, None)
                self.applied.pop(name, None)
            self.physical.pop(name, None)
            self.rebooted.discard(name)
            return
        self.remember(ev.new)
        name = ev.new["metadata"]["name"]
        agent = self._agents.get(name)
        if agent is None:
            return
        before = ((ev.old or {}).get("metadata") or {}).get("labels") or {}
        value = (ev.new["metadata"].get("labels") or {}).get(CONFIG_LABEL, "")
        if value != before.get(CONFIG_LABEL, "") or ev.old is None:
            with self._lock:
                agent.current = value
            if value:
                self._kick(agent)

    def restart_all(self) -> None:
        """The DaemonSet's pods restart (ClusterPolicy change): each reads its label again."""
        started = self._pod_start(time.monotonic())
        for agent in list(self._agents.values()):
            with self._lock:
                agent.last_read = ""
                agent.started_at = started
            self._kick(agent)

    def volume_changed(self) -> None:
        """A ConfigMap in the operator's namespace changed: pods waiting for their volume
        start now and read their label once."""
        started = self._pod_start(time.monotonic())
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
        t.start()

    def _loop(self, agent: _Agent) -> None:
        try:
            while not self._stop.is_set():
                if self.config_file(agent.name) is NOT_RUNNING:
                    return
                with self._lock:
                    if agent.current == agent.last_read or not agent.current:
                        return
                    agent.last_read = value = agent.current  # SyncableMigConfig.Get
                try:
                    self.run(agent.name, value)
                except Exception:
                    log.exception("mig-manager on %s failed", agent.name)
        finally:
            with self._lock:
                agent.busy = False

    def stop(self) -> None:
        self._stop.set()

    def idle(self) -> bool:
        with self._lock:
            return not any(a.busy for a in self._agents.values())

    # ------------------------------------------------------------------- Run
    def _labels(self, name: str, labels: dict[str, str | None]) -> None:
        self.api.patch("nodes", name, {"metadata": {"labels": labels}})

    def _sleep(self, seconds: float | None = None) -> bool:
        return not self._stop.wait(self.options.mig_step_s if seconds is None else seconds)

    def _faults(self, name: str) -> set[str]:
        return faults_of(self.emu.nodes.get(name))

    def _consume(self, name: str, fault: str) -> bool:
        """A one-shot fault: True (and removed from the node's annotation) when set."""
        current = self._faults(name)
        if fault not in current:
            return False
        rest = ",".join(sorted(current - {fault})) or None
        self.api.patch("nodes", name, {"metadata": {"annotations": {FAULT_ANNOTATION: rest}}})
        return True

    def run(self, name: str, config: str) -> None:
        """reconfigure.go ``Run()`` for one label value."""
        node = self.api.get_or_none("nodes", name)
        if node is None:
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
            log.info("%s: config %r is not in the mounted file: failed", name, config)
            self._set_state(name, clients, "failed")
            return
        phys = self.physical[name]
        try:
            layout = layout_from_entries(product(phys["product"]), configs[config], phys["count"])
        except ValueError as exc:
            layout, layout_error = None, str(exc)
        else:
            layout_error = ""
        if layout is not None and layout == self.applied.get(name):  # isConfigAlreadyApplied
            log.info("%s: %s is already applied", name, config)
            self._set_state(name, clients, "success")
            return
        mode_change = _mode(layout) != _mode(self.applied.get(name))
        if mode_change and current_state == "rebooting" and name not in self.rebooted:
            self._set_state(name, clients, "failed")  # "did not take effect after rebooting"
            return
        log.info("%s: applying %s: pending", name, config)
        self._labels(name, {STATE_LABEL: "pending"})
        if not self._sleep():
            return
        self._labels(name, {k: (v if v == "false" else PAUSED) for k, v in clients.items()})
        if "mig_stuck" in self._faults(name):
            log.info("%s: fault mig_stuck: left pending with the clients paused", name)
            return
        if not self._wait_for_clients(name):
            log.info("%s: GPU clients did not shut down; left pending", name)
            return
        self._delete_validators(name)
        settings = self.emu.operator.settings()
        if mode_change and name not in self.rebooted and "mig_reboot" in self._faults(name):
            if settings["with_reboot"]:
                log.info("%s: MIG mode change needs a reboot: rebooting", name)
                self._labels(name, {STATE_LABEL: "rebooting"})
                self._reboot(name)
                return
            layout_error = "MIG mode change failed (a node reboot is needed; WITH_REBOOT off)"
        self.rebooted.discard(name)
        if self._consume(name, "mig_fail"):
            layout_error = "injected mig-parted failure (fault mig_fail)"
        busy = self._gpu_pods_on(name)
        if not layout_error and busy:
            layout_error = f"{busy} GPU pod(s) still running on the node"
        if layout_error or layout is None:
            log.info("%s: applying %s failed: %s", name, config, layout_error)
            self._set_state(name, clients, "failed")
            return
        if not self._sleep():
            return
        with self._lock:
            self.applied[name] = layout
        self._set_state(name, clients, "success")
        log.info("%s: %s applied: success", name, config)
        self.emu.device_plugin.restart(name, config, configs)

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
            agent.started_at = time.monotonic()

    # ---------------------------------------------------------------- pods
    def _node_pods(self, name: str, namespace: str = "", **params: Any) -> list[dict[str, Any]]:
        return self.api.list(
            "pods", namespace or None, fieldSelector=f"spec.nodeName={name}", **params
        )

    def _blocking(self, name: str) -> int:
        ns = self.options.namespace
        n = 0
        for pod in self._node_pods(name):
            meta = pod.get("metadata") or {}
            app = (meta.get("labels") or {}).get("app")
            if meta.get("namespace") == ns and app in OPERAND_APPS:
                n += 1
                continue
            owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
            selector = (pod.get("spec") or {}).get("nodeSelector") or {}
            if owner.get("kind") == "DaemonSet" and CLIENT_LABEL in selector:
                n += 1
        return n

    def _wait_for_clients(self, name: str) -> bool:
        """waitForPodsToBeDeleted: True once gone, False after the timeout."""
        deadline = time.monotonic() + self.options.client_pause_timeout_s
        while self._blocking(name):
            if time.monotonic() >= deadline or not self._sleep(self.options.poll_s):
                return False
        return True

    def _delete_validators(self, name: str) -> None:
        ns = self.options.namespace
        selector = f"app in ({','.join((*VALIDATOR_APPS, 'nvidia-operator-validator'))})"
        for pod in self._node_pods(name, ns, labelSelector=selector):
            self.api.delete("pods", pod["metadata"]["name"], ns)

    def _gpu_pods_on(self, name: str) -> int:
        n = 0
        for pod in self._node_pods(name):
            phase = (pod.get("status") or {}).get("phase")
            if phase not in ("Succeeded", "Failed") and requests_gpus(pod):
                n += 1
        return n
