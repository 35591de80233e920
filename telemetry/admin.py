from django.contrib import admin, messages
from django.db import transaction

from quotas.audit import record

from . import promstate
from .models import GpuState, NodeTelemetry, NodeToken, PrometheusSource
from .promsource import PrometheusUnavailable, QueryRefused


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


@admin.register(PrometheusSource)
class PrometheusSourceAdmin(admin.ModelAdmin):
    """A cluster's telemetry from its Prometheus (telemetry/promsource.py); audited."""

    list_display = ["cluster", "url", "cluster_label", "cluster_value", "secret_env", "enabled"]
    list_filter = ["enabled"]
    actions = ["check_now"]

    @admin.action(description="Check now: read the latest GPU state from the selected sources")
    def check_now(self, request, queryset) -> None:
        """What the minute's sync would do, now, with what it found or why it failed: the
        way to see that the URL, credentials and cluster label are right."""
        for source in queryset.select_related("cluster"):
            try:
                r = promstate.sync_source(source)
            except (PrometheusUnavailable, QueryRefused) as err:
                self.message_user(request, f"{source.cluster}: {err}", messages.ERROR)
                continue
            text = f"{source.cluster}: {r.gpus} GPUs on {r.nodes} nodes read from {source.url}."
            level = messages.SUCCESS
            if not r.gpus:
                level = messages.WARNING
                text += (" No series matched: check the cluster label and value, and that "
                         "Prometheus scrapes dcgm-exporter.")  # fmt: skip
            if r.unknown_hosts:
                level = messages.WARNING
                text += (f" {len(r.unknown_hosts)} nodes in Prometheus are not in this cluster's "
                         f"inventory (e.g. {', '.join(r.unknown_hosts[:3])}): is the cluster "
                         "label right, and is Hostname the Kubernetes node name?")  # fmt: skip
            self.message_user(request, text, level)

    def save_model(self, request, obj, form, change) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            fields = ["url", "cluster_label", "cluster_value", "secret_env", "ca_file",
                      "timeout_seconds", "recorded_activity", "enabled"]  # fmt: skip
            record(request.user, "telemetry.source_" + ("changed" if change else "added"), obj,
                   after={f: getattr(obj, f) for f in fields}, note=str(obj.cluster))  # fmt: skip
        self.message_user(
            request,
            "The GPU state is read within a minute; the action \u201cCheck now\u201d reads it "
            "at once and says what it found.",
        )

    def delete_model(self, request, obj) -> None:
        with transaction.atomic():
            record(request.user, "telemetry.source_removed", obj, note=str(obj.cluster))
            super().delete_model(request, obj)
