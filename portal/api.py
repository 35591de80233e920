"""Personal API token endpoints: issue (username + password), list, revoke."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import api_view, permission_classes, throttle_classes
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle

from .models import ApiToken


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, style={"input_type": "password"})
    name = serializers.CharField(max_length=100, required=False, default="api")


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields


class TokenThrottle(AnonRateThrottle):
    """Slows password guessing through the token endpoint (per client address)."""

    scope = "token"


@extend_schema(
    request=TokenRequestSerializer,
    responses={
        201: inline_serializer(
            "IssuedToken",
            {"token": serializers.CharField(), "id": serializers.UUIDField()},
        )
    },
    auth=[],
    summary="Exchange a username and password for a personal API token",
)
@api_view(["POST"])
@permission_classes([permissions.AllowAny])
@throttle_classes([TokenThrottle])
def issue_token(request):
    data = TokenRequestSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    user = authenticate(
        request,
        username=data.validated_data["username"],
        password=data.validated_data["password"],
    )
    if user is None or not user.is_active:
        raise exceptions.AuthenticationFailed("Unable to log in with the given credentials.")
    token, raw = ApiToken.issue(user, data.validated_data["name"])
    return Response({"token": raw, "id": str(token.id)}, status=status.HTTP_201_CREATED)


class ApiTokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The caller's own tokens; DELETE revokes (the row stays for the audit trail)."""

    serializer_class = ApiTokenSerializer
    filter_backends = []

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    def perform_destroy(self, instance: ApiToken) -> None:
        instance.revoke()
