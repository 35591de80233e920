from django.apps import AppConfig


class NodeLabelsConfig(AppConfig):
    """Admin-managed node label sets, applied through operations, drift reverted."""

    name = "nodelabels"
    verbose_name = "Node labels"
