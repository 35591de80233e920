"""Applying the Kueue backend's objects, reading their status back, and the drift check.

The outbox is the ResourceQuota path's (quotas/apply.py): an Operation per namespace,
claimed, attempted, retried with backoff and audited the same way. On a Kueue cluster
``run_operation`` hands the attempt to :func:`apply_team`, which, with the team's
TeamQueue row locked (two operations of one team never interleave their writes), computes
the desired objects from the grants active now and server-side applies the ResourceFlavors,
the team's ClusterQueue and a LocalQueue in each of its namespaces. It is done when the
API server returns the ClusterQueue's spec as applied: Kueue's scheduler admits from the
spec (its cache follows the object), there is no ``status.hard`` to wait for.

Lowering a nominal quota below what admitted workloads use never stops them (Kueue
preempts only under a preemption policy, and the portal sets none): they keep running and
new workloads queue until usage falls below the quota. So nothing waits for an admin's
confirmation here; the preview says what happens (quotas/preview.py).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from inventory.models import is_gpu_resource

from . import audit, kueue
from .models import Team, TeamNamespace, TeamQueue
from .models_kueue import weight_text

log = logging.getLogger(__name__)


def team_queue(team: Team, cluster) -> TeamQueue:
    tq, _ = TeamQueue.objects.get_or_create(team=team, cluster=cluster)
    return tq


def apply_team(ns: TeamNamespace, gw: KubeGateway) -> tuple[dict, str]:
    """Apply the team's Kueue objects; returns (applied nominal, note). Raises KubeError."""
    team_queue(ns.team, ns.cluster)
    with transaction.atomic():
        tq = (
            TeamQueue.objects.select_for_update()
            .select_related("team", "cluster")
            .get(team=ns.team, cluster=ns.cluster)
        )
        want = kueue.desired(tq)
        for body in want.flavors:
            gw.apply_resource_flavor(body)
        cq = gw.apply_cluster_queue(want.cluster_queue)
        wrong = kueue.queue_differences(cq, want.cluster_queue)
        if wrong:
            raise KubeError(f"ClusterQueue read back differs from what was applied: {wrong}")
        for body in want.local_queues:
            gw.apply_local_queue(body)
        _record(tq, cq, None)
    _retire_resource_quota(ns, gw)
    name = want.cluster_queue["metadata"]["name"]
    return want.nominal, f"Kueue ClusterQueue {name} applied"


def _record(tq: TeamQueue, cq: dict | None, workloads: list[dict] | None) -> None:
    fields = {"status": kueue.queue_status(cq), "status_at": timezone.now()}
    if workloads is not None:
        fields["workloads"] = kueue.workload_summary(workloads)
    TeamQueue.objects.filter(pk=tq.pk).update(**fields)


def _retire_resource_quota(ns: TeamNamespace, gw: KubeGateway) -> None:
    """A namespace switched from the ResourceQuota backend: the portal's quota would refuse
    pods Kueue should queue (a gated pod counts against it), so it goes, audited."""
    quota = gw.get_resource_quota(ns.name, settings.QUOTA_NAME)
    labels = ((quota or {}).get("metadata") or {}).get("labels") or {}
    if quota is None or labels.get("app.kubernetes.io/managed-by") != "gpu-quota-portal":
        return
    gw.delete_resource_quota(ns.name, settings.QUOTA_NAME)
    audit.record(None, "quota.retired_for_kueue", ns, team=ns.team,
                 before=(quota.get("spec") or {}).get("hard") or {},
                 note=f"ResourceQuota {settings.QUOTA_NAME} removed: Kueue enforces this "
                      "cluster's grants")  # fmt: skip


# -- drift ---------------------------------------------------------------------------------


