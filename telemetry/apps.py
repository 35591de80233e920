from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """GPU telemetry from node agents: ingest, latest state, history, insight, showback."""

    name = "telemetry"
