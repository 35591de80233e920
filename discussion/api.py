"""REST API of request threads: ``/api/v1/quota-requests/{id}/comments/`` and
``/api/v1/mig-requests/{id}/comments/`` (GET: the thread oldest first; POST: a comment).

Same isolation as the request endpoints (a request of another team is a 404), bad input
is a 400 with a message per field, members' POSTs count against ``MEMBER_WRITE_RATE``
(portal/throttles.py, the project-wide default throttle).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, generics, serializers, status
from rest_framework.response import Response

from mig.models import MigRequest
from portal.fields import StrictInput, TextField
from portal.validation import visible
from quotas.models import QuotaRequest
from quotas.serializers import ErrorSerializer

from . import services
from .models import BODY_MAX, Comment


class CommentSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author.get_username", read_only=True)
    by_admin = serializers.BooleanField(
        read_only=True, help_text="the author wrote as a portal admin"
    )

    class Meta:
        model = Comment
        fields = ["id", "author", "by_admin", "body", "created_at"]
        read_only_fields = fields


class CommentCreateSerializer(StrictInput, serializers.Serializer):
    # What services.clean_body takes, said in the schema: a visible character, at most
    # BODY_MAX characters (#24: a blank body or one of 5,001-10,000 was schema-valid).
    body = TextField(
        trim_whitespace=False, max_length=BODY_MAX,
        validators=[visible("Write a comment first.")],
        error_messages={"blank": "Write a comment first."},
        help_text=f"plain text, 1 to {BODY_MAX} characters (surrounding blanks are dropped)",
    )  # fmt: skip

    def validate_body(self, value: str) -> str:
        try:
            return services.clean_body(value)
        except DjangoValidationError as err:
            raise serializers.ValidationError(err.message_dict["body"]) from err


_errors = {
    400: OpenApiResponse(ErrorSerializer, description="invalid input, per-field messages"),
    404: OpenApiResponse(ErrorSerializer, description="unknown, or another team's request"),
}


def _schema(what: str):
    return extend_schema_view(
        get=extend_schema(
            summary=f"The comment thread of a {what}, oldest first",
            responses={200: CommentSerializer(many=True), 404: _errors[404]},
        ),
        post=extend_schema(
            summary=f"Comment on a {what}",
            description="The requester, the team's members and portal admins may comment. "
            "The other party is told (e-mail, in-app notice); the author is not.",
            request=CommentCreateSerializer,
            responses={201: CommentSerializer, **_errors},
        ),
    )


class _RequestComments(generics.ListCreateAPIView):
    model: type = QuotaRequest
    serializer_class = CommentSerializer
    filter_backends = []

    def target(self):
        if not hasattr(self, "_target"):
            qs = services.discussable(self.model, self.request.user)
            self._target = get_object_or_404(qs, pk=self.kwargs["pk"])
        return self._target

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Comment.objects.none()
        return services.thread(self.target())

    def create(self, request, *args, **kwargs):
        target = self.target()  # 404 before any field error
        data = CommentCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            comment = services.post(request.user, target, data.validated_data["body"])
        except DjangoValidationError as err:
            raise exceptions.ValidationError(err.message_dict) from err
        except PermissionError as err:
            raise exceptions.PermissionDenied(str(err)) from err
        return Response(CommentSerializer(comment).data, status=status.HTTP_201_CREATED)


@_schema("quota request")
class QuotaRequestComments(_RequestComments):
    model = QuotaRequest


@_schema("MIG request")
class MigRequestComments(_RequestComments):
    model = MigRequest


urlpatterns = [
    path(
        "quota-requests/<uuid:pk>/comments/",
        QuotaRequestComments.as_view(),
        name="quota-request-comments",
    ),
    path(
        "mig-requests/<uuid:pk>/comments/",
        MigRequestComments.as_view(),
        name="mig-request-comments",
    ),
]
