"""REST: agent report ingest, node agent tokens (admins) and the latest GPU state.

``POST /api/v1/agent/reports/`` is a plain Django view, not a DRF view: it is the one hot
endpoint (5,000 nodes at a 10 s interval = 500 reports/s), and DRF's request wrapping,
negotiation and rendering cost more than the rest of the Python path (docs/benchmarks.md).
It appears in the OpenAPI schema through ``AgentReportSchemaView``, whose ``post`` is
never routed.
"""

from __future__ import annotations

import uuid

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.filters import StrictBooleanFilter
from inventory.models import Cluster, Node
from portal.fields import StrictInput
from portal.validation import NOT_FOUND

from . import tokens
from .consistency import inventory_errors
from .ingest import MAX_BODY_BYTES, ReportInvalid, parse_body, store_report, validate_report
from .models import GpuState, NodeToken
from .visibility import PodNames

# -- ingest ----------------------------------------------------------------------------------


def _error(status_code: int, detail: str, **fields) -> JsonResponse:
    response = JsonResponse({"detail": detail, **fields}, status=status_code)
    if status_code == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def _invalid(errors: dict[str, str]) -> JsonResponse:
    summary = "Invalid report in: " + ", ".join(list(errors)[:10])
    summary += f" (and {len(errors) - 10} more)." if len(errors) > 10 else "."
    return _error(400, summary, **{path: [message] for path, message in errors.items()})


@csrf_exempt
def receive_report(request):
    """Accept one agent report (docs/agent-report.md)."""
    if request.method != "POST":
        response = _error(405, f'Method "{request.method}" not allowed.')
        response["Allow"] = "POST"  # RFC 9110 15.5.6: a 405 names the allowed methods
        return response
    try:
        raw = tokens.parse_bearer(request.META.get("HTTP_AUTHORIZATION"))
        if raw is None:
            return _error(401, "Authentication credentials were not provided.")
        agent = tokens.authenticate_node(raw)
    except tokens.TokenError as err:
        return _error(401, str(err))
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400, "Invalid Content-Length.")
    if length > MAX_BODY_BYTES:
        return _error(413, f"A report may be at most {MAX_BODY_BYTES} bytes.")
    body = request.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        return _error(413, f"A report may be at most {MAX_BODY_BYTES} bytes.")
    now = timezone.now()
    try:
        data = parse_body(body)
        # The token's node first: a report for another node is refused whatever its shape.
        if type(data) is dict and type(data.get("node")) is str and data["node"] != agent.node_name:
            return _error(403, f"This token may report only for node {agent.node_name!r}.")
        report = validate_report(data, now)
    except ReportInvalid as err:
        return _invalid(err.errors)
    if errors := inventory_errors(agent.node_id, agent.node_name, report, now):
        return _invalid(errors)
    result = store_report(agent.node_id, report, now)
    if result.accepted:
        return JsonResponse({"accepted": True}, status=202)
    return JsonResponse({"duplicate": True}, status=200)


class AgentReportSchemaView(APIView):
    """Documentation only: the route is served by ``receive_report``."""

    authentication_classes = [tokens.NodeTokenAuthentication]
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="agent_report_create",
        summary="Post a node agent report (node token; docs/agent-report.md)",
        request=OpenApiTypes.OBJECT,
        responses={
            202: inline_serializer("ReportAccepted", {"accepted": serializers.BooleanField()}),
            200: inline_serializer("ReportDuplicate", {"duplicate": serializers.BooleanField()}),
            400: OpenApiResponse(description="per-field reasons, keyed by path (gpus[0].index)"),
            401: OpenApiResponse(description="missing, unknown or revoked node token"),
            403: OpenApiResponse(description="the token belongs to another node"),
            413: OpenApiResponse(description=f"body larger than {MAX_BODY_BYTES} bytes"),
        },
        tags=["agent"],
    )
    def post(self, request):  # pragma: no cover - never routed
        raise NotImplementedError


# The route is the plain view; the schema generator reads the APIView through ``cls``.
receive_report.cls = AgentReportSchemaView
receive_report.initkwargs = {}


# -- node tokens (admins) --------------------------------------------------------------------


class NodeTokenSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    node_id = serializers.UUIDField(read_only=True)
    cluster = serializers.CharField(source="node.cluster.slug", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default="")
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = NodeToken
        fields = [
            "id", "name", "prefix", "node", "node_id", "cluster", "created_by", "created_at",
            "last_used_at", "revoked_at", "is_active",
        ]  # fmt: skip
        read_only_fields = fields


class IssuedNodeTokenSerializer(NodeTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="shown once; store it as a secret")

    class Meta(NodeTokenSerializer.Meta):
        fields = [*NodeTokenSerializer.Meta.fields, "token"]


