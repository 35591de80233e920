"""What both benchmarks need: a fresh, migrated database of their own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def database_url(name: str) -> str:
    """$DATABASE_URL with the database name (its last path segment) replaced."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    head = parts.path.rsplit("/", 1)[0]
    return urlunsplit(parts._replace(path=f"{head}/{name}"))


def fresh_database(name: str) -> str:
    """Drop and create database ``name`` on $DATABASE_URL's server, migrate it, return its URL."""
    import environ
    import psycopg2

    cfg = environ.Env.db_url_config(os.environ["DATABASE_URL"])
    conn = psycopg2.connect(
        dbname=cfg["NAME"], user=cfg["USER"], password=cfg["PASSWORD"] or None,
        host=cfg["HOST"] or None, port=cfg["PORT"] or None,
    )  # fmt: skip
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    url = database_url(name)
    env = dict(os.environ, DATABASE_URL=url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    return url


def log(msg: str) -> None:
    """Progress on stderr, so stdout stays the benchmark's figures."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM a process group started with start_new_session, SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
