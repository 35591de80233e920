"""REST: MIG requests (``/api/v1/mig-requests/``) with approve / reject / cancel / revert.

The viewset derives from the quota API's ``TeamScopedViewSet``, so members see their
teams' requests and admins everything; another team's request is a 404 on every action.
Parsing lives here; every rule (layouts, products, nodes, who may decide) lives in
``mig.services``, whose ValidationErrors become 400s with per-field reasons.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import django_filters
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from inventory.models import Node
from portal.fields import StrictInput
from quotas.api import Conflict, TeamScopedViewSet, domain_errors
from quotas.models import TeamNamespace
from quotas.scoping import visible_to
from quotas.serializers import ErrorSerializer, VisibleTeamField, enum, username

from . import services
from .models import MigRequest, MigStep, TransitionError

# -- serializers ---------------------------------------------------------------------------

LAYOUT_SCHEMA = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1},
                 "example": {"3g.40gb": 1, "1g.10gb": 2}}  # fmt: skip


@extend_schema_field(LAYOUT_SCHEMA)
class LayoutField(serializers.JSONField):
    """Instances per GPU; ``mig.services`` judges the content (400 with the reason)."""


class MigStepSerializer(serializers.ModelSerializer):
    name = enum(MigStep.Name, read_only=True)
    status = enum(MigStep.Status, read_only=True)

    class Meta:
        model = MigStep
        fields = ["name", "status", "attempts", "detail", "started_at", "finished_at"]


class ProposedPodSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    phase = serializers.CharField()
    requests = serializers.DictField(child=serializers.IntegerField())


class ProposalSerializer(serializers.Serializer):
    node = serializers.CharField(source="node.name")
    config_name = serializers.CharField()
    in_config = serializers.BooleanField(help_text="already in this layout: no disruption")
    idle = serializers.BooleanField()
    mig_config = serializers.CharField(source="node.mig_config")
    pods = ProposedPodSerializer(many=True, help_text="GPU pods that would be evicted")


class MigRequestSerializer(serializers.ModelSerializer):
    kind = enum(MigRequest.Kind, read_only=True)
    status = enum(MigRequest.Status, read_only=True)
    drain_policy = serializers.CharField(read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = serializers.CharField(source="namespace.name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    layout = LayoutField(read_only=True)
    requested_node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = username()
    decided_by = username()

    class Meta:
        model = MigRequest
        fields = [
            "id", "kind", "status", "team", "namespace", "cluster", "product", "layout",
            "gpus", "requested_node", "justification", "requested_by", "decided_by",
            "decided_at", "decision_note", "drain_policy", "node", "config_name",
            "previous_config", "granted", "error", "reverts", "created_at", "started_at",
            "finished_at",
        ]  # fmt: skip


class MigRequestDetailSerializer(MigRequestSerializer):
    steps = MigStepSerializer(many=True, read_only=True)
    proposals = serializers.SerializerMethodField(
        help_text="nodes for a pending request: in the layout already, idle, then busy"
    )
    can_revert = serializers.BooleanField(read_only=True)

    class Meta(MigRequestSerializer.Meta):
        fields = [*MigRequestSerializer.Meta.fields, "steps", "proposals", "can_revert"]

    @extend_schema_field(ProposalSerializer(many=True))
    def get_proposals(self, req: MigRequest) -> list[dict]:
        if req.status != MigRequest.Status.PENDING:
            return []
        return ProposalSerializer(services.propose_nodes(req), many=True).data


class MigRequestCreateSerializer(StrictInput, serializers.Serializer):
    team = VisibleTeamField()
    namespace = serializers.CharField(max_length=63, help_text="the team namespace's id or name")
    cluster = serializers.CharField(
        required=False, max_length=63, help_text="cluster slug, when the name is ambiguous"
    )
    product = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=100,
        help_text="short name (A100-80GB) or GFD label (NVIDIA-A100-SXM4-80GB)",
    )  # fmt: skip
    layout = LayoutField(help_text="instances per GPU, the same on each GPU")
    gpus = serializers.IntegerField(help_text="how many GPUs of one node get the layout")
    node = serializers.CharField(required=False, max_length=253, help_text="admins only")
    justification = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)

    def validate(self, attrs: dict) -> dict:
        user = self.context["request"].user
        qs = visible_to(TeamNamespace.objects.select_related("cluster", "team"), user)
        value = attrs["namespace"].strip()
        try:
            qs = qs.filter(pk=uuid.UUID(value))
        except ValueError:
            qs = qs.filter(name=value)
        if attrs.get("cluster"):
            qs = qs.filter(cluster__slug=attrs["cluster"].strip())
        found = list(qs)
        found = [ns for ns in found if ns.team_id == attrs["team"].pk] or found
        if len(found) != 1:
            why = "exists on several clusters; name the cluster" if found else "is not known"
            raise serializers.ValidationError({"namespace": f"Namespace {value!r} {why}."})
        namespace = found[0]
        node = None
        if attrs.get("node"):
            node = Node.objects.present().filter(cluster=namespace.cluster, name=attrs["node"])
            node = node.first()
            if node is None:
                raise serializers.ValidationError(
                    {"node": f"No node {attrs['node']!r} on {namespace.cluster.slug}."}
                )
        return {
            "data": services.MigRequestData(
                team=attrs["team"], namespace=namespace, product=attrs["product"],
                layout=attrs["layout"], gpus=attrs["gpus"], node=node,
                justification=attrs["justification"],
            )
        }  # fmt: skip


class MigApproveSerializer(StrictInput, serializers.Serializer):
    node = serializers.CharField(max_length=253, help_text="node name (see proposals)")
    drain_policy = enum(MigRequest.DrainPolicy)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class MigRejectSerializer(StrictInput, serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class MigCancelSerializer(StrictInput, serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class MigRequestFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    cluster = django_filters.CharFilter(field_name="cluster__slug", help_text="cluster slug")
    node = django_filters.CharFilter(field_name="node__name", help_text="chosen node name")
    status = django_filters.MultipleChoiceFilter(choices=MigRequest.Status.choices)
    kind = django_filters.ChoiceFilter(choices=MigRequest.Kind.choices)

    class Meta:
        model = MigRequest
        fields = ["team", "cluster", "node", "status", "kind"]


# -- the viewset ---------------------------------------------------------------------------


@contextmanager
def mig_errors() -> Iterator[None]:
    """The quota API's mapping (400 / 403), plus this app's illegal transitions as 409."""
    try:
        with domain_errors():
            yield
    except TransitionError as exc:
        raise Conflict(str(exc)) from exc


_errors = {
    400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer,
}  # fmt: skip


@extend_schema_view(
    create=extend_schema(
        request=MigRequestCreateSerializer,
        responses={201: MigRequestDetailSerializer, 400: ErrorSerializer},
        summary="Ask for a MIG layout on some GPUs of a node of one product",
    ),
)
class MigRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    TeamScopedViewSet,
):  # fmt: skip
    """MIG requests of your teams: file, follow every coordinator step, and (admins) decide."""

    queryset = MigRequest.objects.select_related(
        "team", "namespace", "cluster", "requested_node", "node", "requested_by", "decided_by"
    )
    filterset_class = MigRequestFilter
    # layout and requests are objects: forms cannot carry them; JSON only (#24).
    ordering_fields = ["created_at", "status"]
    ordering = ["-created_at"]
    admin_actions = frozenset({"approve", "reject", "revert"})

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action != "list":
            qs = qs.prefetch_related(Prefetch("steps", queryset=MigStep.objects.all()))
        return qs

    def get_serializer_class(self):
        if self.action == "list":
            return MigRequestSerializer
        if self.action == "create":
            return MigRequestCreateSerializer
        return MigRequestDetailSerializer

    def create(self, request, *args, **kwargs):
        form = MigRequestCreateSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        with mig_errors():
            req = services.submit(request.user, form.validated_data["data"])
        return Response(self._detail(req), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=MigApproveSerializer,
        responses={200: MigRequestDetailSerializer, **_errors},
        summary="Approve on a node with a drain policy (admins); starts the coordinator",
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        req = self.get_object()
        form = MigApproveSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = Node.objects.present().filter(cluster=req.cluster, name=form.validated_data["node"])
        if not node.exists():
            raise serializers.ValidationError({"node": "No such node on the request's cluster."})
        with mig_errors():
            req = services.approve(
                req, request.user, node=node.get(),
                drain_policy=form.validated_data["drain_policy"],
                note=form.validated_data["note"],
            )  # fmt: skip
        return Response(self._detail(req))

    @extend_schema(
        request=MigRejectSerializer,
        responses={200: MigRequestDetailSerializer, **_errors},
        summary="Reject with a reason (admins)",
    )
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        req = self.get_object()
        form = MigRejectSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with mig_errors():
            req = services.reject(req, request.user, form.validated_data["reason"])
        return Response(self._detail(req))

    @extend_schema(
        request=MigCancelSerializer,
        responses={200: MigRequestDetailSerializer, **_errors},
        summary="Withdraw a pending request (requester, team manager or admin)",
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        req = self.get_object()
        form = MigCancelSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        with mig_errors():
            req = services.cancel(req, request.user, form.validated_data["note"])
        return Response(self._detail(req))

    @extend_schema(
        request=None,
        responses={201: MigRequestDetailSerializer, **_errors},
        summary="Put a failed run's node back to its previous config (admins)",
    )
    @action(detail=True, methods=["post"])
    def revert(self, request, pk=None):
        req = self.get_object()
        with mig_errors():
            run = services.revert(req, request.user)
        return Response(self._detail(run), status=status.HTTP_201_CREATED)

    def _detail(self, req: MigRequest) -> dict:
        fresh = self.queryset.prefetch_related("steps").get(pk=req.pk)
        return MigRequestDetailSerializer(fresh, context=self.get_serializer_context()).data


router = SimpleRouter()
router.register("mig-requests", MigRequestViewSet, basename="migrequest")
urlpatterns = router.urls
