"""Server-side sorting of a paginated page's table (``?sort=name``, ``?sort=-name``).

Client-side sorting (static/js/table-sort.js) would only reorder the page shown, so a
paginated list sorts in the query: ``parse`` maps the request's ``sort`` to ``order_by``
fields from an allow-list (an unknown column is an error the page shows, not a 500 and not
silently ignored), and ``links`` gives each sortable header its URL (the other parameters
kept, back to page 1) and its ``aria-sort`` state.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import QueryDict


@dataclass(frozen=True)
class Sorted:
    key: str
    descending: bool
    order_by: list[str]
    error: str = ""


def parse(query: QueryDict, columns: dict[str, str], default: str, tie: str = "pk") -> Sorted:
    """``columns``: sort key -> model field; ``default`` names one of them; ``tie``: the
    field that orders rows equal in the chosen column."""
    raw = (query.get("sort") or default).strip()
    key, descending = raw.removeprefix("-"), raw.startswith("-")
    error = ""
    if key not in columns:
        error = f"Sort: unknown column {raw!r}; use one of {', '.join(sorted(columns))}."
        key, descending = default, False
    field = columns[key]
    order = [f"-{field}" if descending else field]
    if field != tie:
        order.append(tie)
    return Sorted(key, descending, order, error)


def links(query: QueryDict, current: Sorted, columns: dict[str, str]) -> dict[str, dict]:
    """Per sortable column: ``url`` (the query with that sort, ascending first, the other
    direction when it is the current one) and ``aria`` ("ascending"/"descending"/"")."""
    out = {}
    for key in columns:
        params = query.copy()
        params.pop("page", None)
        active = key == current.key
        params["sort"] = f"-{key}" if active and not current.descending else key
        aria = ("descending" if current.descending else "ascending") if active else ""
        out[key] = {"url": "?" + params.urlencode(), "aria": aria}
    return out
