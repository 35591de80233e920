from django.contrib import admin

from .models import (
    AuditEvent,
    ForeignQuota,
    Grant,
    GrantReclaim,
    Membership,
    Operation,
    OvercommitPolicy,
    QuotaRequest,
    ReclaimPolicy,
    Team,
    TeamNamespace,
    TeamQueue,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class NamespaceInline(admin.TabularInline):
    model = TeamNamespace
    extra = 1


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, NamespaceInline]


@admin.register(TeamNamespace)
class TeamNamespaceAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "team", "created_by_portal"]
    list_filter = ["cluster", "team"]
    search_fields = ["name"]


@admin.register(OvercommitPolicy)
class OvercommitPolicyAdmin(admin.ModelAdmin):
    list_display = ["cluster", "resource", "ratio"]


@admin.register(Grant)
class GrantAdmin(admin.ModelAdmin):
    """Read-only here: grants change through requests (and their audit trail)."""

    list_display = [
        "namespace", "gpu_class", "resource", "amount", "starts_at", "ends_at", "kind", "ended_at",
    ]  # fmt: skip
    list_filter = ["kind", "resource"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    list_display = [
        "team", "namespace", "kind", "gpu_class", "resource", "amount", "status", "created_at",
    ]  # fmt: skip
    list_filter = ["status", "kind", "resource"]
    readonly_fields = [f.name for f in QuotaRequest._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = ["namespace", "reason", "status", "attempts", "created_at", "finished_at"]
    list_filter = ["status", "reason"]
    readonly_fields = [f.name for f in Operation._meta.fields]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "action", "object_type", "object_id", "team"]
    list_filter = ["action", "object_type"]
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ForeignQuota)
class ForeignQuotaAdmin(admin.ModelAdmin):
    """Read-only: decisions are taken on the namespace page (audited there)."""

    list_display = ["name", "namespace", "decision", "seen_at", "gone_at"]
    list_filter = ["decision"]
    search_fields = ["name", "namespace__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TeamQueue)
class TeamQueueAdmin(admin.ModelAdmin):
    """A team's Kueue ClusterQueue settings; saving audits and applies them
    (quotas/kueue_apply.py ``set_queue_settings``)."""

    list_display = ["team", "cluster", "cohort", "borrowing_limit", "lending_limit",
                    "fair_weight", "reclaim_within_cohort", "status_at"]  # fmt: skip
    list_filter = ["cluster", "cohort"]
    fields = ["team", "cluster", "cohort", "borrowing_limit", "lending_limit", "fair_weight",
              "reclaim_within_cohort", "borrow_within_cohort", "status", "workloads",
              "status_at"]  # fmt: skip
    readonly_fields = ["status", "workloads", "status_at"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, *(["team", "cluster"] if obj else [])]

    def save_model(self, request, obj, form, change):
        from .kueue_apply import QUEUE_SETTINGS, set_queue_settings

        fields = {k: form.cleaned_data.get(k) for k in QUEUE_SETTINGS}
        set_queue_settings(obj.team, obj.cluster, request.user, **fields)


@admin.register(ReclaimPolicy)
class ReclaimPolicyAdmin(admin.ModelAdmin):
    """When idle grants' unused part goes back (issue #25 section 2); saving audits it and
    turning a policy off withdraws its open warnings (quotas/reclaim.py ``set_policy``).
    The portal's page: /telemetry/reclaim/."""

    list_display = ["cluster", "gpu_class", "enabled", "idle_hours", "grace_hours",
                    "hold_hours", "updated_at", "updated_by"]  # fmt: skip
    list_filter = ["enabled", "cluster"]
    fields = ["cluster", "gpu_class", "enabled", "idle_hours", "grace_hours", "hold_hours"]

    def get_readonly_fields(self, request, obj=None):
        return ["cluster", "gpu_class"] if obj else []

    def save_model(self, request, obj, form, change):
        from .reclaim import set_policy

        values = {k: form.cleaned_data[k] for k in ("enabled", "idle_hours", "grace_hours",
                                                     "hold_hours")}  # fmt: skip
        set_policy(obj.cluster, obj.gpu_class, request.user, **values)


@admin.register(GrantReclaim)
class GrantReclaimAdmin(admin.ModelAdmin):
    """Reclaims are written by the beat and answered by managers: read-only here."""

    list_display = ["namespace", "gpu_class", "status", "granted", "unused", "warned_at",
                    "grace_ends_at", "answered_by", "lowered_by"]  # fmt: skip
    list_filter = ["status"]
    search_fields = ["namespace__name", "reason"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
