"""``GET /api/v1/teams/{slug}/waiting/``: why the team's jobs wait (quotas/waiting.py)."""

from __future__ import annotations

from rest_framework import serializers

from .waiting import CAUSES


class SuggestionSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["request", "class", "admin", "fix", "wait"],
        help_text="request: a prefilled request (url); class: another GPU class with room "
        "now; admin: what only an admin can do; fix: a change to the job; wait: an "
        "estimated start, or why none can be given",
    )
    text = serializers.CharField()
    url = serializers.CharField(allow_blank=True, help_text="a portal page, or empty")


class QueuePositionSerializer(serializers.Serializer):
    local_queue = serializers.CharField()
    in_local_queue = serializers.IntegerField(
        min_value=1, help_text="1 = the next workload of its LocalQueue Kueue considers"
    )
    in_cluster_queue = serializers.IntegerField(
        min_value=1, help_text="its place among all pending workloads of the ClusterQueue"
    )


class WaitingItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        source="finding.kind",
        choices=["pod", "workload"],
        help_text="a pod, or a workload (a Kueue Workload, or a controller such as a Job "
        "whose pods a quota refused)",
    )
    cluster = serializers.CharField(source="cluster.slug")
    namespace = serializers.CharField(source="finding.namespace")
    name = serializers.CharField(source="finding.name")
    owner = serializers.CharField(source="finding.owner", help_text="'Job/train', or empty")
    resource = serializers.CharField(source="finding.resource")
    gpu_class = serializers.CharField(
        source="gpu_class.name", allow_null=True, default=None,
        help_text="the GPU class its node selector (or Kueue flavor) names; null: none",
    )  # fmt: skip
    amount = serializers.IntegerField(source="finding.amount")
    cause = serializers.ChoiceField(choices=list(CAUSES), source="finding.cause")
    message = serializers.CharField(
        source="finding.message", help_text="the cluster's own words (event, condition)"
    )
    explanation = serializers.CharField(help_text="the portal's reading of it, in a sentence")
    since = serializers.DateTimeField(source="finding.since", allow_null=True)
    queue_position = QueuePositionSerializer(
        source="finding.queue_position", allow_null=True,
        help_text="Kueue's own order (its visibility API) for a queued workload; null for "
        "anything else, or where the cluster does not serve that API (queue_note says why)",
    )  # fmt: skip
    queue_note = serializers.CharField(
        source="finding.queue_note",
        help_text="why a queued workload has no queue_position; empty otherwise",
    )
    suggestions = SuggestionSerializer(many=True)


class UnreadableSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    error = serializers.CharField()


class WaitingSerializer(serializers.Serializer):
    read_at = serializers.DateTimeField()
    unreadable = UnreadableSerializer(
        many=True, help_text="clusters that could not be read now: what waits there is left out"
    )
    items = WaitingItemSerializer(many=True)

    def to_representation(self, instance):
        return {
            "read_at": serializers.DateTimeField().to_representation(instance.read_at),
            "unreadable": [{"cluster": c.slug, "error": e} for c, e in instance.unreadable],
            "items": WaitingItemSerializer(instance.items, many=True).data,
        }
