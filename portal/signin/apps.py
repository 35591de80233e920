from django.apps import AppConfig


class SigninConfig(AppConfig):
    name = "portal.signin"
    label = "signin"
    verbose_name = "Sign-in"

    def ready(self) -> None:
        from . import checks, lockout  # noqa: F401 - registers the system check and receivers
