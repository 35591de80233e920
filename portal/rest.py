"""REST plumbing loaded by DRF settings: pagination and the error format.

Kept free of view imports: DRF imports these while it is still importing itself.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.exceptions import ErrorDetail
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import exception_handler as drf_exception_handler

from .validation import CONFLICT, NOT_FOUND


class Pagination(PageNumberPagination):
    """``page`` must be a positive integer (else 400); a page past the last is a 404."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_number(self, request, paginator):
        text = str(super().get_page_number(request, paginator)).strip()  # "last": a number
        if not _whole(text) or len(text) > 18 or int(text) < 1:
            raise exceptions.ValidationError(
                {self.page_query_param: ["Use a positive whole number (1, 2, ...)."]}
            )
        return int(text)

    def get_page_size(self, request):
        """``page_size`` 1..500 when given; junk is a 400, not silently the default."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        text = raw.strip()
        if not _whole(text) or len(text) > 6 or not 1 <= int(text) <= self.max_page_size:
            raise exceptions.ValidationError(
                {
                    self.page_size_query_param: [
                        f"Use a whole number from 1 to {self.max_page_size}."
                    ]
                }
            )
        return int(text)

    def get_schema_operation_parameters(self, view):
        """The limits the two parameters really have (schemathesis' positive and negative
        checks hold the API to them, tests/portal/test_schema_fuzz.py)."""
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1,
                                       "maximum": 10**18 - 1}  # fmt: skip
            elif parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1,
                                       "maximum": self.max_page_size}  # fmt: skip
        return parameters


def _whole(text: str) -> bool:
    """ASCII digits only (str.isdecimal() also takes other scripts' digits)."""
    return text.isascii() and text.isdecimal()


def _leaf_codes(codes) -> Iterator[str]:
    if isinstance(codes, dict):
        for value in codes.values():
            yield from _leaf_codes(value)
    elif isinstance(codes, list):
        for value in codes:
            yield from _leaf_codes(value)
    else:
        yield codes


def validation_status(exc: exceptions.ValidationError) -> int:
    codes = set(_leaf_codes(exc.get_codes()))
    if codes and codes <= {NOT_FOUND}:
        return 404
    if codes and codes <= {NOT_FOUND, CONFLICT, "unique"}:
        return 409
    return 400


def drf_detail(exc: DjangoValidationError, recode: dict[str, str] | None = None) -> dict | list:
    """Django's messages as DRF's, with their codes (``recode`` renames some)."""
    recode = recode or {}

    def details(errors) -> list[ErrorDetail]:
        return [
            ErrorDetail(text, code=recode.get(error.code, error.code))
            for error in errors
            for text in error
        ]

    if hasattr(exc, "error_dict"):
        return {field: details(errors) for field, errors in exc.error_dict.items()}
    return details(exc.error_list)


def exception_handler(exc, context):
    """DRF's handler, plus: every error body carries a human-readable ``detail``.

    Validation errors keep DRF's per-field messages and gain a one-line summary, so a
    client can show ``detail`` without walking the field map.
    """
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    elif isinstance(exc, RequestDataTooBig):
        from .parsers import BodyTooLarge, too_large_detail

        exc = BodyTooLarge(too_large_detail(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0))
    elif isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        exc = exceptions.ParseError(str(exc) or "Too many form fields.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.status_code = validation_status(exc)
    if isinstance(exc, exceptions.ValidationError) and isinstance(response.data, dict):
        fields = [k for k in response.data if k != "non_field_errors"]
        summary = "Invalid input" + (f" in: {', '.join(fields)}." if fields else ".")
        response.data = {"detail": summary, **response.data}
    elif isinstance(exc, exceptions.ValidationError) and isinstance(response.data, list):
        response.data = {"detail": " ".join(str(m) for m in response.data)}
    return response


# -- schema: the statuses every operation may answer ------------------------------------------

_COMMON_ERRORS = {
    "400": "invalid input: a malformed parameter or body, with a message (per field when a "
    "field is at fault)",
    "401": "missing, unknown, expired or revoked credentials",
    "403": "signed in, but not allowed to do this",
    "413": "request body larger than the limit (DATA_UPLOAD_MAX_MEMORY_SIZE)",
    "429": "too many requests: wait as Retry-After says",
    "503": "a service the portal depends on (PostgreSQL, Redis) does not answer; nothing was "
    "changed: try again as Retry-After says",
}
_PATH_ERRORS = {"404": "unknown, or not visible to you (or a page past the last one)"}
_BODY_ERRORS = {
    "404": "unknown, or not visible to you; or the body names an object that is (per field)",
    "409": "valid, but the object's current state does not allow it (per field or in detail)",
    "415": "unsupported Content-Type for the body (the API reads JSON)",
}


def document_common_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: add the error statuses any request may get.

    Whatever a view documents itself is kept; the others answer the shared error body
    (``Error``: ``detail`` plus, for validation errors, messages per field).
    """
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "Error",
        {
            "type": "object",
            "description": "Every error: ``detail``; validation errors add a list of "
            "messages per field.",
            "properties": {"detail": {"type": "string"}},
            "required": ["detail"],
        },
    )
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, item in result.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            wanted = dict(_COMMON_ERRORS)
            names = {p.get("name") for p in operation.get("parameters", [])}
            # A page past the last one is a 404; so is an unknown ?format= (DRF's rule).
            if "{" in path or "page" in names or "format" in names:
                wanted.update(_PATH_ERRORS)
            if "requestBody" in operation:
                wanted.update(_BODY_ERRORS)
                _closed_body(operation["requestBody"], schemas)
            responses = operation["responses"]
            for code, description in wanted.items():
                if code not in responses:
                    responses[code] = {"description": description, "content": error}
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema") or {}
                # NUL in a URL is a 400 (portal/middleware.py): say so.
                if schema.get("type") == "string" and not schema.keys() & {
                    "enum",
                    "format",
                    "pattern",
                }:
                    schema["pattern"] = NO_NUL
    return result


NO_NUL = "^[^\\u0000]*$"


def _closed_body(body: dict, schemas: dict) -> None:
    """A request component holds only its properties (``portal.fields.StrictInput``)."""
    for content in body.get("content", {}).values():
        ref = content.get("schema", {}).get("$ref", "")
        component = schemas.get(ref.rsplit("/", 1)[-1]) if ref else None
        if component is not None and component.get("type") == "object":
            component.setdefault("additionalProperties", False)
