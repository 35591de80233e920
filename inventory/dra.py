"""The GPUs of a Dynamic Resource Allocation cluster, read from the API (issue #22, section 2).

On a cluster whose enforcement is ``dra`` NVIDIA's DRA driver publishes the GPUs as devices
in ResourceSlices (one pool per node; kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/deviceinfo.go``: attribute ``type`` ``gpu`` or ``mig``, ``profile``,
``productName``...) and pods hold them through ResourceClaims; the device plugin is off, so
nodes advertise no ``nvidia.com/gpu``. The inventory keeps one vocabulary for every backend:
a whole-GPU device counts as one ``nvidia.com/gpu`` and a MIG device of profile P as one
``nvidia.com/mig-P`` (the device plugin's names under the mixed strategy), so idle, free to
grant and usable (inventory/figures.py, quotas/figures.py) mean the same on a DRA cluster:

- a node's capacity and allocatable per resource: the driver's devices on it (a device that
  fails is withdrawn from the slice, so published = allocatable);
- what a pod holds: the devices allocated to its claims (``status.allocation.devices.results``,
  pool and device looked up in the slices); what a pending pod asks for: its claims'
  requests (``exactly.count`` of a DeviceClass), the class and resource told by the DeviceClass:
  the portal's carry them as annotations (quotas/dra.py), the driver's generic
  ``gpu.nvidia.com`` is whole GPUs of any model.

A pod's claims are ``spec.resourceClaims``: a ``resourceClaimName``, or a
``resourceClaimTemplateName`` whose generated claim ``status.resourceClaimStatuses`` names
(kubernetes ``pkg/controller/resourceclaim``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

from .models import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from .parsing import TERMINAL_PHASES, NodeFacts, PodFacts, parse_quantity, pod_gpu_selector
from .parsing import pod_facts as pod_facts_of

DRIVER = "gpu.nvidia.com"
GENERIC_GPU_CLASS = "gpu.nvidia.com"
GENERIC_MIG_CLASS = "mig.nvidia.com"
# On the portal's DeviceClasses (quotas/dra.py): which GPU class and resource they select.
CLASS_ANNOTATION = "gpu-portal.dev/gpu-class"
RESOURCE_ANNOTATION = "gpu-portal.dev/resource"


def _attr(device: dict, key: str) -> str:
    value = (device.get("attributes") or {}).get(key) or {}
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return str(value[kind])
    return ""


def device_resource(device: dict) -> str | None:
    """``nvidia.com/gpu`` for a whole GPU, ``nvidia.com/mig-<profile>`` for a MIG device
    (``+me`` written ``.me``, as the device plugin names it), None for anything else."""
    kind = _attr(device, "type")
    if kind == "gpu":
        return GPU_RESOURCE
    if kind == "mig" and _attr(device, "profile"):
        return MIG_RESOURCE_PREFIX + _attr(device, "profile").replace("+me", ".me")
    return None


def gfd_product(product_name: str) -> str:
    """NVML's product name as GPU Feature Discovery labels it, spaces to dashes
    (GPU-FACTS.md section 2): ``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3``; the
    product of a DRA node without GFD labels."""
    return "-".join(product_name.split())


@dataclass
class DraNode:
    """The devices the driver publishes for one node."""

    product_name: str = ""  # NVML's, from the devices' productName
    gpus: set[str] = field(default_factory=set)  # physical GPU UUIDs
    memory_mib: int | None = None
    resources: dict[str, int] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        blob = json.dumps([self.product_name, len(self.gpus), sorted(self.resources.items())])
        return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class DeviceClassInfo:
    resource: str | None  # what one device of it counts as (None: not known)
    gpu_class: str = ""  # the portal class slug it selects ("" : any model)


@dataclass
class ClaimFacts:
    node: str = ""  # where its devices are (allocated), else ""
    allocated: dict[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)  # while not allocated
    gpu_class: str = ""  # the class its requests name (a portal DeviceClass), if one


@dataclass
class DraInventory:
    nodes: dict[str, DraNode] = field(default_factory=dict)
    claims: dict[tuple[str, str], ClaimFacts] = field(default_factory=dict)
    # (pool, device) -> (node, resource) of the newest generation's devices, and what each
    # DeviceClass counts as: what a claim is read with (:meth:`add_claim`)
    devices: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    kinds: dict[str, DeviceClassInfo] = field(default_factory=dict)

    def add_claim(self, claim: dict) -> ClaimFacts:
        """Read one ResourceClaim into :attr:`claims` (replacing what was known of it)."""
        meta = claim.get("metadata") or {}
        facts = ClaimFacts()
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            for result in (allocation.get("devices") or {}).get("results") or []:
                if result.get("driver") != DRIVER:
                    continue
                key = (result.get("pool", ""), result.get("device", ""))
                node, res = self.devices.get(key, ("", ""))
                if res:
                    facts.node = facts.node or node
                    facts.allocated[res] = facts.allocated.get(res, 0) + 1
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            info = self.kinds.get(exactly.get("deviceClassName", ""))
            if info is None:
                continue
            facts.gpu_class = facts.gpu_class or info.gpu_class
            exact = exactly.get("allocationMode", "ExactCount") == "ExactCount"
            if not allocation and info.resource and exact:
                n = int(exactly.get("count") or 1)
                facts.requested[info.resource] = facts.requested.get(info.resource, 0) + n
        self.claims[(meta.get("namespace", ""), meta.get("name", ""))] = facts
        return facts

    def knows(self, claim: dict) -> bool:
        """Whether every device allocated to ``claim`` is in the slices as read (a device
        of a slice published since is not: read the slices again)."""
        allocation = (claim.get("status") or {}).get("allocation") or {}
        return all(
            (r.get("pool", ""), r.get("device", "")) in self.devices
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == DRIVER
        )

    def pod_usage(self, pod: dict) -> tuple[dict[str, int], str]:
        """(GPU resources the pod's claims hold, or ask for while unallocated; the portal
        class they name, "" if none). Claims not created yet count nothing."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        out: dict[str, int] = {}
        gpu_class = ""
        for name in claim_names(pod):
            facts = self.claims.get((namespace, name))
            if facts is None:
                continue
            for res, n in (facts.allocated or facts.requested).items():
                out[res] = out.get(res, 0) + n
            gpu_class = gpu_class or facts.gpu_class
        return out, gpu_class


