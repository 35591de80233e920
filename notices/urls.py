"""Pages: /notifications/ (everyone's own) and /admin-webhooks/ (staff)."""

from django.urls import path

from . import views, views_webhooks

app_name = "notices"

urlpatterns = [
    path("notifications/", views.notification_list, name="list"),
    path("notifications/read-all/", views.notification_read_all, name="read-all"),
    path("notifications/<uuid:pk>/open/", views.notification_open, name="open"),
    path("admin-webhooks/", views_webhooks.webhook_list, name="webhooks"),
    path("admin-webhooks/new/", views_webhooks.webhook_new, name="webhook-new"),
    path("admin-webhooks/<uuid:pk>/edit/", views_webhooks.webhook_edit, name="webhook-edit"),
    path("admin-webhooks/<uuid:pk>/delete/", views_webhooks.webhook_delete, name="webhook-delete"),
    path("admin-webhooks/<uuid:pk>/test/", views_webhooks.webhook_test, name="webhook-test"),
    path(
        "admin-webhooks/deliveries/<uuid:pk>/retry/",
        views_webhooks.delivery_retry,
        name="delivery-retry",
    ),
]
