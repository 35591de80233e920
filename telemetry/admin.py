from django.contrib import admin

from .models import GpuState, NodeTelemetry, NodeToken


@admin.register(NodeToken)
class NodeTokenAdmin(admin.ModelAdmin):
    """Tokens are issued through POST /api/v1/agent/tokens/ (the secret is shown once)."""

    list_display = ["node", "name", "prefix", "created_by", "created_at", "last_used_at",
                    "revoked_at"]  # fmt: skip
    list_filter = ["node__cluster"]
    search_fields = ["node__name", "name", "prefix"]
    readonly_fields = ["id", "node", "prefix", "key_hash", "created_by", "created_at",
                       "last_used_at", "revoked_at"]  # fmt: skip
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        for token in queryset.filter(revoked_at__isnull=True):
            token.revoke()


@admin.register(NodeTelemetry)
class NodeTelemetryAdmin(admin.ModelAdmin):
    list_display = ["node", "driver_version", "agent_version", "gpu_count", "last_report_at",
                    "stale_after"]  # fmt: skip
    list_filter = ["driver_version", "agent_version"]
    search_fields = ["node__name"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(GpuState)
class GpuStateAdmin(admin.ModelAdmin):
    list_display = ["node", "index", "name", "uuid", "lost", "utilization_gpu_pct",
                    "memory_used_mib", "temperature_c", "reported_at"]  # fmt: skip
    list_filter = ["lost", "name"]
    search_fields = ["node__name", "uuid"]
    list_select_related = ["node"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
