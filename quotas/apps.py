from django.apps import AppConfig


class QuotasConfig(AppConfig):
    """Teams, quota requests, grants and the operations that apply them."""

    name = "quotas"

    def ready(self) -> None:
        # The watcher process confirms applies from quota events (quotas/quotawatch.py).
        from inventory.watch import register

        from .quotawatch import follow_quotas

        register("quotas", follow_quotas)