class NodeTokenCreateSerializer(StrictInput, serializers.Serializer):
    node = serializers.CharField(max_length=253, help_text="node id or name")
    cluster = serializers.SlugField(
        required=False, max_length=63, help_text="cluster slug, when the name is ambiguous"
    )
    name = serializers.CharField(required=False, allow_blank=True, default="", max_length=100)

    def validate(self, attrs):
        nodes = Node.objects.present().select_related("cluster")
        try:
            match = Q(pk=uuid.UUID(attrs["node"]))
        except ValueError:
            match = Q(name=attrs["node"])
        if attrs.get("cluster"):
            if not Cluster.objects.filter(slug=attrs["cluster"]).exists():
                raise serializers.ValidationError({"cluster": "No such cluster."}, code=NOT_FOUND)
            nodes = nodes.filter(cluster__slug=attrs["cluster"])
        found = list(nodes.filter(match)[:2])
        if not found:
            raise serializers.ValidationError(
                {"node": "No such node (present in inventory)."}, code=NOT_FOUND
            )
        if len(found) > 1:
            raise serializers.ValidationError(
                {"cluster": "The node name exists in several clusters: give the cluster."}
            )
        attrs["node"] = found[0]
        return attrs


class NodeTokenFilter(django_filters.FilterSet):
    """By node id or name: an unknown one is an empty page, as for any filter (a model
    choice filter made it a 400 for a well-formed UUID)."""

    node = django_filters.UUIDFilter(field_name="node_id")
    node__name = django_filters.CharFilter(field_name="node__name")

    class Meta:
        model = NodeToken
        fields = ["node", "node__name"]


@extend_schema(tags=["agent"])
class NodeTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Node agent tokens (admins only). POST issues one and shows the secret once; DELETE
    revokes it (the row stays, so the token's use remains traceable)."""

    permission_classes = [permissions.IsAdminUser]
    serializer_class = NodeTokenSerializer
    queryset = NodeToken.objects.select_related("node__cluster", "created_by")
    filterset_class = NodeTokenFilter
    ordering_fields = ["created_at", "last_used_at"]

    @extend_schema(request=NodeTokenCreateSerializer, responses={201: IssuedNodeTokenSerializer})
    def create(self, request, *args, **kwargs):
        data = NodeTokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            token, raw = tokens.issue(
                data.validated_data["node"], request.user, data.validated_data["name"]
            )
        except DjangoValidationError as err:  # pragma: no cover - defensive
            raise serializers.ValidationError(err.messages) from err
        token.token = raw
        return Response(IssuedNodeTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: NodeToken) -> None:
        instance.revoke()


# -- latest GPU state ------------------------------------------------------------------------


class GpuStateFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="node__cluster__slug", help_text="slug")
    node = django_filters.CharFilter(field_name="node__name", help_text="node name")
    node_id = django_filters.UUIDFilter(field_name="node_id")
    uuid = django_filters.CharFilter()
    lost = StrictBooleanFilter()
    stale = StrictBooleanFilter(method="filter_stale", help_text="node silent for 3 intervals")

    class Meta:
        model = GpuState
        fields = ["cluster", "node", "node_id", "uuid", "lost", "stale"]

    def filter_stale(self, queryset, name, value):
        if value is None:
            return queryset
        return queryset.stale() if value else queryset.fresh()


class GpuStateSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    node_id = serializers.UUIDField(read_only=True)
    cluster = serializers.CharField(source="node.cluster.slug", read_only=True)
    stale = serializers.BooleanField(source="is_stale", read_only=True)
    mig_mode = serializers.SerializerMethodField()
    processes = serializers.SerializerMethodField()

    class Meta:
        model = GpuState
        fields = [
            "id", "cluster", "node", "node_id", "index", "uuid", "name", "lost",
            "memory_total_mib", "memory_used_mib", "utilization_gpu_pct",
            "utilization_memory_pct", "temperature_c", "power_w", "power_limit_w", "mig_mode",
            "mig_devices", "processes", "unsupported", "xid_last", "reported_at", "stale",
            "stale_after",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(
        {"type": "object", "nullable": True, "properties": {
            "current": {"type": "boolean"}, "pending": {"type": "boolean"}}}
    )  # fmt: skip
    def get_mig_mode(self, gpu: GpuState) -> dict | None:
        if gpu.mig_current is None:
            return None
        return {"current": gpu.mig_current, "pending": gpu.mig_pending}

    @extend_schema_field(
        {"type": "array", "items": {"type": "object", "additionalProperties": True, "properties": {
            "pod": {"type": "string", "nullable": True,
                    "description": "namespace/name; null unless the caller may see it"}}}}
    )  # fmt: skip
    def get_processes(self, gpu: GpuState) -> list[dict]:
        """Pod names only where ``telemetry.visibility`` allows (admins, own teams)."""
        names = self.context.get("pod_names")
        if names is None:
            request = self.context.get("request")
            names = self.context["pod_names"] = PodNames(request.user if request else None)
        out = []
        for p in gpu.processes or []:
            row = dict(p)
            if "pod" in row:
                row["pod"] = names.qualified(gpu.node.cluster_id, row.get("pod"))
            out.append(row)
        return out


@extend_schema(tags=["telemetry"])
class GpuStateViewSet(viewsets.ReadOnlyModelViewSet):
    """The latest reported state of every GPU (any signed-in user; inventory is not
    team-scoped). Filter by cluster, node, stale, lost."""

    serializer_class = GpuStateSerializer
    queryset = GpuState.objects.select_related("node__cluster").order_by("node__name", "index")
    filterset_class = GpuStateFilter
    ordering_fields = ["reported_at", "utilization_gpu_pct", "temperature_c", "index"]
