"""Input serializers of the quota API's actions, and the error and outlook shapes.

They only parse and resolve references; every rule is checked by ``quotas.services`` (and
``quotas.membership`` for members).
"""

from __future__ import annotations

import uuid

from rest_framework import serializers

from portal.fields import StrictInput
from portal.validation import NOT_FOUND, visible

from .capacity import advertised_resources
from .models import Membership, TeamNamespace


def enum(*args, **kwargs):
    from .serializers import enum as _enum  # the one enum field (schema extension there)

    return _enum(*args, **kwargs)


class ApproveSerializer(StrictInput, serializers.Serializer):
    amount = serializers.IntegerField(
        required=False, allow_null=True, min_value=1,
        help_text="approve less than asked (default: all); more than asked is a 409",
    )  # fmt: skip
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="a shorter window (default: as asked)"
    )
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


SAY_WHY = "Say why the request is rejected."


class RejectSerializer(StrictInput, serializers.Serializer):
    # Required, with a visible character: what services.reject refuses otherwise, now in the
    # schema too (it said optional, default "": schemathesis' valid data was refused; #24).
    reason = serializers.CharField(
        max_length=2000, trim_whitespace=False, help_text="why, for the requester to read",
        validators=[visible(SAY_WHY)],
        error_messages={"required": SAY_WHY, "blank": SAY_WHY},
    )  # fmt: skip


class CancelSerializer(StrictInput, serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ErrorSerializer(serializers.Serializer):
    """Every error: ``detail``; validation errors add a list of messages per field."""

    detail = serializers.CharField()


class BaselineSerializer(StrictInput, serializers.Serializer):
    namespace = serializers.CharField(help_text="the team namespace's id or name", max_length=63)
    resource = serializers.CharField(max_length=100)
    amount = serializers.IntegerField(min_value=0, max_value=100_000)

    def validate_namespace(self, value: str) -> TeamNamespace:
        team = self.context["team"]
        qs = TeamNamespace.objects.select_related("cluster", "team").filter(team=team)
        try:
            match = qs.filter(pk=uuid.UUID(value))
        except ValueError:
            match = qs.filter(name=value)
        found = list(match[:2])
        if len(found) != 1:
            raise serializers.ValidationError(
                f"No single namespace {value!r} in team {team.slug}.", code=NOT_FOUND
            )
        return found[0]

    def validate(self, attrs: dict) -> dict:
        cluster = attrs["namespace"].cluster
        if attrs["resource"] not in advertised_resources(cluster):
            raise serializers.ValidationError(
                {"resource": f"Cluster {cluster.slug} does not advertise {attrs['resource']}."}
            )
        return attrs


class OutlookSerializer(serializers.Serializer):
    """What a request would meet (quotas/preview.py ``outlook``), nothing stored."""

    gpu_class = serializers.CharField(allow_null=True, help_text="null: any class")
    capacity_text = serializers.CharField(help_text="e.g. 32 replicas on 8 GPUs")
    resource = serializers.CharField()
    held = serializers.IntegerField(
        help_text="the namespace's active grants of this class plus its any-class grants"
    )
    used = serializers.IntegerField(help_text="its pods' requests on the class's nodes")
    free_now = serializers.IntegerField()
    free_window = serializers.IntegerField(help_text="free over the asked window")
    class_enforced = serializers.BooleanField(
        help_text="false: class not enforced by Kubernetes on this cluster (ResourceQuota)"
    )
    idle_now = serializers.IntegerField(
        help_text="idle now on the class's nodes (the cluster's for any class): allocatable "
        "minus what bound, unfinished pods request"
    )
    usable_now = serializers.IntegerField(
        allow_null=True,
        help_text="usable by the team now in the namespace (its effective limit minus what "
        "it uses); null: no quota limits it",
    )
    usable_binding = serializers.CharField(help_text="what sets that limit, in words")
    problems = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="what submitting would refuse, per field (empty: it would be accepted)",
    )


# -- team members (issue #12 section 1; rules in quotas/membership.py) ------------------


class MemberAddSerializer(StrictInput, serializers.Serializer):
    user = serializers.CharField(
        max_length=254,
        help_text="username or e-mail address of an existing account (people get one when "
        "they first sign in)",
    )
    role = enum(Membership.Role, default=Membership.Role.MEMBER)


class MemberRoleSerializer(StrictInput, serializers.Serializer):
    role = enum(Membership.Role)
