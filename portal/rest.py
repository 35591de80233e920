"""REST plumbing loaded by DRF settings: pagination and the error format.

Kept free of view imports: DRF imports these while it is still importing itself.
"""

from __future__ import annotations

from django.http import Http404
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import exception_handler as drf_exception_handler


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def exception_handler(exc, context):
    """DRF's handler, plus: every error body carries a human-readable ``detail``.

    Validation errors keep DRF's per-field messages and gain a one-line summary, so a
    client can show ``detail`` without walking the field map.
    """
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("Not found.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError) and isinstance(response.data, dict):
        fields = [k for k in response.data if k != "non_field_errors"]
        summary = "Invalid input" + (f" in: {', '.join(fields)}." if fields else ".")
        response.data = {"detail": summary, **response.data}
    elif isinstance(exc, exceptions.ValidationError) and isinstance(response.data, list):
        response.data = {"detail": " ".join(str(m) for m in response.data)}
    return response
