"""Personal API token endpoints: issue (username + password), list, revoke."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import (
    api_view,
    authentication_classes,
    permission_classes,
    throttle_classes,
)
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from .auth import PasswordInBody
from .fields import StrictInput
from .models import ApiToken
from .signin import client_ip, lockout


class TokenRequestSerializer(StrictInput, serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, style={"input_type": "password"})
    name = serializers.CharField(max_length=100, required=False, default="api")


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields


class TokenThrottle(SimpleRateThrottle):
    """Requests per client address (``TOKEN_THROTTLE_RATE``), whatever the credentials.

    The address is the real client's (portal/signin/address.py: ``X-Forwarded-For`` only
    behind ``TRUSTED_PROXIES``). Failed passwords are also counted per account and address
    by django-axes (portal/signin/), which locks out long before this rate is reached.
    """

    scope = "token"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request) or "-"}


@extend_schema(
    request=TokenRequestSerializer,
    responses={
        201: inline_serializer(
            "IssuedToken",
            {"token": serializers.CharField(), "id": serializers.UUIDField()},
        ),
        429: inline_serializer(
            "SigninLocked",
            {
                "detail": serializers.CharField(),
                "retry_after": serializers.IntegerField(required=False),
            },
        ),
    },
    auth=[],
    summary="Exchange a username and password for a personal API token",
)
@api_view(["POST"])
# Only the password in the body counts: a bearer token or a session sent along changes
# neither whose password is checked nor who is throttled.
@authentication_classes([PasswordInBody])
@permission_classes([permissions.AllowAny])
@throttle_classes([TokenThrottle])
def issue_token(request):
    data = TokenRequestSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    username = data.validated_data["username"]
    # The Django request: django-axes keeps its per-request state on it (AxesMiddleware).
    django_request = request._request
    user = authenticate(django_request, username=username, password=data.validated_data["password"])
    if getattr(django_request, "axes_locked_out", False):
        wait = lockout.retry_after(django_request, {"username": username})
        return Response(
            {"detail": lockout.message(wait), "retry_after": wait},
            status=status.HTTP_429_TOO_MANY_REQUESTS,
            headers={"Retry-After": str(wait)},
        )
    if user is None or not user.is_active:
        raise exceptions.AuthenticationFailed("Unable to log in with the given credentials.")
    token, raw = ApiToken.issue(user, data.validated_data["name"])
    return Response({"token": raw, "id": str(token.id)}, status=status.HTTP_201_CREATED)


class ApiTokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The caller's own tokens; DELETE revokes (the row stays for the audit trail)."""

    serializer_class = ApiTokenSerializer
    filter_backends = []
    # Revoking stays possible at the members' write limit (portal/throttles.py): a leaked
    # token must be revocable at once. Listing is a read; a user can only revoke their own.
    exempt_from_write_limit = True

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    def perform_destroy(self, instance: ApiToken) -> None:
        instance.revoke()
