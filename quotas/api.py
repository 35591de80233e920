"""REST API for teams, quota requests, grants, apply operations and the audit trail.

Every viewset derives from ``TeamScopedViewSet``: its queryset holds only rows of the
caller's teams (admins see everything), so another team's object is a 404 on every
endpoint and action. Views parse input and map domain errors to HTTP; the rules live in
``quotas.services``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, renderers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.rest import drf_detail

from . import membership, preview, services
from .filters import AuditEventFilter, GrantFilter, OperationFilter, QuotaRequestFilter
from .models import (
    AuditEvent,
    Grant,
    Membership,
    Operation,
    QuotaRequest,
    RequestEvent,
    Team,
    TeamNamespace,
)
from .scoping import visible_to
from .serializers import (
    ApproveSerializer,
    AuditEventSerializer,
    BaselineSerializer,
    CancelSerializer,
    ErrorSerializer,
    GrantSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    MemberSerializer,
    OperationSerializer,
    OutlookSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestDetailSerializer,
    QuotaRequestSerializer,
    RejectSerializer,
    TeamSerializer,
)
from .serializers_waiting import WaitingSerializer
from .waiting_service import team_waiting


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object is not in a state that allows this."
    default_code = "conflict"


@contextmanager
def domain_errors() -> Iterator[None]:
    """Map the services' exceptions to API errors: field messages to 400 (404 or 409 by
    their codes, portal.validation.NOT_FOUND and CONFLICT), a refused
    actor to 403, an illegal transition to 409."""
    try:
        yield
    except DjangoValidationError as exc:  # CapacityError included
        raise exceptions.ValidationError(drf_detail(exc)) from exc
    except PermissionError as exc:
        raise exceptions.PermissionDenied(str(exc)) from exc
    except services.TransitionError as exc:
        raise Conflict(str(exc)) from exc


class AdminOnly(permissions.BasePermission):
    """Portal admins (Django staff) only. As a permission class it runs before the view
    reads the body, so a member's request is refused (403) before any field error."""

    message = "Only portal admins can do this."

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_staff)


class TeamScopedViewSet(viewsets.GenericViewSet):
    """Base of the quota viewsets: ``queryset`` (with its joins) limited to the caller.

    ``team_path`` leads from the model to its Team. A concrete viewset sets
    ``queryset``, ``serializer_class``, ``filterset_class`` and ``ordering_fields``;
    ``admin_actions`` names the actions only admins may take (checked first: 403 before
    the body is validated or the object looked up).
    """

    team_path = "team"
    ordering_fields: list[str] = []
    admin_actions: frozenset[str] = frozenset()

    def get_permissions(self):
        perms = super().get_permissions()
        if self.action in self.admin_actions:
            perms.append(AdminOnly())
        return perms

    def get_queryset(self):
        qs = super().get_queryset()
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return qs.none()
        return visible_to(qs, self.request.user, self.team_path)


_errors = {
    400: OpenApiResponse(ErrorSerializer, description="invalid input, per-field messages"),
    403: OpenApiResponse(ErrorSerializer, description="not allowed to take this action"),
    404: OpenApiResponse(ErrorSerializer, description="unknown, or another team's"),
    409: OpenApiResponse(ErrorSerializer, description="the request is no longer pending"),
}


class TeamManagerOrAdmin(permissions.BasePermission):
    """The team's managers and portal admins (issue #12 section 1). Runs before the body
    is read: a member of the team gets 403 before any field error; someone outside it
    gets the 404 an unknown team gets, as on every other team endpoint."""

    message = "Only the team's managers and portal admins can change its members."

    def has_permission(self, request, view) -> bool:
        if request.user.is_staff:
            return True
        role = (
            Membership.objects.filter(team__slug=view.kwargs.get("slug"), user=request.user)
            .values_list("role", flat=True)
            .first()
        )
        if role is None:
            raise exceptions.NotFound("No team with this slug among your teams.")
        return role == Membership.Role.MANAGER


MEMBER_RULES = (
    "Only the team's managers and portal admins (403 for other members, before the body is "
    "read; 404 for people outside the team). Each change is audited and e-mailed to the "
    "person and the team's managers."
)
_member_errors = {
    **_errors,
    404: OpenApiResponse(ErrorSerializer, description="unknown team or member, or another team's"),
    409: OpenApiResponse(
        ErrorSerializer, description="already a member, or the team's last manager"
    ),
}


