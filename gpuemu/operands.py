"""The GPU Operator's objects as a Helm install and the operator's first reconcile leave them.

Sources, NVIDIA/gpu-operator v26.7.0 (commit 10ee5b36):

- ``deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml``: the ClusterPolicy CRD,
  shipped whole as ``gpuemu/crds/nvidia.com_clusterpolicies.yaml`` (152 KB is no problem
  for the API server: etcd's limit is 1.5 MB);
- the ``cluster-policy`` object from the fleet's ``gpuOperator`` key is built by
  :func:`simcluster.clusterpolicy.cluster_policy_object` (the simulator's, reused);
- ``controllers/object_controls.go`` ``createConfigMap``: ``default-mig-parted-config`` from
  ``assets/state-mig-manager/0400_configmap.yaml`` (``simcluster/assets/`` holds the same
  copy), owned by the ClusterPolicy, not created when ``spec.migManager.config.name`` names
  a custom ConfigMap;
- the operand DaemonSets ``assets/state-device-plugin/0500_daemonset.yaml``,
  ``assets/gpu-feature-discovery/0500_daemonset.yaml``,
  ``assets/state-dcgm-exporter/0800_daemonset.yaml``, ``assets/state-dcgm/0400_dcgm.yml``:
  kept are what the cluster acts on (name, ``app`` label and selector, the
  ``nvidia.com/gpu.deploy.<operand>: "true"`` nodeSelector, the ``nvidia.com/gpu`` toleration,
  ``priorityClassName: system-node-critical``, the ServiceAccount) and one container with
  the image of ``deployments/gpu-operator/values.yaml``; init containers, volumes and
  security contexts are left out (nothing runs them under kwok). The operator sets itself
  as their controller (``controllerutil.SetControllerReference``), so the garbage collector
  removes them with the ClusterPolicy.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from simcluster.clusterpolicy import cluster_policy_object
from simcluster.gpuoperator import DEFAULT_CONFIGMAP, stock_config_text

CRD_FILE = Path(__file__).parent / "crds" / "nvidia.com_clusterpolicies.yaml"
CRD_NAME = "clusterpolicies.nvidia.com"
POLICY_NAME = "cluster-policy"

# (DaemonSet name = app label, ServiceAccount, deploy label operand, image, extra labels)
OPERANDS: tuple[tuple[str, str, str, str, dict[str, str]], ...] = (
    (
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "device-plugin",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        {},
    ),
    (
        "gpu-feature-discovery",
        "nvidia-gpu-feature-discovery",
        "gpu-feature-discovery",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        {"app.kubernetes.io/part-of": "nvidia-gpu"},
    ),
    (
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "dcgm-exporter",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
        {},
    ),
    (
        "nvidia-dcgm",
        "nvidia-dcgm",
        "dcgm",
        "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04",
        {},
    ),
)


@cache
def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


def crd() -> dict[str, Any]:
    """The ClusterPolicy CustomResourceDefinition (a fresh copy)."""
    return copy.deepcopy(_crd())


def cluster_policy(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the object to create, its ``status``) for the fleet's ``gpuOperator`` key."""
    obj = cluster_policy_object(spec, "", "")
    status = obj.pop("status")
    obj["metadata"] = {"name": obj["metadata"]["name"]}
    return obj, status


def owner_reference(policy: dict[str, Any]) -> dict[str, Any]:
    meta = policy["metadata"]
    return {
        "apiVersion": policy.get("apiVersion", "nvidia.com/v1"),
        "kind": "ClusterPolicy",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def default_configmap(namespace: str, policy: dict[str, Any] | None) -> dict[str, Any]:
    """``default-mig-parted-config`` with the stock ``config.yaml``."""
    meta: dict[str, Any] = {"name": DEFAULT_CONFIGMAP, "namespace": namespace}
    if policy is not None and (policy.get("metadata") or {}).get("uid"):
        meta["ownerReferences"] = [owner_reference(policy)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"config.yaml": stock_config_text()},
    }


def runtime_class(policy: dict[str, Any] | None) -> dict[str, Any]:
    """The RuntimeClass ``nvidia`` the operator's container-toolkit state creates
    (NVIDIA/gpu-operator ``controllers/object_controls.go`` ``RuntimeClasses``; handler
    ``nvidia``). GPU clients such as the portal's agent name it in ``runtimeClassName``; the
    API server's RuntimeClass admission refuses their pods while it is missing."""
    obj: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    if policy is not None:
        obj["metadata"]["ownerReferences"] = [owner_reference(policy)]
    return obj


def service_accounts(namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": namespace},
        }
        for _, sa, _, _, _ in OPERANDS
    ]


def daemonsets(namespace: str, policy: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The four operand DaemonSets mig-manager pauses (reconfigure.go ``waitForPodsToBeDeleted``
    waits for their ``app`` labels)."""
    out = []
    for name, sa, operand, image, extra in OPERANDS:
        labels = {"app": name, **extra}
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
        if policy is not None and (policy.get("metadata") or {}).get("uid"):
            meta["ownerReferences"] = [owner_reference(policy)]
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": meta,
                "spec": {
                    "selector": {"matchLabels": dict(labels)},
                    "template": {
                        "metadata": {"labels": dict(labels)},
                        "spec": {
                            "nodeSelector": {f"nvidia.com/gpu.deploy.{operand}": "true"},
                            "tolerations": [
                                {
                                    "key": "nvidia.com/gpu",
                                    "operator": "Exists",
                                    "effect": "NoSchedule",
                                }
                            ],
                            "priorityClassName": "system-node-critical",
                            "serviceAccountName": sa,
                            "terminationGracePeriodSeconds": 30,
                            "containers": [
                                {"name": name.removesuffix("-daemonset"), "image": image}
                            ],
                        },
                    },
                },
            }
        )
    return out
