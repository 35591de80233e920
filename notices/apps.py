from django.apps import AppConfig


class NoticesConfig(AppConfig):
    """In-app notifications (unread count, /notifications/) and admin-configured webhooks."""

    name = "notices"
    verbose_name = "Notifications"
