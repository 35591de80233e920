"""The DRA backend (issue #22): GPU classes enforced by Kubernetes itself, through Dynamic
Resource Allocation.

- For each GPU class and each resource it offers the portal manages a **DeviceClass** whose
  CEL selector picks the class's devices by the driver's own attributes
  (kubernetes-sigs/dra-driver-nvidia-gpu ``deviceinfo.go``: ``type`` ``gpu`` or ``mig``,
  ``productName`` as NVML names the model, ``profile`` for MIG devices, whose
  ``productName`` is their parent's): ``gpu-portal-<class>`` for whole GPUs,
  ``gpu-portal-<class>.mig-<profile>`` per MIG profile. Annotations say which class and
  resource it stands for (read back by inventory/dra.py). Server-side applied under the
  portal's field manager through the gateway, before each quota apply of the cluster.
- Each team namespace's ResourceQuota (the portal's own, as on a ResourceQuota cluster:
  outbox, retries, lowering held, drift revert, audit; quotas/apply.py) carries
  ``<device class>.deviceclass.resource.k8s.io/devices`` per class and resource from the
  team's grants active now, and **0 for every other GPU DeviceClass** (the driver's generic
  ``gpu.nvidia.com`` and ``mig.nvidia.com``, an admin's): a claim through a class without a
  limit would not be limited at all. The quota evaluator charges a claim when it is created
  or updated, for every device it requests, worst case over ``firstAvailable`` subrequests
  (kubernetes ``pkg/quota/v1/evaluator/core/resource_claims.go``, ``V1ResourceByDeviceClass``).
- ``requests.nvidia.com/gpu`` is 0 as well: with ``DRAExtendedResource`` (beta, on by default
  in v1.36) a pod asking for ``nvidia.com/gpu`` is served through the driver's generic class
  (its ``extendedResourceName``), which no grant covers; such a pod is refused at creation
  with the quota's own message and asks for a class's DeviceClass instead.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Sum
from django.utils import timezone

from inventory.dra import (
    CLASS_ANNOTATION,
    DRIVER,
    GENERIC_GPU_CLASS,
    GENERIC_MIG_CLASS,
    RESOURCE_ANNOTATION,
)
from inventory.models import GPU_RESOURCE, MIG_RESOURCE_PREFIX, Cluster, GpuClass, Node

from .limits import DEVICES
from .models import Grant, TeamNamespace

NAME_PREFIX = "gpu-portal-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-quota-portal"}


def device_class_name(cls: GpuClass, resource: str) -> str:
    if resource == GPU_RESOURCE:
        return f"{NAME_PREFIX}{cls.slug}"
    return f"{NAME_PREFIX}{cls.slug}.mig-{resource.removeprefix(MIG_RESOURCE_PREFIX)}"


def quota_key(device_class: str) -> str:
    """What ResourceQuota counts a DeviceClass's devices under."""
    return device_class + DEVICES


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def selector(resource: str, products: list[str]) -> str:
    """The CEL expression of a class's DeviceClass for ``resource``."""
    attrs = f"device.attributes[{_quoted(DRIVER)}]"
    parts = [f"device.driver == {_quoted(DRIVER)}"]
    if resource == GPU_RESOURCE:
        parts.append(f"{attrs}.type == 'gpu'")
    else:
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX).replace(".me", "+me")
        parts += [f"{attrs}.type == 'mig'", f"{attrs}.profile == {_quoted(profile)}"]
    if len(products) == 1:
        parts.append(f"{attrs}.productName == {_quoted(products[0])}")
    else:
        parts.append(f"{attrs}.productName in [{', '.join(_quoted(p) for p in products)}]")
    return " && ".join(parts)


def class_products(cluster: Cluster) -> dict:
    """{class id: NVML product names of its present nodes} (the devices' productName)."""
    out: dict = defaultdict(set)
    rows = Node.objects.filter(cluster=cluster, gone_at__isnull=True).exclude(gpu_product_name="")
    for cls_id, name in rows.values_list("gpu_class_id", "gpu_product_name").distinct():
        if cls_id is not None:
            out[cls_id].add(name)
    return {k: sorted(v) for k, v in out.items()}


