"""REST: the caller's own notifications (``/api/v1/notifications/``) and mark-read.

Everyone, admins included, sees only their own notifications: another user's is a 404.
"""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from quotas.serializers import ErrorSerializer, enum

from . import services
from .models import Event, Notification


class NotificationSerializer(serializers.ModelSerializer):
    event = enum(Event, read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    url = serializers.CharField(read_only=True, help_text="the portal path it links to, or empty")
    unread = serializers.BooleanField(read_only=True)

    class Meta:
        model = Notification
        fields = ["id", "event", "title", "body", "url", "team", "created_at", "read_at",
                  "unread"]  # fmt: skip


class MarkedSerializer(serializers.Serializer):
    marked = serializers.IntegerField(help_text="how many unread notifications were marked")


class NotificationFilter(django_filters.FilterSet):
    unread = django_filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")], method="filter_unread",
        help_text="true: only unread; false: only read",
    )  # fmt: skip
    event = django_filters.MultipleChoiceFilter(choices=Event.choices)

    class Meta:
        model = Notification
        fields = ["unread", "event"]

    def filter_unread(self, queryset, name, value):
        return queryset.filter(read_at__isnull=value == "true")


_404 = OpenApiResponse(ErrorSerializer, description="unknown, or not yours")


@extend_schema_view(
    list=extend_schema(summary="Your notifications, newest first (?unread=true: unread only)"),
    retrieve=extend_schema(summary="One of your notifications", responses={
        200: NotificationSerializer, 404: _404}),
)  # fmt: skip
class NotificationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = NotificationSerializer
    filterset_class = NotificationFilter
    queryset = Notification.objects.select_related("team")
    ordering_fields = ["created_at"]
    ordering = ["-created_at"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return self.queryset.none()
        return self.queryset.filter(recipient_id=self.request.user.pk)

    @extend_schema(
        request=None,
        responses={200: NotificationSerializer, 404: _404},
        summary="Mark one of your notifications read (idempotent)",
    )
    @action(detail=True, methods=["post"], url_path="read")
    def read(self, request, pk=None):
        note = self.get_object()
        note = services.mark_read(request.user, note.pk)
        fresh = self.get_queryset().get(pk=note.pk)
        return Response(self.get_serializer(fresh).data)

    @extend_schema(
        request=None,
        responses={200: MarkedSerializer},
        summary="Mark all your notifications read",
    )
    @action(detail=False, methods=["post"], url_path="read-all")
    def read_all(self, request):
        return Response({"marked": services.mark_all_read(request.user)})


router = SimpleRouter()
router.register("notifications", NotificationViewSet, basename="notification")
urlpatterns = router.urls
