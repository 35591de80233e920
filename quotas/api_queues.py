"""REST API for teams' Kueue queues: per class the nominal quota (the team's active grants),
what admitted workloads hold and borrow, what waits; admins set cohort and limits.

Only clusters whose enforcement is Kueue have queues. Rules live in quotas/kueue.py and
quotas/kueue_apply.py; this module parses input and maps their errors to HTTP.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.response import Response

from portal.fields import StrictInput

from . import kueue
from .api import TeamScopedViewSet, _errors, domain_errors
from .kueue_apply import set_queue_settings
from .models import TeamQueue
from .models_kueue import BORROW, RECLAIM, WEIGHT_PLACES


class QueueClassSerializer(serializers.Serializer):
    gpu_class = serializers.CharField(source="gpu_class.slug")
    gpu_class_name = serializers.CharField(source="gpu_class.name")
    resource = serializers.CharField()
    nominal = serializers.IntegerField(help_text="nominalQuota: the team's active grants")
    used = serializers.IntegerField(help_text="held by admitted workloads (flavorsUsage)")
    borrowed = serializers.IntegerField(help_text="of used, borrowed from the cohort")


class NamespaceWorkloadsSerializer(serializers.Serializer):
    admitted = serializers.DictField(child=serializers.IntegerField(), help_text="GPUs")
    pending = serializers.DictField(child=serializers.IntegerField(), help_text="GPUs")
    admitted_count = serializers.IntegerField()
    pending_count = serializers.IntegerField()


class TeamQueueSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster_queue = serializers.SerializerMethodField()
    weighted_share = serializers.SerializerMethodField()
    classes = serializers.SerializerMethodField()
    active = serializers.SerializerMethodField()
    message = serializers.SerializerMethodField()
    workloads_admitted = serializers.SerializerMethodField()
    workloads_pending = serializers.SerializerMethodField()
    namespaces = serializers.SerializerMethodField()

    class Meta:
        model = TeamQueue
        fields = [
            "id", "team", "cluster", "cluster_queue", "cohort", "borrowing_limit",
            "lending_limit", "fair_weight", "reclaim_within_cohort", "borrow_within_cohort",
            "weighted_share", "classes", "active", "message", "workloads_admitted",
            "workloads_pending", "namespaces", "status_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_weighted_share(self, tq: TeamQueue) -> int | None:
        """Kueue's status.fairSharing.weightedShare as last read (null: not reported: fair
        sharing is off in Kueue's configuration, or not read yet)."""
        return (tq.status or {}).get("weighted_share")

    def get_cluster_queue(self, tq: TeamQueue) -> str:
        return kueue.queue_name(tq.team)

    @extend_schema_field(QueueClassSerializer(many=True))
    def get_classes(self, tq: TeamQueue) -> list:
        return QueueClassSerializer(kueue.class_rows(tq), many=True).data

    def get_active(self, tq: TeamQueue) -> bool | None:
        """The ClusterQueue's Active condition as last read (null: not read yet)."""
        return (tq.status or {}).get("active")

    def get_message(self, tq: TeamQueue) -> str:
        return str((tq.status or {}).get("message") or "")

    def get_workloads_admitted(self, tq: TeamQueue) -> int:
        return int((tq.status or {}).get("admitted") or 0)

    def get_workloads_pending(self, tq: TeamQueue) -> int:
        return int((tq.status or {}).get("pending") or 0)

    @extend_schema_field(serializers.DictField(child=NamespaceWorkloadsSerializer()))
    def get_namespaces(self, tq: TeamQueue) -> dict:
        keys = ("admitted", "pending", "admitted_count", "pending_count")
        return {ns: {k: row.get(k, 0 if k.endswith("count") else {}) for k in keys}
                for ns, row in (tq.workloads or {}).items()}  # fmt: skip


class QueueSettingsSerializer(StrictInput, serializers.Serializer):
    cohort = serializers.CharField(max_length=253, allow_blank=True, required=False)
    borrowing_limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    lending_limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    fair_weight = serializers.DecimalField(
        max_digits=9, decimal_places=WEIGHT_PLACES, min_value=0, allow_null=True,
        required=False, help_text="Kueue fairSharing.weight (null: Kueue's default, 1)",
    )  # fmt: skip
    reclaim_within_cohort = serializers.ChoiceField(choices=RECLAIM, required=False)
    borrow_within_cohort = serializers.ChoiceField(
        choices=BORROW, required=False,
        help_text="LowerPriority needs reclaim_within_cohort other than Never (Kueue's rule)",
    )  # fmt: skip


@extend_schema_view(
    list=extend_schema(summary="Your teams' Kueue queues, per GPU class"),
    retrieve=extend_schema(summary="One team's Kueue queue", responses={200: TeamQueueSerializer,
                                                                         404: _errors[404]}),
)  # fmt: skip
class TeamQueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """A team's ClusterQueue on a Kueue cluster: quota, usage and queued work per class;
    admins set its cohort and borrowing/lending limits (PATCH)."""

    queryset = TeamQueue.objects.select_related("team", "cluster").filter(
        cluster__enforcement="kueue"
    )
    serializer_class = TeamQueueSerializer
    ordering_fields = ["team__slug"]
    ordering = ["cluster__slug", "team__slug"]
    admin_actions = frozenset({"partial_update"})

    @extend_schema(request=QueueSettingsSerializer,
                   responses={200: TeamQueueSerializer,
                              **{k: _errors[k] for k in (400, 403, 404)}},
                   summary="Set a team's cohort, limits, fair-sharing weight and preemption "
                   "(admins)")  # fmt: skip
    def partial_update(self, request, *args, **kwargs):
        tq = self.get_object()
        form = QueueSettingsSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with domain_errors():
            tq = set_queue_settings(tq.team, tq.cluster, request.user, **form.validated_data)
        return Response(TeamQueueSerializer(tq, context=self.get_serializer_context()).data)
