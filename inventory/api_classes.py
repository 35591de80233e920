"""``/api/v1/gpu-classes/``: every signed-in user reads the classes (with idle now and free
to grant in each, quotas/figures.py); admins create, edit and delete them."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from portal.fields import StrictInput
from portal.rest import drf_detail
from portal.validation import CONFLICT

from . import classes
from .figures import DEFINITIONS, figures_by_class
from .models import LABEL_KEY, LABEL_VALUE, Cluster, GpuClass

NOT_ENFORCED = "class not enforced by Kubernetes on this cluster"


class ClassCapacitySerializer(serializers.Serializer):
    """One resource of a class: the nodes' figures and the grants' (quotas/figures.py)."""

    resource = serializers.CharField()
    unit = serializers.CharField(help_text="GPUs, instances (MIG) or replicas (time-sliced)")
    allocatable = serializers.IntegerField(help_text="on the class's present nodes")
    requested = serializers.IntegerField(
        help_text="what bound, unfinished pods request on the class's nodes"
    )
    idle = serializers.IntegerField(help_text=f"idle now: {DEFINITIONS['idle']}")
    limit = serializers.IntegerField(source="room.limit", help_text="allocatable x overcommit")
    granted = serializers.IntegerField(help_text="what this class's grants reserve at peak")
    held_beyond_grants = serializers.IntegerField(source="room.beyond")
    pool_free_to_grant = serializers.IntegerField(
        source="room.pool.free", help_text="free to grant in the whole cluster, all classes"
    )
    free_to_grant = serializers.IntegerField(
        help_text=f"free to grant: {DEFINITIONS['free_to_grant']} For a permanent grant from "
        "now: min(class, pool)."
    )


@extend_schema_field({
    "type": "object", "minProperties": 1,
    "propertyNames": {"maxLength": 316, "pattern": f"^{LABEL_KEY.pattern}$"},
    "additionalProperties": {"type": "string", "maxLength": 63,
                             "pattern": f"^{LABEL_VALUE.pattern}$"},
})  # fmt: skip
class SelectorField(serializers.DictField):
    """Node label matches as ``GpuClass.clean`` accepts them: at least one, Kubernetes
    label keys and values."""


class GpuClassSerializer(StrictInput, serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    weight = serializers.DecimalField(
        max_digits=10, decimal_places=4, min_value=0, required=False, allow_null=True,
        help_text="optional weight or price per GPU-hour, >= 0",
    )  # fmt: skip
    selector = SelectorField(
        child=serializers.CharField(allow_blank=True, max_length=63),
        help_text='node label matches, e.g. {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}',
    )
    capacity_text = serializers.CharField(read_only=True, help_text="e.g. 32 replicas on 8 GPUs")
    time_sliced = serializers.BooleanField(read_only=True)
    empty = serializers.BooleanField(read_only=True, help_text="all its nodes are gone")
    enforcement = serializers.SerializerMethodField(
        help_text=f"the cluster's backend; under resourcequota: {NOT_ENFORCED}"
    )
    capacity = serializers.SerializerMethodField()

    class Meta:
        model = GpuClass
        fields = [
            "id", "cluster", "slug", "name", "selector", "weight", "derived", "resources",
            "node_count", "gpus", "replicas", "time_sliced", "capacity_text", "empty",
            "empty_since", "enforcement", "capacity", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = [
            "id", "derived", "resources", "node_count", "gpus", "replicas", "empty_since",
            "created_at", "updated_at",
        ]  # fmt: skip

    def get_enforcement(self, cls: GpuClass) -> str:
        if cls.cluster.enforces_classes:
            return cls.cluster.enforcement
        return f"{cls.cluster.enforcement}: {NOT_ENFORCED}"

    @extend_schema_field(ClassCapacitySerializer(many=True))
    def get_capacity(self, cls: GpuClass) -> list[dict]:
        figures = self.context.get("figures")
        if figures is None:  # one class (retrieve, create, update): compute its own
            figures = figures_by_class([cls])
        return ClassCapacitySerializer(figures.get(cls.pk, []), many=True).data


class GpuClassErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


@extend_schema_view(
    list=extend_schema(parameters=[OpenApiParameter("cluster", str, description="cluster slug")]),
    create=extend_schema(responses={201: GpuClassSerializer, 400: GpuClassErrorSerializer}),
    partial_update=extend_schema(responses={200: GpuClassSerializer, 400: GpuClassErrorSerializer}),
    update=extend_schema(responses={200: GpuClassSerializer, 400: GpuClassErrorSerializer}),
    destroy=extend_schema(responses={204: None, 409: GpuClassErrorSerializer}),
)
class GpuClassViewSet(
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    """GPU classes per cluster: derived from the inventory (one per ``gpu.product``;
    time-sliced products their own, with their replica factor) or defined by admins, each
    with, per resource, allocatable, requested, idle now, granted and free to grant
    (quotas/figures.py: the figures the fleet page and the approval queue show).
    Everyone signed in reads; admins write (name, selector, weight; cluster and slug on
    create). A class that grants or requests name cannot be deleted (409)."""

    # selector is an object: a form cannot carry one, so the schema offers JSON only (#24).

    serializer_class = GpuClassSerializer

    def get_queryset(self):
        qs = GpuClass.objects.select_related("cluster").order_by("cluster__name", "name")
        slug = self.request.query_params.get("cluster")
        if slug:
            qs = qs.filter(cluster__slug=slug)
        return qs

    def get_permissions(self):
        if self.action in ("create", "update", "partial_update", "destroy"):
            return [permissions.IsAdminUser()]
        return super().get_permissions()

    def list(self, request, *args, **kwargs):
        slug = request.query_params.get("cluster")
        if slug and not Cluster.objects.filter(slug=slug).exists():
            return Response(
                {"detail": f"Unknown cluster {slug!r}.", "cluster": ["No cluster with this slug."]},
                status=status.HTTP_404_NOT_FOUND,  # a well-formed slug of no cluster
            )
        objs = list(self.filter_queryset(self.get_queryset()))
        page = self.paginate_queryset(objs)
        shown = page if page is not None else objs
        data = self.get_serializer(shown, many=True, context=self._ctx(shown)).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    def _ctx(self, objs) -> dict:
        return {**self.get_serializer_context(), "figures": figures_by_class(objs)}

    def perform_create(self, serializer):
        data = serializer.validated_data
        with _as_drf_errors():
            serializer.instance = classes.create_class(self.request.user, **data)

    def perform_update(self, serializer):
        data = dict(serializer.validated_data)
        instance = serializer.instance
        for fixed in ("cluster", "slug"):
            value = data.pop(fixed, None)
            current = instance.cluster if fixed == "cluster" else instance.slug
            if value is not None and value != current:
                raise ValidationError({fixed: ["Fixed once the class exists."]}, code=CONFLICT)
        with _as_drf_errors():
            serializer.instance = classes.update_class(self.request.user, instance, **data)

    def perform_destroy(self, instance):
        classes.delete_class(self.request.user, instance)

    def destroy(self, request, *args, **kwargs):
        try:
            return super().destroy(request, *args, **kwargs)
        except classes.ClassInUse as err:
            return Response({"detail": str(err)}, status=status.HTTP_409_CONFLICT)


class _as_drf_errors:
    """Model validation (``full_clean``) as a 400 with a message per field."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, DjangoValidationError):
            raise ValidationError(drf_detail(exc)) from exc
        return False
