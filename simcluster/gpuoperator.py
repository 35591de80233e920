"""Emulation of the NVIDIA GPU Operator's part in MIG: the ClusterPolicy and mig-manager's files.

Sources: NVIDIA/gpu-operator v26.7.0 ``controllers/object_controls.go`` (``createConfigMap``:
the operator creates ``default-mig-parted-config`` in its namespace from
``assets/state-mig-manager/0400_configmap.yaml``, owned by the ClusterPolicy, and updates it
back to that content on every reconcile, "avoid creating default 'mig-parted-config'
ConfigMap if custom one is provided"; ``TransformMIGManager``: with
``spec.migManager.config.name`` the mig-manager pods mount that ConfigMap's ``config.yaml``
and get ``CONFIG_FILE``, else the default mounted as ``config-default.yaml`` and
``DEFAULT_CONFIG_FILE`` only) and NVIDIA/mig-parted ``cmd/nvidia-mig-manager/main.go``
(``setupMigConfig``: no ``CONFIG_FILE`` means a config generated from the hardware,
``pkg/mig/builder/builder.go``; the default file only when no MIG profile is discovered).

The mounted file is a ConfigMap volume: the kubelet rewrites it on its periodic sync, so
mig-manager reads the ConfigMap as it was ``config_mount_delay_s`` ago (sim clock,
simcluster/clock.py). Every write of a ConfigMap in the operator's namespace is kept with
its time for that.
"""

from __future__ import annotations

import copy
import json
import logging
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simcluster import clusterpolicy as cp
from simcluster import validation
from simcluster.errors import ApiError
from simcluster.fleet import Fleet, namespace_object, new_uid, now_iso
from simcluster.gpu import Product
from simcluster.patch import MERGE
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

log = logging.getLogger("simcluster.gpuoperator")
DEFAULT_CONFIGMAP = "default-mig-parted-config"
MIG_CONFIG = "nvidia.com/mig.config"
MANAGER = "gpu-operator"
_ASSET = Path(__file__).parent / "assets" / "mig-parted-default-configmap.yaml"
DEFAULTS = {  # fleet ``gpuOperator`` keys -> defaults (the real components' timings)
    "namespace": "gpu-operator",
    "configMountDelay": 60.0,  # kubelet ConfigMap volume sync (about a minute)
    "devicePluginRestart": 5.0,  # device plugin + GFD restart after mig.config.state=success
    "clientPauseTimeout": 300.0,  # reconfigure.go waitForPodsToBeDeleted: 5 min per wait
}

validation.register("clusterpolicies", cp.validate, cp.validate_update)


@cache
def stock_config_text() -> str:
    """``data["config.yaml"]`` of the operator's stock ``default-mig-parted-config``."""
    doc = yaml.safe_load(_ASSET.read_text())
    return doc["data"]["config.yaml"]


def parse_configs(text: str | None) -> dict[str, Any] | None:
    """``mig-configs`` of a mig-parted config file; None when absent or not a valid file."""
    if text is None:
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("mig-configs"), dict):
        return None
    return doc["mig-configs"]


def generated_configs(prod: Product) -> dict[str, Any] | None:
    """What mig-manager generates from the hardware (builder.go ``buildMigConfigSpec``):
    ``all-disabled``, ``all-enabled``, ``all-balanced`` and ``all-<profile>`` at the
    profile's max count (``+`` in a profile name becomes ``.``). None without MIG profiles
    (``ErrNoProfilesDiscovered``: main.go then falls back to ``DEFAULT_CONFIG_FILE``)."""
    if not prod.mig:
        return None
    out: dict[str, Any] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    if prod.balanced:
        out["all-balanced"] = [
            {"devices": "all", "mig-enabled": True, "mig-devices": dict(prod.balanced)}
        ]
    for name in sorted(prod.mig):
        out["all-" + name.replace("+", ".")] = [
            {"devices": "all", "mig-enabled": True, "mig-devices": {name: prod.mig[name].max_count}}
        ]
    return out


