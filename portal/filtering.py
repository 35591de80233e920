"""The API's filter backend: django-filter's, strict about what it would quietly ignore.

django-filter drops a filter whose value is blank (``?since=``) and reads a boolean it does
not know (``?enabled=AAA``, ``?enabled=2``) as "no filter", so a client with a typo gets
every row and no error. Here both are a 400 naming the parameter, as the schema says: a
boolean filter takes ``true`` or ``false``, and a filter's value is never blank (#24,
finding 9: schemathesis' negative-data check found them).
"""

from __future__ import annotations

import django_filters
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import exceptions

BOOLEAN_VALUES = frozenset({"true", "false"})


class StrictFilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            _refuse_ignored_values(filterset, request.query_params)
        return filterset


def _refuse_ignored_values(filterset, params) -> None:
    errors: dict[str, list[str]] = {}
    for name, field in filterset.form.fields.items():
        keys = [name]
        widget = field.widget
        suffixes = getattr(widget, "suffixes", None)
        if suffixes:  # range filters: name_after / name_before, name_min / name_max
            keys = [f"{name}_{suffix}" if suffix else name for suffix in suffixes]
        for key in keys:
            if key not in params:
                continue
            values = params.getlist(key)
            if any(v.strip() == "" for v in values):
                errors[key] = ["May not be blank: leave the parameter out to not filter."]
            elif isinstance(filterset.filters.get(name), django_filters.BooleanFilter) and any(
                v not in BOOLEAN_VALUES for v in values
            ):
                errors[key] = ["Use true or false."]
    if errors:
        raise exceptions.ValidationError(errors)
