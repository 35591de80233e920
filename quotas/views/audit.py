"""The audit trail page and its CSV export."""

from __future__ import annotations

import csv
import json
import re

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ..forms import (
    AuditFilterForm,
    audit_actions,
)
from ..models import (
    AuditEvent,
)
from .common import (
    visible_audit,
    visible_teams,
)

AUDIT_PER_PAGE = 50


# -- audit -----------------------------------------------------------------------------


def _audit_filtered(request: HttpRequest) -> tuple[AuditFilterForm, QuerySet[AuditEvent]]:
    form = AuditFilterForm(
        request.GET or None, teams=list(visible_teams(request.user)), actions=audit_actions()
    )
    qs = visible_audit(request.user)
    if form.is_bound:
        qs = form.filter(qs) if form.is_valid() else qs.none()
    return form, qs


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    form, qs = _audit_filtered(request)
    page = Paginator(qs, AUDIT_PER_PAGE).get_page(request.GET.get("page"))
    names = object_names(page.object_list)
    for e in page.object_list:
        e.changes = _changes(e.before, e.after)
        e.object_name = names.get((e.object_type, e.object_id), "")
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "quotas/audit.html",
        {
            "form": form,
            "page": page,
            "filtered": any(v for k, v in request.GET.items() if k != "page"),
            "export_query": query.urlencode(),
        },
    )


def object_names(events) -> dict[tuple[str, str], str]:
    """What each event is about, by name (a namespace, team, node, grant...), not by id:
    one query per kind of object on the page. An object deleted since keeps its id only."""
    from inventory.models import Cluster, Node
    from mig.models import MigRequest

    from ..models import ForeignQuota, Grant, QuotaRequest, Team, TeamNamespace

    def ns(n) -> str:
        return f"{n.cluster.slug}/{n.name}"

    kinds = {
        "teamnamespace": (TeamNamespace.objects.select_related("cluster"), ns),
        "team": (Team.objects.all(), lambda t: t.name),
        "node": (Node.objects.select_related("cluster"), lambda n: f"{n.cluster.slug}/{n.name}"),
        "cluster": (Cluster.objects.all(), lambda c: c.slug),
        "grant": (Grant.objects.select_related("namespace__cluster"),
                  lambda g: f"+{g.amount} {g.resource} for {ns(g.namespace)}"),
        "quotarequest": (QuotaRequest.objects.select_related("namespace__cluster"),
                         lambda r: f"+{r.amount} {r.resource} for {ns(r.namespace)}"),
        "foreignquota": (ForeignQuota.objects.select_related("namespace__cluster"),
                         lambda q: f"quota {q.name} in {ns(q.namespace)}"),
        "migrequest": (MigRequest.objects.all(), lambda m: str(m)),
    }  # fmt: skip
    wanted: dict[str, set] = {}
    for e in events:
        if e.object_type in kinds:
            wanted.setdefault(e.object_type, set()).add(e.object_id)
    out = {}
    for kind, ids in wanted.items():
        qs, label = kinds[kind]
        valid = [i for i in ids if _pk_like(qs.model, i)]
        for obj in qs.filter(pk__in=valid):
            out[(kind, str(obj.pk))] = label(obj)
    return out


def _pk_like(model, value: str) -> bool:
    from django.core.exceptions import ValidationError

    try:
        model._meta.pk.to_python(value)
    except (ValueError, TypeError, ValidationError):  # a malformed id names nothing
        return False
    return True


_ISO = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)[^ ]*$")


def _shown(value) -> str:
    """A before/after value for the page: ISO times to the minute, JSON otherwise."""
    if value is None:
        return "—"
    if isinstance(value, str):
        match = _ISO.match(value)
        return f"{match[1]} {match[2]}" if match else value
    return json.dumps(value, ensure_ascii=False)


def _changes(before, after) -> list[tuple[str, str | None, str]]:
    """(key, before or None when there was no before, after) per key, for the audit page."""
    before, after = before or {}, after or {}
    if not isinstance(before, dict) or not isinstance(after, dict):
        return [("", _shown(before), _shown(after))]
    return [
        (k, _shown(before[k]) if k in before else None, _shown(after.get(k)))
        for k in sorted(set(before) | set(after))
    ]


def _compact(value) -> str:
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)


def csv_cell(value) -> str:
    """A CSV cell a spreadsheet will not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@login_required
def audit_export(request: HttpRequest) -> HttpResponse:
    form, qs = _audit_filtered(request)
    if form.is_bound and not form.is_valid():
        # Never a CSV of only its header row: the filter was refused, say why.
        reasons = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return HttpResponse(
            f"Invalid filter, nothing exported: {reasons}",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["at", "actor", "action", "object_type", "object_id", "team", "before", "after", "note"]
    )
    for e in qs.iterator(chunk_size=1000):
        writer.writerow(
            csv_cell(v)
            for v in (
                e.at.isoformat(),
                e.actor_name,
                e.action,
                e.object_type,
                e.object_id,
                e.team.slug if e.team else "",
                _compact(e.before),
                _compact(e.after),
                e.note,
            )
        )
    return response
