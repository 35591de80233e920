"""Journey 1 (issue #12 section 4): a researcher asks for GPUs, an admin grants fewer.

alice signs in through the login form, submits the request form with bad input (every
error shown at once, nothing saved), then asks for 6 GPUs for ten days; the admin, in
another browser context, approves 4 for five days in the approvals queue; a real Celery
worker applies the ResourceQuota in the simulated cluster (read back as the cluster
admin), and alice's request page says "4 of 6 asked" and "applied". Every page is checked
with axe-core and for overflow at 1280 and 390 px (tests/e2e/browser.py).
"""

from __future__ import annotations

import re
from datetime import UTC, timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from quotas.models import Operation
from tests.conftest import wait_for
from tests.e2e.browser import follow_live, new_page, sign_in, text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
GPU = "nvidia.com/gpu"
NAMESPACE = "ml-vision"


def quota_hard(sim) -> int:
    """requests.nvidia.com/gpu of the portal's ResourceQuota in ml-vision (0: none)."""
    api = client.CoreV1Api(config.new_client_from_config(str(sim.admin_kubeconfig_path)))
    try:
        rq = api.read_namespaced_resource_quota(settings.QUOTA_NAME, NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return 0
        raise
    finally:
        api.api_client.close()
    return int((rq.spec.hard or {}).get(f"requests.{GPU}", 0))


def _local(dt) -> str:
    """A datetime-local input's value (the form's times are UTC)."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


def test_request_approved_for_less_and_applied(demo, worker, browser, live_server, checker):
    now = timezone.now()
    alice = new_page(browser, live_server)
    sign_in(alice, "alice", "alice-demo-pass", checker)
    alice.goto("/requests/new/")
    checker.check(alice, "request form")

    # Bad input first: no amount, a window without its end, no justification.
    form = alice.locator("form[method=post]").filter(has=alice.get_by_label("Amount"))
    form.get_by_label("Amount").fill("0")
    form.get_by_role("radio", name="For a window").check()
    form.get_by_role("button", name="Submit request").click()
    alice.wait_for_load_state()
    assert "Nothing was saved" in text(alice, "[role=alert]")
    errors = {e.get_attribute("id"): e.inner_text() for e in alice.locator(".field-error").all()}
    assert {"id_amount_error", "id_ends_at_error", "id_justification_error"} <= set(errors), errors
    assert alice.get_by_label("Amount").get_attribute("aria-invalid") == "true"
    checker.check(alice, "request form errors")

    # Then valid: 6 GPUs for ten days.
    asked_end, granted_end = now + timedelta(days=10), now + timedelta(days=5)
    alice.get_by_label("Resource").select_option(GPU)
    alice.get_by_label("Amount").fill("6")
    alice.get_by_role("radio", name="For a window").check()
    alice.locator("#id_ends_at").fill(_local(asked_end))
    alice.get_by_label("Justification").fill("Six GPUs for the segmentation sweep.")
    alice.get_by_role("button", name="Submit request").click()
    alice.wait_for_load_state()
    match = re.search(r"/requests/([0-9a-f-]{36})/$", alice.url)
    assert match, f"not on the request page after submitting: {alice.url}\n{text(alice)}"
    pk = match[1]
    assert "Request submitted" in text(alice)
    checker.check(alice, "request pending")
    # What the cluster enforces before the decision, once the demo's own applies are done.
    unfinished = Operation.objects.filter(
        namespace__name=NAMESPACE, status__in=["pending", "running"]
    )
    wait_for(lambda: not unfinished.exists(), timeout=30)
    before = quota_hard(demo)

    # The admin, in their own browser context, approves 4 for five days in the queue.
    admin = new_page(browser, live_server)
    sign_in(admin, "admin", "admin-demo-pass")
    admin.goto("/admin-queue/")
    checker.check(admin, "approvals queue")
    card = admin.locator(f'li[aria-labelledby="q-{pk}"]')
    assert "+6" in card.locator("h2").inner_text()
    card.locator(f"#amount-{pk}").fill("4")
    card.locator(f"#ends-{pk}").fill(_local(granted_end))
    card.get_by_role("button", name="Approve").click()
    admin.wait_for_load_state()
    flash = text(admin)
    assert f"Approved 4 of 6 asked {GPU} for {NAMESPACE}" in flash, flash
    assert "(a shorter window than asked)" in flash
    checker.check(admin, "approved")

    # alice sees what was granted, and the applied state once the worker has applied it.
    alice.goto(f"/requests/{pk}/")
    heading = alice.locator("main h1")
    follow_live(
        alice,
        lambda: "applied" in alice.locator(".page-head .badge").first.inner_text(),
        "the request's applied state",
    )
    assert "(4 of 6 asked)" in heading.inner_text()
    assert "+4" in heading.inner_text() and "+6" not in heading.inner_text()
    granted = text(alice, "[data-granted]")
    assert "(4 of 6 asked)" in granted and "(a shorter window than asked)" in granted
    assert f"{granted_end:%Y-%m-%d %H:%M}" in granted, granted
    checker.check(alice, "request applied")
    assert quota_hard(demo) == before + 4
    checker.assert_clean()
