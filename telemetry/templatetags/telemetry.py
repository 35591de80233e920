"""Telemetry partials included on other apps' pages.

``{% node_gpus node show_pods as tele %}`` (``telemetry/_node_gpus.html`` on the node
page) and ``{% team_usage rows as usage %}`` (``telemetry/_team_usage.html`` on My teams).
"""

from __future__ import annotations

from django import template

from .. import views

register = template.Library()


@register.simple_tag
def node_gpus(node, show_pods: bool = False) -> dict:
    return views.node_gpu_context(node, bool(show_pods))


@register.simple_tag
def team_usage(teams) -> dict:
    return views.team_usage_context(teams)