def reconcile_cluster(cluster, namespaces: list[TeamNamespace], busy: set, counts: dict) -> None:
    """Compare the teams' ClusterQueues, LocalQueues and the class flavors with what the
    database wants; a difference (or a missing object) is audited and re-applied through
    the outbox. Records every queue's status and workloads. ``busy``: namespace ids with an
    operation in flight (their team is left to it)."""
    by_team: dict = {}
    for ns in namespaces:
        by_team.setdefault(ns.team_id, []).append(ns)
    try:
        with KubeGateway(cluster) as gw:
            queues = gw.list_kueue_objects("clusterqueues", label_selector=_managed())
            flavors = gw.list_kueue_objects("resourceflavors", label_selector=_managed())
            if queues is None or flavors is None:
                log.warning("drift check of %s: Kueue's API is not served", cluster.slug)
                counts["errors"] += 1
                return
            queues = {q["metadata"]["name"]: q for q in queues}
            flavors = {f["metadata"]["name"]: f for f in flavors}
            flavor_drift = _flavor_drift(cluster, flavors)
            reverted = False
            for team_nss in by_team.values():
                team = team_nss[0].team
                fresh = not TeamQueue.objects.filter(team=team, cluster=cluster).exists()
                tq = team_queue(team, cluster)
                workloads, local = [], {}
                for ns in team_nss:
                    workloads += gw.list_kueue_objects("workloads", namespace=ns.name) or []
                    local[ns.name] = gw.list_kueue_objects("localqueues", namespace=ns.name) or []
                counts["checked"] += 1
                cq = queues.get(kueue.queue_name(team))
                _record(tq, cq, workloads)
                in_flight = any(ns.pk in busy for ns in team_nss)
                reason = _team_drift(tq, cq, local, fresh, team_nss)
                # With an apply in flight only a deleted object is recreated at once:
                # without its queues a namespace's pods run unlimited (or not at all).
                if reason and in_flight and (reason[0] not in RECREATIONS
                                             or _recreation_waits(team_nss)):  # fmt: skip
                    continue
                if reason:
                    _revert(team_nss[0], *reason, counts)
                    reverted = True
            # One team's apply re-applies every flavor of the cluster.
            first = next((n for nss in by_team.values() for n in nss if n.pk not in busy), None)
            if flavor_drift and not reverted and first is not None:
                note = "ResourceFlavor(s) edited or deleted outside the portal"
                _revert(first, "kueue.drift_reverted", {"flavors": flavor_drift}, {}, note, counts)
    except KubeError as err:
        log.warning("Kueue drift check of %s failed: %s", cluster.slug, err)
        counts["errors"] += 1


RECREATIONS = ("kueue.created", "kueue.recreated")
COUNTED = {"kueue.created": "created", "kueue.recreated": "recreated",
           "kueue.catch_up": "caught_up"}  # fmt: skip


def _recreation_waits(namespaces) -> bool:
    from .apply import RECREATE
    from .models import Operation

    return Operation.objects.filter(
        namespace__in=namespaces, reason=RECREATE, status=Operation.Status.PENDING, attempts=0
    ).exists()


def _revert(ns: TeamNamespace, kind: str, before, after, note: str, counts: dict) -> None:
    from .apply import RECREATE, enqueue_apply

    reason = {"kueue.catch_up": "catch-up"}.get(kind, RECREATE if kind in RECREATIONS else "drift")
    with transaction.atomic():
        audit.record(None, kind, ns, team=ns.team, before=before, after=after, note=note)
        enqueue_apply(ns, reason=reason)
    counts[COUNTED.get(kind, "reverted")] = counts.get(COUNTED.get(kind, "reverted"), 0) + 1


def _nominal_of(cq: dict) -> dict:
    """The ClusterQueue's GPU nominal quotas as an operation's applied_hard spells them."""
    out = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                if is_gpu_resource(r.get("name", "")):
                    out[f"{flavor.get('name')}/{r['name']}"] = kueue._qty_int(r.get("nominalQuota"))
    return out


def _managed() -> str:
    return ",".join(f"{k}={v}" for k, v in kueue.MANAGED_BY.items())


def _flavor_drift(cluster, flavors: dict) -> dict:
    out = {}
    for cls in kueue.classes_of(cluster):
        want = kueue.flavor_body(cls)
        name = want["metadata"]["name"]
        if name not in flavors:
            out[name] = "missing"
        elif kueue.flavor_differences(flavors[name], want):
            out[name] = kueue.flavor_differences(flavors[name], want)
    return out


