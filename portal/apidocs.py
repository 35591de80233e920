"""The OpenAPI schema (``/api/schema/``) and Swagger UI (``/api/docs/``) need a signed-in
user or an API token, unless ``API_DOCS_PUBLIC`` opens them (#24, finding 6: they answered
anonymous callers, describing every endpoint to anyone who can reach the portal).

Read per request, so the setting can be changed without re-importing the views
(drf-spectacular's ``SERVE_PERMISSIONS`` is fixed when its views are defined).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework import exceptions
from rest_framework.permissions import BasePermission


def allowed(request) -> bool:
    return bool(settings.API_DOCS_PUBLIC or (request.user and request.user.is_authenticated))


class DocsAccess(BasePermission):
    message = "Sign in or send an API token to read the API schema."

    def has_permission(self, request, view) -> bool:
        return allowed(request)


class SchemaView(SpectacularAPIView):
    permission_classes = [DocsAccess]


class DocsView(SpectacularSwaggerSplitView):
    """Swagger UI; an anonymous browser is sent to the sign-in page and back."""

    permission_classes = [DocsAccess]

    def handle_exception(self, exc):
        refused = isinstance(exc, exceptions.NotAuthenticated | exceptions.PermissionDenied)
        if refused and "script" not in self.request.GET:  # the page, not its init script
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)
