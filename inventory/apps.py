from django.apps import AppConfig


class InventoryConfig(AppConfig):
    """Clusters, nodes, GPU resources and usage, and the one gateway to Kubernetes APIs."""

    name = "inventory"
