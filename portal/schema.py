"""The API schema's generator (``DEFAULT_SCHEMA_CLASS``): drf-spectacular's, with request
text fields declared as DRF reads them (#24 finding 9), so the schema's valid strings are
the ones the API accepts."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from .validation import TEXT, VISIBLE_TEXT

# A text field of a request body, as DRF reads it: no NUL (its CharField refuses one) and,
# when trimmed and not allowed blank, at least one character that is not white space
# (" " trims to "" and is refused as blank: #24 finding 9). The patterns: portal.validation.


class PortalAutoSchema(AutoSchema):
    """drf-spectacular's schema, with request text fields declared as DRF reads them."""

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        result = super()._map_serializer_field(field, direction, bypass_extensions)
        if isinstance(field, serializers.DecimalField) and "pattern" in result:
            result["pattern"] = decimal_pattern(field)
        if (
            direction == "request"
            and isinstance(field, serializers.CharField)
            and result.get("type") == "string"
            and not result.keys() & {"enum", "format", "pattern"}
            # drf-spectacular adds a RegexValidator's pattern after this method
            and not any(isinstance(v, RegexValidator) for v in field.validators)
        ):
            visible = field.trim_whitespace and not field.allow_blank
            result["pattern"] = VISIBLE_TEXT if visible else TEXT
        return result


def decimal_pattern(field: serializers.DecimalField) -> str:
    """A decimal as text, as DRF reads it: at least one digit (drf-spectacular's pattern
    allows "" and "-"), no sign when the field's minimum is not negative."""
    places = field.decimal_places or 0
    whole = (field.max_digits or 30) - places
    sign = "" if field.min_value is not None and field.min_value >= 0 else "-?"
    if not places:
        return f"^{sign}\\d{{1,{whole}}}$"
    return f"^{sign}(?:\\d{{1,{whole}}}(?:\\.\\d{{0,{places}}})?|\\.\\d{{1,{places}}})$"


def any_value_may_be_null(result, generator, request, public):
    """drf-spectacular's OpenAPI 3.1 for a nullable JSON field is ``oneOf: [{}, {type:
    null}]``, which no null can satisfy (it matches both). Any value includes null: ``{}``.
    (A postprocessing hook.)"""
    stack = [result]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("oneOf") in ([{}, {"type": "null"}], [{"type": "null"}, {}]):
                del node["oneOf"]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return result
