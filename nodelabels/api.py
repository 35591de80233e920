"""REST API for label sets: admins create, change and delete; everyone signed in reads.

Serializers only parse and resolve the cluster; every rule (label syntax, reserved
prefixes, selector, conflicts between sets) lives in ``nodelabels.models`` and
``nodelabels.services``, whose field errors come back as 400 per field.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import exceptions, permissions, serializers, status, viewsets
from rest_framework.response import Response

from inventory.models import Cluster
from portal.fields import StrictInput

from . import services
from .models import LabelSet


class IsStaffOrReadOnly(permissions.BasePermission):
    message = "Only portal admins can manage node labels."

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or request.user.is_staff


class NodeSyncSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.ChoiceField(
        choices=["in sync", "pending", "failed", "drifted", "not applied"]
    )
    error = serializers.CharField()


class LabelSetSerializer(StrictInput, serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    labels = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=255),
        help_text="{key: value}; keys under nvidia.com/, kubernetes.io/ and k8s.io/ are refused.",
    )
    node_names = serializers.ListField(
        child=serializers.CharField(max_length=253),
        required=False,
        help_text="Explicit node names (or give gpu_product instead).",
    )
    gpu_product = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="Every node of this GFD product, e.g. NVIDIA-A100-SXM4-80GB.",
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    nodes = serializers.SerializerMethodField()

    class Meta:
        model = LabelSet
        fields = [
            "id", "cluster", "name", "description", "labels", "node_names", "gpu_product",
            "enabled", "created_by", "created_at", "updated_at", "nodes",
        ]  # fmt: skip
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        validators = []  # the name's uniqueness is checked by services, as a field error

    @extend_schema_field(NodeSyncSerializer(many=True))
    def get_nodes(self, obj: LabelSet) -> list[dict]:
        rows = (self.context.get("overview") or {}).get(obj.pk, [])
        return [{"name": r.name, "status": r.status, "error": r.error} for r in rows]

    def save(self, **kwargs):
        user = self.context["request"].user
        try:
            if self.instance is None:
                self.instance = services.create_label_set(user, **self.validated_data)
            else:
                self.instance = services.update_label_set(
                    user, self.instance, **self.validated_data
                )
        except DjangoValidationError as exc:
            raise exceptions.ValidationError(exc.message_dict) from exc
        except PermissionError as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return self.instance


@extend_schema_view(
    list=extend_schema(summary="Label sets, each with the nodes it selects and their sync state"),
    retrieve=extend_schema(summary="One label set"),
    create=extend_schema(summary="Define a label set (admins); its nodes are labelled next"),
    update=extend_schema(summary="Change a label set (admins)"),
    partial_update=extend_schema(summary="Change some fields of a label set (admins)"),
    destroy=extend_schema(
        summary="Delete a label set (admins): its labels are removed where still the portal's"
    ),
)
class LabelSetViewSet(viewsets.ModelViewSet):
    """Admin-managed node labels, kept on nodes by operations and reverted on drift."""

    queryset = LabelSet.objects.select_related("cluster", "created_by")
    serializer_class = LabelSetSerializer
    permission_classes = [permissions.IsAuthenticated, IsStaffOrReadOnly]
    # labels is an object: a form cannot carry one, so the schema offers JSON only (#24).
    filterset_fields = ["cluster__slug", "enabled"]
    ordering_fields = ["name", "created_at", "updated_at"]
    ordering = ["cluster__name", "name"]

    def list(self, request, *args, **kwargs):
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(page if page is not None else queryset)
        serializer = self._serializer(rows, many=True)
        if page is not None:
            return self.get_paginated_response(serializer.data)
        return Response(serializer.data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self._serializer(self.get_object()).data)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        label_set = serializer.save()
        return Response(self._serializer(label_set).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        partial = kwargs.pop("partial", False)
        serializer = self.get_serializer(self.get_object(), data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        label_set = serializer.save()
        return Response(self._serializer(label_set).data)

    def perform_destroy(self, instance: LabelSet) -> None:
        try:
            services.delete_label_set(self.request.user, instance)
        except PermissionError as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc

    def _serializer(self, data, many: bool = False) -> LabelSetSerializer:
        sets = list(data) if many else [data]
        context = {**self.get_serializer_context(), "overview": services.sync_overview(sets)}
        return LabelSetSerializer(data, many=many, context=context)
