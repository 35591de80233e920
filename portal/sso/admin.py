"""Group rules (admin-editable, every change audited) and what single sign-on manages."""

from django.contrib import admin

from quotas.audit import record

from .models import GroupRule, ManagedMembership, SsoIdentity


@admin.register(GroupRule)
class GroupRuleAdmin(admin.ModelAdmin):
    list_display = ("group", "grants", "team", "role", "enabled", "note")
    list_filter = ("grants", "enabled", "role", "team")
    search_fields = ("group", "note", "team__name", "team__slug")
    fields = ("group", "grants", "team", "role", "enabled", "note")

    def save_model(self, request, obj, form, change):
        before = GroupRule.objects.get(pk=obj.pk).state() if change else None
        super().save_model(request, obj, form, change)
        action = "sso.rule_changed" if change else "sso.rule_added"
        record(request.user, action, obj, team=obj.team, before=before, after=obj.state(),
               note="applies at each person's next single sign-on")  # fmt: skip

    def delete_model(self, request, obj):
        record(request.user, "sso.rule_deleted", obj, team=obj.team, before=obj.state())
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for rule in queryset.select_related("team"):
            record(request.user, "sso.rule_deleted", rule, team=rule.team, before=rule.state())
        super().delete_queryset(request, queryset)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    list_display = ("user", "subject", "issuer", "staff_managed", "last_sign_in")
    search_fields = ("user__username", "user__email", "subject")
    readonly_fields = ("user", "issuer", "subject", "groups", "staff_managed", "created_at",
                       "last_sign_in")  # fmt: skip

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    # Deleting one unlinks the account: the next sign-in of that subject is a first one.
    def delete_model(self, request, obj):
        _record_unlink(request.user, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for identity in queryset.select_related("user"):
            _record_unlink(request.user, identity)
        super().delete_queryset(request, queryset)


def _record_unlink(by, identity: SsoIdentity) -> None:
    record(by, "sso.identity_unlinked", identity.user,
           before={"subject": identity.subject, "issuer": identity.issuer})  # fmt: skip


def _record_release(by, managed: ManagedMembership) -> None:
    m = managed.membership
    record(
        by, "sso.membership_released", m, team=m.team,
        before={"user": m.user.get_username(), "role": m.role, "managed": True},
        note="single sign-on no longer manages it: kept like a membership added by hand",
    )  # fmt: skip


@admin.register(ManagedMembership)
class ManagedMembershipAdmin(admin.ModelAdmin):
    list_display = ("membership", "groups", "created_at")
    search_fields = ("membership__user__username", "membership__team__name")
    readonly_fields = ("membership", "groups", "created_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    # Deleting one keeps the membership and hands it over to the team's managers.
    def delete_model(self, request, obj):
        _record_release(request.user, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for managed in queryset.select_related("membership__user", "membership__team"):
            _record_release(request.user, managed)
        super().delete_queryset(request, queryset)
