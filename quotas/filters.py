"""FilterSets for the quota domain, shared by the pages and ``/api/v1/``.

Team and namespace filters take slugs and names as text rather than choices from a table:
an unknown or invisible team gives an empty list, never an error that would reveal
whether another team's slug exists. The querysets they filter are already scoped to the
caller (``quotas.scoping.visible_to``).
"""

from __future__ import annotations

import uuid

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone

from portal.fields import StrictIsoDateTimeFilter, StrictIsoDateTimeFromToRangeFilter

from .models import AuditEvent, Grant, Operation, QuotaRequest


def filter_namespace(queryset: QuerySet, path: str, value: str) -> QuerySet:
    """``value`` is a TeamNamespace id or a namespace name (on any cluster)."""
    value = value.strip()
    try:
        return queryset.filter(**{f"{path}_id": uuid.UUID(value)})
    except ValueError:
        return queryset.filter(**{f"{path}__name": value})


class QuotaRequestFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    namespace = django_filters.CharFilter(
        method="filter_namespace", help_text="namespace id or name"
    )
    cluster = django_filters.CharFilter(field_name="namespace__cluster__slug", help_text="slug")
    status = django_filters.MultipleChoiceFilter(choices=QuotaRequest.Status.choices)
    kind = django_filters.ChoiceFilter(choices=QuotaRequest.Kind.choices)
    resource = django_filters.CharFilter()
    created = StrictIsoDateTimeFromToRangeFilter(
        field_name="created_at",
        help_text="created_after / created_before (ISO 8601)",
    )

    class Meta:
        model = QuotaRequest
        fields = ["team", "namespace", "cluster", "status", "kind", "resource", "created"]

    def filter_namespace(self, queryset, name, value):
        return filter_namespace(queryset, "namespace", value)


class GrantFilter(django_filters.FilterSet):
    STATES = [("active", "active"), ("upcoming", "upcoming"), ("ended", "expired or released")]

    team = django_filters.CharFilter(field_name="namespace__team__slug", help_text="team slug")
    namespace = django_filters.CharFilter(
        method="filter_namespace", help_text="namespace id or name"
    )
    cluster = django_filters.CharFilter(field_name="namespace__cluster__slug", help_text="slug")
    resource = django_filters.CharFilter()
    kind = django_filters.ChoiceFilter(choices=Grant.Kind.choices)
    state = django_filters.ChoiceFilter(choices=STATES, method="filter_state")

    class Meta:
        model = Grant
        fields = ["team", "namespace", "cluster", "resource", "kind", "state"]

    def filter_namespace(self, queryset, name, value):
        return filter_namespace(queryset, "namespace", value)

    def filter_state(self, queryset, name, value):
        now = timezone.now()
        if value == "active":
            return queryset.active_at(now)
        if value == "upcoming":
            return queryset.filter(ended_at__isnull=True, starts_at__gt=now)
        return queryset.filter(Q(ended_at__isnull=False) | Q(ends_at__lte=now))


class OperationFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="namespace__team__slug", help_text="team slug")
    namespace = django_filters.CharFilter(
        method="filter_namespace", help_text="namespace id or name"
    )
    status = django_filters.MultipleChoiceFilter(choices=Operation.Status.choices)
    reason = django_filters.CharFilter()
    request = django_filters.UUIDFilter(field_name="requests", help_text="quota request id")

    class Meta:
        model = Operation
        fields = ["team", "namespace", "status", "reason", "request"]

    def filter_namespace(self, queryset, name, value):
        return filter_namespace(queryset, "namespace", value)


class AuditEventFilter(django_filters.FilterSet):
    action = django_filters.CharFilter(
        method="filter_action",
        help_text="an action (request.approved), or a prefix ending in '.' (request.)",
    )
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    actor = django_filters.CharFilter(field_name="actor_name", help_text="username or 'system'")
    since = StrictIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = StrictIsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["action", "object_type", "object_id", "team", "actor", "since", "until"]

    def filter_action(self, queryset, name, value):
        value = value.strip()
        if value.endswith("."):
            return queryset.filter(action__startswith=value)
        return queryset.filter(action=value)
