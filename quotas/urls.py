from django.urls import path

from . import views

app_name = "quotas"

urlpatterns = [
    path("teams/", views.teams, name="teams"),
    path("teams/<slug:slug>/members/", views.team_members, name="team-members"),
    path("teams/<slug:slug>/waiting/", views.waiting, name="team-waiting"),
    path(
        "teams/<slug:slug>/members/<str:username>/remove/",
        views.team_member_remove,
        name="team-member-remove",
    ),
    path("requests/", views.request_list, name="requests"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/export.csv", views.request_export, name="request-export"),
    path("requests/<uuid:pk>/", views.request_detail, name="request"),
    path("requests/<uuid:pk>/cancel/", views.request_cancel, name="request-cancel"),
    path("requests/<uuid:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<uuid:pk>/reject/", views.request_reject, name="request-reject"),
    path("grants/<uuid:pk>/renew/", views.grant_renew, name="grant-renew"),
    path("grants/<uuid:pk>/release/", views.grant_release, name="grant-release"),
    path("admin-queue/", views.queue, name="queue"),
    path("reclaims/<uuid:pk>/still-needed/", views.reclaim_answer, name="reclaim-answer"),
    path("namespaces/new/", views.namespace_new, name="namespace-new"),
    path("namespaces/<uuid:pk>/", views.namespace_detail, name="namespace"),
    path("namespaces/<uuid:pk>/confirm-lowering/", views.lowering_confirm, name="lowering-confirm"),
    path(
        "namespaces/<uuid:pk>/quotas/<int:quota>/adopt/", views.foreign_adopt, name="foreign-adopt"
    ),
    path("namespaces/<uuid:pk>/quotas/<int:quota>/keep/", views.foreign_keep, name="foreign-keep"),
    path(
        "namespaces/<uuid:pk>/quotas/<int:quota>/remove/",
        views.foreign_remove,
        name="foreign-remove",
    ),
    path("capacity/", views.capacity, name="capacity"),
    path("calendar/", views.calendar, name="calendar"),
    path("calendar/feed/", views.calendar_feed, name="calendar-feed"),
    path("calendar/feed/revoke/", views.calendar_feed_revoke, name="calendar-feed-revoke"),
    path("calendar/feed/<str:secret>.ics", views.calendar_ics, name="calendar-ics"),
    path("audit/", views.audit, name="audit"),
    path("audit/export.csv", views.audit_export, name="audit-export"),
    path("account/notifications/", views.notifications, name="notifications"),
]
