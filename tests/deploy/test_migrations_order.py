"""Apply order on a fresh cluster: every portal pod's init container waits until the
migrations Job has migrated, so nothing starts on an empty database whatever order the
objects come up in. Both commands are read from the rendered manifests and run for real
with the production settings on a new, empty PostgreSQL database.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"

pytestmark = pytest.mark.slow


def _objects(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def _url(settings_dict: dict, name: str) -> str:
    auth = quote(settings_dict["USER"] or "")
    if settings_dict["PASSWORD"]:
        auth += ":" + quote(settings_dict["PASSWORD"])
    host = settings_dict["HOST"] or ""
    if host.startswith("/"):
        return f"postgres://{auth}@/{quote(host, safe='')}/{name}"
    port = f":{settings_dict['PORT']}" if settings_dict["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{name}"


@pytest.fixture
def empty_database(django_db_blocker):
    from django.db import connection

    s = connection.settings_dict
    name = f"install_{uuid.uuid4().hex[:12]}"
    params = {"dbname": "postgres", "user": s["USER"], "password": s["PASSWORD"] or None,
              "host": s["HOST"] or None, "port": s["PORT"] or None}  # fmt: skip
    admin = psycopg2.connect(**params)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _url(s, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_pods_wait_for_the_migrations_job_on_an_empty_database(empty_database, settings):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "ALLOWED_HOSTS")}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings_production",
               SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="gpu-portal.example.org",
               DATABASE_URL=empty_database, REDIS_URL=settings.REDIS_URL)  # fmt: skip
    # `python` in the manifests' commands is the image's; here, this virtualenv's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    web = next(d for d in _objects("web.yaml") if d["kind"] == "Deployment")
    (init,) = web["spec"]["template"]["spec"]["initContainers"]
    (job,) = _objects("migrate-job.yaml")
    migrate = job["spec"]["template"]["spec"]["containers"][0]["command"]
    # The init container's script, with a short sleep between its checks.
    script = init["command"][-1].replace("sleep 5", "sleep 1")
    waiting = subprocess.Popen(
        [*init["command"][:-1], script], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        time.sleep(6)
        assert waiting.poll() is None, waiting.communicate()[0]  # still waiting: not migrated
        ran = subprocess.run(migrate, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        out, _ = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, out
    assert "waiting for the migrations Job" in out
