from django.contrib import admin

from .models import Notification, Webhook, WebhookDelivery


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["title", "recipient", "event", "team", "created_at", "read_at"]
    list_filter = ["event", "team"]
    search_fields = ["title", "recipient__username"]
    readonly_fields = [f.name for f in Notification._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Inspect here; add and change webhooks on the portal's page (/admin-webhooks/),
    which validates, keeps the secret write-only and audits the change."""

    list_display = ["name", "format", "url", "team", "active", "updated_at"]
    list_filter = ["format", "active", "team"]
    search_fields = ["name", "url"]
    exclude = ["secret"]
    readonly_fields = ["name", "url", "format", "events", "team", "active", "secret_set",
                       "created_at", "updated_at"]  # fmt: skip

    @admin.display(boolean=True, description="secret set")
    def secret_set(self, obj) -> bool:
        return bool(obj.secret)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["event", "webhook", "status", "attempts", "response_code", "created_at"]
    list_filter = ["status", "event", "webhook"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
