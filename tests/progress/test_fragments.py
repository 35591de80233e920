"""Live progress fragments of the request pages (issue #12 section 2): polled while the work
runs, final (no hx-* attributes) once it ends, the page's own isolation, no-JS fallback."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from mig import services as mig_services
from mig.models import MigRequest, MigStep
from quotas import services
from quotas.models import Operation, QuotaRequest

pytestmark = pytest.mark.django_db


def _login(client, user):
    client.force_login(user)
    return client


def _approve(w, on_commit) -> Operation:
    with on_commit(execute=False):  # no worker here: the apply stays pending
        services.approve(w["req"], w["admin"])
    return w["req"].operations.get()


def _quota_urls(w):
    pk = w["req"].pk
    return reverse("quotas:request", args=[pk]), reverse("discussion:request-progress", args=[pk])


def test_pending_request_is_not_polled_and_loads_no_htmx(client, world):
    page, _ = _quota_urls(world)
    html = _login(client, world["requester"]).get(page).content.decode()
    assert "hx-get" not in html and "htmx.min.js" not in html
    assert 'aria-live="polite"' in html


def test_approved_request_polls_until_the_quota_is_applied(client, world, on_commit):
    op = _approve(world, on_commit)
    page, fragment = _quota_urls(world)
    client = _login(client, world["requester"])
    html = client.get(page).content.decode()
    assert f'hx-get="{fragment}"' in html and 'hx-trigger="every 2s"' in html
    assert "vendor/htmx/htmx.min.js" in html
    config = """content='{"includeIndicatorStyles":false, "allowEval":false}'>"""
    assert f'<meta name="htmx-config" {config}' in html
    assert f'href="{page}">Refresh</a>' in html  # without JS: a plain link
    assert " hx-on" not in html

    live = client.get(fragment, HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and "no-store" in live["Cache-Control"]
    body = live.content.decode()
    assert body.lstrip().startswith("<div") and "<html" not in body
    assert f'hx-get="{fragment}"' in body and 'data-status="approved"' in body

    # the worker's outcome, as run_operation leaves it (tests/quotas cover the worker)
    Operation.objects.filter(pk=op.pk).update(
        status=Operation.Status.SUCCEEDED, attempts=1, finished_at=timezone.now()
    )
    req = QuotaRequest.objects.get(pk=world["req"].pk)
    services.mark_applied(req)
    done = client.get(fragment, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-get" not in done and "hx-trigger" not in done
    assert 'data-status="applied"' in done
    assert '<span id="request-status" hx-swap-oob="true">' in done  # the header's badge
    assert "htmx.min.js" not in client.get(page).content.decode()


def test_a_retrying_apply_keeps_polling_and_a_held_one_does_not(client, world, on_commit):
    op = _approve(world, on_commit)
    _, fragment = _quota_urls(world)
    client = _login(client, world["requester"])
    Operation.objects.filter(pk=op.pk).update(attempts=2, last_error="connection refused")
    body = client.get(fragment).content.decode()
    assert "hx-get" in body and "connection refused" in body
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.CONFIRM)
    assert "hx-get" not in client.get(fragment).content.decode()  # waits for an admin


def test_quota_fragment_isolation(client, world, on_commit):
    _approve(world, on_commit)
    _, fragment = _quota_urls(world)
    assert _login(client, world["outsider"]).get(fragment).status_code == 404
    assert _login(client, world["admin2"]).get(fragment).status_code == 200
    assert _login(client, world["manager"]).get(fragment).status_code == 200


def test_signed_out_fragment_redirects_or_tells_htmx_to_reload(client, world):
    _, fragment = _quota_urls(world)
    plain = client.get(fragment)
    assert plain.status_code == 302 and plain["Location"].startswith(reverse("login"))
    polled = client.get(fragment, HTTP_HX_REQUEST="true")
    assert polled.status_code == 401 and polled["HX-Refresh"] == "true"
    assert client.post(fragment).status_code == 405


# -- MIG ----------------------------------------------------------------------------------


def _mig_running(w) -> MigRequest:
    """The request as a coordinator run leaves it mid-way: approved, steps, one running."""
    from tests.factories import make_node

    node = make_node(w["cluster"], "a100-00", product="NVIDIA-A100-SXM4-80GB", gpus=2,
                     mig_capable=True, mig_strategy="mixed", mig_config="all-disabled",
                     mig_config_state="success")  # fmt: skip
    req = w["mig"]
    req.approve(w["admin"], node=node, drain_policy="evict", strategy="mixed",
                config_name="portal-test")  # fmt: skip
    req.status, req.started_at = MigRequest.Status.RUNNING, timezone.now()
    req.save()
    for i, name in enumerate(mig_services.APPLY_STEPS):
        status = "done" if i == 0 else "running" if i == 1 else "pending"
        MigStep.objects.create(request=req, position=i, name=name, status=status)
    return req


def test_mig_run_polls_its_steps_until_it_ends(client, world):
    req = _mig_running(world)
    page = reverse("mig:request", args=[req.pk])
    fragment = reverse("discussion:mig-request-progress", args=[req.pk])
    client = _login(client, world["member"])
    html = client.get(page).content.decode()
    assert f'hx-get="{fragment}"' in html and "htmx.min.js" in html
    body = client.get(fragment).content.decode()
    assert "hx-get" in body and body.count("data-step=") == len(mig_services.APPLY_STEPS)
    assert 'data-step-status="running"' in body
    req.steps.update(status=MigStep.Status.DONE, finished_at=timezone.now())
    req.refresh_from_db()
    req.succeed()
    req.save()
    done = client.get(fragment).content.decode()
    assert "hx-get" not in done and 'data-status="succeeded"' in done
    assert 'data-step-status="running"' not in done
    assert _login(client, world["outsider"]).get(fragment).status_code == 404


def test_mig_failed_run_shows_the_error_and_stops(client, world):
    req = _mig_running(world)
    req.fail("mig-manager reported failed")
    req.save()
    fragment = reverse("discussion:mig-request-progress", args=[req.pk])
    body = _login(client, world["requester"]).get(fragment).content.decode()
    assert "hx-get" not in body and "mig-manager reported failed" in body
    page = _login(client, world["requester"]).get(reverse("mig:request", args=[req.pk]))
    assert page.content.decode().count("mig-manager reported failed") == 1  # the banner


def test_pending_mig_request_is_not_polled(client, world):
    html = (
        _login(client, world["requester"])
        .get(reverse("mig:request", args=[world["mig"].pk]))
        .content.decode()
    )
    assert "hx-get" not in html and "What happens next" in html