def device_classes(items: list[dict]) -> dict[str, DeviceClassInfo]:
    """What each DeviceClass's devices count as: the portal's by their annotations, the
    driver's generic GPU class as whole GPUs; others unknown."""
    out = {GENERIC_GPU_CLASS: DeviceClassInfo(GPU_RESOURCE)}
    for dc in items:
        meta = dc.get("metadata") or {}
        notes = meta.get("annotations") or {}
        if RESOURCE_ANNOTATION in notes:
            out[meta.get("name", "")] = DeviceClassInfo(
                notes[RESOURCE_ANNOTATION], notes.get(CLASS_ANNOTATION, "")
            )
    return out


def other_gpu_classes(items: list[dict]) -> list[str]:
    """DeviceClasses that select the GPU driver's devices and are not the portal's (they
    carry no :data:`RESOURCE_ANNOTATION`): the driver's generic ones, an admin's."""
    out = []
    for dc in items:
        meta = dc.get("metadata") or {}
        if RESOURCE_ANNOTATION in (meta.get("annotations") or {}):
            continue
        selectors = (dc.get("spec") or {}).get("selectors") or []
        if any(DRIVER in str((s.get("cel") or {}).get("expression", "")) for s in selectors):
            out.append(meta.get("name", ""))
    return sorted(out)


