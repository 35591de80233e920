"""Pods on a GPU class their namespace holds no grant for (the ResourceQuota backend).

ResourceQuota counts ``requests.nvidia.com/gpu`` over every GPU model together, so on a
cluster whose enforcement is ``resourcequota`` a namespace granted 4 H100s may run its
pods on V100s (or on the H200s another team was promised) and Kubernetes lets it. The
portal cannot stop that there; it reports it. A pod is *off class* when it requests a
resource its namespace holds active grants for, every one of them names a class (an
any-class grant means the team does not care), and the pod is scheduled on a node of
another class. Clusters that enforce classes (Kueue) have no off-class pods to report.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.utils import timezone

from inventory.models import Node

from . import limits
from .models import Grant, TeamNamespace


@dataclass(frozen=True)
class OffClassPod:
    pod: limits.PodRow
    resource: str
    amount: int
    node_class: str  # display name of the class the pod's node is in ("" = none yet)
    granted_classes: tuple[str, ...]  # display names of the classes the grants name


def off_class(namespaces: list[TeamNamespace], now=None) -> dict:
    """``{namespace id: [OffClassPod]}`` for the namespaces on ResourceQuota clusters, in
    three queries whatever their number (grants, pods, the pods' nodes); pods are read
    only in namespaces whose grants of some resource all name a class."""
    now = now or timezone.now()
    namespaces = [ns for ns in namespaces if not ns.cluster.enforces_classes]
    if not namespaces:
        return {}
    granted: dict = defaultdict(set)  # (ns id, resource) -> {class id or None}
    names: dict = {}
    rows = (
        Grant.objects.filter(namespace__in=namespaces)
        .active_at(now)
        .values_list("namespace_id", "resource", "gpu_class_id", "gpu_class__name")
    )
    for ns_id, resource, class_id, class_name in rows:
        granted[(ns_id, resource)].add(class_id)
        names[class_id] = class_name
    classed = {ns_id for (ns_id, _), classes in granted.items() if None not in classes}
    pods = limits.pods_by_namespace([ns for ns in namespaces if ns.pk in classed])
    scheduled = {(p.cluster_id, p.node_name) for plist in pods.values() for p in plist
                 if p.node_name}  # fmt: skip
    node_class = {
        (cluster_id, name): (class_id, class_name or "")
        for cluster_id, name, class_id, class_name in Node.objects.filter(
            cluster_id__in={c for c, _ in scheduled}, name__in={n for _, n in scheduled}
        ).values_list("cluster_id", "name", "gpu_class_id", "gpu_class__name")
    }
    out: dict = defaultdict(list)
    for ns in namespaces:
        for pod in pods.get(ns.pk, []):
            if not pod.node_name or pod.phase in ("Succeeded", "Failed"):
                continue
            class_id, class_name = node_class.get((pod.cluster_id, pod.node_name), (None, ""))
            for resource, amount in sorted((pod.requests or {}).items()):
                classes = granted.get((ns.pk, resource))
                if not classes or None in classes or class_id in classes:
                    continue
                out[ns.pk].append(OffClassPod(
                    pod, resource, int(amount), class_name,
                    tuple(sorted(names[c] for c in classes)),
                ))  # fmt: skip
    return dict(out)
