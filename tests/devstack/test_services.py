"""The embedded services behind `make demo` / `make test`, and the URLs they hand to Django."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import environ
import pytest

from devstack.services import (
    EmbeddedPostgres,
    EmbeddedRedis,
    ServiceError,
    _short_socket_path,
    data_lock,
    postgres_socket_url,
    redact,
    redis_ping,
    redis_socket_url,
)
from portal.env import celery_broker_url


def quiet(_message: str) -> None:
    pass


def test_database_url_names_the_socket_dir_for_django() -> None:
    url = postgres_socket_url(Path("/tmp/a b+c/pg"), "portal")
    config = environ.Env.db_url_config(url)
    assert config["HOST"] == "/tmp/a b+c/pg"
    assert config["NAME"] == "portal"
    assert config["USER"] == "postgres"
    assert config["ENGINE"] == "django.db.backends.postgresql"


def test_redis_url_is_redis_py_style_and_settings_translate_it_for_celery() -> None:
    url = redis_socket_url(Path("/data/redis/redis.sock"))
    assert url == "unix:///data/redis/redis.sock?db=0"
    assert celery_broker_url(url) == "redis+socket:///data/redis/redis.sock?virtual_host=0"
    assert celery_broker_url("redis://cache:6379/2") == "redis://cache:6379/2"


def test_the_celery_broker_uses_the_database_redis_url_names(settings) -> None:
    """Kombu ignores ``?db=`` on a socket URL; the translated URL reaches the database named."""
    import redis
    from kombu import Connection

    from tests.parallel import redis_db

    url = redis_db(settings.REDIS_URL, 14)
    raw = redis.Redis.from_url(url)
    raw.delete("broker-db-probe")
    with Connection(celery_broker_url(url)) as conn:
        queue = conn.SimpleQueue("broker-db-probe")
        queue.put({"hello": "db 14"})
        queue.close()
    assert raw.llen("broker-db-probe") == 1
    raw.delete("broker-db-probe")


def test_redact_hides_only_the_password() -> None:
    assert redact("postgres://app:hunter2@db:5432/portal") == "postgres://app:***@db:5432/portal"
    assert redact("redis://cache:6379/0") == "redis://cache:6379/0"


def test_too_long_socket_paths_move_to_the_temp_dir() -> None:
    short = Path("/tmp/x/redis.sock")
    assert _short_socket_path(short) == short
    moved = _short_socket_path(Path("/" + "d" * 120) / "redis.sock")
    assert moved.name == "redis.sock"
    assert len(os.fsencode(moved)) < 100


def test_a_second_demo_on_the_same_data_is_refused(tmp_path: Path) -> None:
    with (
        data_lock(tmp_path, wait=False, what="demo", log=quiet),
        pytest.raises(ServiceError, match="already running"),
        data_lock(tmp_path, wait=False, what="demo", log=quiet),
    ):
        pass
    with data_lock(tmp_path, wait=False, what="demo", log=quiet):
        pass  # released again


def test_embedded_redis_answers_ping_on_its_socket(tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis", persistent=False)
    redis.start(quiet)
    try:
        assert redis.alive()
        assert redis_ping(redis.socket_path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(redis.socket_path))
            sock.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            assert sock.recv(16) == b"+OK\r\n"
        pid = redis.proc.pid if redis.proc else 0
    finally:
        redis.stop(quiet)
    assert not redis.alive()
    assert not redis.socket_path.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_embedded_postgres_starts_creates_the_database_and_stops(tmp_path: Path) -> None:
    import psycopg2

    postgres = EmbeddedPostgres(tmp_path / "postgres")
    postgres.start(quiet)
    try:
        assert postgres.ensure_database("portal") is True
        assert postgres.ensure_database("portal") is False
        config = environ.Env.db_url_config(postgres.url("portal"))
        conn = psycopg2.connect(host=config["HOST"], dbname=config["NAME"], user=config["USER"])
        with conn, conn.cursor() as cur:
            cur.execute("SELECT current_database()")
            assert cur.fetchone() == ("portal",)
        conn.close()
    finally:
        postgres.stop(quiet)
    assert not postgres.alive()


def test_the_demo_supervisor_restarts_a_dead_redis_and_postgres(tmp_path: Path) -> None:
    """#24: a Redis or PostgreSQL that dies in the demo is started again (on the same data
    and socket, so every process's URL stays right), not the end of the whole demo."""
    import io

    import psycopg2

    from devstack.services import Services
    from devstack.supervisor import Supervisor

    postgres = EmbeddedPostgres(tmp_path / "postgres")
    postgres.start(quiet)
    redis = EmbeddedRedis(tmp_path / "redis", persistent=False)
    out = io.StringIO()
    services = Services(postgres.url("postgres"), "", postgres, None, [])
    try:
        redis.start(quiet)
        services.redis = redis
        sup = Supervisor(out, colour=False)
        restarts = services.restarts(sup.log)
        for name, alive in services.health().items():
            sup.watch(name, alive, restart=restarts[name])
        first = (redis.proc.pid, postgres.process.pid)
        os.kill(redis.proc.pid, 9)
        os.kill(postgres.process.pid, 9)
        deadline = time.monotonic() + 60
        while not (redis.alive() and postgres.alive() and redis_ping(redis.socket_path)):
            assert time.monotonic() < deadline, out.getvalue()
            sup._tick()
            time.sleep(0.1)
        assert not sup.stopping, out.getvalue()
        assert (redis.proc.pid, postgres.process.pid) != first
        assert "redis is no longer running; restarting it" in out.getvalue()
        assert "postgres restarted" in out.getvalue()
        config = environ.Env.db_url_config(postgres.url("postgres"))
        conn = psycopg2.connect(host=config["HOST"], dbname=config["NAME"], user=config["USER"])
        with conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        conn.close()
    finally:
        services.stop(quiet)
