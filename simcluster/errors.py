"""API errors rendered as Kubernetes ``Status`` objects.

Clients (the official client, kubectl, the portal's gateway) branch on ``code`` and
``reason``, so both must match what a real API server sends.
"""

from __future__ import annotations

import json
from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error that the server turns into a ``Status`` response."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "InternalError")
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object for this error."""
        return status_body(self.code, self.message, self.reason, self.details)


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Build a failure ``Status`` object the way the API server does."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "InternalError"),
    }
    if details is not None:  # a present StatusDetails, even empty, is sent as {}
        body["details"] = details
    body["code"] = code
    return body


class NoSuchResource(ApiError):
    """404 for a path under a served API root that names nothing: go-restful's not-found
    handler answers ``errors.NewGenericServerResponse(404, ...)``, whose ``details`` is an
    empty, present ``{}`` (``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
    responsewriters/errors.go``, ``staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go``)."""

    def __init__(self) -> None:
        super().__init__(404, "the server could not find the requested resource", "NotFound", {})


class PageNotFound(ApiError):
    """404 from the server's mux for a path no API serves (an unknown group, a custom
    resource's group without that version or resource): Go's ``http.NotFound``, plain text
    ``404 page not found`` (``staging/src/k8s.io/apiserver/pkg/server/mux/pathrecorder.go``,
    ``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_handler.go``)."""

    BODY = b"404 page not found\n"
    CONTENT_TYPE = "text/plain; charset=utf-8"

    def __init__(self) -> None:
        super().__init__(404, "404 page not found", "NotFound")


def status_bytes(code: int, message: str, reason: str | None = None) -> bytes:
    """Serialized failure ``Status``."""
    return json.dumps(status_body(code, message, reason), separators=(",", ":")).encode()


def _qualified(resource: str, name: str, group: str) -> tuple[str, dict[str, Any]]:
    """``schema.GroupResource.String()`` (``deployments.apps``) and the ``StatusDetails``
    (``name``, ``group``, ``kind``) of ``errors.NewNotFound`` and its siblings
    (``staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go``)."""
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return (f"{resource}.{group}" if group else resource), details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """404 in the API server's wording: ``pods "x" not found``, ``deployments.apps "x" …``."""
    qualified, details = _qualified(resource, name, group)
    return ApiError(404, f'{qualified} "{name}" not found', "NotFound", details)


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """409 AlreadyExists for a create of an existing name."""
    qualified, details = _qualified(resource, name, group)
    return ApiError(409, f'{qualified} "{name}" already exists', "AlreadyExists", details)


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    """409 Conflict for an update with a stale resourceVersion."""
    qualified, details = _qualified(resource, name, group)
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        details,
    )


def invalid(kind: str, name: str, field: str, value: Any, detail: str, group: str = "") -> ApiError:
    """422 Invalid with one ``FieldValueInvalid`` cause, as ``errors.NewInvalid`` words it.

    For several errors or other cause types build a list with
    :mod:`simcluster.fielderrors` and call :func:`simcluster.fielderrors.invalid_error`.
    """
    from simcluster import fielderrors

    return fielderrors.invalid_error(kind, group, name, [fielderrors.invalid(field, value, detail)])
