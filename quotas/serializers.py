"""Serializers for the quota API.

Output serializers read rows that the viewsets load with ``select_related`` /
``prefetch_related`` (no per-row queries). Input serializers only parse and resolve
references; every business rule is checked by ``quotas.services``.
"""

from __future__ import annotations

import uuid

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import TextChoices, prefetch_related_objects
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import GpuClass
from portal.fields import StrictInput
from portal.validation import NOT_FOUND

from . import notify, services
from .models import (
    AuditEvent,
    Grant,
    Membership,
    Operation,
    OperationAttempt,
    QuotaRequest,
    RequestEvent,
    Team,
    TeamNamespace,
)
from .scoping import visible_to
from .serializers_limits import NamespaceLimitsSerializer

User = get_user_model()


def username() -> serializers.SlugRelatedField:
    # null when no user is set (a system action, an undecided request): schema says so
    return serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)


class VisibleTeamField(serializers.SlugRelatedField):
    """A team slug in a request body, looked up among the caller's teams (admins: all).

    Another team's slug and a made-up one get the same field error, so a body cannot
    tell a non-member which teams exist (issue #11, section 3)."""

    default_error_messages = {
        "does_not_exist": "No team {value!r} among your teams.",
        "invalid": "Give a team slug.",
    }

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("slug_field", "slug")
        kwargs.setdefault("queryset", Team.objects.all())
        super().__init__(**kwargs)

    def get_queryset(self):
        request = self.context.get("request")
        qs = super().get_queryset()
        return visible_to(qs, request.user, "pk") if request is not None else qs.none()


class EnumField(serializers.ChoiceField):
    """A ChoiceField shown in the schema as the named enum ``enum_name``.

    drf-spectacular names enums after the field, so requests' and operations' ``status``
    (or requests' and grants' ``kind``) would collide; a name per choice set avoids that.
    """

    def __init__(self, choices, *, enum_name: str, **kwargs):
        self.enum_name = enum_name
        super().__init__(choices, **kwargs)


class EnumFieldExtension(OpenApiSerializerFieldExtension):
    target_class = EnumField

    def get_name(self) -> str:
        return self.target.enum_name

    def map_serializer_field(self, auto_schema, direction) -> dict:
        return {"type": "string", "enum": list(self.target.choices)}


def enum(choices: type[TextChoices], **kwargs) -> EnumField:
    """``EnumField`` named after the TextChoices class: QuotaRequest.Status ->
    QuotaRequestStatusEnum."""
    name = choices.__qualname__.replace(".", "") + "Enum"
    return EnumField(choices.choices, enum_name=name, **kwargs)


# -- output -----------------------------------------------------------------------------


class NamespaceSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = TeamNamespace
        fields = ["id", "cluster", "name"]
        read_only_fields = fields


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    role = enum(Membership.Role, read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]
        read_only_fields = fields


class TeamSerializer(serializers.ModelSerializer):
    members = MemberSerializer(source="memberships", many=True, read_only=True)
    # With effective limits and foreign quotas (quotas/serializers_limits.py).
    namespaces = NamespaceLimitsSerializer(many=True, read_only=True)
    my_role = serializers.SerializerMethodField(
        help_text="the caller's role in the team; null for an admin who is not a member"
    )

    class Meta:
        model = Team
        fields = ["slug", "name", "description", "members", "namespaces", "my_role"]
        read_only_fields = fields

    @extend_schema_field(enum(Membership.Role, allow_null=True))
    def get_my_role(self, team: Team) -> str | None:
        request = self.context.get("request")
        user_id = request.user.pk if request else None
        # Reads the prefetched memberships: no query per team.
        return next((m.role for m in team.memberships.all() if m.user_id == user_id), None)


class RequestEventSerializer(serializers.ModelSerializer):
    actor = username()

    class Meta:
        model = RequestEvent
        fields = ["at", "from_status", "to_status", "actor", "note"]
        read_only_fields = fields


