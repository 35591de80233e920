"""Typed helpers for settings read from the environment.

Every secret can also come from a file: ``SECRET_KEY_FILE=/run/secrets/key`` wins over
``SECRET_KEY`` (the Kubernetes / Docker secrets convention).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import environ

env = environ.Env()


def secret(name: str, default: str | None = None) -> str | None:
    """Return ``$NAME``, or the stripped content of the file named by ``$NAME_FILE``."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def celery_broker_url(redis_url: str) -> str:
    """Translate a redis-py URL into the form kombu understands.

    redis-py spells a unix socket ``unix:///path?db=0``; kombu wants ``redis+socket:///path``,
    and takes a socket's database from ``virtual_host`` only: it sets ``db`` from the URL's
    virtual host after the query (kombu ``transport/redis.py``, ``Channel._connparams``),
    so a ``?db=3`` would be ignored and every broker would share database 0.
    """
    parts = urlsplit(redis_url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"]
        db = dict(parse_qsl(parts.query)).get("db")
        if db:
            query.append(("virtual_host", db))
        return f"redis+socket://{parts.path}" + (f"?{urlencode(query)}" if query else "")
    return redis_url
