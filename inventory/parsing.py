"""Turn raw Kubernetes JSON (dicts, as listed) into the facts the inventory stores.

Pure functions, no Django: the sync calls them for every node and pod of every page, so
they stay cheap, and they are unit-tested against GPU-FACTS.md section 2.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from .models import GPU_RESOURCE, MIG_RESOURCE_PREFIX, is_gpu_resource

NV = "nvidia.com/"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value: str | int | float | None) -> int:
    """Parse a Kubernetes quantity into an integer count (extended resources are integers).

    ``"4"`` -> 4, ``"2k"`` -> 2000, ``"1Ki"`` -> 1024; fractions round up, as a request of
    ``500m`` of an integer resource would be refused anyway.
    """
    if value is None:
        return 0
    if isinstance(value, int | float):
        return int(-(-value // 1))
    text = str(value).strip()
    if not text:
        return 0
    for suffix, mult in _BINARY_SUFFIX.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    if text.endswith("m"):
        return -(-int(float(text[:-1])) // 1000)
    if text[-1] in _DECIMAL_SUFFIX:
        return int(float(text[:-1]) * _DECIMAL_SUFFIX[text[-1]])
    number = float(text)
    return int(-(-number // 1))


def _int_label(labels: dict[str, str], key: str, default: int | None = None) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return default


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    uid: str
    labels: dict[str, str]
    gpu_product: str
    gpu_count: int
    gpu_memory_mib: int | None
    gpu_family: str
    compute_capability: str
    driver_version: str
    mig_capable: bool
    mig_strategy: str
    mig_config: str
    mig_config_state: str
    sharing_strategy: str
    gpu_replicas: int
    instance_type: str
    unschedulable: bool
    taints: list[dict[str, str]]
    ready: bool
    paused_operands: list[str]
    k8s_created_at: datetime | None
    # {resource: (capacity, allocatable)} for GPU resources only.
    resources: dict[str, tuple[int, int]] = field(default_factory=dict)
    gpu_product_name: str = ""  # NVML's, from the DRA driver's devices (inventory/dra.py)


def node_fingerprint(obj: dict) -> str:
    """A digest of everything the inventory stores about a raw node object.

    Computed from the raw JSON so an unchanged node costs neither parsing nor a write.
    Only the Ready condition's status goes in: heartbeat timestamps change every few
    seconds on a real node and mean nothing to the inventory.
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"]
    blob = json.dumps(
        [
            meta.get("uid"),
            meta.get("creationTimestamp"),
            meta.get("labels"),
            (obj.get("spec") or {}).get("unschedulable"),
            (obj.get("spec") or {}).get("taints"),
            status.get("capacity"),
            status.get("allocatable"),
            ready,
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def parse_node(obj: dict) -> NodeFacts:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels: dict[str, str] = meta.get("labels") or {}
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or {}
    resources = {
        name: (parse_quantity(capacity.get(name)), parse_quantity(allocatable.get(name)))
        for name in capacity.keys() | allocatable.keys()
        if is_gpu_resource(name)
    }
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    major, minor = labels.get(NV + "gpu.compute.major"), labels.get(NV + "gpu.compute.minor")
    paused = sorted(
        key[len(DEPLOY_LABEL_PREFIX) :]
        for key, value in labels.items()
        if key.startswith(DEPLOY_LABEL_PREFIX) and value not in ("true", "")
    )
    return NodeFacts(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        labels=labels,
        gpu_product=labels.get(NV + "gpu.product", ""),
        gpu_count=_int_label(labels, NV + "gpu.count", 0) or 0,
        gpu_memory_mib=_int_label(labels, NV + "gpu.memory"),
        gpu_family=labels.get(NV + "gpu.family", ""),
        compute_capability=f"{major}.{minor}" if major and minor else "",
        driver_version=labels.get(NV + "cuda.driver-version.full") or _driver_from_parts(labels),
        mig_capable=labels.get(NV + "mig.capable") == "true",
        mig_strategy=labels.get(NV + "mig.strategy", ""),
        mig_config=labels.get(NV + "mig.config", ""),
        mig_config_state=labels.get(NV + "mig.config.state", ""),
        sharing_strategy=labels.get(NV + "gpu.sharing-strategy", ""),
        gpu_replicas=_int_label(labels, NV + "gpu.replicas", 1) or 1,
        instance_type=labels.get("node.kubernetes.io/instance-type", ""),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=_scheduling_taints(spec.get("taints")),
        ready=ready,
        paused_operands=paused,
        k8s_created_at=parse_time(meta.get("creationTimestamp")),
        resources=resources,
    )


SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def _scheduling_taints(taints) -> list[dict[str, str]]:
    """The taints that keep pods off a node (``PreferNoSchedule`` only discourages), in the
    API's order; ``node.kubernetes.io/unschedulable`` is left out (it mirrors a cordon)."""
    out = []
    for t in taints or ():
        if not isinstance(t, dict) or t.get("effect") not in SCHEDULING_EFFECTS:
            continue
        key = str(t.get("key") or "")
        if key and key != "node.kubernetes.io/unschedulable":
            out.append({"key": key, "value": str(t.get("value") or ""), "effect": t["effect"]})
    return out


def _driver_from_parts(labels: dict[str, str]) -> str:
    parts = [labels.get(NV + f"cuda.driver.{p}") for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) if parts[0] else ""


class PodFacts(NamedTuple):
    """A GPU pod as the sync needs it (a NamedTuple: built 30,000 times a sync)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    requests: dict[str, int]
    priority_class: str
    k8s_created_at: datetime | None
    # status.startTime: when its kubelet started it, from which it holds its node's GPUs
    # (None while Pending).
    started_at: datetime | None
    # The ``nvidia.com/`` labels the pod's nodeSelector asks for (a GPU class, when they
    # match one: quotas/demand.py); {} for most pods.
    gpu_selector: dict[str, str] = {}


def pod_gpu_selector(spec: dict) -> dict[str, str]:
    """``nvidia.com/*`` keys of ``spec.nodeSelector``, plus single-value ``In``
    requirements of every required node-affinity term (a class asked for either way)."""
    out = {k: str(v) for k, v in (spec.get("nodeSelector") or {}).items() if k.startswith(NV)}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) == 1:  # several terms are ORed: no single class
        for expr in terms[0].get("matchExpressions") or []:
            key, values = str(expr.get("key", "")), expr.get("values") or []
            if key.startswith(NV) and expr.get("operator") == "In" and len(values) == 1:
                out.setdefault(key, str(values[0]))
    return out


def pod_gpu_requests(spec: dict) -> dict[str, int]:
    """Effective GPU request of a pod: max(any init container, sum of containers) + overhead.

    This is the rule the scheduler and the quota evaluator use (GPU-FACTS.md section 1).
    Limits count as requests for extended resources when requests are absent.
    """
    totals: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for name, amount in _container_gpu_requests(container).items():
            totals[name] = totals.get(name, 0) + amount
    for container in spec.get("initContainers") or ():
        for name, amount in _container_gpu_requests(container).items():
            if amount > totals.get(name, 0):
                totals[name] = amount
    for name, value in (spec.get("overhead") or {}).items():
        if is_gpu_resource(name):
            totals[name] = totals.get(name, 0) + parse_quantity(value)
    return {name: amount for name, amount in totals.items() if amount > 0}


def _container_gpu_requests(container: dict) -> dict[str, int]:
    """GPU requests of one container; limits stand in where a request is missing.

    Runs for every container of every pod in the cluster, most of which request no GPU,
    so it avoids allocating anything until it finds a GPU resource.
    """
    resources = container.get("resources")
    if not resources:
        return {}
    found: dict[str, int] = {}
    for section in (resources.get("requests"), resources.get("limits")):
        if not section:
            continue
        for name, value in section.items():
            if name in found:
                continue
            if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX):
                found[name] = parse_quantity(value)
    return found


def _mentions_gpu(spec: dict) -> bool:
    """Cheap first pass: does any container ask for an ``nvidia.com/`` resource at all?

    The sync sees every pod in the cluster and most request no GPU; this check costs a
    fraction of computing the effective request, which only GPU pods then pay. It is
    written for speed (no allocations, no helper calls): it runs 150,000 times a sync.
    """
    for container in spec.get("containers") or ():
        resources = container.get("resources")
        if resources:
            requests = resources.get("requests")
            if requests:
                for name in requests:
                    if name.startswith(NV):
                        return True
            limits = resources.get("limits")
            if limits:
                for name in limits:
                    if name.startswith(NV):
                        return True
    if "initContainers" in spec or "overhead" in spec:
        return bool(pod_gpu_requests(spec))
    return False


def parse_gpu_pod(obj: dict) -> PodFacts | None:
    """Facts of a non-terminal pod that requests GPUs, or None for any other pod."""
    spec = obj.get("spec")
    if not spec or not _mentions_gpu(spec):
        return None
    status = obj.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in TERMINAL_PHASES:
        return None
    requests = pod_gpu_requests(spec)
    if not requests:
        return None
    return pod_facts(obj, requests)


def pod_facts(
    obj: dict, requests: dict[str, int], gpu_selector: dict[str, str] | None = None
) -> PodFacts:
    """A pod's facts with the GPU ``requests`` given (its containers', or on a DRA cluster
    its claims', inventory/dra.py); ``gpu_selector`` defaults to its node selector's."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    return PodFacts(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        requests=requests,
        priority_class=spec.get("priorityClassName") or "",
        k8s_created_at=parse_time(meta.get("creationTimestamp")),
        started_at=parse_time(status.get("startTime")),
        gpu_selector=pod_gpu_selector(spec) if gpu_selector is None else gpu_selector,
    )
