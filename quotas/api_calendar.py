"""REST: the capacity calendar and the caller's teams' bookings (issue #25 section 1).

``GET /api/v1/calendar/`` answers the page's slots (quotas/calendar.py); ``GET
/api/v1/bookings/`` lists the time-bound grants of the caller's teams that have not ended
(admins: every team's), the same rows the iCalendar feed holds.
"""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.models import Cluster, GpuClass
from portal.validation import NOT_FOUND

from .calendar import VIEWS, bookings, calendar_for, default_resource, start_of
from .capacity import advertised_resources
from .models import Grant
from .serializers_actions import ErrorSerializer

# ``start``: any day of these years (the schema says so; a past day shows what grants
# reserved then, as the portal still knows them).
START_PATTERN = "^20[0-9]{2}-"


class CalendarQuerySerializer(serializers.Serializer):
    # Blank is allowed where the schema allows it: an empty cluster is no cluster (404), an
    # empty class any class, an empty resource the default.
    cluster = serializers.CharField(allow_blank=True)
    gpu_class = serializers.CharField(required=False, allow_blank=True)
    resource = serializers.CharField(required=False, allow_blank=True)
    view = serializers.ChoiceField(choices=list(VIEWS), default="day")
    start = serializers.DateField(required=False)

    def validate(self, attrs):
        cluster = Cluster.objects.filter(slug=attrs["cluster"]).first()
        if cluster is None:
            raise serializers.ValidationError({"cluster": "No such cluster."}, code=NOT_FOUND)
        attrs["cluster"] = cluster
        slug = attrs.get("gpu_class")
        attrs["gpu_class"] = None
        if slug:
            attrs["gpu_class"] = GpuClass.objects.filter(cluster=cluster, slug=slug).first()
            if attrs["gpu_class"] is None:
                raise serializers.ValidationError(
                    {"gpu_class": f"No class {slug!r} on {cluster.slug}."}, code=NOT_FOUND
                )
        resources = advertised_resources(cluster)
        resource = attrs.get("resource") or default_resource(resources)
        if resource not in resources:
            raise serializers.ValidationError(
                {"resource": f"{cluster.slug} advertises {', '.join(resources) or 'nothing'}."},
                code=NOT_FOUND,
            )
        attrs["resource"] = resource
        day = attrs.get("start")
        if day is not None and not 2000 <= day.year <= 2099:
            raise serializers.ValidationError({"start": "A day of the years 2000 to 2099."})
        attrs["start"] = start_of(attrs["view"], day)
        return attrs


class MarkSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["granted", "booked", "pending"])
    team = serializers.CharField()
    namespace = serializers.CharField()
    amount = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField(allow_null=True)


class SlotSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    limit = serializers.IntegerField(help_text="allocatable times the overcommit ratio")
    granted = serializers.IntegerField(help_text="held by grants that have started")
    booked = serializers.IntegerField(help_text="held by approved grants that start later")
    free_to_grant = serializers.IntegerField(
        source="free", help_text="what a request for exactly this slot could be approved for"
    )
    yours = MarkSerializer(many=True, help_text="your teams' grants and pending requests")


class CalendarSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    gpu_class = serializers.CharField(allow_null=True)
    resource = serializers.CharField()
    view = serializers.CharField()
    slots = SlotSerializer(many=True)


class CalendarView(APIView):
    @extend_schema(
        operation_id="calendar_retrieve",
        summary="The capacity calendar of a cluster, class and resource",
        parameters=[
            OpenApiParameter("cluster", str, required=True, description="cluster slug"),
            OpenApiParameter("gpu_class", str, description="class slug; empty: any (the pool)"),
            OpenApiParameter("resource", str, description="default nvidia.com/gpu"),
            OpenApiParameter("view", str, enum=list(VIEWS), description="day (42) or hour (72)"),
            OpenApiParameter(
                "start",
                {"type": "string", "format": "date", "pattern": START_PATTERN},
                description="first day (UTC), 2000 to 2099; default now",
            ),
        ],
        responses={
            200: CalendarSerializer,
            404: OpenApiResponse(
                ErrorSerializer,
                description="no such cluster, class or resource (message under its parameter)",
            ),
        },
    )
    def get(self, request):
        query = CalendarQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        slots = calendar_for(request.user, q["cluster"], q["gpu_class"], q["resource"],
                             q["view"], q["start"])  # fmt: skip
        body = {
            "cluster": q["cluster"].slug,
            "gpu_class": q["gpu_class"].slug if q["gpu_class"] else None,
            "resource": q["resource"], "view": q["view"], "slots": slots,
        }  # fmt: skip
        return Response(CalendarSerializer(body).data)


class BookingSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="namespace.team.slug")
    cluster = serializers.CharField(source="namespace.cluster.slug")
    namespace = serializers.CharField(source="namespace.name")
    gpu_class = serializers.CharField(source="gpu_class.slug", allow_null=True, default=None)
    state = serializers.SerializerMethodField(help_text="booked (starts later) or active")

    class Meta:
        model = Grant
        fields = ["id", "team", "cluster", "namespace", "resource", "gpu_class", "amount",
                  "starts_at", "ends_at", "state"]  # fmt: skip

    def get_state(self, grant) -> str:
        return "booked" if grant.starts_at > timezone.now() else "active"


@extend_schema(
    summary="Your teams' bookings: time-bound grants that have not ended",
    parameters=[OpenApiParameter("team", str, description="team slug")],
)
class BookingList(generics.ListAPIView):
    serializer_class = BookingSerializer
    filter_backends = []

    def get_queryset(self):
        qs = bookings(self.request.user)
        team = self.request.query_params.get("team")
        return qs.filter(Q(namespace__team__slug=team)) if team else qs