class GpuOperator:
    """The operator's ConfigMap reconcile plus the history mig-manager's volume lags behind."""

    def __init__(
        self,
        cluster: SimCluster,
        *,
        config_mount_delay_s: float | None = None,
        device_plugin_restart_s: float | None = None,
        client_pause_timeout_s: float | None = None,
    ) -> None:
        self.cluster = cluster
        self.installed = False
        self.namespace = DEFAULTS["namespace"]
        self._overrides = {
            "configMountDelay": config_mount_delay_s,
            "devicePluginRestart": device_plugin_restart_s,
            "clientPauseTimeout": client_pause_timeout_s,
        }
        self.config_mount_delay_s = float(DEFAULTS["configMountDelay"])
        self.device_plugin_restart_s = float(DEFAULTS["devicePluginRestart"])
        self.client_pause_timeout_s = float(DEFAULTS["clientPauseTimeout"])
        # (name) -> [(sim time written, config.yaml or None when deleted/absent)]
        self._versions: dict[str, list[tuple[float, str | None]]] = {}
        self._settings_key: tuple[Any, ...] | None = None

    # ------------------------------------------------------------- loading
    def load(self, fleet: Fleet) -> None:
        """Store the ClusterPolicy (and the default ConfigMap), under the store lock."""
        spec = fleet.gpu_operator
        if spec is None:
            return
        self.installed = True
        self.namespace = str(spec.get("namespace") or DEFAULTS["namespace"])
        for key, attr in (
            ("configMountDelay", "config_mount_delay_s"),
            ("devicePluginRestart", "device_plugin_restart_s"),
            ("clientPauseTimeout", "client_pause_timeout_s"),
        ):
            value = self._overrides[key]
            if value is None:
                value = spec.get(key, DEFAULTS[key])
            setattr(self, attr, float(value))
        st = self.cluster.store
        ts = now_iso()
        if st.get("namespaces", "", self.namespace) is None:
            st.put("namespaces", namespace_object(self.namespace, None, ts), "ADDED", emit=False)
        policy = cp.cluster_policy_object(spec, ts, new_uid())
        st.put("clusterpolicies", policy, "ADDED", emit=False)
        keys, lo, hi = st.key_range("configmaps", self.namespace)
        for k in keys[lo:hi]:
            obj = st.objects["configmaps"][k].obj()
            self._versions[obj["metadata"]["name"]] = [
                (float("-inf"), (obj.get("data") or {}).get("config.yaml"))
            ]
        settings = cp.mig_settings(policy)
        self._settings_key = _key(settings)
        if settings["enabled"] and not settings["config_name"]:
            existing = st.get("configmaps", self.namespace, DEFAULT_CONFIGMAP)
            cm = self._default_configmap(policy)
            if existing is not None:
                cm["metadata"] = {**existing.obj()["metadata"], **cm["metadata"]}
            st.put("configmaps", cm, "ADDED", emit=False)
            self._versions[DEFAULT_CONFIGMAP] = [(float("-inf"), stock_config_text())]

    def _default_configmap(self, policy: dict[str, Any]) -> dict[str, Any]:
        meta = policy["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": DEFAULT_CONFIGMAP,
                "namespace": self.namespace,
                "uid": new_uid(),
                "creationTimestamp": now_iso(),
                "ownerReferences": [
                    {
                        "apiVersion": "nvidia.com/v1",
                        "kind": "ClusterPolicy",
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": {"config.yaml": stock_config_text()},
        }

    # ------------------------------------------------------------ reading
    def policy(self) -> dict[str, Any] | None:
        """The ClusterPolicy in force: the oldest one (the operator ignores the others)."""
        objs = self.cluster.list("clusterpolicies")
        if not objs:
            return None
        return min(
            objs, key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"])
        )

    def settings(self) -> dict[str, Any]:
        """mig-manager's settings from the ClusterPolicy (``enabled`` False without one)."""
        if not self.installed:
            return {**cp.mig_settings(None), "enabled": False}
        pol = self.policy()
        if pol is None:
            return {**cp.mig_settings(None), "enabled": False}
        return cp.mig_settings(pol)

    def mounted_text(self, name: str, since: float | None = None) -> tuple[bool, str | None]:
        """``(exists, config.yaml)`` of ConfigMap ``name`` as a pod's volume shows it now:
        the version written at least ``config_mount_delay_s`` ago (sim clock), or the one
        the pod mounted when it started at ``since`` if that is newer. A deleted ConfigMap
        leaves the last content in place (the kubelet cannot sync it)."""
        cutoff = self.cluster.clock.now() - self.config_mount_delay_s
        if since is not None:
            cutoff = max(cutoff, since)
        with self.cluster.store.lock:
            versions = list(self._versions.get(name, ()))
        seen = [v for t, v in versions if t <= cutoff]
        if not seen:
            return False, None
        return True, seen[-1]

    def configmap_exists(self, name: str) -> bool:
        with self.cluster.store.lock:
            return self.cluster.store.get("configmaps", self.namespace, name) is not None

    # ------------------------------------------------------------ writes
    def on_write(
        self, rt_name: str, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """Every stored change, under the store lock."""
        if not self.installed:
            return
        if rt_name == "configmaps" and ns == self.namespace:
            name = (new or old or {}).get("metadata", {}).get("name", "")
            if new is not None:
                hist = self._versions.setdefault(name, [])
                hist.append((self.cluster.clock.now(), (new.get("data") or {}).get("config.yaml")))
                del hist[:-64]
            if name == DEFAULT_CONFIGMAP:
                self._queue()
            self.cluster.controllers.add_after(
                ("mig-volumes",), 0.0, self.cluster.mig.volume_changed
            )
        elif rt_name == "clusterpolicies":
            self._queue()
        elif rt_name == "nodes" and new is not None:
            labels = new["metadata"].get("labels") or {}
            if labels.get("nvidia.com/mig.capable") == "true" and not labels.get(MIG_CONFIG):
                name = new["metadata"]["name"]
                self.cluster.controllers.add_after(
                    ("gpu-operator-node", name), 0.05, lambda: self._default_label(name)
                )

    def _default_label(self, name: str) -> None:
        """nodelabeling_controller.go: a MIG-capable node without ``nvidia.com/mig.config``
        gets ``all-disabled`` when mig-manager is enabled and ``config.default`` is
        ``all-disabled`` (the CRD's default)."""
        settings = self.settings()
        if not settings["enabled"] or settings["default"] != "all-disabled":
            return
        try:
            node = self.cluster.get("nodes", name)
        except ApiError:
            return
        if (node["metadata"].get("labels") or {}).get(MIG_CONFIG):
            return
        body = json.dumps({"metadata": {"labels": {MIG_CONFIG: "all-disabled"}}}).encode()
        self._call(self.cluster.op_patch, RT["nodes"], "", name, "", body, MERGE, {}, MANAGER)

    def _queue(self) -> None:
        self.cluster.controllers.add_after(("gpu-operator",), 0.05, self.reconcile)

    def reconcile(self) -> None:
        """createConfigMap: the default ConfigMap back to stock unless a custom one is named;
        deleted while mig-manager is disabled. A change of mig-manager's settings restarts
        the mig-manager pods (the DaemonSet's template changes)."""
        settings = self.settings()
        key = _key(settings)
        if key != self._settings_key:
            self._settings_key = key
            self.cluster.mig.restart_all()
        if not self.installed:
            return
        pol = self.policy()
        rt = RT["configmaps"]
        try:
            current = self.cluster.get("configmaps", DEFAULT_CONFIGMAP, self.namespace)
        except ApiError:
            current = None
        if pol is None or not settings["enabled"]:
            if current is not None:
                self._call(self.cluster.op_delete, rt, self.namespace, DEFAULT_CONFIGMAP, None, {})
            return
        if settings["config_name"]:
            return  # "Not creating resource, custom ConfigMap provided"
        want = self._default_configmap(pol)
        if current is None:
            body = {k: v for k, v in want.items()}
            body["metadata"] = {
                k: v for k, v in want["metadata"].items() if k not in ("uid", "creationTimestamp")
            }
            self._call(self.cluster.op_create, rt, self.namespace, body, {}, MANAGER)
            return
        if current.get("data") == want["data"] and not current.get("binaryData"):
            return
        body = copy.deepcopy(current)
        body["data"] = want["data"]
        body.pop("binaryData", None)
        self._call(
            self.cluster.op_update, rt, self.namespace, DEFAULT_CONFIGMAP, "", body, {}, MANAGER
        )

    @staticmethod
    def _call(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except ApiError as exc:  # a conflict with a concurrent write: the next event retries
            log.info("gpu-operator reconcile: %s", exc)


def _key(settings: dict[str, Any]) -> tuple[Any, ...]:
    return (settings["enabled"], settings["config_name"], settings["with_reboot"])
