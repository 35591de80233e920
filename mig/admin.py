"""Django admin for MIG requests: read-mostly, with the coordinator's steps inline.

Decisions go through the portal's pages and API (``mig.services``), which audit them and
start the coordinator; the admin only shows the rows.
"""

from __future__ import annotations

from django.contrib import admin

from .models import MigRequest, MigStep


class MigStepInline(admin.TabularInline):
    model = MigStep
    extra = 0
    can_delete = False
    fields = ["position", "name", "status", "attempts", "detail", "started_at", "finished_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(MigRequest)
class MigRequestAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "status", "team", "namespace", "product", "gpus", "node",
                    "created_at"]  # fmt: skip
    list_filter = ["status", "kind", "cluster", "drain_policy"]
    search_fields = ["id", "team__slug", "namespace__name", "node__name", "config_name"]
    list_select_related = ["team", "namespace__cluster", "node"]
    readonly_fields = [f.name for f in MigRequest._meta.fields]
    inlines = [MigStepInline]

    def has_add_permission(self, request) -> bool:
        return False
