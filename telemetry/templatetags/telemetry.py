"""Telemetry partials included on other apps' pages.

``{% node_gpus node pod_names as tele %}`` (``telemetry/_node_gpus.html`` on the node
page) and ``{% team_usage rows as usage %}`` (``telemetry/_team_usage.html`` on My teams).
"""

from __future__ import annotations

from django import template

from .. import views
from ..visibility import PodNames

register = template.Library()


@register.simple_tag
def node_gpus(node, pod_names=None) -> dict:
    """``pod_names``: the page's ``telemetry.visibility.PodNames`` (None: hide them all)."""
    return views.node_gpu_context(node, pod_names or PodNames(None))


@register.simple_tag
def team_usage(teams) -> dict:
    return views.team_usage_context(teams)
