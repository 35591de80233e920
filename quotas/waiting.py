"""Why is my job waiting? Each waiting pod and queued workload of a namespace, with its
cause read from the cluster's own signals (issue #21 section 4). Pure functions of what the
API returned (:func:`findings`); quotas/waiting_service.py reads it and adds what to do.

The four causes and their signals:

- ``quota``: a ResourceQuota refused a controller's pods (on a DRA cluster also: the
  ResourceClaim a pod's template asks for, :func:`claim_refusals`). The controller (Job, ReplicaSet,
  StatefulSet...) records a Warning event ``FailedCreate`` "Error creating: pods "x" is
  forbidden: exceeded quota: <name>, requested: requests.nvidia.com/gpu=8, used: ...,
  limited: ..." (kubernetes ``pkg/controller/controller_utils.go``
  ``RealPodControl.createPods``; the text from k8s.io/apiserver
  ``pkg/admission/plugin/resourcequota/controller.go``). A bare pod refused this way was
  never created: only its creator saw the 403, and nothing in the cluster records it.
  Events younger than :data:`EVENT_WINDOW` count: a refused Job retries with backoff and
  its event is repeated (the API server keeps events an hour, ``--event-ttl``).
- ``queued``: a Kueue Workload without quota reserved (condition ``QuotaReserved`` False,
  message from kueue ``pkg/scheduler/flavorassigner/flavorassigner.go``
  ``Assignment.Message``: "couldn't assign flavors to pod set main: insufficient unused
  quota for nvidia.com/gpu in flavor h100, 8 more needed"), or a pod held by Kueue's
  scheduling gate ``kueue.x-k8s.io/admission`` (GPU-FACTS.md section 7). Its position is
  Kueue's own, from the visibility API's pending workloads of its LocalQueue
  (:func:`place_in_queues`), where the cluster serves that API.
- ``unschedulable``: a pod no node holds, with its ``PodScheduled`` condition False: the
  scheduler's own message ("0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3
  node(s) didn't match Pod's node affinity/selector. ..." kubernetes
  ``pkg/scheduler/framework/types.go`` and the plugins' reasons). A pod no scheduler has
  looked at yet says so.
- ``starting``: a pod bound to a node and still Pending: the latest Warning event about it
  (the kubelet's, the device plugin's ``UnexpectedAdmissionError``...) or its containers'
  waiting reason (GPU-FACTS.md section 6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from inventory.models import is_gpu_resource
from inventory.parsing import parse_time, pod_gpu_requests, pod_gpu_selector

from .kueue import workload_gpus, workload_selector

CAUSES = ("quota", "queued", "unschedulable", "starting")
KUEUE_GATE = "kueue.x-k8s.io/admission"
EVENT_WINDOW = timedelta(minutes=15)
REQUESTS = "requests."

_EXCEEDED = re.compile(
    r"exceeded quota: (?P<quota>[^,\s]+), requested: (?P<requested>\S+), "
    r"used: (?P<used>\S+), limited: (?P<limited>[^\s\"]+)"
)
_NEEDED = re.compile(
    r"insufficient (?:unused )?quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
    r"(?P<needed>\d+) more needed"
)
_INSUFFICIENT = re.compile(r"Insufficient (?P<resource>[\w./-]+)")
SELECTOR_MISMATCH = "didn't match Pod's node affinity/selector"
TAINTED = ("untolerated taint", "taints that the pod didn't tolerate")


@dataclass(frozen=True)
class QueuePosition:
    """Where Kueue's visibility API puts a pending workload (1 = next it considers)."""

    local_queue: str
    in_local_queue: int
    in_cluster_queue: int

    @classmethod
    def from_visibility(cls, item: dict) -> QueuePosition:
        """From a ``PendingWorkload`` (kueue ``apis/visibility/v1beta2/types.go``: positions
        start from 0, in the ClusterQueue's order: priority, then queue-order time)."""
        return cls(
            str(item.get("localQueueName") or ""),
            int(item.get("positionInLocalQueue") or 0) + 1,
            int(item.get("positionInClusterQueue") or 0) + 1,
        )


