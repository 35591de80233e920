"""The three GPU figures' names and definitions on pages (inventory/figures.py).

``{% figure_definitions "idle" "free_to_grant" %}`` renders each named figure's one-line
definition under its name, so every page that shows a figure says what it is.
"""

from __future__ import annotations

from django import template

from ..figures import DEFINITIONS, FREE_TO_GRANT, IDLE_NOW, USABLE

register = template.Library()
NAMES = {"idle": IDLE_NOW, "free_to_grant": FREE_TO_GRANT, "usable": USABLE}


@register.inclusion_tag("inventory/_figure_definitions.html")
def figure_definitions(*keys: str) -> dict:
    return {"figures": [(key, NAMES[key], DEFINITIONS[key]) for key in keys]}


@register.simple_tag
def figure_definition(key: str) -> str:
    """One definition as text (a ``title`` attribute, a table caption)."""
    return f"{NAMES[key]}: {DEFINITIONS[key]}"
