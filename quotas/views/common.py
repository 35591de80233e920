"""Scoping helpers shared by the quota pages: what a user may see and do."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from inventory.models import NamespaceUsage

from .. import services
from ..models import (
    AuditEvent,
    Grant,
    QuotaRequest,
    Team,
)
from ..scoping import visible_to

# -- scoping ---------------------------------------------------------------------------


def visible_teams(user) -> QuerySet[Team]:
    return visible_to(Team.objects.all(), user, "pk")


def visible_requests(user) -> QuerySet[QuotaRequest]:
    qs = QuotaRequest.objects.select_related(
        "team", "namespace__cluster", "requested_by", "decided_by", "target_grant"
    )
    return visible_to(qs, user)


def visible_grants(user) -> QuerySet[Grant]:
    qs = Grant.objects.select_related("namespace__cluster", "namespace__team")
    return visible_to(qs, user, "namespace__team")


def visible_audit(user) -> QuerySet[AuditEvent]:
    return visible_to(AuditEvent.objects.select_related("team"), user)


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins can do this.")


def _can_manage(user, team: Team) -> bool:
    return user.is_staff or services.is_manager(user, team)


def _usage(namespaces) -> dict[tuple, int]:
    """Used per (namespace id, resource): the managed ResourceQuota's ``status.used`` as
    last read from the cluster, else what the namespace's pods request now (inventory
    sync), for namespaces whose quota the portal has not read yet."""
    by_key = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    rows = NamespaceUsage.objects.filter(
        cluster_id__in={ns.cluster_id for ns in namespaces},
        namespace__in={ns.name for ns in namespaces},
    ).values_list("cluster_id", "namespace", "resource", "requested")
    out = {}
    for cluster_id, name, resource, requested in rows:
        ns_id = by_key.get((cluster_id, name))
        if ns_id is not None:
            out[(ns_id, resource)] = requested
    for ns in namespaces:
        for key, value in ((ns.quota_status or {}).get("used") or {}).items():
            if key.startswith("requests."):
                out[(ns.pk, key.removeprefix("requests."))] = int(value)
    return out