@dataclass
class Finding:
    """One thing that waits, per GPU resource it asks for."""

    kind: str  # "pod" or "workload" (a Kueue Workload, or a controller whose pods a quota refused)
    namespace: str
    name: str
    resource: str
    amount: int
    cause: str  # one of CAUSES
    message: str  # the cluster's own words
    selector: dict = field(default_factory=dict)  # nvidia.com/ labels it asks nodes for
    since: datetime | None = None
    # cause details: quota name / requested / used / limited; Kueue flavor and "more
    # needed"; the scheduler's reasons ("capacity", "selector", "taint")
    quota: str = ""
    used: int | None = None
    limited: int | None = None
    flavor: str = ""
    needed: int | None = None
    reasons: tuple[str, ...] = ()
    owner: str = ""  # "Job/train" for a pod a controller made
    local_queue: str = ""  # a Workload's spec.queueName
    # Kueue's own order of the LocalQueue's pending workloads (visibility API), from 1
    queue_position: QueuePosition | None = None
    queue_note: str = ""  # why there is no position, when there is none

    @property
    def owner_kind(self) -> str:
        return self.owner.partition("/")[0]

    @property
    def title(self) -> str:
        """What the researcher created: the pod, or the Job/Pod a Workload stands for."""
        return self.owner.partition("/")[2] if self.kind == "workload" and self.owner else self.name


@dataclass(frozen=True)
class DraView:
    """What a DRA cluster adds (quotas/dra.py, inventory/dra.py): per Pending pod the GPU
    devices its claims ask for and the selector of the class they name; per quota key
    (``<device class>.deviceclass.resource.k8s.io/devices``) the resource and class
    selector it counts."""

    usage: dict[str, tuple[dict[str, int], dict]] = field(default_factory=dict)
    keys: dict[str, tuple[str, dict]] = field(default_factory=dict)


def _pairs(text: str, keys: dict | None = None) -> dict[str, int]:
    """``requests.nvidia.com/gpu=8,requests.cpu=2`` -> {"nvidia.com/gpu": 8} (GPU keys; a
    DeviceClass key of ``keys`` as the resource it counts)."""
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if keys and key in keys:
            key = keys[key][0]
        key = key.removeprefix(REQUESTS)
        if is_gpu_resource(key) and value.isdigit():
            out[key] = int(value)
    return out


def parse_exceeded(message: str, keys: dict | None = None) -> dict | None:
    """The parts of a quota refusal's message, GPU resources only; None when it is not one."""
    m = _EXCEEDED.search(message)
    if m is None:
        return None
    return {
        "quota": m["quota"],
        "requested": _pairs(m["requested"], keys),
        "used": _pairs(m["used"], keys),
        "limited": _pairs(m["limited"], keys),
        "selector": next((keys[k][1] for k in (keys or {}) if k + "=" in m["requested"]), {}),
    }


def _event_time(ev: dict) -> datetime | None:
    series = ev.get("series") or {}
    return (
        parse_time(series.get("lastObservedTime"))
        or parse_time(ev.get("lastTimestamp"))
        or parse_time(ev.get("eventTime"))
        or parse_time((ev.get("metadata") or {}).get("creationTimestamp"))
    )


