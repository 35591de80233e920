"""In-app notifications and webhooks (issue #12 section 2).

``notices.notify(users, event=..., title=..., body="", url="", team=None)`` is the one
entry point (``notices.services.notify``).
"""

from __future__ import annotations

from typing import Any


def notify(users, *, event: str, title: str, body: str = "", url: str = "", team=None,
           webhook: bool = True) -> Any:  # fmt: skip
    """See ``notices.services.notify`` (imported late: apps load this package first)."""
    from .services import notify as _notify

    return _notify(users, event=event, title=title, body=body, url=url, team=team,
                   webhook=webhook)  # fmt: skip
