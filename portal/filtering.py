"""The API's filter backend: django-filter's, strict about what it would quietly ignore.

django-filter drops a filter whose value is blank (``?since=``) and reads a boolean it does
not know (``?enabled=AAA``, ``?enabled=2``) as "no filter", so a client with a typo gets
every row and no error. Here both are a 400 naming the parameter, as the schema says: a
boolean filter takes ``true`` or ``false``, and a date, UUID or number filter is never
blank (#24, finding 9: schemathesis' negative-data check found them).
"""

from __future__ import annotations

import django_filters
from django import forms
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import exceptions

BOOLEAN_VALUES = frozenset({"true", "false"})


class StrictFilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            _refuse_ignored_values(filterset, request.query_params)
        return filterset


# Fields whose schema is not a plain string (a date-time, a UUID, a number): a blank
# value does not match it, so it is refused instead of ignored. A text filter's schema
# is a string, which may be empty: filtering by "" is then no filter, as documented.
TYPED = (forms.DateField, forms.DateTimeField, forms.UUIDField, forms.IntegerField,
         forms.DecimalField, forms.FloatField, forms.NullBooleanField)  # fmt: skip


def _refuse_ignored_values(filterset, params) -> None:
    errors: dict[str, list[str]] = {}
    for name, field in filterset.form.fields.items():
        parts = [(name, field)]
        suffixes = getattr(field.widget, "suffixes", None)
        if suffixes:  # range filters: name_after / name_before, name_min / name_max
            subfields = getattr(field, "fields", [field] * len(suffixes))
            parts = [(f"{name}_{suffix}" if suffix else name, sub)
                     for suffix, sub in zip(suffixes, subfields, strict=False)]  # fmt: skip
        boolean = isinstance(filterset.filters.get(name), django_filters.BooleanFilter)
        for key, sub in parts:
            if key not in params:
                continue
            values = params.getlist(key)
            if boolean and any(v not in BOOLEAN_VALUES for v in values):
                errors[key] = ["Use true or false."]
            elif isinstance(sub, TYPED) and any(v.strip() == "" for v in values):
                errors[key] = ["May not be blank: leave the parameter out to not filter."]
    if errors:
        raise exceptions.ValidationError(errors)
