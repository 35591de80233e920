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
    if details:
        body["details"] = details
    body["code"] = code
    return body


def status_bytes(code: int, message: str, reason: str | None = None) -> bytes:
    """Serialized failure ``Status``."""
    return json.dumps(status_body(code, message, reason), separators=(",", ":")).encode()


def not_found(resource: str, name: str) -> ApiError:
    """404 in the API server's wording: ``pods "x" not found``."""
    return ApiError(
        404, f'{resource} "{name}" not found', "NotFound", {"name": name, "kind": resource}
    )


def already_exists(resource: str, name: str) -> ApiError:
    """409 AlreadyExists for a create of an existing name."""
    return ApiError(
        409,
        f'{resource} "{name}" already exists',
        "AlreadyExists",
        {"name": name, "kind": resource},
    )


def conflict(resource: str, name: str) -> ApiError:
    """409 Conflict for an update with a stale resourceVersion."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        {"name": name, "kind": resource},
    )


def invalid(kind: str, name: str, field: str, value: Any, detail: str, group: str = "") -> ApiError:
    """422 Invalid with one ``FieldValueInvalid`` cause, as ``errors.NewInvalid`` words it.

    For several errors or other cause types build a list with
    :mod:`simcluster.fielderrors` and call :func:`simcluster.fielderrors.invalid_error`.
    """
    from simcluster import fielderrors

    return fielderrors.invalid_error(kind, group, name, [fielderrors.invalid(field, value, detail)])
