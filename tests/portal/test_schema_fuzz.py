"""Schema fuzzing of the whole API (issue #11 section 2): schemathesis against /api/schema/.

Every operation of the live OpenAPI schema gets generated requests, valid and invalid
(Hypothesis, a few examples each), through the WSGI app on the test database, as a team
member and as an admin, with a few rows of every kind in place (a team, namespaces, a
grant, a request, an audit event, a node with GPUs and telemetry) so lists have items to
check. Each response must be no 5xx, a documented status code, the documented content type
and a body matching the documented schema.

A third pass is stateful where it helps: every operation on one object gets the id of a
real row of the member's team (what a list returned) with generated bodies, as the member
and as an admin, so detail endpoints and actions are exercised, not only their 404s.

Bounded: ``FUZZ_EXAMPLES`` examples per operation and persona (default 4; about two
minutes in all). Run more locally with
``FUZZ_EXAMPLES=50 make test ARGS=tests/portal/test_schema_fuzz.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import schemathesis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from quotas.models import AuditEvent, QuotaRequest
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

# ``ca_cert`` is declared "format: pem-certificates" (inventory/serializers_connect.py): a
# schema cannot spell out what a certificate is, so the fuzzer is told how to make one (a
# self-signed CA certificate; its key was thrown away) or none.
CA_PEM = (Path(__file__).parent / "fuzz-ca.pem").read_text()
schemathesis.openapi.format("pem-certificates", st.sampled_from(["", CA_PEM]))

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
# The schema is held to what the API does (#24 finding 9): on every operation invalid data is
# refused (negative_data_rejection) and valid data accepted (positive_data_acceptance). A
# valid body may still answer 404 (it names an object that does not exist or that the
# caller cannot see) or 409 (the object's current state refuses it): portal.validation.


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
    from inventory.classes import refresh
    from quotas.models import Operation

    (gpu_class, *_) = refresh(cluster) or [None]
    op = Operation.objects.create(namespace=ns, reason="drift")
    event = AuditEvent.objects.create(actor_name="system", action="grant.created",
                                      object_type="grant", team=team)  # fmt: skip
    headers = {
        name: {"Authorization": api_for(user)._credentials["HTTP_AUTHORIZATION"]}
        for name, user in (("member", member), ("admin", admin))
    }
    # Real objects of the member's team, by the path's resource, for the stateful pass:
    # detail endpoints and actions then reach rows instead of 404s. (Tokens are left out:
    # revoking the caller's own token would end the pass.)
    headers["ids"] = {
        "clusters": "lab", "teams": "vision", "namespaces": str(ns.pk),
        "grants": str(ns.grants.get().pk), "quota-requests": str(QuotaRequest.objects.get().pk),
        "audit-events": str(event.pk), "nodes": str(node.pk), "operations": str(op.pk),
        "gpus": str(GpuState.objects.get().pk),
        **({"gpu-classes": str(gpu_class.pk)} if gpu_class else {}),
    }  # fmt: skip
    return headers


def _load_schema():
    from django.test import override_settings

    from portal.wsgi import application

    # Read once at import, without a user: open for this one read (portal/apidocs.py).
    with override_settings(API_DOCS_PUBLIC=True):
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
    case.call_and_validate(
        headers=headers, checks=[*CHECKS, negative_data_rejection, positive_data_acceptance]
    )


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


def _on_real_objects(case, ids: dict[str, str]):
    """Point the path's parameter at a real row of the resource the path names."""
    resource = case.operation.path.strip("/").split("/")[2]
    if resource in ids and case.path_parameters:
        case.path_parameters = {key: ids[resource] for key in case.path_parameters}
    return case


# Stateful where it helps: the operations on one object, with generated bodies, against
# real rows (what a list returned), as the member who owns them and as an admin.
on_objects = schema.include(path_regex=r"\{")


@on_objects.parametrize()
@FUZZ
def test_api_on_real_objects_answers_as_documented(case, fuzz_world):
    case = _on_real_objects(case, fuzz_world["ids"])
    _call(case, fuzz_world["member"])
    _call(case, fuzz_world["admin"])
