"""Node agent tokens: issue, look up, and authenticate (``Authorization: Bearer gqa_…``).

Separate from personal API tokens (``portal.models.ApiToken``): a node token stands for a
node, not a user, and authenticates only the ingest endpoint. Like personal tokens, only
the SHA-256 of the high-entropy secret is stored, so a lookup is one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.db import connection
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from inventory.models import Node

from .models import NodeToken

TOKEN_PREFIX = "gqa_"
# Writing last_used_at on every report would add a write per report; 5 minutes is enough
# to tell a live agent from a dead one.
LAST_USED_GRANULARITY = timedelta(minutes=5)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def issue(node: Node, created_by=None, name: str = "") -> tuple[NodeToken, str]:
    """Create a token for ``node``; returns it with the raw secret (never stored)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(30)
    token = NodeToken.objects.create(
        node=node,
        name=name,
        prefix=raw[: len(TOKEN_PREFIX) + 4],
        key_hash=hash_token(raw),
        created_by=created_by,
    )
    return token, raw


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """Who a valid node token speaks for (no model instances: the ingest path is hot)."""

    token_id: UUID
    node_id: UUID
    node_name: str
    cluster_id: UUID

    # DRF treats request.user as a user-like object.
    is_authenticated = True
    is_staff = False


class TokenError(Exception):
    """A missing, malformed, unknown or revoked token (answered with 401)."""


def parse_bearer(header: str | bytes | None) -> str | None:
    """The raw token from an Authorization header; None when the header is absent."""
    if not header:
        return None
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeDecodeError as err:
            raise TokenError("Invalid token characters.") from err
    parts = header.split()
    if not parts or parts[0].lower() != "bearer":
        return None
    if len(parts) != 2:
        raise TokenError("Invalid Authorization header: expected 'Bearer <token>'.")
    return parts[1]


def authenticate_node(raw: str, now: datetime | None = None) -> AgentIdentity:
    """The identity of an active node token, in one query (two every 5 minutes)."""
    if not raw.startswith(TOKEN_PREFIX):
        raise TokenError("Not a node agent token.")
    with connection.cursor() as cur:
        cur.execute(
            "SELECT t.id, t.last_used_at, n.id, n.name, n.cluster_id "
            "FROM telemetry_nodetoken t JOIN inventory_node n ON n.id = t.node_id "
            "WHERE t.key_hash = %s AND t.revoked_at IS NULL",
            [hash_token(raw)],
        )
        row = cur.fetchone()
        if row is None:
            raise TokenError("Invalid or revoked node token.")
        token_id, last_used_at, node_id, node_name, cluster_id = row
        now = now or timezone.now()
        if last_used_at is None or now - last_used_at > LAST_USED_GRANULARITY:
            cur.execute(
                "UPDATE telemetry_nodetoken SET last_used_at = %s WHERE id = %s", [now, token_id]
            )
    return AgentIdentity(token_id, node_id, node_name, cluster_id)


class NodeTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication for the ingest endpoint only (not in DEFAULT_AUTHENTICATION_CLASSES)."""

    keyword = "Bearer"

    def authenticate(self, request):
        try:
            raw = parse_bearer(authentication.get_authorization_header(request))
            if raw is None:
                return None
            identity = authenticate_node(raw)
        except TokenError as err:
            raise exceptions.AuthenticationFailed(str(err)) from err
        return identity, identity

    def authenticate_header(self, request) -> str:
        return self.keyword


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "telemetry.tokens.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Node agent token (gqa_…), issued by an admin for one node",
        }
