"""REST API for clusters, nodes and the fleet summary.

Nodes and the summary are read-only. Admins connect and edit clusters (the preflight runs
before anything is saved, ``connect.py``), re-run a cluster's preflight, and trigger syncs.
"""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action, api_view
from rest_framework.response import Response

from portal import broker
from portal.outages import DependencyUnavailable

from .connect import connect, describe, rerun
from .figures import DEFINITIONS
from .filters import NodeFilter
from .health import node_badges, usual_drivers
from .models import Cluster, GpuPod, Node, NodeResource, SyncRun
from .serializers_connect import (
    ClusterConnectSerializer,
    PreflightRefusedSerializer,
    PreflightReportSerializer,
)
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
    data_as_of = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="until when the inventory is known complete: the last good full sync, or "
        "later where the watcher has kept it current since; null before any good sync",
    )  # fmt: skip
    is_watched = serializers.BooleanField(
        read_only=True, help_text="a watch keeps nodes and pods current between full syncs"
    )
    node_count = serializers.IntegerField(read_only=True)
    # Blank until set (no URL: kubeconfig or in-cluster; no preflight run yet).
    api_url = serializers.CharField(
        read_only=True, help_text="empty with a kubeconfig, and for non-admins"
    )
    preflight_status = serializers.ChoiceField(
        choices=Cluster._meta.get_field("preflight_status").choices,
        allow_blank=True, read_only=True, help_text="empty: no preflight run yet",
    )  # fmt: skip
    preflight = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = [
            "id", "slug", "name", "description", "auth_method", "sync_enabled", "sync_status",
            "is_stale", "data_as_of", "is_watched", "last_sync_at", "last_success_at",
            "last_error", "server_version", "node_count", "kubeconfig_path", "kubeconfig_context",
            "api_url", "bearer_token_file", "verify_tls", "preflight_namespaces",
            "preflight_status", "preflight_at", "missing_permissions", "permissions_checked_at",
            "preflight", "enforcement",
        ]  # fmt: skip
        read_only_fields = fields
        extra_kwargs = {
            name: {"help_text": "empty for non-admins (the portal's own set-up)"}
            for name in ("kubeconfig_path", "kubeconfig_context", "bearer_token_file",
                         "missing_permissions")
        }  # fmt: skip

    @extend_schema_field(PreflightReportSerializer(allow_null=True))
    def get_preflight(self, cluster: Cluster) -> dict | None:
        """The last report, for admins (it names every team's namespaces and quotas)."""
        return (cluster.preflight or None) if self._staff else None

    @property
    def _staff(self) -> bool:
        request = self.context.get("request")
        return bool(request and request.user.is_staff)

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if not self._staff:
            data["preflight_namespaces"] = []
            # How the portal reaches the cluster is the admins' business: file paths on
            # the portal's host, the kubeconfig context and the API address stay with them.
            for name in ADMIN_ONLY_CONNECTION:
                data[name] = ""
            data["missing_permissions"] = []
        return data


# Cluster fields that name files and addresses of the portal's own set-up: empty for
# members (issue #12 review: GET /clusters/ showed them the kubeconfig's path).
ADMIN_ONLY_CONNECTION = ("kubeconfig_path", "kubeconfig_context", "api_url", "bearer_token_file")


class NodeResourceSerializer(serializers.ModelSerializer):
    requested = serializers.IntegerField(
        read_only=True, help_text="what bound, unfinished pods request on the node"
    )
    idle = serializers.IntegerField(read_only=True, help_text=f"idle now: {DEFINITIONS['idle']}")

    class Meta:
        model = NodeResource
        fields = ["resource", "capacity", "allocatable", "requested", "idle"]


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
        from telemetry.visibility import PodNames  # telemetry depends on inventory

        request = self.context.get("request")
        names = PodNames(request.user if request else None)
        return [
            {
                "namespace": p.namespace,
                "name": names.name(node.cluster_id, p.namespace, p.name),
                "phase": p.phase,
                "requests": p.requests,
            }
            for p in node.gpu_pods.all()
        ]


_CONNECT_RESPONSES = {409: PreflightRefusedSerializer}


class ClusterViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet
):
    """Configured clusters with their sync state and last preflight. Tokens are never
    returned. Admins connect (POST) and edit (PUT/PATCH) clusters: the preflight runs
    first, and errors refuse the save (409 with the report) unless ``save_anyway``."""

    serializer_class = ClusterSerializer
    lookup_field = "slug"
    filterset_fields = ["sync_status", "sync_enabled", "preflight_status"]

    def get_queryset(self):
        return Cluster.objects.annotate(
            node_count=Count("nodes", filter=Q(nodes__gone_at__isnull=True))
        ).order_by("name")

    def get_permissions(self):
        if self.action in ("create", "update", "partial_update", "preflight"):
            return [permissions.IsAdminUser()]
        return super().get_permissions()

    def get_serializer_class(self):
        if self.action in ("create", "update", "partial_update"):
            return ClusterConnectSerializer
        return ClusterSerializer

    def _connected(self, serializer, before, created: bool) -> Response:
        data = serializer.validated_data
        outcome = connect(data["cluster"], actor=self.request.user,
                          save_anyway=data["save_anyway"], before=before)  # fmt: skip
        if not outcome.saved:
            return Response(
                {
                    "detail": "The preflight found errors; nothing was saved. Fix them, "
                    "or send save_anyway=true.",
                    "save_anyway": ["The preflight found errors."],
                    "preflight": outcome.report.as_dict(),
                },
                status=status.HTTP_409_CONFLICT,  # a valid body; the cluster refuses it
            )
        cluster = self.get_queryset().get(pk=data["cluster"].pk)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        body = ClusterSerializer(cluster, context=self.get_serializer_context()).data
        return Response(body, status=code)

    @extend_schema(responses={201: ClusterSerializer, **_CONNECT_RESPONSES})
    def create(self, request, *args, **kwargs):
        """Connect a cluster (admins): validate, run the preflight, save."""
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return self._connected(serializer, None, created=True)

    @extend_schema(responses={200: ClusterSerializer, **_CONNECT_RESPONSES})
    def update(self, request, *args, **kwargs):
        """Edit a cluster's connection (admins); the preflight runs again before saving."""
        instance = self.get_object()
        before = describe(instance)
        serializer = self.get_serializer(
            instance, data=request.data, partial=kwargs.pop("partial", False)
        )
        serializer.is_valid(raise_exception=True)
        return self._connected(serializer, before, created=False)

    @extend_schema(responses={200: ClusterSerializer, **_CONNECT_RESPONSES})
    def partial_update(self, request, *args, **kwargs):
        kwargs["partial"] = True
        return self.update(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: PreflightReportSerializer})
    @action(detail=True, methods=["post"])
    def preflight(self, request, slug=None):
        """Run the cluster's preflight again (admins) and keep the result."""
        report = rerun(self.get_object(), actor=request.user)
        return Response(report.as_dict())

    @extend_schema(responses=SyncRunSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="sync-runs")
    def sync_runs(self, request, slug=None):
        """The cluster's syncs, newest first, paginated like every list (the schema said
        so; the answer was a bare list of the last 50)."""
        runs = SyncRun.objects.filter(cluster=self.get_object()).order_by("-started_at", "-pk")
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(SyncRunSerializer(page, many=True).data)

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
        if not broker.send(sync_cluster_task, (str(cluster.pk), "api"), what=f"sync of {slug}"):
            raise DependencyUnavailable(
                "The task queue (Redis) does not answer: the sync was not queued. The "
                "periodic sync runs once it is back."
            )
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
    requested = serializers.IntegerField(help_text="what bound, unfinished pods request")
    idle = serializers.IntegerField(help_text=f"idle now: {DEFINITIONS['idle']}")
    replicas = serializers.BooleanField(
        help_text="true: counted on time-sliced nodes, in replicas (never added to the "
        "physical row of the same resource)"
    )


class ProductSummarySerializer(serializers.Serializer):
    product = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    mig_enabled_nodes = serializers.IntegerField()
    time_sliced_nodes = serializers.IntegerField()
    unschedulable_nodes = serializers.IntegerField()
    resources = serializers.SerializerMethodField()

    def get_resources(self, obj) -> list[dict]:
        return ResourceTotalsSerializer(obj.rows(), many=True).data


@extend_schema(
    parameters=[OpenApiParameter("cluster", str, description="cluster slug")],
    responses={
        200: inline_serializer(
            "InventorySummary",
            {
                "products": ProductSummarySerializer(many=True),
                "totals": ProductSummarySerializer(),
            },
        ),
        404: OpenApiResponse(
            inline_serializer(
                "UnknownCluster",
                {
                    "detail": serializers.CharField(),
                    "cluster": serializers.ListField(child=serializers.CharField()),
                },
            ),
            description="no cluster with this slug",
        ),
    },
)
@api_view(["GET"])
def inventory_summary(request):
    """Per GPU product: nodes, GPUs, capacity / allocatable / requested / idle now per
    resource, all clusters added together unless ``cluster`` names one."""
    nodes = Node.objects.all()
    slug = request.query_params.get("cluster")
    if slug:
        if not Cluster.objects.filter(slug=slug).exists():
            return Response(
                {"detail": f"Unknown cluster {slug!r}.", "cluster": ["No cluster with this slug."]},
                status=status.HTTP_404_NOT_FOUND,  # a well-formed slug of no cluster
            )
        nodes = nodes.filter(cluster__slug=slug)
    products = fleet_summary(nodes)
    return Response(
        {
            "products": ProductSummarySerializer(products, many=True).data,
            "totals": ProductSummarySerializer(fleet_totals(products)).data,
        }
    )