def read(slices: list[dict], claims: list[dict], classes: list[dict]) -> DraInventory:
    """The inventory of a DRA cluster from its slices, claims and DeviceClasses (module doc).
    Only the newest generation of each pool counts (a pool being republished may have slices
    of two generations for a moment; kubernetes ``staging/src/k8s.io/dynamic-resource-
    allocation/structured`` uses the highest)."""
    inv = DraInventory()
    newest: dict[str, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == DRIVER:
            pool = (spec.get("pool") or {}).get("name", "")
            gen = int((spec.get("pool") or {}).get("generation") or 0)
            newest[pool] = max(newest.get(pool, gen), gen)
    where: dict[tuple[str, str], tuple[str, str]] = {}  # (pool, device) -> (node, resource)
    for s in slices:
        spec = s.get("spec") or {}
        pool_spec = spec.get("pool") or {}
        pool = pool_spec.get("name", "")
        if spec.get("driver") != DRIVER or int(pool_spec.get("generation") or 0) != newest[pool]:
            continue
        node_name = spec.get("nodeName") or ""
        if not node_name:
            continue
        node = inv.nodes.setdefault(node_name, DraNode())
        for device in spec.get("devices") or []:
            res = device_resource(device)
            if res is None:
                continue
            node.resources[res] = node.resources.get(res, 0) + 1
            node.product_name = node.product_name or _attr(device, "productName")
            uuid = _attr(device, "uuid") if res == GPU_RESOURCE else _attr(device, "parentUUID")
            node.gpus.add(uuid)
            if res == GPU_RESOURCE and node.memory_mib is None:
                memory = ((device.get("capacity") or {}).get("memory") or {}).get("value")
                node.memory_mib = _mib(memory)
            where[(pool, device.get("name", ""))] = (node_name, res)
    inv.devices, inv.kinds = where, device_classes(classes)
    for claim in claims:
        inv.add_claim(claim)
    return inv


def _mib(value: str | None) -> int | None:
    if not value:
        return None
    return parse_quantity(value) // 2**20 or None


def node_facts(facts: NodeFacts, node: DraNode | None) -> NodeFacts:
    """A node's facts on a DRA cluster: its GPU resources are the driver's devices; a node
    without GFD labels takes its product and GPU count from them."""
    changes: dict = {
        "resources": {r: (n, n) for r, n in (node.resources if node else {}).items()},
        "gpu_product_name": node.product_name if node else "",
    }
    if node is not None and not facts.gpu_product and node.product_name:
        changes |= {
            "gpu_product": gfd_product(node.product_name),
            "gpu_memory_mib": node.memory_mib,
        }
    if node is not None and not facts.gpu_count:
        changes["gpu_count"] = len(node.gpus)
    return replace(facts, **changes)


def claim_names(pod: dict) -> list[str]:
    """The names of the ResourceClaims a pod uses: named ones, and those generated from its
    templates as far as its status tells them."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {
        s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
    }
    names = [ref.get("resourceClaimName") or generated.get(ref.get("name"))
             for ref in spec.get("resourceClaims") or []]  # fmt: skip
    return [n for n in names if n]


def pod_facts(
    obj: dict, inv: DraInventory, base: PodFacts | None, selectors: dict[str, dict]
) -> PodFacts | None:
    """A pod's facts with what its claims hold or ask for added to its requests (``base``:
    what :func:`inventory.parsing.parse_gpu_pod` read from its containers, if anything);
    a pod asking through a portal DeviceClass names that class's selector."""
    spec = obj.get("spec") or {}
    if not spec.get("resourceClaims"):
        return base
    if ((obj.get("status") or {}).get("phase") or "Pending") in TERMINAL_PHASES:
        return None
    held, gpu_class = inv.pod_usage(obj)
    if not held:
        return base
    requests = dict(base.requests) if base else {}
    for res, n in held.items():
        requests[res] = requests.get(res, 0) + n
    if base is not None:
        return base._replace(requests=requests)
    return pod_facts_of(obj, requests, dict(selectors.get(gpu_class) or pod_gpu_selector(spec)))
