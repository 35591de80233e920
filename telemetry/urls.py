"""Pages (filled in by the owner of this module)."""

app_name = "telemetry"
urlpatterns: list = []
