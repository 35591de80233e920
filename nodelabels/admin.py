from django.contrib import admin

from .models import LabelOperation, LabelSet, NodeLabelState


@admin.register(LabelSet)
class LabelSetAdmin(admin.ModelAdmin):
    """Read and inspect here; create and change label sets on the portal's pages or API,
    which validate conflicts, audit the change and queue the node operations."""

    list_display = ["name", "cluster", "gpu_product", "enabled", "updated_at"]
    list_filter = ["cluster", "enabled"]
    search_fields = ["name", "description"]
    readonly_fields = [f.name for f in LabelSet._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(NodeLabelState)
class NodeLabelStateAdmin(admin.ModelAdmin):
    list_display = ["node_name", "cluster", "applied_at", "checked_at"]
    list_filter = ["cluster"]
    search_fields = ["node_name"]
    readonly_fields = ["cluster", "node_name", "applied", "applied_at", "checked_at"]


@admin.register(LabelOperation)
class LabelOperationAdmin(admin.ModelAdmin):
    list_display = ["node_name", "cluster", "reason", "status", "attempts", "created_at"]
    list_filter = ["status", "reason", "cluster"]
    search_fields = ["node_name"]
    readonly_fields = [f.name for f in LabelOperation._meta.fields]
