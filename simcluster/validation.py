"""Object validation as the API server does it (pkg/apis/core/validation, apimachinery).

Called by :mod:`simcluster.crud` after defaulting and before admission and storage:
:func:`validate_create` for a new object, :func:`validate_update` for a changed one (the
whole object after an update, patch or apply, and ``sub`` = ``"status"`` for writes to the
status subresource). Both raise a 422 ``Invalid`` :class:`~simcluster.errors.ApiError`.
"""

from __future__ import annotations

from typing import Any

from simcluster.resources import ResourceType


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Validate an object about to be created."""


def validate_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any], sub: str) -> None:
    """Validate an update of ``old`` into ``new`` (``sub`` is ``"status"`` for /status)."""
