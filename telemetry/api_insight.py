"""REST: showback per team and month (``GET /api/v1/showback/?month=2026-11``).

Scoped like every team query (``quotas.scoping.visible_to``): the caller's teams; admins
every team. Numbers and their definitions as on the showback page (telemetry.showback).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from quotas.models import Team
from quotas.scoping import visible_to

from . import showback


class ShowbackRowSerializer(serializers.Serializer):
    team = serializers.SlugField(help_text="team slug")
    resource = serializers.CharField(help_text="nvidia.com/gpu or a MIG resource")
    granted_gpu_hours = serializers.FloatField(
        help_text="amount x hours of the month the team's grants covered (up to now)"
    )
    allocated_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="GPU-hours the team's pods held (reported history x attribution share); "
        "null for MIG resources (not measured)",
    )
    busy_gpu_hours = serializers.FloatField(
        allow_null=True, help_text="allocated GPU-hours weighted by mean utilisation"
    )


class ShowbackSerializer(serializers.Serializer):
    month = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    results = ShowbackRowSerializer(many=True)


@extend_schema(
    operation_id="showback",
    tags=["telemetry"],
    parameters=[
        OpenApiParameter(
            "month", OpenApiTypes.STR, description="YYYY-MM (UTC); default: the current month"
        )
    ],
    responses={
        200: ShowbackSerializer,
        400: OpenApiResponse(description="month is not YYYY-MM"),
    },
)
@api_view(["GET"])
def showback_api(request):
    """GPU-hours granted, allocated and busy per team and resource for one month."""
    try:
        month, start, end = showback.parse_month(request.query_params.get("month"))
    except showback.BadMonth as err:
        return Response({"month": [str(err)]}, status=400)
    teams = visible_to(Team.objects.all(), request.user, "pk")
    rows = showback.showback(teams, start, end)
    return Response(
        {
            "month": month,
            "start": start.isoformat().replace("+00:00", "Z"),
            "end": end.isoformat().replace("+00:00", "Z"),
            "results": [r.as_dict() for r in rows],
        }
    )
