"""REST: the MIG profile catalog and one-GPU layout validation.

``GET /api/v1/mig-profiles/`` lists the catalog (optionally one product);
``POST /api/v1/mig-layouts/validate/`` checks a layout for one GPU. Input that cannot be
judged (missing or unknown product, a layout that is not an object, counts that are not
positive integers, profiles the product lacks) is a 400 with field messages; a well-formed
layout that does not fit is a 200 with ``valid: false`` and the reasons, so a form can
show them live.
"""

from __future__ import annotations

from django.urls import path
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

from portal.parsers import JSONParser

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


@extend_schema_field({"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}})
class _Layout(serializers.DictField):
    """``{profile: instances}``: any JSON object here; counts are checked by the validator
    so every bad count is reported, with bools and "2" refused (DRF would coerce them)."""

    child = serializers.JSONField()


class MigLayoutSerializer(serializers.Serializer):
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

    parser_classes = [JSONParser]  # a layout is a JSON object; forms cannot carry one

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
