from django.apps import AppConfig


class MigConfig(AppConfig):
    """MIG profiles and layouts, MIG requests and the reconfiguration coordinator."""

    name = "mig"
    verbose_name = "MIG"
