from django.apps import AppConfig


class QuotasConfig(AppConfig):
    """Teams, quota requests, grants and the operations that apply them."""

    name = "quotas"
