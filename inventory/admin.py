from django import forms
from django.contrib import admin

from . import classes
from .models import Cluster, GpuClass, GpuPod, NamespaceUsage, Node, NodeResource, SyncRun


class ClusterAdminForm(forms.ModelForm):
    """The bearer token is write-only here too, as on the connect page and in the API."""

    bearer_token = forms.CharField(
        required=False,
        max_length=4096,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Never shown again. Leave empty to keep the stored token.",
    )
    api_url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", label="API server URL"
    )

    class Meta:
        model = Cluster
        fields = [
            "name", "slug", "description", "sync_enabled", "auth_method", "kubeconfig_path",
            "kubeconfig_context", "api_url", "bearer_token", "bearer_token_file", "ca_cert",
            "verify_tls", "enforcement",
        ]  # fmt: skip

    def clean_bearer_token(self):
        token = self.cleaned_data.get("bearer_token", "")
        stored = self.instance.bearer_token if self.instance.pk else ""
        return token or stored


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
    list_display = ["name", "slug", "auth_method", "sync_enabled", "sync_status", "last_success_at"]
    list_filter = ["auth_method", "sync_enabled", "sync_status"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = [
        "sync_status", "last_sync_at", "last_success_at", "last_error", "server_version",
    ]  # fmt: skip
    fieldsets = [
        (None, {"fields": ["name", "slug", "description", "sync_enabled", "enforcement"]}),
        (
            "Credentials",
            {
                "fields": [
                    "auth_method",
                    "kubeconfig_path",
                    "kubeconfig_context",
                    "api_url",
                    "bearer_token",
                    "bearer_token_file",
                    "ca_cert",
                    "verify_tls",
                ]
            },
        ),
        ("Sync", {"fields": readonly_fields}),
    ]

    def save_model(self, request, obj, form, change):
        before = form.initial.get("enforcement") if change else None
        super().save_model(request, obj, form, change)
        if change and before and before != obj.enforcement:
            from quotas.kueue_apply import enforcement_changed  # quotas builds on inventory

            queued = enforcement_changed(obj, request.user, before)
            self.message_user(request, f"Enforcement is now {obj.get_enforcement_display()}: "
                              f"{queued} namespace(s) re-applied.")  # fmt: skip


class NodeResourceInline(admin.TabularInline):
    model = NodeResource
    extra = 0
    can_delete = False
    readonly_fields = ["resource", "capacity", "allocatable", "requested"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "gpu_product", "gpu_count", "mig_strategy", "gone_at"]
    list_filter = ["cluster", "gpu_product", "mig_capable", "unschedulable"]
    search_fields = ["name", "gpu_product"]
    inlines = [NodeResourceInline]
    readonly_fields = [f.name for f in Node._meta.fields]


@admin.register(SyncRun)
class SyncRunAdmin(admin.ModelAdmin):
    list_display = ["cluster", "started_at", "status", "duration_ms", "nodes_seen", "gpu_pods_seen"]
    list_filter = ["cluster", "status"]
    readonly_fields = [f.name for f in SyncRun._meta.fields]


@admin.register(GpuPod)
class GpuPodAdmin(admin.ModelAdmin):
    list_display = ["name", "namespace", "cluster", "node_name", "phase"]
    list_filter = ["cluster", "phase"]
    search_fields = ["name", "namespace", "node_name"]
    readonly_fields = [f.name for f in GpuPod._meta.fields]


@admin.register(NamespaceUsage)
class NamespaceUsageAdmin(admin.ModelAdmin):
    list_display = ["namespace", "cluster", "resource", "requested", "pods"]
    list_filter = ["cluster", "resource"]
    readonly_fields = [f.name for f in NamespaceUsage._meta.fields]


@admin.register(GpuClass)
class GpuClassAdmin(admin.ModelAdmin):
    """Display name, selector and weight are the admin's; the rest is derived after each
    sync (inventory/classes.py). Saves go through the audited domain functions."""

    list_display = ["name", "cluster", "slug", "derived", "node_count", "gpus", "replicas",
                    "weight", "empty_since"]  # fmt: skip
    list_filter = ["cluster", "derived"]
    search_fields = ["name", "slug"]
    readonly_fields = ["derived", "resources", "node_count", "gpus", "replicas", "empty_since",
                       "created_at", "updated_at"]  # fmt: skip

    def get_readonly_fields(self, request, obj=None):
        fixed = ["cluster", "slug"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def save_model(self, request, obj, form, change):
        if change:
            fields = {name: getattr(obj, name) for name in classes.EDITABLE}
            classes.update_class(request.user, obj, **fields)
        else:
            created = classes.create_class(
                request.user, obj.cluster, slug=obj.slug, name=obj.name,
                selector=obj.selector, weight=obj.weight,
            )  # fmt: skip
            obj.pk = created.pk

    def delete_model(self, request, obj):
        classes.delete_class(request.user, obj)
