"""The Kueue backend's objects: what the portal wants Kueue to hold for a team on a cluster.

On a cluster whose enforcement is Kueue (docs/quotas.md, "Kueue"), each GPU class is a
ResourceFlavor (``nodeLabels`` = the class's selector, tolerations for the taints all its
nodes share), each team a ClusterQueue whose nominal quota per flavor is the sum of the
team's active grants in that class, in all its namespaces on the cluster, and each team
namespace a LocalQueue pointing at it. Pure functions of the database: the apply
(quotas/kueue_apply.py) writes them, the drift check compares the cluster with them.

Kueue facts these follow (kubernetes-sigs/kueue, apis/kueue/v1beta2 and pkg/):
- a ClusterQueue without ``namespaceSelector`` admits from no namespace (``{}``: all), so
  the portal always sets one naming the team's namespaces;
- a workload is admitted only when every resource it requests is covered by a resource
  group: the GPU resources in one group (a flavor per class), the rest
  (``settings.KUEUE_OTHER_RESOURCES``) in a second with a flavor without node labels;
- every flavor of a group lists every covered resource, in the group's order;
- ``borrowingLimit`` and ``lendingLimit`` must be nil without a cohort, and
  ``lendingLimit`` at most ``nominalQuota`` (pkg/webhooks/clusterqueue_webhook.go).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from inventory.kube import KUEUE_API
from inventory.models import GPU_RESOURCE, Cluster, GpuClass, Node, is_gpu_resource

from . import limits
from .models import Grant, Team, TeamNamespace, TeamQueue

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-quota-portal"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API


def flavor_name(cls: GpuClass) -> str:
    return f"{settings.KUEUE_NAME_PREFIX}{cls.slug}"


def default_flavor_name() -> str:
    return f"{settings.KUEUE_NAME_PREFIX}default"


def queue_name(team: Team) -> str:
    return f"{settings.KUEUE_NAME_PREFIX}{team.slug}"


def anyclass_blockers(cluster: Cluster) -> str:
    """Why the cluster cannot switch to Kueue or DRA now ("" when it can): their quota is
    per flavor or DeviceClass, so a grant for "any class" has nothing to be enforced as."""
    count = (
        Grant.objects.filter(namespace__cluster=cluster, gpu_class__isnull=True)
        .filter(
            Q(ended_at__isnull=True) & (Q(ends_at__isnull=True) | Q(ends_at__gt=timezone.now()))
        )
        .count()
    )
    if not count:
        return ""
    return (
        f"{cluster.backend_name} enforces quota per GPU class, and {count} active or upcoming "
        "grant(s) on this cluster name no class. Release them or replace them with "
        "per-class grants first."
    )


def classes_of(cluster: Cluster) -> list[GpuClass]:
    return list(GpuClass.objects.filter(cluster=cluster).order_by("slug"))


def _toleration(taint: dict) -> dict:
    tol = {"key": taint["key"], "effect": taint["effect"]}
    if taint.get("value"):
        tol |= {"operator": "Equal", "value": taint["value"]}
    else:
        tol["operator"] = "Exists"
    return tol


def flavor_tolerations(cls: GpuClass) -> list[dict]:
    """Tolerations for the taints every present node of the class carries (so an admitted
    pod can land on any of them); a taint only some nodes have is left to the pods."""
    shared: list[dict] | None = None
    for taints in Node.objects.filter(gpu_class=cls, gone_at__isnull=True).values_list(
        "taints", flat=True
    ):
        shared = list(taints) if shared is None else [t for t in shared if t in taints]
    return [_toleration(t) for t in shared or []]


def flavor_body(cls: GpuClass) -> dict:
    spec: dict = {"nodeLabels": dict(sorted(cls.selector.items()))}
    tolerations = flavor_tolerations(cls)
    if tolerations:
        spec["tolerations"] = tolerations
    return _object("ResourceFlavor", flavor_name(cls), spec)


def default_flavor_body() -> dict:
    return _object("ResourceFlavor", default_flavor_name(), {})


def _object(kind: str, name: str, spec: dict, namespace: str = "") -> dict:
    meta: dict = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": KUEUE_API, "kind": kind, "metadata": meta, "spec": spec}


def nominal(team: Team, cluster: Cluster, now: datetime | None = None) -> dict:
    """{(class id, resource): GPUs} of the team's grants active now on the cluster."""
    now = now or timezone.now()
    rows = (
        Grant.objects.filter(namespace__team=team, namespace__cluster=cluster)
        .exclude(gpu_class=None)
        .active_at(now)
        .values_list("gpu_class_id", "resource")
        .annotate(total=Sum("amount"))
    )
    return {(cls_id, res): int(total) for cls_id, res, total in rows}


