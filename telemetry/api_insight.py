"""REST: showback per team and month (``GET /api/v1/showback/?month=2026-11``), with its
rows per GPU class and weighted totals, and idle allocations per GPU class
(``GET /api/v1/idle-allocations/``).

Scoped like every team query (``quotas.scoping.visible_to``): the caller's teams; admins
every team. Numbers and their definitions as on the showback page (telemetry.showback,
telemetry.classes) and the idle page.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from quotas.models import Team, TeamNamespace
from quotas.scoping import visible_to

from . import classes, insight, showback, sources, summary


class ShowbackRowSerializer(serializers.Serializer):
    team = serializers.SlugField(help_text="team slug")
    resource = serializers.CharField(help_text="nvidia.com/gpu or a MIG resource")
    granted_gpu_hours = serializers.FloatField(
        help_text="amount x hours of the month the team's grants covered (up to now)"
    )
    allocated_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="GPU-hours the team's pods held: on clusters that send telemetry, reported "
        "history x attribution share; on the others, the inventory's pod records (GPUs "
        "requested x hours from the pod's start to its end); null: not measured (MIG "
        "resources, or a cluster never synced)",
    )
    busy_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="allocated GPU-hours weighted by mean utilisation, from telemetry only; "
        "null: not measured",
    )
    allocated_from = serializers.ListField(
        child=serializers.ChoiceField(choices=["telemetry", "inventory"]),
        help_text="where allocated_gpu_hours comes from; empty: not measured",
    )


class ShowbackTeamRowSerializer(ShowbackRowSerializer):
    recorded_since = serializers.DateTimeField(
        allow_null=True,
        help_text="when allocated_gpu_hours comes partly from the inventory and its record "
        "of ended pods begins inside the month: pods that ended before it are not counted",
    )


class ClassFieldsSerializer(serializers.Serializer):
    gpu_class = serializers.UUIDField(allow_null=True, help_text="GPU class id; null: any class")
    gpu_class_slug = serializers.SlugField(allow_null=True)
    gpu_class_name = serializers.CharField(help_text='display name, or "any class"')
    cluster = serializers.SlugField(allow_null=True, help_text="the class's cluster")
    weight = serializers.DecimalField(
        max_digits=10, decimal_places=4, allow_null=True,
        help_text="the weight or price per GPU-hour an admin set on the class; null: none",
    )  # fmt: skip


WEIGHTED = "x the class weight; null without a weight, for any class and for MIG resources"


class ShowbackClassRowSerializer(ShowbackRowSerializer, ClassFieldsSerializer):
    """A team's row split by GPU class: granted by the grant's class (null: any-class
    grants), allocated / busy by the class of the node the GPU is on."""

    weighted_granted = serializers.FloatField(allow_null=True, help_text=f"granted {WEIGHTED}")
    weighted_allocated = serializers.FloatField(allow_null=True, help_text=f"allocated {WEIGHTED}")
    weighted_busy = serializers.FloatField(allow_null=True, help_text=f"busy {WEIGHTED}")


class TeamCostSerializer(serializers.Serializer):
    team = serializers.SlugField()
    weighted_granted = serializers.FloatField(
        allow_null=True, help_text="sum over the team's weighted nvidia.com/gpu class rows"
    )
    weighted_allocated = serializers.FloatField(allow_null=True)
    weighted_busy = serializers.FloatField(allow_null=True)
    unweighted_granted_gpu_hours = serializers.FloatField(
        help_text="granted GPU-hours of rows without a weight (not in the totals)"
    )
    unweighted_allocated_gpu_hours = serializers.FloatField()


class OutageSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    message = serializers.CharField(help_text="why its Prometheus could not answer")


UNAVAILABLE_HELP = (
    "clusters whose telemetry source did not answer: their GPUs' measured figures are "
    "missing from this answer (the pages show a banner)"
)


def _outages() -> list[dict]:
    return [{"cluster": o.cluster, "message": o.message} for o in sources.outages()]


class ShowbackSerializer(serializers.Serializer):
    month = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    results = ShowbackTeamRowSerializer(many=True)
    classes = ShowbackClassRowSerializer(
        many=True, help_text="results split by GPU class; they add up to results per team"
    )
    team_costs = TeamCostSerializer(many=True, help_text="weighted totals per team")
    telemetry_unavailable = OutageSerializer(many=True, help_text=UNAVAILABLE_HELP)


@extend_schema(
    operation_id="showback",
    tags=["telemetry"],
    parameters=[
        OpenApiParameter(
            "month",
            OpenApiTypes.STR,
            description="YYYY-MM (UTC), 2000-01 to 2999-12; default: the current month",
            pattern=r"^2[0-9]{3}-(0[1-9]|1[0-2])$",
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
    raw = request.query_params.get("month")
    if raw is not None and not raw.strip():
        return Response({"month": ["May not be blank: leave it out for this month."]}, status=400)
    try:
        month, start, end = showback.parse_month(raw)
    except showback.BadMonth as err:
        return Response({"month": [str(err)]}, status=400)
    teams = visible_to(Team.objects.all(), request.user, "pk")
    led = showback.ledger(teams, start, end)
    report = classes.class_rows(led)
    return Response(
        {
            "month": month,
            "start": start.isoformat().replace("+00:00", "Z"),
            "end": end.isoformat().replace("+00:00", "Z"),
            "results": [r.as_dict() for r in showback.rows(led)],
            "classes": [r.as_dict() for r in report.rows],
            "team_costs": [t.as_dict() for t in report.teams],
            "telemetry_unavailable": _outages(),
        }
    )


# -- idle allocations ---------------------------------------------------------------------


class IdleClassSerializer(ClassFieldsSerializer):
    allocations = serializers.IntegerField()
    gpus = serializers.IntegerField()
    idle_gpu_hours = serializers.FloatField(
        help_text="GPUs x hours since any of their GPUs was last at or above the threshold"
    )
    weighted_idle = serializers.FloatField(allow_null=True, help_text=f"idle GPU-hours {WEIGHTED}")


class IdleAllocationSerializer(ClassFieldsSerializer):
    team = serializers.SlugField(allow_null=True)
    namespace = serializers.CharField()
    pod = serializers.CharField()
    node = serializers.CharField()
    gpus = serializers.IntegerField()
    gpu_indexes = serializers.ListField(child=serializers.IntegerField())
    method = serializers.ChoiceField(choices=["agent", "requests"], help_text="attribution")
    max_util_pct = serializers.FloatField(allow_null=True, help_text="peak 5-minute average")
    metric = serializers.CharField(
        help_text="what max_util_pct measures: the agents' NVML utilisation, or the "
        "dcgm-exporter metric of a Prometheus source (DCGM_FI_PROF_GR_ENGINE_ACTIVE where "
        "present, else DCGM_FI_DEV_GPU_UTIL)"
    )
    mig_instances = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="{GPU id: MIG instance ids (GPU_I_ID)} judged instead of the whole GPU",
    )
    since = serializers.DateTimeField(allow_null=True, help_text="pod start")
    idle_since = serializers.DateTimeField()
    idle_gpu_hours = serializers.FloatField()
    weighted_idle = serializers.FloatField(allow_null=True)


class IdleSerializer(serializers.Serializer):
    threshold_pct = serializers.FloatField()
    window_hours = serializers.FloatField()
    as_of = serializers.DateTimeField(
        allow_null=True,
        help_text="when the oldest of these figures was computed (they are computed every "
        "minute per cluster, before anyone asks); null: no cluster sends telemetry",
    )
    classes = IdleClassSerializer(many=True, help_text="per GPU class, costliest first")
    results = IdleAllocationSerializer(many=True)
    telemetry_unavailable = OutageSerializer(many=True, help_text=UNAVAILABLE_HELP)


@extend_schema(operation_id="idle_allocations", tags=["telemetry"], responses=IdleSerializer)
@api_view(["GET"])
def idle_api(request):
    """Allocations idle now (the idle page's list) with their GPU class, idle GPU-hours and
    weighted figure, and the sums per class; the caller's teams' namespaces (admins: all)."""
    if request.user.is_staff:
        figures = summary.read()
    else:
        keys = set(
            visible_to(TeamNamespace.objects.all(), request.user).values_list("cluster_id", "name")
        )
        figures = summary.read({c for c, _ in keys}, namespaces=keys)
    allocations = figures.idle
    by_class = classes.idle_by_class(allocations)
    return Response(
        {
            "threshold_pct": insight.idle_threshold_pct(),
            "window_hours": insight.idle_window().total_seconds() / 3600,
            "as_of": figures.as_of,
            "classes": [c.as_dict() for c in by_class],
            "results": [classes.idle_allocation_dict(a) for a in allocations],
            "telemetry_unavailable": _outages(),
        }
    )
