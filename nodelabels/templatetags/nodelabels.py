"""``{% managed_labels node as managed %}``: the portal-managed labels of one node, for
the partial ``nodelabels/_node_labels.html`` included on the node page."""

from __future__ import annotations

from django import template

from .. import services

register = template.Library()


@register.simple_tag
def managed_labels(node) -> dict:
    return services.node_summary(node)