class _GrantedListSerializer(serializers.ListSerializer):
    """Lists load the grants ``granted_amount`` reads in two queries, not one per row."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        prefetch_related_objects(items, "grant", "target_grant")
        return super().to_representation(items)


class QuotaRequestSerializer(serializers.ModelSerializer):
    status = enum(QuotaRequest.Status, read_only=True)
    kind = enum(QuotaRequest.Kind, read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = NamespaceSerializer(read_only=True)
    requested_by = username()
    decided_by = username()
    gpu_class = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="GPU class slug; null: any class",
    )
    # What the approval gave, which can be less (and shorter) than asked: amount and
    # ends_at above are what was asked (quotas/notify.py ``granted``).
    granted_amount = serializers.SerializerMethodField(
        help_text="the amount approved (can be less than amount); null: nothing granted (yet)"
    )
    granted_ends_at = serializers.SerializerMethodField(
        help_text="the end of the granted window (can be before ends_at); null: permanent, "
        "or nothing granted (see granted_amount)"
    )

    class Meta:
        model = QuotaRequest
        fields = [
            "id", "status", "kind", "team", "namespace", "gpu_class", "resource", "amount",
            "starts_at",
            "ends_at", "justification", "target_grant", "requested_by", "on_behalf",
            "decided_by", "decided_at", "decision_note", "grant", "granted_amount",
            "granted_ends_at", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields
        list_serializer_class = _GrantedListSerializer

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_granted_amount(self, req: QuotaRequest) -> int | None:
        gave = notify.granted(req)
        return None if gave is None else gave.amount

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_granted_ends_at(self, req: QuotaRequest) -> str | None:
        gave = notify.granted(req)
        if gave is None or gave.ends_at is None:
            return None
        return serializers.DateTimeField().to_representation(gave.ends_at)


class OutcomeSerializer(serializers.Serializer):
    """An approved request as the team meets it (quotas/figures.py ``outcome``)."""

    granted = serializers.IntegerField(help_text="what the approval granted")
    usable_gain = serializers.IntegerField(
        help_text="how much the grant raised what the namespace can use (0 when another quota "
        "binds below it, or the cluster does not hold the new quota yet)"
    )
    usable_now = serializers.IntegerField(
        allow_null=True, help_text="usable by the team now (null: no quota limits it)"
    )
    binding = serializers.CharField(help_text="the quota or queue that limits the namespace")
    applied = serializers.BooleanField(help_text="the cluster holds the quota with this grant")
    text = serializers.CharField(help_text="'granted +6, usable +0: quota gpu-quota caps ...'")


class WaitEstimateSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True, help_text="null: no estimate (text says why)")
    text = serializers.CharField(help_text="the estimate and its basis, or why there is none")


class QuotaRequestDetailSerializer(QuotaRequestSerializer):
    events = RequestEventSerializer(many=True, read_only=True)
    outcome = serializers.SerializerMethodField(
        help_text="for an approved request: granted, usable_now and what binds; null otherwise"
    )
    wait_estimate = serializers.SerializerMethodField(
        help_text="for a pending request: when it may be decided, from when the capacity it "
        "needs frees (grants' ends) and the median time to a decision; null otherwise"
    )

    class Meta(QuotaRequestSerializer.Meta):
        fields = [*QuotaRequestSerializer.Meta.fields, "outcome", "wait_estimate", "events"]
        read_only_fields = fields

    @extend_schema_field(WaitEstimateSerializer(allow_null=True))
    def get_wait_estimate(self, req: QuotaRequest) -> dict | None:
        if req.status != QuotaRequest.Status.PENDING or req.kind == QuotaRequest.Kind.RELEASE:
            return None
        from .request_wait import estimate

        found = estimate(req)
        return {"at": found.at, "text": found.text}

    @extend_schema_field(OutcomeSerializer(allow_null=True))
    def get_outcome(self, req: QuotaRequest) -> dict | None:
        from .figures import outcome

        out = outcome(req)
        if out is None:
            return None
        return OutcomeSerializer(out).data | {"text": out.text(req.namespace.name)}


class GrantSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(source="namespace.team", slug_field="slug", read_only=True)
    namespace = NamespaceSerializer(read_only=True)
    kind = enum(Grant.Kind, read_only=True)
    gpu_class = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="GPU class slug; null: any class",
    )
    state = serializers.SerializerMethodField(
        help_text="active, upcoming, expired or released (now)"
    )

    class Meta:
        model = Grant
        fields = [
            "id", "team", "namespace", "gpu_class", "resource", "amount", "starts_at",
            "ends_at", "kind",
            "state", "ended_at", "end_reason", "created_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_state(self, grant: Grant) -> str:
        return grant.state()


class OperationAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = OperationAttempt
        fields = ["number", "started_at", "finished_at", "ok", "error"]
        read_only_fields = fields


class OperationSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(source="namespace.team", slug_field="slug", read_only=True)
    namespace = NamespaceSerializer(read_only=True)
    status = enum(Operation.Status, read_only=True)
    attempt_log = OperationAttemptSerializer(many=True, read_only=True)
    requests = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    applied_hard = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="the ResourceQuota's status.hard as read back after the apply",
    )
    lowering = serializers.JSONField(
        read_only=True,
        help_text="status confirm: keys it would set below usage, {key: {hard, was, used}}",
    )
    confirmed_hard = serializers.JSONField(
        read_only=True, help_text="values below usage an admin confirmed"
    )

    class Meta:
        model = Operation
        fields = [
            "id", "team", "namespace", "reason", "status", "attempts", "max_attempts",
            "last_error", "unreachable_since", "next_attempt_at", "applied_hard", "lowering",
            "confirmed_hard", "created_at", "started_at", "finished_at", "attempt_log",
            "requests",
        ]  # fmt: skip
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    team = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="null: no team's event"
    )
    before = serializers.JSONField(read_only=True, allow_null=True)
    after = serializers.JSONField(read_only=True, allow_null=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id", "at", "actor", "action", "object_type", "object_id", "team", "before",
            "after", "note",
        ]  # fmt: skip
        read_only_fields = fields


# -- input ------------------------------------------------------------------------------


class QuotaRequestCreateSerializer(StrictInput, serializers.Serializer):
    """Parses a new request and resolves its references; ``services.submit`` validates.

    Renewals and releases take the namespace, resource and amount from ``target_grant``
    when they are left out.
    """

    team = VisibleTeamField()
    namespace = serializers.CharField(
        required=False, max_length=63, help_text="the team namespace's id or its name"
    )
    cluster = serializers.CharField(
        required=False,
        max_length=63,
        help_text="cluster slug; needed only when the team has that namespace name on "
        "several clusters",
    )
    resource = serializers.CharField(
        required=False, max_length=100, help_text="nvidia.com/gpu or nvidia.com/mig-*"
    )
    gpu_class = serializers.SlugField(
        required=False, allow_null=True, max_length=63,
        help_text="slug of a GPU class of the namespace's cluster (GET /api/v1/gpu-classes/); "
        "empty: any class. Renewals and releases keep the grant's class.",
    )  # fmt: skip
    amount = serializers.IntegerField(required=False)
    starts_at = serializers.DateTimeField(required=False, allow_null=True, help_text="empty: now")
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="empty: permanent"
    )
    # Length and blankness are checked by services.validate, with its messages.
    justification = serializers.CharField(
        required=False, allow_blank=True, default="", trim_whitespace=False
    )
    kind = enum(QuotaRequest.Kind, default=QuotaRequest.Kind.NEW)
    target_grant = serializers.UUIDField(
        required=False, allow_null=True, help_text="the grant to renew or release"
    )

    def validate(self, attrs: dict) -> dict:
        user = self.context["request"].user
        team = attrs["team"]
        # Asked before the namespace lookup, so that an unknown namespace cannot tell a
        # non-member what the team's namespaces are called.
        try:
            services.check_may_file(user, team)
        except DjangoValidationError as err:
            raise serializers.ValidationError(err.message_dict) from err
        grant = None
        if attrs.get("target_grant"):
            grant = (
                visible_to(
                    Grant.objects.select_related("namespace__cluster"), user, "namespace__team"
                )
                .filter(pk=attrs["target_grant"])
                .first()
            )
            if grant is None:
                raise serializers.ValidationError({"target_grant": "No such grant."})
        new = attrs["kind"] == QuotaRequest.Kind.NEW
        if attrs.get("namespace"):
            namespace = self._namespace(user, team, attrs["namespace"], attrs.get("cluster"))
        elif grant is not None and not new:
            namespace = grant.namespace
        else:
            raise serializers.ValidationError({"namespace": "This field is required."})
        # Renewals and releases take resource and amount from the grant (services).
        missing = {
            name: "This field is required."
            for name in ("resource", "amount")
            if new and attrs.get(name) is None
        }
        if missing:
            raise serializers.ValidationError(missing)
        gpu_class = None
        if new and attrs.get("gpu_class"):
            gpu_class = GpuClass.objects.filter(
                cluster_id=namespace.cluster_id, slug=attrs["gpu_class"]
            ).first()
            if gpu_class is None:
                raise serializers.ValidationError(
                    {
                        "gpu_class": f"No GPU class {attrs['gpu_class']!r} on cluster "
                        f"{namespace.cluster.slug}."
                    }
                )
        return {
            "data": services.RequestData(
                team=team,
                namespace=namespace,
                resource=attrs.get("resource") or "",
                amount=attrs.get("amount") or 0,
                justification=attrs["justification"],
                starts_at=attrs.get("starts_at"),
                ends_at=attrs.get("ends_at"),
                kind=attrs["kind"],
                target_grant=grant,
                gpu_class=gpu_class,
            )
        }

    @staticmethod
    def _namespace(user, team: Team, value: str, cluster: str | None) -> TeamNamespace:
        """The team's namespace with this id or name; else one of the caller's other
        teams' (so that services can say it belongs to another team)."""
        value = value.strip()
        qs = visible_to(TeamNamespace.objects.select_related("cluster", "team"), user)
        try:
            qs = qs.filter(pk=uuid.UUID(value))
        except ValueError:
            qs = qs.filter(name=value)
        if cluster:
            qs = qs.filter(cluster__slug=cluster.strip())
        found = list(qs)
        candidates = [ns for ns in found if ns.team_id == team.pk] or found
        if not candidates:
            where = f" on cluster {cluster}" if cluster else ""
            raise serializers.ValidationError(
                {"namespace": f"No namespace {value!r}{where} among your teams' namespaces."},
                code=NOT_FOUND,
            )
        if len(candidates) > 1:
            clusters = ", ".join(sorted(ns.cluster.slug for ns in candidates))
            raise serializers.ValidationError(
                {
                    "cluster": f"Namespace {value!r} exists on several clusters ({clusters}); "
                    "name the cluster."
                }
            )
        return candidates[0]


# The input serializers of actions (approve, reject, cancel, baseline, members) and the
# error and outlook shapes live in their own module; re-exported for the viewsets.
from .serializers_actions import (  # noqa: E402
    ApproveSerializer,
    BaselineSerializer,
    CancelSerializer,
    ErrorSerializer,
    MemberAddSerializer,
    MemberRoleSerializer,
    OutlookSerializer,
    RejectSerializer,
)

__all__ = [
    "ApproveSerializer", "BaselineSerializer", "CancelSerializer", "ErrorSerializer",
    "MemberAddSerializer", "MemberRoleSerializer", "OutlookSerializer", "RejectSerializer",
]  # fmt: skip
