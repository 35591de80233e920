"""One FilterSet for nodes, shared by the node list page and ``GET /api/v1/nodes/``."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q

from .models import Node


class StrictBooleanField(forms.Field):
    """true/false/1/0/yes/no; anything else is an error instead of silently ignored."""

    TRUE, FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}

    def to_python(self, value):
        if value in (None, ""):
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in self.TRUE:
            return True
        if text in self.FALSE:
            return False
        raise forms.ValidationError(f"Use true or false, not {value!r}.", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class NodeFilter(django_filters.FilterSet):
    # By slug; an unknown one is an empty page (a model choice filter made a well-formed
    # slug a 400, #24 finding 9).
    cluster = django_filters.CharFilter(field_name="cluster__slug", help_text="cluster slug")
    product = django_filters.CharFilter(
        method="filter_product",
        help_text="GPU product label or a part of it (case-insensitive), e.g. A100 or "
        "NVIDIA-H100-80GB-HBM3",
    )
    mig_capable = StrictBooleanFilter()
    schedulable = StrictBooleanFilter(field_name="unschedulable", exclude=True)
    has_gpu = StrictBooleanFilter(method="filter_has_gpu")
    include_gone = StrictBooleanFilter(
        method="filter_include_gone", help_text="also list nodes no longer in the cluster"
    )
    q = django_filters.CharFilter(method="filter_q", help_text="search node name or product")

    class Meta:
        model = Node
        fields = ["cluster", "product", "mig_capable", "schedulable", "sharing_strategy"]

    def filter_queryset(self, queryset):
        if not self.form.cleaned_data.get("include_gone"):
            queryset = queryset.filter(gone_at__isnull=True)
        return super().filter_queryset(queryset)

    def filter_product(self, queryset, name, value):
        return queryset.filter(gpu_product__icontains=value.strip())

    def filter_has_gpu(self, queryset, name, value):
        return queryset.exclude(gpu_product="") if value else queryset.filter(gpu_product="")

    def filter_include_gone(self, queryset, name, value):
        return queryset  # applied in filter_queryset so the default excludes gone nodes

    def filter_q(self, queryset, name, value):
        value = value.strip()
        return queryset.filter(Q(name__icontains=value) | Q(gpu_product__icontains=value))
