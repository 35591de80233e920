"""Schema fuzzing of the whole API (issue #11 section 2): schemathesis against /api/schema/.

Every operation of the live OpenAPI schema gets generated requests, valid and invalid
(Hypothesis, a few examples each), through the WSGI app on the test database, as a team
member and as an admin, with a few rows of every kind in place (a team, namespaces, a
grant, a request, an audit event, a node with GPUs and telemetry) so lists have items to
check. Each response must be no 5xx, a documented status code, the documented content type
and a body matching the documented schema.

Bounded: ``FUZZ_EXAMPLES`` examples per operation and persona (default 4; about a minute
in all). Run more locally with ``FUZZ_EXAMPLES=50 make test ARGS=tests/portal/test_schema_fuzz.py``.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from quotas.models import AuditEvent, QuotaRequest
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Operations that reach outside the process: a cluster preflight or sync connects to
# whatever kubeconfig the generated body names (slow timeouts, not input handling).
SKIP = {"v1_clusters_preflight_create", "v1_clusters_sync_create"}


@pytest.fixture
def fuzz_world(db):
    from telemetry.models import GpuState

    member, admin = make_user("fuzz-member"), make_user("fuzz-admin", staff=True)
    admin.is_superuser = True
    admin.save()
    cluster = make_cluster("lab")
    team = make_team("vision", members=[member])
    ns = make_namespace(team, cluster, "ml-vision")
    make_grant(ns, 2)
    QuotaRequest.objects.create(
        team=team, namespace=ns, resource="nvidia.com/gpu", amount=1, requested_by=member,
        justification="fuzz", starts_at=timezone.now(),
    )  # fmt: skip
    AuditEvent.objects.create(actor_name="system", action="team.created", object_type="team")
    node = make_node(cluster, "a100-00")
    now = timezone.now()
    GpuState.objects.create(node=node, index=0, name="NVIDIA A100", reported_at=now,
                            stale_after=now)  # fmt: skip
    return {
        name: {"Authorization": api_for(user)._credentials["HTTP_AUTHORIZATION"]}
        for name, user in (("member", member), ("admin", admin))
    }


def _load_schema():
    from portal.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/", application)


# The live schema, as /api/schema/ serves it (generated from the code; no database).
schema = _load_schema()


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI app is called directly, not through Django's test client: keep Django
    from closing the test's database connection at the end of each request."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _call(case, headers: dict[str, str]) -> None:
    if case.operation.definition.raw.get("operationId") in SKIP:
        return  # reaches a cluster
    case.call_and_validate(headers=headers, checks=CHECKS)


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@FUZZ
def test_api_answers_as_documented_to_a_member(case, fuzz_world):
    _call(case, fuzz_world["member"])


@schema.parametrize()
@FUZZ
def test_api_answers_as_documented_to_an_admin(case, fuzz_world):
    _call(case, fuzz_world["admin"])
