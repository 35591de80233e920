"""Output serializers for what really limits a team namespace (quotas/limits.py).

They read ``context["states"]`` (``quotas.preview.states``, loaded in bulk by the
viewset), so a list costs a fixed number of queries.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.figures import DEFINITIONS

from . import preview
from .models import ForeignQuota, TeamNamespace


def extend_schema_field_list(serializer_class):
    return extend_schema_field(serializer_class(many=True))


class OutsideLimitSerializer(serializers.Serializer):
    quota = serializers.CharField()
    limit = serializers.IntegerField()


class ScopedLimitSerializer(serializers.Serializer):
    quota = serializers.CharField()
    limit = serializers.IntegerField()
    scopes = serializers.CharField(help_text="the pods it binds, e.g. PriorityClass In x")


class EffectiveLimitSerializer(serializers.Serializer):
    resource = serializers.CharField()
    granted = serializers.IntegerField(help_text="what the portal grants (its own quota)")
    limit = serializers.IntegerField(help_text="the minimum over every unscoped quota")
    binding = serializers.CharField(help_text="the quota that sets the limit")
    text = serializers.CharField(help_text="'granted 17, effective limit 16 (gpu-quota binds)'")
    outside = serializers.SerializerMethodField()
    scoped = ScopedLimitSerializer(many=True)

    @extend_schema_field_list(OutsideLimitSerializer)
    def get_outside(self, row) -> list[dict]:
        return [{"quota": q, "limit": v} for q, v in row.outside]


class UsableSerializer(serializers.Serializer):
    """Usable by the team (quotas/figures.py): what the namespace can start now."""

    resource = serializers.CharField()
    gpu_class = serializers.CharField(
        source="gpu_class.slug", read_only=True, allow_null=True, default=None,
        help_text="the class slug of a Kueue ClusterQueue row or a DRA DeviceClass (null on "
        "ResourceQuota clusters)",
    )  # fmt: skip
    limit = serializers.IntegerField(
        allow_null=True,
        help_text="the effective limit: every quota that binds (on a DRA cluster: on the "
        "class's DeviceClass), or the Kueue queue's nominal quota plus what it may borrow "
        "now; null when no quota limits the namespace",
    )
    used = serializers.IntegerField(
        help_text="what counts against it: non-terminal pods' requests (ResourceQuota), the "
        "devices its claims ask for as the quota counts them (DRA) or what admitted workloads "
        "hold (Kueue)"
    )
    usable = serializers.IntegerField(
        allow_null=True, help_text=f"usable by the team: {DEFINITIONS['usable']} Null: no limit"
    )
    binding = serializers.CharField(help_text="what sets the limit, in words")
    nominal = serializers.IntegerField(allow_null=True, help_text="Kueue: the queue's quota")
    may_borrow = serializers.IntegerField(
        help_text="Kueue: what the cohort's other queues leave now (negative: they borrowed)"
    )
    borrowed = serializers.IntegerField(help_text="Kueue: held above the nominal quota")


class ForeignQuotaSerializer(serializers.ModelSerializer):
    decision = serializers.CharField(read_only=True)
    scoped = serializers.BooleanField(read_only=True)
    hard = serializers.DictField(child=serializers.CharField(), read_only=True)
    used = serializers.DictField(child=serializers.CharField(), read_only=True)
    ignored = serializers.DictField(
        child=serializers.CharField(), read_only=True,
        help_text="limits./bare nvidia.com keys: accepted, never counted by quota",
    )  # fmt: skip

    class Meta:
        model = ForeignQuota
        fields = ["id", "name", "hard", "used", "ignored", "scopes", "scoped", "decision",
                  "decided_at", "decision_note", "seen_at"]  # fmt: skip
        read_only_fields = fields


class NamespaceLimitsSerializer(serializers.ModelSerializer):
    """A team namespace with what really limits it (reads ``context["states"]``)."""

    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    effective_limits = serializers.SerializerMethodField()
    usable = serializers.SerializerMethodField()
    foreign_quotas = serializers.SerializerMethodField()
    needs_confirmation = serializers.SerializerMethodField(
        help_text="keys a held apply would set below usage: {key: {hard, was, used}}"
    )

    class Meta:
        model = TeamNamespace
        fields = ["id", "cluster", "name", "effective_limits", "usable", "foreign_quotas",
                  "needs_confirmation"]  # fmt: skip
        read_only_fields = fields

    def _state(self, ns) -> preview.NamespaceState:
        states = self.context.setdefault("states", {})
        if ns.pk not in states:
            states.update(preview.states([ns]))
        return states[ns.pk]

    @extend_schema_field_list(EffectiveLimitSerializer)
    def get_effective_limits(self, ns) -> list[dict]:
        rows = self._state(ns).effective.values()
        return [EffectiveLimitSerializer(r).data | {"text": r.text()} for r in rows]

    @extend_schema_field_list(UsableSerializer)
    def get_usable(self, ns) -> list[dict]:
        from .figures import usable

        return UsableSerializer(usable(self._state(ns)), many=True).data

    @extend_schema_field_list(ForeignQuotaSerializer)
    def get_foreign_quotas(self, ns) -> list[dict]:
        return ForeignQuotaSerializer(self._state(ns).foreign, many=True).data

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_needs_confirmation(self, ns) -> dict:
        return self._state(ns).awaiting
