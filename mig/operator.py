"""Where the portal's mig-parted configs must go: the GPU Operator's ClusterPolicy.

NVIDIA/gpu-operator (v26.7.0) controllers/object_controls.go owns
``default-mig-parted-config`` (assets/state-mig-manager/0400_configmap.yaml), rewrites it on
every reconcile and, in TransformMIGManager, mounts a *custom* config only from the
ConfigMap named in ``ClusterPolicy.spec.migManager.config.name`` (its ``config.yaml`` at
``/mig-parted-config/config.yaml``, env ``CONFIG_FILE``). Without a custom name the default
is mounted as ``config-default.yaml`` (env ``DEFAULT_CONFIG_FILE``), which mig-manager uses
only as a fallback for configs it GENERATES from the hardware (NVIDIA/mig-parted
cmd/nvidia-mig-manager/main.go setupMigConfig). So the portal writes only the ConfigMap the
ClusterPolicy names, and it must be ``MIG_CONFIGMAP_NAME`` (the name its RBAC allows).
Field names: api/nvidia/v1/clusterpolicy_types.go (MIGManagerSpec.Config is a
MIGPartedConfigSpec ``{name, default}``; ``default`` accepts ``all-disabled`` or ``""``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .stepbase import conf

DEFAULT_CONFIGMAP = "default-mig-parted-config"
STOCK_FILE = Path(__file__).with_name("stock_mig_configs.yaml")


class OperatorProblem(Exception):
    """The cluster's GPU Operator is not set up for the portal's MIG configs; the message
    tells the admin exactly what to do."""


def configmap_name() -> str:
    return conf("MIG_CONFIGMAP_NAME", "gpu-quota-portal-mig-config")


def configmap_namespace() -> str:
    return conf("MIG_CONFIGMAP_NAMESPACE", "gpu-operator")


def patch_command(policy: str = "cluster-policy") -> str:
    """The command that points mig-manager at the portal's ConfigMap."""
    body = {"spec": {"migManager": {"config": {"name": configmap_name(),
                                               "default": "all-disabled"}}}}  # fmt: skip
    return (
        f"kubectl patch clusterpolicies.nvidia.com/{policy} --type merge "
        f"-p '{json.dumps(body, separators=(',', ':'))}'"
    )


def _active_policy(policies: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator reconciles one ClusterPolicy and marks any other ``ignored``."""
    live = [p for p in policies if ((p.get("status") or {}).get("state")) != "ignored"]
    pool = live or policies
    return sorted(pool, key=lambda p: p["metadata"].get("creationTimestamp") or "")[0]


def check_policy(policies: list[dict[str, Any]] | None) -> str:
    """The ConfigMap name mig-manager reads configs from, or OperatorProblem.

    ``policies`` is ``KubeGateway.list_cluster_policies()`` (None: the CRD is not served).
    """
    want = configmap_name()
    if policies is None:
        raise OperatorProblem(
            "The cluster does not serve clusterpolicies.nvidia.com: the NVIDIA GPU Operator is "
            "not installed. The portal changes MIG layouts only through the operator's "
            "mig-manager."
        )
    if not policies:
        raise OperatorProblem(
            "The cluster has no ClusterPolicy (clusterpolicies.nvidia.com): the GPU Operator "
            "is not configured, so no mig-manager runs."
        )
    policy = _active_policy(policies)
    name = policy["metadata"]["name"]
    mig_manager = (policy.get("spec") or {}).get("migManager") or {}
    if mig_manager.get("enabled") is False:
        raise OperatorProblem(
            f"mig-manager is disabled in ClusterPolicy {name} (spec.migManager.enabled: false); "
            f"enable it: kubectl patch clusterpolicies.nvidia.com/{name} --type merge "
            """-p '{"spec":{"migManager":{"enabled":true}}}'"""
        )
    named = ((mig_manager.get("config") or {}).get("name")) or ""
    if not named:
        raise OperatorProblem(
            f"ClusterPolicy {name} names no custom mig-parted ConfigMap "
            "(spec.migManager.config.name), so mig-manager only knows the configs it generates "
            "from the hardware and would refuse the portal's. Point it at the portal's "
            f"ConfigMap {configmap_namespace()}/{want} (MIG_CONFIGMAP_NAME): "
            f"{patch_command(name)}"
        )
    if named != want:
        raise OperatorProblem(
            f"ClusterPolicy {name} mounts ConfigMap {named!r} for mig-manager, but the portal "
            f"writes {want!r} (MIG_CONFIGMAP_NAME). Either set MIG_CONFIGMAP_NAME={named} and "
            "change the resourceNames of Role gpu-quota-portal-mig-config in "
            f"deploy/kubernetes/rbac.yaml to it, or point the ClusterPolicy at {want}: "
            f"{patch_command(name)}"
        )
    return named


@cache
def stock_configs() -> dict[str, Any]:
    """The operator's stock configs (vendored copy of its default ConfigMap's config.yaml)."""
    doc = yaml.safe_load(STOCK_FILE.read_text())
    return doc["mig-configs"]


def configs_of(cm: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``mig-configs`` of a mig-parted ConfigMap, or None when absent or unusable."""
    if cm is None:
        return None
    try:
        doc = yaml.safe_load((cm.get("data") or {}).get("config.yaml") or "") or {}
    except yaml.YAMLError:
        return None
    configs = doc.get("mig-configs") if isinstance(doc, dict) else None
    return dict(configs) if isinstance(configs, dict) else None