def covered_gpu_resources(classes: list[GpuClass], nominal_map: dict) -> list[str]:
    """The GPU resources of the cluster's classes (and of any grant), nvidia.com/gpu first."""
    names = {r for c in classes for r in c.resources if is_gpu_resource(r)}
    names |= {res for _, res in nominal_map}
    names.add(GPU_RESOURCE)
    return [GPU_RESOURCE, *sorted(names - {GPU_RESOURCE})]


def _flavor_order(classes: list[GpuClass], nominal_map: dict) -> list[GpuClass]:
    """The classes the team holds first (Kueue tries a group's flavors in order, so a pod
    that names no class lands on its own quota before it borrows), then the rest."""
    held = defaultdict(int)
    for (cls_id, _), amount in nominal_map.items():
        held[cls_id] += amount
    return sorted(classes, key=lambda c: (held[c.pk] == 0, c.slug))


@dataclass
class Desired:
    """Everything the portal wants Kueue to hold for one team on one cluster."""

    flavors: list[dict]
    cluster_queue: dict
    local_queues: list[dict]
    nominal: dict[str, int]  # "<flavor>/<resource>" -> GPUs (the operation's applied_hard)


def desired(tq: TeamQueue, now: datetime | None = None) -> Desired:
    cluster, team = tq.cluster, tq.team
    classes = classes_of(cluster)
    nominal_map = nominal(team, cluster, now)
    covered = covered_gpu_resources(classes, nominal_map)
    gpu_flavors, summary = [], {}
    for cls in _flavor_order(classes, nominal_map):
        resources = []
        for res in covered:
            amount = nominal_map.get((cls.pk, res), 0)
            summary[f"{flavor_name(cls)}/{res}"] = amount
            entry = {"name": res, "nominalQuota": str(amount)}
            if tq.cohort and tq.borrowing_limit is not None:
                entry["borrowingLimit"] = str(tq.borrowing_limit)
            if tq.cohort and tq.lending_limit is not None:
                entry["lendingLimit"] = str(min(tq.lending_limit, amount))
            resources.append(entry)
        gpu_flavors.append({"name": flavor_name(cls), "resources": resources})
    groups = []
    if gpu_flavors:
        groups.append({"coveredResources": covered, "flavors": gpu_flavors})
    other = dict(settings.KUEUE_OTHER_RESOURCES)
    if other:
        groups.append({
            "coveredResources": list(other),
            "flavors": [{"name": default_flavor_name(), "resources": [
                {"name": r, "nominalQuota": str(q)} for r, q in other.items()]}],
        })  # fmt: skip
    names = sorted(
        TeamNamespace.objects.filter(team=team, cluster=cluster).values_list("name", flat=True)
    )
    spec: dict = {
        "namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": names}]},
        "resourceGroups": groups,
    }  # fmt: skip
    if tq.cohort:
        spec["cohortName"] = tq.cohort
    # Preemption always spelt out (Kueue's defaults are Never), so a hand edit is drift;
    # a weight only when an admin set one (absent, Kueue reads 1).
    spec["preemption"] = {
        "reclaimWithinCohort": tq.reclaim_within_cohort,
        "borrowWithinCohort": {"policy": tq.borrow_within_cohort},
    }
    if tq.fair_weight is not None:
        spec["fairSharing"] = {"weight": tq.weight_text}
    cq = queue_name(team)
    flavors = [flavor_body(c) for c in classes]
    if other:
        flavors.append(default_flavor_body())
    return Desired(
        flavors=flavors,
        cluster_queue=_object("ClusterQueue", cq, spec),
        local_queues=[
            _object("LocalQueue", settings.KUEUE_LOCAL_QUEUE, {"clusterQueue": cq}, ns)
            for ns in names
        ],
        nominal=summary,
    )


# -- comparing with what the cluster holds ------------------------------------------------