def device_classes(cluster: Cluster) -> list[dict]:
    """The DeviceClasses the portal keeps on ``cluster``: one per class and resource, for
    classes whose nodes the driver has published (an empty class keeps its last one)."""
    products = class_products(cluster)
    out = []
    for cls in GpuClass.objects.filter(cluster=cluster).order_by("slug"):
        if cls.pk not in products:
            continue
        for resource in sorted(cls.resources or []):
            name = device_class_name(cls, resource)
            out.append({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {
                    "name": name,
                    "labels": dict(MANAGED_BY),
                    "annotations": {CLASS_ANNOTATION: cls.slug, RESOURCE_ANNOTATION: resource},
                },
                "spec": {"selectors": [
                    {"cel": {"expression": selector(resource, products[cls.pk])}}]},
            })  # fmt: skip
    return out


def apply_device_classes(cluster: Cluster, gw) -> int:
    """Server-side apply every DeviceClass of :func:`device_classes` (idempotent)."""
    bodies = device_classes(cluster)
    for body in bodies:
        gw.apply_device_class(body)
    return len(bodies)


def desired_hard(namespace: TeamNamespace, now: datetime | None = None) -> dict[str, int]:
    """The portal quota's ``spec.hard`` on a DRA cluster (module doc): per class and
    resource the grants active now, 0 for every class and resource without one, for every
    other GPU DeviceClass, and for ``requests.nvidia.com/gpu``."""
    now = now or timezone.now()
    cluster = namespace.cluster
    classes = {c.pk: c for c in GpuClass.objects.filter(cluster=cluster)}
    sums = {
        (cls_id, res): int(total)
        for cls_id, res, total in Grant.objects.filter(namespace=namespace, gpu_class__isnull=False)
        .active_at(now)
        .values("gpu_class_id", "resource")
        .annotate(total=Sum("amount"))
        .values_list("gpu_class_id", "resource", "total")
    }
    pairs = {(c.pk, r) for c in classes.values() for r in c.resources or []}
    pairs |= set(
        Grant.objects.filter(namespace=namespace, gpu_class__isnull=False)
        .values_list("gpu_class_id", "resource")
        .distinct()
    )
    hard = {
        quota_key(device_class_name(classes[cls_id], res)): sums.get((cls_id, res), 0)
        for cls_id, res in pairs
        if cls_id in classes
    }
    for name in {GENERIC_GPU_CLASS, GENERIC_MIG_CLASS, *(cluster.dra_other_classes or [])}:
        hard[quota_key(name)] = 0
    hard[f"requests.{GPU_RESOURCE}"] = 0
    return dict(sorted(hard.items()))


def _managed_selector() -> str:
    return ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


def device_class_drift(cluster: Cluster, gw) -> dict[str, str]:
    """{DeviceClass name: what differs} between the portal's DeviceClasses on the cluster
    and :func:`device_classes` ("missing", or the selector or annotations edited)."""
    live = {
        d["metadata"]["name"]: d for d in gw.list_device_classes(label_selector=_managed_selector())
    }
    out = {}
    for want in device_classes(cluster):
        name = want["metadata"]["name"]
        have = live.get(name)
        if have is None:
            out[name] = "missing"
            continue
        notes = (have.get("metadata") or {}).get("annotations") or {}
        if any(notes.get(k) != v for k, v in want["metadata"]["annotations"].items()):
            out[name] = "annotations edited"
        elif (have.get("spec") or {}).get("selectors") != want["spec"]["selectors"]:
            out[name] = "selector edited"
    return out


def pod_usage(namespace: TeamNamespace, pods) -> dict[str, int]:
    """Per DeviceClass quota key, the devices the namespace's pods hold or ask for through
    their claims, by the class of the node they run on (or the class their claims name,
    while pending): what the quota counts, without waiting for its controller."""
    classes = list(GpuClass.objects.filter(cluster=namespace.cluster))
    node_class = dict(
        Node.objects.filter(pk__in={p.node_id for p in pods if p.node_id}).values_list(
            "pk", "gpu_class_id"
        )
    )
    by_id = {c.pk: c for c in classes}
    out: dict[str, int] = defaultdict(int)
    for pod in pods:
        cls = by_id.get(node_class.get(pod.node_id))
        if cls is None:
            cls = next(
                (c for c in classes if pod.gpu_selector and c.matches(pod.gpu_selector)), None
            )
        if cls is None:
            continue
        for resource, amount in (pod.requests or {}).items():
            out[quota_key(device_class_name(cls, resource))] += int(amount)
    return dict(out)