def _team_drift(tq: TeamQueue, cq: dict | None, local: dict, fresh: bool, namespaces=()):
    """(audit kind, before, after, note) when the team's objects differ, else None.
    ``fresh``: the portal never applied them (a namespace new to a Kueue cluster, or a
    cluster that just switched): pods in a namespace without a LocalQueue run unlimited,
    so every team namespace gets its queues even without a grant."""
    want = kueue.desired(tq)
    name = want.cluster_queue["metadata"]["name"]
    if cq is None and fresh:
        return ("kueue.created", {}, want.nominal, f"ClusterQueue {name} created for the "
                "team's namespaces on this Kueue cluster")  # fmt: skip
    if cq is None:
        return ("kueue.recreated", {}, want.nominal, f"ClusterQueue {name} was deleted")
    wrong = kueue.queue_differences(cq, want.cluster_queue)
    if wrong:
        before = {k: v[0] for k, v in wrong.items()}
        after = {k: v[1] for k, v in wrong.items()}
        from .tasks import last_applied, last_failure

        applied = last_applied(namespaces) if namespaces else None
        if (
            set(wrong) == {"resourceGroups"}
            and applied is not None
            and _nominal_of(cq) == {k: int(v) for k, v in applied.items()}
        ):
            # The queue holds what the portal last applied: its own change is missing.
            return ("kueue.catch_up", _nominal_of(cq), want.nominal,
                    f"ClusterQueue {name}: the portal's own change had not reached the "
                    f"cluster{last_failure(namespaces)}; applying it")  # fmt: skip
        return ("kueue.drift_reverted", before, after,
                f"ClusterQueue {name} edited outside the portal")  # fmt: skip
    for body in want.local_queues:
        ns = body["metadata"]["namespace"]
        names = {q["metadata"]["name"] for q in local.get(ns, [])}
        if body["metadata"]["name"] not in names:
            return ("kueue.recreated", {}, {"localqueue": f"{ns}/{body['metadata']['name']}"},
                    f"LocalQueue {body['metadata']['name']} in {ns} was deleted")  # fmt: skip
    return None


# What admins set on a team's ClusterQueue (the TeamQueue fields of the same names).
QUEUE_SETTINGS = ("cohort", "borrowing_limit", "lending_limit", "fair_weight",
                  "reclaim_within_cohort", "borrow_within_cohort")  # fmt: skip


def _plain(values: dict) -> dict:
    """JSON for the audit trail: a weight as its text."""
    return {k: (weight_text(v) if k == "fair_weight" and v is not None else v)
            for k, v in values.items()}  # fmt: skip


@transaction.atomic
def set_queue_settings(team: Team, cluster, by, **fields) -> TeamQueue:
    """An admin sets the team's cohort, borrowing/lending limits, fair-sharing weight and
    preemption policies on a Kueue cluster; validated as Kueue's CEL rules and webhook
    would, audited, applied through the outbox."""
    from .apply import enqueue_apply

    if not by.is_staff:
        raise PermissionError("Only portal admins set a team's Kueue cohort and limits.")
    tq = TeamQueue.objects.select_for_update().get(pk=team_queue(team, cluster).pk)
    before = {k: getattr(tq, k) for k in QUEUE_SETTINGS}
    for key, value in fields.items():
        if key not in before:
            raise TypeError(key)
        setattr(tq, key, value)
    tq.full_clean(exclude=["team", "cluster"])
    tq.updated_at = timezone.now()
    tq.save()
    after = {k: getattr(tq, k) for k in before}
    if after != before:
        audit.record(by, "kueue.queue_settings", tq, team=team, before=_plain(before),
                     after=_plain(after))  # fmt: skip
        ns = TeamNamespace.objects.filter(team=team, cluster=cluster).order_by("name").first()
        if ns is not None:
            enqueue_apply(ns, reason="queue settings")
    return tq


@transaction.atomic
def enforcement_changed(cluster, by, before: str) -> int:
    """After an admin switched the cluster's backend: audited, and every team namespace
    applied under the new one (to Kueue: each team's queues are created and the portal's
    ResourceQuotas retired). Returns the operations queued."""
    from .apply import enqueue_apply

    audit.record(by, "cluster.enforcement_changed", cluster, before={"enforcement": before},
                 after={"enforcement": cluster.enforcement})  # fmt: skip
    namespaces = list(TeamNamespace.objects.filter(cluster=cluster).select_related("team"))
    for ns in namespaces:
        enqueue_apply(ns, reason="enforcement")
    return len(namespaces)