def _owned_spec(body: dict) -> dict:
    """The ClusterQueue fields the portal sets, as a comparable value (quantities as
    strings; Kueue stores them as sent)."""
    spec = body.get("spec") or {}
    return {
        "namespaceSelector": spec.get("namespaceSelector"),
        "cohortName": spec.get("cohortName") or "",
        "preemption": {
            "reclaimWithinCohort": (spec.get("preemption") or {}).get("reclaimWithinCohort")
            or "Never",
            "borrowWithinCohort": ((spec.get("preemption") or {}).get("borrowWithinCohort")
                                   or {}).get("policy") or "Never",
        },
        "fairSharing": str((spec.get("fairSharing") or {}).get("weight") or ""),
        "resourceGroups": [
            {
                "coveredResources": list(g.get("coveredResources") or []),
                "flavors": [
                    {"name": f.get("name"), "resources": [
                        {k: str(r[k]) for k in ("name", "nominalQuota", "borrowingLimit",
                                                "lendingLimit") if r.get(k) is not None}
                        for r in f.get("resources") or []]}
                    for f in g.get("flavors") or []
                ],
            }
            for g in spec.get("resourceGroups") or []
        ],
    }  # fmt: skip


def queue_differences(actual: dict | None, want: dict) -> dict:
    """{field: (actual, wanted)} of the portal's ClusterQueue fields that differ."""
    have = _owned_spec(actual or {})
    ours = _owned_spec(want)
    return {k: (have[k], v) for k, v in ours.items() if have[k] != v}


def flavor_differences(actual: dict | None, want: dict) -> dict:
    have = (actual or {}).get("spec") or {}
    ours = want["spec"]
    return {
        k: (have.get(k), ours.get(k))
        for k in ("nodeLabels", "tolerations")
        if (have.get(k) or None) != (ours.get(k) or None)
    }


# -- reading status back ------------------------------------------------------------------


def _qty_int(value) -> int:
    return limits._int(value) or 0


def queue_status(cq: dict | None) -> dict:
    """The ClusterQueue status the team page shows: per flavor and GPU resource what
    admitted workloads use (``flavorsUsage``) and borrow, the workload counts, whether it
    is active (its ``Active`` condition) and its fair-sharing weighted share."""
    status = (cq or {}).get("status") or {}
    usage: dict = {}
    for flavor in status.get("flavorsUsage") or []:
        for r in flavor.get("resources") or []:
            if is_gpu_resource(str(r.get("name"))):
                usage[f"{flavor.get('name')}/{r['name']}"] = {
                    "total": _qty_int(r.get("total")),
                    "borrowed": _qty_int(r.get("borrowed")),
                }
    active = next((c for c in status.get("conditions") or [] if c.get("type") == "Active"), None)
    return {
        "usage": usage,
        "pending": int(status.get("pendingWorkloads") or 0),
        "admitted": int(status.get("admittedWorkloads") or 0),
        "active": None if active is None else active.get("status") == "True",
        "message": "" if active is None else str(active.get("message") or ""),
        # Only when fair sharing is enabled in Kueue's configuration (the controller sets
        # status.fairSharing then, clusterqueue_controller.go); None: not reported.
        "weighted_share": ((status.get("fairSharing") or {}).get("weightedShare")),
    }


