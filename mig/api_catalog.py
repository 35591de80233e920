"""REST: the MIG profile catalog and one-GPU layout validation.

``GET /api/v1/mig-profiles/`` lists the catalog (optionally one product);
``POST /api/v1/mig-layouts/validate/`` checks a layout for one GPU. Input that cannot be
judged (missing or unknown product, a layout that is not an object, counts that are not
positive integers, profiles the product lacks) is a 400 with field messages; a well-formed
layout that does not fit is a 200 with ``valid: false`` and the reasons, so a form can
show them live.
"""

from __future__ import annotations

import re

from django.urls import path
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.fields import StrictInput

from .catalog import PRODUCTS, Product, UnknownProduct, resolve_product
from .layout import STRATEGIES, input_errors, place, resources_for, validate_node_layout

# -- serializers ---------------------------------------------------------------------------


class MigProfileSerializer(serializers.Serializer):
    name = serializers.CharField()
    resource = serializers.CharField(help_text="Extended resource under the mixed strategy.")
    compute_slices = serializers.IntegerField()
    memory_slices = serializers.IntegerField()
    max_count = serializers.IntegerField(help_text="Most instances of this profile per GPU.")
    starts = serializers.ListField(
        child=serializers.IntegerField(), help_text="Allowed memory-slice start positions."
    )
    media_extensions = serializers.BooleanField(help_text="A +me profile: once per GPU.")


class MigProductSerializer(serializers.Serializer):
    product = serializers.CharField(source="name")
    gfd_products = serializers.ListField(child=serializers.CharField())
    compute_slices = serializers.IntegerField()
    memory_slices = serializers.IntegerField()
    profiles = serializers.SerializerMethodField()

    @extend_schema_field(MigProfileSerializer(many=True))
    def get_profiles(self, product: Product) -> list[dict]:
        return MigProfileSerializer(list(product.profiles.values()), many=True).data


def _integral_float(value: object) -> bool:
    return isinstance(value, float) and value.is_integer()


@extend_schema_field({"type": "object", "minProperties": 1,
                      "additionalProperties": {"type": "integer", "minimum": 1}})  # fmt: skip
class _Layout(serializers.DictField):
    """``{profile: instances}``: any JSON object here; counts are checked by the validator
    so every bad count is reported, with bools and "2" refused (DRF would coerce them)."""

    child = serializers.JSONField()

    def to_internal_value(self, data):
        layout = super().to_internal_value(data)
        # JSON Schema's integers include 2.0: read it as 2 (DRF's IntegerField does too).
        return {name: int(count) if _integral_float(count) else count
                for name, count in layout.items()}  # fmt: skip


class MigLayoutSerializer(StrictInput, serializers.Serializer):
    product = serializers.CharField(
        help_text="Short name (A100-80GB) or GFD gpu.product label (NVIDIA-A100-SXM4-80GB)."
    )
    layout = _Layout(help_text='Instances per profile on one GPU, e.g. {"3g.40gb": 1}.')
    strategy = serializers.ChoiceField(
        choices=STRATEGIES,
        default="mixed",
        help_text="MIG strategy of the target node: decides the advertised resources.",
    )

    def validate_product(self, value: str) -> Product:
        try:
            return resolve_product(value)
        except UnknownProduct as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def validate(self, attrs: dict) -> dict:
        errors = input_errors(attrs["product"], attrs["layout"])
        if errors:
            raise serializers.ValidationError({"layout": errors})
        return attrs


def _one_of(*names: str) -> str:
    # A pattern, not an enum: drf-spectacular would make each enum a component.
    return "^(?:" + "|".join(re.sub(r"([.+])", r"\\\1", name) for name in names) + ")$"


class MigLayoutSchema(OpenApiSerializerExtension):
    """The schema names, per product, the profiles its layout may hold (``input_errors``
    refuses others): one ``anyOf`` branch per catalog product, by its names."""

    target_class = MigLayoutSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["anyOf"] = [
                {"properties": {
                    "product": {"pattern": _one_of(product.name, *product.gfd_products)},
                    "layout": {"propertyNames": {"pattern": _one_of(*product.profile_names())}},
                }}
                for product in PRODUCTS.values()
            ]  # fmt: skip
        return schema


class MigPlacementSerializer(serializers.Serializer):
    profile = serializers.CharField()
    start = serializers.IntegerField(help_text="First memory slice.")
    size = serializers.IntegerField(help_text="Memory slices.")


class MigLayoutValidationSerializer(serializers.Serializer):
    product = serializers.CharField(help_text="The catalog product the input matched.")
    valid = serializers.BooleanField()
    errors = serializers.ListField(child=serializers.CharField())
    placements = MigPlacementSerializer(many=True, help_text="Empty when not valid.")
    resources = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Resources one GPU in this layout advertises; empty when not valid.",
    )


# -- views ---------------------------------------------------------------------------------


class MigProfilesView(APIView):
    """The MIG profile catalog per GPU product."""

    @extend_schema(
        operation_id="mig_profiles_list",
        summary="MIG profiles per GPU product",
        parameters=[
            OpenApiParameter(
                "product",
                OpenApiTypes.STR,
                description="Only this product: short name or GFD gpu.product label "
                "(case-insensitive, GFD's -SHARED and -MIG-... suffixes ignored).",
                enum=sorted(
                    {name for p in PRODUCTS.values() for name in (p.name, *p.gfd_products)}
                ),
            )
        ],
        responses={
            200: MigProductSerializer(many=True),
            400: OpenApiResponse(description="Unknown product."),
        },
    )
    def get(self, request: Request) -> Response:
        wanted = request.query_params.get("product")
        products = list(PRODUCTS.values())
        if wanted is not None:
            try:
                products = [resolve_product(wanted)]
            except UnknownProduct as exc:
                raise serializers.ValidationError({"product": [str(exc)]}) from exc
        return Response(MigProductSerializer(products, many=True).data)


class LayoutValidateView(APIView):
    """Whether a layout fits on one GPU, and why not."""

    @extend_schema(
        operation_id="mig_layouts_validate",
        summary="Validate a MIG layout for one GPU",
        request=MigLayoutSerializer,
        responses={
            200: MigLayoutValidationSerializer,
            400: OpenApiResponse(
                description="Malformed input, an unknown product or a profile the product "
                "does not have: `detail` plus messages per field."
            ),
        },
        examples=[
            OpenApiExample(
                "A100-80GB mix",
                value={"product": "A100-80GB", "layout": {"3g.40gb": 1, "1g.10gb": 2}},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = MigLayoutSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        product: Product = data.validated_data["product"]
        layout: dict[str, int] = data.validated_data["layout"]
        strategy: str = data.validated_data["strategy"]
        errors = validate_node_layout(product, layout, 1, strategy)
        placements = [] if errors else place(product, layout) or []
        body = {
            "product": product.name,
            "valid": not errors,
            "errors": errors,
            "placements": [
                {"profile": p.profile, "start": p.start, "size": p.size} for p in placements
            ],
            "resources": {} if errors else resources_for(product, layout, 1, strategy),
        }
        return Response(MigLayoutValidationSerializer(body).data)


urlpatterns = [
    path("mig-profiles/", MigProfilesView.as_view(), name="mig-profiles"),
    path("mig-layouts/validate/", LayoutValidateView.as_view(), name="mig-layouts-validate"),
]