def _condition(obj: dict, kind: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def _owner(meta: dict) -> str:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return ""


def quota_refusals(events: list[dict], now: datetime) -> list[Finding]:
    """Controllers whose pods a ResourceQuota refused within :data:`EVENT_WINDOW` and that
    have not created a pod since: the latest refusal per controller, per GPU resource."""
    latest: dict[tuple, tuple] = {}
    created: dict[tuple, datetime] = {}  # the last pod a controller did create
    for ev in events:
        obj = ev.get("involvedObject") or {}
        key = (obj.get("namespace", ""), obj.get("kind", ""), obj.get("name", ""))
        if ev.get("reason") == "SuccessfulCreate" and (when := _event_time(ev)):
            created[key] = max(when, created.get(key, when))
        if ev.get("reason") != "FailedCreate":
            continue
        parsed = parse_exceeded(str(ev.get("message") or ""))
        when = _event_time(ev)
        if parsed is None or not parsed["requested"] or when is None or now - when > EVENT_WINDOW:
            continue
        if key not in latest or when > latest[key][0]:
            latest[key] = (when, parsed, str(ev.get("message")))
    out = []
    for key, (when, parsed, message) in sorted(latest.items(), key=lambda kv: kv[0]):
        if key in created and created[key] >= when:
            continue  # refused, then created once the quota allowed it
        namespace, kind, name = key
        for resource, amount in sorted(parsed["requested"].items()):
            out.append(
                Finding(
                    "workload", namespace, name, resource, amount, "quota",
                    message.removeprefix("Error creating: "), since=when,
                    quota=parsed["quota"], used=parsed["used"].get(resource),
                    limited=parsed["limited"].get(resource), owner=f"{kind}/{name}",
                )
            )  # fmt: skip
    return out


def queued_workloads(workloads: list[dict]) -> list[Finding]:
    """Kueue Workloads neither finished nor holding quota, per GPU resource."""
    out = []
    for wl in workloads:
        if _condition(wl, "Finished") and _condition(wl, "Finished").get("status") == "True":
            continue
        reserved = _condition(wl, "QuotaReserved")
        if reserved is not None and reserved.get("status") == "True":
            continue
        meta = wl.get("metadata") or {}
        message = str((reserved or {}).get("message") or "")
        if not message:
            message = "Kueue has not considered it yet (no QuotaReserved condition)."
        needed = {m["resource"]: (m["flavor"], int(m["needed"])) for m in _NEEDED.finditer(message)}
        since = parse_time((reserved or {}).get("lastTransitionTime")) or parse_time(
            meta.get("creationTimestamp")
        )
        for resource, amount in sorted(workload_gpus(wl).items()):
            flavor, more = needed.get(resource, ("", None))
            out.append(
                Finding(
                    "workload", meta.get("namespace", ""), meta.get("name", ""), resource,
                    amount, "queued", message, selector=workload_selector(wl), since=since,
                    flavor=flavor, needed=more, owner=_owner(meta),
                    local_queue=str((wl.get("spec") or {}).get("queueName") or ""),
                )
            )  # fmt: skip
    return out


def claim_refusals(events: list[dict], now: datetime, dra: DraView) -> list[Finding]:
    """Pods whose ResourceClaim (from a template) a ResourceQuota refused within
    :data:`EVENT_WINDOW`: the resourceclaim controller's Warning ``FailedResourceClaimCreation``
    on the pod, "PodResourceClaim gpus: resourceclaims.resource.k8s.io ... is forbidden:
    exceeded quota: ..." (kubernetes ``pkg/controller/resourceclaim/controller.go``)."""
    latest: dict[tuple, tuple] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if ev.get("reason") != "FailedResourceClaimCreation" or obj.get("kind") != "Pod":
            continue
        parsed = parse_exceeded(str(ev.get("message") or ""), dra.keys)
        when = _event_time(ev)
        if parsed is None or not parsed["requested"] or when is None or now - when > EVENT_WINDOW:
            continue
        key = (obj.get("namespace", ""), obj.get("name", ""))
        if key not in latest or when > latest[key][0]:
            latest[key] = (when, parsed, str(ev.get("message")))
    return [
        Finding(
            "pod", namespace, name, resource, amount, "quota", message, since=when,
            selector=parsed["selector"], quota=parsed["quota"],
            used=parsed["used"].get(resource), limited=parsed["limited"].get(resource),
        )
        for (namespace, name), (when, parsed, message) in sorted(latest.items())
        for resource, amount in sorted(parsed["requested"].items())
    ]  # fmt: skip


# The DynamicResources plugin's reason when no node's devices satisfy a pod's claims
# (kubernetes pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go).
CLAIMS_UNALLOCATABLE = "cannot allocate all claims"


def scheduler_reasons(message: str, resource: str) -> tuple[str, ...]:
    """Which of the scheduler's reasons a message names: ``capacity`` (Insufficient this
    resource, or claims no node's devices satisfy), ``selector``, ``taint``."""
    reasons = []
    insufficient = (m["resource"].rstrip(".") for m in _INSUFFICIENT.finditer(message))
    if resource in insufficient or CLAIMS_UNALLOCATABLE in message:
        reasons.append("capacity")
    if SELECTOR_MISMATCH in message:
        reasons.append("selector")
    if any(t in message for t in TAINTED):
        reasons.append("taint")
    return tuple(reasons)


def _pod_events(events: list[dict]) -> dict[str, dict]:
    """The latest Warning event per pod name."""
    out: dict[str, tuple] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if obj.get("kind") != "Pod" or ev.get("type") != "Warning":
            continue
        when = _event_time(ev)
        name = obj.get("name", "")
        if name not in out or (when and (out[name][0] is None or when > out[name][0])):
            out[name] = (when, ev)
    return {name: ev for name, (_, ev) in out.items()}


def _starting_message(pod: dict, event: dict | None) -> str:
    if event is not None:
        return f"{event.get('reason')}: {event.get('message')}"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message') or 'waiting'}"
    return "Bound to its node; its kubelet has not started it yet."


def pod_finding(
    pod: dict, events: dict[str, dict], queued_pods: set[str], dra: DraView | None = None
) -> list[Finding]:
    """What keeps one Pending GPU pod waiting (empty for a pod with no GPU request, and for
    a gated pod whose Workload is already reported as queued). On a DRA cluster its claims'
    devices count as its request."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name", "")
    gpus = pod_gpu_requests(spec)
    claimed, class_selector = (dra.usage.get(name) if dra else None) or ({}, {})
    for resource, amount in claimed.items():
        gpus[resource] = gpus.get(resource, 0) + amount
    if not gpus:
        return []
    gates = {g.get("name") for g in spec.get("schedulingGates") or []}
    scheduled = _condition(pod, "PodScheduled")
    since = parse_time((scheduled or {}).get("lastTransitionTime")) or parse_time(
        meta.get("creationTimestamp")
    )
    if KUEUE_GATE in gates:
        if name in queued_pods:
            return []
        cause, message = "queued", "Held by Kueue's admission gate until its Workload is admitted."
    elif spec.get("nodeName"):
        cause, message = "starting", _starting_message(pod, events.get(name))
    elif scheduled is not None and scheduled.get("status") == "False":
        cause = "unschedulable"
        message = str(scheduled.get("message") or scheduled.get("reason") or "")
    elif gates:
        cause = "unschedulable"
        message = f"Held by scheduling gates {', '.join(sorted(gates))}: no scheduler considers it."
    else:
        scheduler = spec.get("schedulerName") or "default-scheduler"
        cause = "unschedulable"
        message = f"No scheduler has placed it yet (schedulerName {scheduler})."
    selector = class_selector or pod_gpu_selector(spec)
    return [
        Finding(
            "pod", meta.get("namespace", ""), name, resource, amount, cause, message,
            selector=selector, since=since, owner=_owner(meta),
            reasons=scheduler_reasons(message, resource) if cause == "unschedulable" else (),
        )
        for resource, amount in sorted(gpus.items())
    ]  # fmt: skip


def _workload_pods(workloads: list[dict]) -> set[str]:
    """Names of the pods whose (pod-integration) Workload is queued."""
    out = set()
    for wl in workloads:
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Pod":
                out.add(ref.get("name", ""))
    return out


def findings(
    pods: list[dict],
    events: list[dict],
    workloads: list[dict] | None,
    now: datetime,
    dra: DraView | None = None,
) -> list[Finding]:
    """Everything that waits in one namespace, from its Pending pods, its Warning events
    and (on a Kueue cluster) its Workloads, (on a DRA cluster) its claims: quota refusals,
    queued workloads, then pods."""
    queued = queued_workloads(workloads or [])
    queued_pods = _workload_pods(
        [w for w in workloads or [] if any(f.name == w["metadata"]["name"] for f in queued)]
    )
    by_pod = _pod_events(events)
    refused = claim_refusals(events, now, dra) if dra is not None else []
    # a pod whose claim was refused waits for that, not for a node
    pending = {p["metadata"]["name"] for p in pods}
    refused = [f for f in refused if f.name in pending]
    out = quota_refusals(events, now) + refused + queued
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod["metadata"]["name"] not in {f.name for f in refused}:
            out += pod_finding(pod, by_pod, queued_pods, dra)
    return out


def place_in_queues(
    found: list[Finding], pending: dict[str, list[dict]] | None, why_not: str = ""
) -> None:
    """Set each queued workload's :class:`QueuePosition` from Kueue's pending lists
    (``{local queue: [PendingWorkload]}``), or say why there is none: ``pending`` None means
    the cluster gave no lists (``why_not`` says why)."""
    for f in found:
        if f.kind != "workload" or f.cause != "queued" or not f.local_queue:
            continue
        if pending is None:
            f.queue_note = why_not
            continue
        listed = {
            (item.get("metadata") or {}).get("name"): item
            for item in pending.get(f.local_queue) or []
        }
        if f.name in listed:
            f.queue_position = QueuePosition.from_visibility(listed[f.name])
        else:
            f.queue_note = (
                f"Kueue does not list it among LocalQueue {f.local_queue}'s pending workloads."
            )
