"""Form and filter fields that refuse what PostgreSQL would refuse (see portal.validation).

``StrictIsoDateTimeField`` is django-filter's ISO 8601 field, plus: an offset beyond
+-15:59 (Python accepts up to +-23:59; ``timestamptz`` does not) or an instant that cannot
be expressed in UTC is a validation error, so the filter answers 400 with a message
instead of a database error (a 500, or a CSV export that streams only its header).
"""

from __future__ import annotations

from datetime import UTC, datetime

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField, RangeField
from django_filters.widgets import DateRangeWidget
from rest_framework import serializers


def strict_datetime(value: datetime | None) -> datetime | None:
    """``value`` in UTC, or a ``forms.ValidationError`` for an instant that cannot be one.

    Any RFC 3339 offset is accepted (up to +-23:59, as the schema's ``date-time`` says) and
    the instant converted to UTC: PostgreSQL's ``timestamptz`` takes offsets only up to
    +-15:59, and refusing the others refused valid input (#24 finding 9; before, #11, such
    offsets were a 500)."""
    if value is None or value.tzinfo is None:
        return value
    offset = value.utcoffset()
    if offset is not None and offset.seconds % 60:
        raise forms.ValidationError("The time-zone offset must be whole minutes.", code="invalid")
    try:
        return value.astimezone(UTC)
    except OverflowError as err:
        raise forms.ValidationError("Date-time out of range.", code="invalid") from err


class StrictIsoDateTimeField(IsoDateTimeField):
    def to_python(self, value):
        return strict_datetime(super().to_python(value))


class StrictIsoDateTimeRangeField(RangeField):
    widget = DateRangeWidget

    def __init__(self, *args, **kwargs):
        super().__init__((StrictIsoDateTimeField(), StrictIsoDateTimeField()), *args, **kwargs)


class StrictIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = StrictIsoDateTimeField


class StrictIsoDateTimeFromToRangeFilter(django_filters.IsoDateTimeFromToRangeFilter):
    field_class = StrictIsoDateTimeRangeField


class TextField(serializers.CharField):
    """A text field that takes a JSON string only: DRF's ``CharField`` turns ``0`` and
    ``1.5`` into "0" and "1.5", which the schema (``type: string``) says are invalid
    (schemathesis' negative-data check, #24 finding 9)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# Names echoed back in an error about unknown keys: a key can be as long as the body.
_SHOWN_KEYS, _SHOWN_KEY_LENGTH = 20, 64


class StrictInput:
    """A request body holds only the fields the operation writes (#24 finding 9).

    DRF drops keys a serializer does not declare, so a misspelt optional field
    (``"end_at"``) is silently a request without an end. Mixed into every request
    serializer: an unknown or read-only key is a 400 naming it, and the schema says
    ``additionalProperties: false`` for these bodies (``portal.rest``).
    """

    def to_internal_value(self, data):
        if isinstance(data, dict):
            writable = {field.field_name for field in self._writable_fields}
            unknown = [key for key in data if key not in writable]
            if unknown:
                known = ", ".join(sorted(writable)) or "none"
                errors = {}
                for key in unknown[:_SHOWN_KEYS]:
                    name = key if len(key) <= _SHOWN_KEY_LENGTH else key[:_SHOWN_KEY_LENGTH] + "…"
                    read_only = key in self.fields
                    errors[name] = [
                        "Read-only: leave it out of the body."
                        if read_only
                        else f"Unknown field. This operation takes: {known}."
                    ]
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)
