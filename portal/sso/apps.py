from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "portal.sso"
    label = "sso"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
