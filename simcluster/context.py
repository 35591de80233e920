"""Per-request context for code below the HTTP layer: who is asking, and what to warn about.

The HTTP handler opens a context for each API request (:func:`begin`), puts the
authenticated user in it, and after the operation sends every collected warning as a
``Warning: 299 - "..."`` response header, as the API server does (for example the
``unknown field`` warnings of ``fieldValidation=Warn``). Code that runs outside a request
(controllers, the mig-manager emulation, fleet loading, in-process helpers) sees a context
with no user: it acts with the simulator's own privileges.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

_local = threading.local()


@dataclass(frozen=True)
class User:
    """An authenticated identity, as ``user.Info`` in k8s.io/apiserver."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class RequestContext:
    """What one request carries down into the operations."""

    user: User | None = None
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


_INTERNAL = RequestContext()


def begin(user: User | None = None) -> RequestContext:
    """Open the context of the request being handled on this thread."""
    ctx = RequestContext(user=user)
    _local.ctx = ctx
    return ctx


def end() -> None:
    """Close this thread's request context."""
    _local.ctx = None


def current() -> RequestContext:
    """This thread's request context (an internal one, without a user, outside requests)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        _INTERNAL.warnings.clear()
        return _INTERNAL
    return ctx


def warn(message: str) -> None:
    """Add a warning to the current request (ignored outside requests)."""
    current().warn(message)