class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Teams you belong to (admins: all), with members and namespaces."""

    queryset = Team.objects.prefetch_related(
        Prefetch("memberships", queryset=Membership.objects.select_related("user")),
        Prefetch("namespaces", queryset=TeamNamespace.objects.select_related("cluster")),
    )
    serializer_class = TeamSerializer
    lookup_field = "slug"
    team_path = "pk"
    ordering_fields = ["name", "slug"]
    ordering = ["name"]
    admin_actions = frozenset({"baseline"})

    def get_serializer(self, *args, **kwargs):
        """Loads the namespaces' limits in bulk (quotas/preview.py) for the teams shown."""
        if args and self.action in ("list", "retrieve"):
            teams = list(args[0]) if kwargs.get("many") else [args[0]]
            context = kwargs.setdefault("context", self.get_serializer_context())
            context["states"] = preview.states([ns for t in teams for ns in t.namespaces.all()])
            args = (teams if kwargs.get("many") else teams[0], *args[1:])
        return super().get_serializer(*args, **kwargs)

    @extend_schema(
        request=BaselineSerializer,
        responses={200: GrantSerializer, 204: None, **_errors},
        summary="Set a namespace's permanent baseline of one resource (admins; 0 removes it)",
    )
    @action(detail=True, methods=["post"])
    def baseline(self, request, slug=None):
        team = self.get_object()
        form = BaselineSerializer(data=request.data, context={"team": team})
        form.is_valid(raise_exception=True)
        with domain_errors():
            grant = services.set_baseline(
                form.validated_data["namespace"],
                form.validated_data["resource"],
                form.validated_data["amount"],
                request.user,
            )
        if grant is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(GrantSerializer(grant, context={"request": request}).data)

    # -- members (issue #12 section 1; rules in quotas/membership.py) -----------------

    manager_actions = frozenset({"add_member", "set_member_role", "remove_member"})

    def get_permissions(self):
        perms = super().get_permissions()
        if self.action in self.manager_actions:
            perms.append(TeamManagerOrAdmin())
        return perms

    @extend_schema(
        responses={200: MemberSerializer(many=True), 404: _errors[404]},
        summary="Who is in the team, with roles (every member)",
        description="Every member of the team (and admins) may read this list.",
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def members(self, request, slug=None):
        team = self.get_object()
        return Response(MemberSerializer(team.memberships.all(), many=True).data)

    @extend_schema(
        responses={200: WaitingSerializer, 404: _errors[404]},
        summary="Why the team's jobs wait: each pending pod and queued workload, its cause "
        "and what to do (the team's members and admins)",
        description="Read from the team's clusters now. `cause` is `quota` (a ResourceQuota "
        "refused a controller's pods), `queued` (Kueue has not admitted the workload), "
        "`unschedulable` (the scheduler found no node) or `starting` (bound, not started); "
        "`message` is the cluster's own text. A cluster that cannot be read is listed in "
        "`unreadable` and its namespaces are left out.",
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def waiting(self, request, slug=None):
        return Response(WaitingSerializer(team_waiting(self.get_object())).data)

    @extend_schema(
        request=MemberAddSerializer,
        responses={201: MemberSerializer, **_member_errors},
        summary="Add an existing account to the team (its managers and admins)",
        description=MEMBER_RULES + " `user` is a username or an e-mail address; accounts are "
        "created when people first sign in, so an unknown one is a 400 (they must sign in "
        "once first). Someone already in the team is a 409.",
    )
    @members.mapping.post
    def add_member(self, request, slug=None):
        team = self.get_object()
        form = MemberAddSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            m = membership.add_member(
                team, form.validated_data["user"], form.validated_data["role"], request.user
            )
        return Response(MemberSerializer(m).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, **_member_errors},
        summary="Make a member a manager or back (its managers and admins)",
        description=MEMBER_RULES + " Demoting the team's last manager is a 409.",
    )
    @action(
        detail=True,
        methods=["patch"],
        url_path=r"members/(?P<username>[^/]+)",
        pagination_class=None,
        filter_backends=[],
    )
    def set_member_role(self, request, slug=None, username=None):
        team = self.get_object()
        form = MemberRoleSerializer(data=request.data, partial=True)  # PATCH {}: no change
        form.is_valid(raise_exception=True)
        with domain_errors():
            m = membership.set_role(team, username, form.validated_data.get("role"), request.user)
        return Response(MemberSerializer(m).data)

    @extend_schema(
        request=None,
        responses={204: None, **{k: v for k, v in _member_errors.items() if k != 400}},
        summary="Remove someone from the team (its managers and admins)",
        description=MEMBER_RULES + " Removing the team's last manager is a 409.",
    )
    @set_member_role.mapping.delete
    def remove_member(self, request, slug=None, username=None):
        team = self.get_object()
        with domain_errors():
            membership.remove_member(team, username, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    create=extend_schema(
        request=QuotaRequestCreateSerializer,
        responses={201: QuotaRequestDetailSerializer, 400: _errors[400]},
        summary="File a quota request (admins: for any team, recorded as on behalf)",
    ),
)
class QuotaRequestViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    TeamScopedViewSet,
):
    """Quota requests of your teams: file, follow, and (admins) decide."""

    queryset = QuotaRequest.objects.select_related(
        "team", "namespace__cluster", "requested_by", "decided_by", "gpu_class"
    )
    filterset_class = QuotaRequestFilter
    ordering_fields = ["created_at", "amount", "status"]
    ordering = ["-created_at"]
    admin_actions = frozenset({"approve", "reject"})

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action != "list":
            qs = qs.prefetch_related(
                Prefetch("events", queryset=RequestEvent.objects.select_related("actor"))
            )
        return qs

    def get_serializer_class(self):
        if self.action == "list":
            return QuotaRequestSerializer
        if self.action == "create":
            return QuotaRequestCreateSerializer
        return QuotaRequestDetailSerializer

    def create(self, request, *args, **kwargs):
        form = QuotaRequestCreateSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        with domain_errors():
            req = services.submit(request.user, form.validated_data["data"])
        return Response(self._detail(req), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=QuotaRequestCreateSerializer,
        responses={200: OutlookSerializer, **_errors},
        summary="Preview a request before sending it: held, used and free for its class",
    )
    @action(detail=False, methods=["post"])
    def preview(self, request):
        form = QuotaRequestCreateSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        data = form.validated_data["data"]
        problems: dict = {}
        try:
            data = services.validate(request.user, data)
        except DjangoValidationError as err:
            problems = err.message_dict
        body = preview.outlook(
            data.namespace, data.gpu_class, data.resource, data.starts_at, data.ends_at
        ).as_dict()
        return Response(OutlookSerializer({**body, "problems": problems}).data)

    @extend_schema(
        request=ApproveSerializer,
        responses={200: QuotaRequestDetailSerializer, **_errors},
        summary="Approve (admins), optionally a smaller amount or a shorter window",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        req = self.get_object()
        form = ApproveSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            req = services.approve(req, request.user, **form.validated_data)
        return Response(self._detail(req))

    @extend_schema(
        request=RejectSerializer,
        responses={200: QuotaRequestDetailSerializer, **_errors},
        summary="Reject with a reason (admins)",
    )
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        req = self.get_object()
        form = RejectSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            req = services.reject(req, request.user, form.validated_data["reason"])
        return Response(self._detail(req))

    @extend_schema(
        request=CancelSerializer,
        responses={200: QuotaRequestDetailSerializer, **_errors},
        summary="Withdraw a pending request (requester, team manager or admin)",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        req = self.get_object()
        form = CancelSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            req = services.cancel(req, request.user, form.validated_data["note"])
        return Response(self._detail(req))

    def _detail(self, req: QuotaRequest) -> dict:
        fresh = self.queryset.prefetch_related(
            Prefetch("events", queryset=RequestEvent.objects.select_related("actor"))
        ).get(pk=req.pk)
        return QuotaRequestDetailSerializer(fresh, context=self.get_serializer_context()).data


class GrantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Grants of your teams' namespaces: active, upcoming, expired and released."""

    queryset = Grant.objects.select_related("namespace__cluster", "namespace__team", "gpu_class")
    serializer_class = GrantSerializer
    filterset_class = GrantFilter
    team_path = "namespace__team"
    ordering_fields = ["created_at", "starts_at", "ends_at", "amount"]
    ordering = ["-created_at"]


class OperationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """Apply operations (outbox rows) for your teams' namespaces, with every attempt."""

    queryset = Operation.objects.select_related(
        "namespace__cluster", "namespace__team"
    ).prefetch_related(
        "attempt_log", Prefetch("requests", queryset=QuotaRequest.objects.only("id"))
    )
    serializer_class = OperationSerializer
    filterset_class = OperationFilter
    team_path = "namespace__team"
    ordering_fields = ["created_at", "finished_at", "attempts"]
    ordering = ["-created_at"]


CSV_COLUMNS = [
    "at", "actor", "action", "object_type", "object_id", "team", "before", "after", "note",
]  # fmt: skip


def _csv_cell(value) -> str:
    """Text for a spreadsheet: JSON for structures; a leading quote defuses formulas."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class _Echo:
    def write(self, value: str) -> str:
        return value


class CSVRenderer(renderers.BaseRenderer):
    """Lets a client ask for ``Accept: text/csv``; the export streams its own body, and
    errors on this path are written as JSON text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return json.dumps(data).encode() if data is not None else b""


class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """The audit trail of your teams (admins: everything, including events of no team)."""

    queryset = AuditEvent.objects.select_related("team")
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    ordering_fields = ["at"]
    ordering = ["-at", "-id"]

    @extend_schema(
        responses={(200, "text/csv"): OpenApiTypes.STR, 400: _errors[400]},
        summary="The same events as CSV (same filters, not paginated)",
    )
    @action(
        detail=False,
        methods=["get"],
        pagination_class=None,
        renderer_classes=[renderers.JSONRenderer, CSVRenderer],
    )
    def export(self, request):
        events = self.filter_queryset(self.get_queryset())
        writer = csv.writer(_Echo())

        def rows() -> Iterator[str]:
            yield writer.writerow(CSV_COLUMNS)
            for e in events.iterator(chunk_size=2000):
                team = e.team.slug if e.team else ""
                yield writer.writerow(
                    [e.at.isoformat(), e.actor_name, e.action, e.object_type, e.object_id, team]
                    + [_csv_cell(v) for v in (e.before, e.after, e.note)]
                )

        response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit-events.csv"'
        return response
