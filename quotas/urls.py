from django.urls import path

from . import views

app_name = "quotas"

urlpatterns = [
    path("teams/", views.teams, name="teams"),
    path("requests/", views.request_list, name="requests"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/<uuid:pk>/", views.request_detail, name="request"),
    path("requests/<uuid:pk>/cancel/", views.request_cancel, name="request-cancel"),
    path("requests/<uuid:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<uuid:pk>/reject/", views.request_reject, name="request-reject"),
    path("grants/<uuid:pk>/renew/", views.grant_renew, name="grant-renew"),
    path("grants/<uuid:pk>/release/", views.grant_release, name="grant-release"),
    path("admin-queue/", views.queue, name="queue"),
    path("capacity/", views.capacity, name="capacity"),
    path("audit/", views.audit, name="audit"),
    path("audit/export.csv", views.audit_export, name="audit-export"),
    path("account/notifications/", views.notifications, name="notifications"),
]
