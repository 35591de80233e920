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

from .validation import InputRefused, check_offset


def strict_datetime(value: datetime | None) -> datetime | None:
    """``value`` if PostgreSQL can store it, else a ``forms.ValidationError``."""
    if value is None:
        return None
    try:
        check_offset(value)
        if value.tzinfo is not None:
            value.astimezone(UTC)
    except InputRefused as err:
        raise forms.ValidationError(str(err), code="invalid") from err
    except OverflowError as err:
        raise forms.ValidationError("Date-time out of range.", code="invalid") from err
    return value


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