def _true(wl: dict, typ: str) -> bool:
    return any(
        c.get("type") == typ and c.get("status") == "True"
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def workload_selector(wl: dict) -> dict[str, str]:
    """The nvidia.com/ labels the first pod set's template asks for (its GPU class)."""
    from inventory.parsing import pod_gpu_selector

    for ps in (wl.get("spec") or {}).get("podSets") or []:
        return pod_gpu_selector((ps.get("template") or {}).get("spec") or {})
    return {}


def workload_gpus(wl: dict) -> dict[str, int]:
    """GPU requests of a Workload: every pod set's containers x its count."""
    out: dict[str, int] = defaultdict(int)
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        count = _qty_int(ps.get("count", 1)) or 1
        spec = (ps.get("template") or {}).get("spec") or {}
        for c in spec.get("containers") or []:
            req = ((c.get("resources") or {}).get("requests")) or {}
            lim = ((c.get("resources") or {}).get("limits")) or {}
            for r in set(req) | set(lim):
                if is_gpu_resource(r):
                    out[r] += _qty_int(req.get(r, lim.get(r))) * count
    return dict(out)


def workload_summary(workloads: list[dict]) -> dict:
    """Per namespace, the GPUs of workloads admitted and pending (not finished), and the
    pending ones that have no pod yet (a suspended Job, with the GPU labels it asks for):
    pods of pending pod workloads are already counted as pending pods (quotas/demand.py),
    Jobs' are not."""
    out: dict = {}
    for wl in workloads:
        if _true(wl, "Finished"):
            continue
        ns = wl["metadata"].get("namespace", "")
        row = out.setdefault(ns, {"admitted": {}, "pending": {}, "pending_jobs": [],
                                  "pending_count": 0, "admitted_count": 0})  # fmt: skip
        admitted = _true(wl, "QuotaReserved")
        kind = "admitted" if admitted else "pending"
        row[f"{kind}_count"] += 1
        owners = {o.get("kind") for o in wl["metadata"].get("ownerReferences") or []}
        job = not admitted and "Pod" not in owners
        gpus = workload_gpus(wl)
        for r, n in gpus.items():
            row[kind][r] = row[kind].get(r, 0) + n
        if job and gpus:
            row["pending_jobs"].append({"name": wl["metadata"].get("name", ""), "gpus": gpus,
                                        "selector": workload_selector(wl)})  # fmt: skip
    return out


@dataclass
class ClassQueueRow:
    """One GPU class of a team's ClusterQueue, as the team page shows it."""

    gpu_class: GpuClass
    resource: str
    nominal: int
    used: int
    borrowed: int


def class_rows(tq: TeamQueue, now: datetime | None = None) -> list[ClassQueueRow]:
    """Per class and GPU resource with quota or usage: the nominal quota (the team's
    active grants), what its admitted workloads hold and borrow (the ClusterQueue's
    ``flavorsUsage`` as last read)."""
    nominal_map = nominal(tq.team, tq.cluster, now)
    usage = (tq.status or {}).get("usage") or {}
    rows = []
    for cls in classes_of(tq.cluster):
        for res in sorted(set(cls.resources) | {r for c, r in nominal_map if c == cls.pk}):
            used = usage.get(f"{flavor_name(cls)}/{res}") or {}
            amount = nominal_map.get((cls.pk, res), 0)
            if amount or used.get("total"):
                rows.append(ClassQueueRow(cls, res, amount, int(used.get("total", 0)),
                                          int(used.get("borrowed", 0))))  # fmt: skip
    return rows


def cohort_lendable(tq: TeamQueue, now: datetime | None = None) -> dict:
    """{(class id, resource): GPUs} that the cohort's other portal-managed ClusterQueues on
    the cluster leave for borrowing now: each queue's nominal quota minus what its admitted
    workloads hold (``flavorsUsage`` as last read), at most its lending limit; negative
    where they hold more than their quota (they borrowed it). Queues the portal does not
    manage are not counted. One query for the queues, one per queue for its grants."""
    out: dict = defaultdict(int)
    if not tq.cohort:
        return {}
    others = TeamQueue.objects.filter(cluster=tq.cluster, cohort=tq.cohort).exclude(pk=tq.pk)
    classes = classes_of(tq.cluster)
    for other in others.select_related("team", "cluster"):
        quota = nominal(other.team, other.cluster, now)
        usage = (other.status or {}).get("usage") or {}
        for cls in classes:
            for res in cls.resources:
                unused = quota.get((cls.pk, res), 0) - int(
                    (usage.get(f"{flavor_name(cls)}/{res}") or {}).get("total", 0)
                )
                if unused > 0 and other.lending_limit is not None:
                    unused = min(unused, other.lending_limit)
                out[(cls.pk, res)] += unused
    return dict(out)


@dataclass
class CohortState:
    """A Kueue cohort on one cluster as the approval queue shows it (#25 section 3): its
    portal-managed queues and, per class and GPU resource, their nominal quota, what their
    admitted workloads hold and how much of that is borrowed (status as last read)."""

    name: str
    queues: int
    reclaiming: int  # queues whose reclaimWithinCohort is not Never
    rows: dict  # (class id, resource) -> ClassQueueRow summed over the queues (gpu_class set)


def cohort_state(cluster: Cluster, cohort: str, now: datetime | None = None) -> CohortState:
    queues = list(
        TeamQueue.objects.filter(cluster=cluster, cohort=cohort).select_related("team", "cluster")
    )
    rows: dict = {}
    for tq in queues:
        for row in class_rows(tq, now):
            key = (row.gpu_class.pk, row.resource)
            if key not in rows:
                rows[key] = ClassQueueRow(row.gpu_class, row.resource, 0, 0, 0)
            total = rows[key]
            total.nominal += row.nominal
            total.used += row.used
            total.borrowed += row.borrowed
    reclaiming = sum(1 for tq in queues if tq.reclaim_within_cohort != "Never")
    return CohortState(cohort, len(queues), reclaiming, rows)
