"""REST API for clusters, nodes and the fleet summary (read-only; admins can trigger syncs)."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action, api_view
from rest_framework.response import Response

from .filters import NodeFilter
from .health import node_badges, usual_drivers
from .models import Cluster, GpuPod, Node, NodeResource, SyncRun
from .summary import fleet_summary, fleet_totals


class SyncRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = SyncRun
        fields = [
            "started_at", "finished_at", "duration_ms", "status", "trigger", "nodes_seen",
            "pods_seen", "gpu_pods_seen", "pages", "list_restarts", "rows_created",
            "rows_updated", "rows_deleted", "nodes_gone", "error",
        ]  # fmt: skip


class ClusterSerializer(serializers.ModelSerializer):
    is_stale = serializers.BooleanField(read_only=True)
    node_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id", "slug", "name", "description", "auth_method", "sync_enabled", "sync_status",
            "is_stale", "last_sync_at", "last_success_at", "last_error", "server_version",
            "node_count",
        ]  # fmt: skip
        read_only_fields = fields


class NodeResourceSerializer(serializers.ModelSerializer):
    free = serializers.IntegerField(read_only=True)

    class Meta:
        model = NodeResource
        fields = ["resource", "capacity", "allocatable", "requested", "free"]


class BadgeSerializer(serializers.Serializer):
    code = serializers.CharField()
    level = serializers.CharField()
    label = serializers.CharField()
    detail = serializers.CharField()


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    resources = NodeResourceSerializer(many=True, read_only=True)
    health = serializers.SerializerMethodField()
    mig = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id", "cluster", "name", "gpu_product", "gpu_count", "gpu_memory_mib", "gpu_family",
            "compute_capability", "driver_version", "sharing_strategy", "gpu_replicas",
            "instance_type", "unschedulable", "ready", "mig", "resources", "health",
            "first_seen_at", "last_changed_at", "gone_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(BadgeSerializer(many=True))
    def get_health(self, node: Node) -> list[dict]:
        usual = self.context.get("usual_drivers", {})
        return BadgeSerializer(node_badges(node, usual), many=True).data

    def get_mig(self, node: Node) -> dict:
        return {
            "capable": node.mig_capable,
            "strategy": node.mig_strategy,
            "config": node.mig_config,
            "config_state": node.mig_config_state,
        }


class NodeDetailSerializer(NodeSerializer):
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    pods = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "labels", "pods"]
        read_only_fields = fields

    def get_pods(self, node: Node) -> list[dict]:
        request = self.context.get("request")
        staff = bool(request and request.user.is_staff)
        return [
            {
                "namespace": p.namespace,
                "name": p.name if staff else None,
                "phase": p.phase,
                "requests": p.requests,
            }
            for p in node.gpu_pods.all()
        ]


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    """Configured clusters with their sync state. Credentials are never returned."""

    serializer_class = ClusterSerializer
    lookup_field = "slug"
    filterset_fields = ["sync_status", "sync_enabled"]

    def get_queryset(self):
        return Cluster.objects.annotate(
            node_count=Count("nodes", filter=Q(nodes__gone_at__isnull=True))
        ).order_by("name")

    @extend_schema(responses=SyncRunSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="sync-runs")
    def sync_runs(self, request, slug=None):
        runs = SyncRun.objects.filter(cluster=self.get_object())[:50]
        return Response(SyncRunSerializer(runs, many=True).data)

    @extend_schema(
        request=None,
        responses={202: inline_serializer("SyncQueued", {"detail": serializers.CharField()})},
    )
    @action(
        detail=True,
        methods=["post"],
        permission_classes=[permissions.IsAdminUser],
    )
    def sync(self, request, slug=None):
        """Queue a sync of this cluster now (admins)."""
        from .tasks import sync_cluster_task

        cluster = self.get_object()
        sync_cluster_task.delay(str(cluster.pk), "api")
        return Response({"detail": f"Sync of {cluster.slug} queued."}, status.HTTP_202_ACCEPTED)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """GPU nodes (gone nodes only with ``include_gone=true``)."""

    filterset_class = NodeFilter
    ordering_fields = ["name", "gpu_product", "last_changed_at"]
    ordering = ["name"]

    def get_queryset(self):
        qs = Node.objects.select_related("cluster").prefetch_related("resources")
        if self.action == "retrieve":
            qs = qs.prefetch_related(
                Prefetch("gpu_pods", queryset=GpuPod.objects.order_by("namespace", "name"))
            )
        return qs

    def get_serializer_class(self):
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["usual_drivers"] = usual_drivers(Node.objects.all())
        return context


class ResourceTotalsSerializer(serializers.Serializer):
    resource = serializers.CharField()
    capacity = serializers.IntegerField()
    allocatable = serializers.IntegerField()
    requested = serializers.IntegerField()
    free = serializers.IntegerField()


class ProductSummarySerializer(serializers.Serializer):
    product = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    mig_enabled_nodes = serializers.IntegerField()
    time_sliced_nodes = serializers.IntegerField()
    unschedulable_nodes = serializers.IntegerField()
    resources = serializers.SerializerMethodField()

    def get_resources(self, obj) -> list[dict]:
        return ResourceTotalsSerializer(
            sorted(obj.resources.values(), key=lambda r: r.resource), many=True
        ).data


@extend_schema(
    parameters=[OpenApiParameter("cluster", str, description="cluster slug")],
    responses=inline_serializer(
        "InventorySummary",
        {
            "products": ProductSummarySerializer(many=True),
            "totals": ProductSummarySerializer(),
        },
    ),
)
@api_view(["GET"])
def inventory_summary(request):
    """Per GPU product: nodes, GPUs, capacity / allocatable / requested / free per resource."""
    nodes = Node.objects.all()
    slug = request.query_params.get("cluster")
    if slug:
        if not Cluster.objects.filter(slug=slug).exists():
            return Response(
                {"detail": f"Unknown cluster {slug!r}.", "cluster": ["No cluster with this slug."]},
                status=status.HTTP_400_BAD_REQUEST,
            )
        nodes = nodes.filter(cluster__slug=slug)
    products = fleet_summary(nodes)
    return Response(
        {
            "products": ProductSummarySerializer(products, many=True).data,
            "totals": ProductSummarySerializer(fleet_totals(products)).data,
        }
    )
