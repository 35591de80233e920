"""Failed sign-in attempts in the Django admin; "Unlock" forgets them, with an audit row.

A lockout by account counts the account's failures from every address, a lockout by
address every account's failures from that address: search for the username or the
address, select the rows, then "Unlock". Deleting rows does the same (also audited).
"""

from axes.admin import AccessAttemptAdmin as AxesAccessAttemptAdmin
from axes.admin import AccessLogAdmin
from axes.models import AccessAttempt, AccessLog
from django.contrib import admin, messages

from .lockout import unlock


@admin.register(AccessAttempt)
class AccessAttemptAdmin(AxesAccessAttemptAdmin):
    actions = ["unlock_selected", "cleanup_expired_attempts"]

    @admin.action(description="Unlock: forget the selected failed attempts", permissions=["delete"])
    def unlock_selected(self, request, queryset):
        count = unlock(request.user, queryset)
        self.message_user(request, f"Unlocked {count} sign-in record(s).", messages.SUCCESS)

    def delete_model(self, request, obj):
        unlock(request.user, [obj])

    def delete_queryset(self, request, queryset):
        unlock(request.user, queryset)


admin.site.register(AccessLog, AccessLogAdmin)
