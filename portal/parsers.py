"""The API's JSON parser (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``).

DRF's own parser reads the whole stream whatever its size (only form bodies are held to
``DATA_UPLOAD_MAX_MEMORY_SIZE``), answers 500 on JSON nested ~1,000 deep
(``RecursionError``) and hands NUL and lone surrogates on to PostgreSQL, which refuses them
(another 500). This one reads at most the limit (413 past it) and parses with
:func:`portal.validation.loads_json`: every refusal is a 400 with its reason.
"""

from __future__ import annotations

import codecs

from django.conf import settings
from rest_framework import exceptions, parsers, status

from .validation import InputRefused, loads_json


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def body_limit() -> int | None:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large_detail(limit: int) -> str:
    return f"The request body is too large (at most {limit} bytes)."


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parsers.get_encoding(parser_context)
        limit = body_limit()
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise BodyTooLarge(too_large_detail(limit))
        try:
            text = codecs.decode(raw, encoding)
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(f"JSON parse error - not valid {encoding}: {exc}") from exc
        try:
            return loads_json(text)
        except InputRefused as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
