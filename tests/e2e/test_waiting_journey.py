"""Journey (issue #21 section 7): a researcher's job waits; she finds out why, files the
request the page filled in for her, an admin approves it, and the job runs.

The demo cluster on the real control plane. A namespace ``journey`` is onboarded for the
vision team with a permanent baseline of 1 GPU (the portal's quota, applied by a real
Celery worker). alice submits a Job for 2 GPUs (as her ``kubectl`` would): the job
controller's pod is refused by the quota. The waiting page says so in the cluster's words
and offers "Request 1 more"; she submits the prefilled form, the admin approves it in the
queue, the worker raises the quota, the job controller's next try creates the pod, the
scheduler and kwok run it, and the waiting page, updating itself, says nothing waits.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from inventory.models import Cluster
from quotas import adoption, services
from quotas.models import Team
from tests.conftest import wait_for
from tests.e2e.browser import follow_live, new_page, sign_in, text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
GPU = "nvidia.com/gpu"
NS = "journey"


def portal_quota_hard(api) -> int | None:
    for q in api.list("resourcequotas", NS):
        if q["metadata"]["name"] == settings.QUOTA_NAME:
            return int((q.get("status") or {}).get("hard", {}).get(f"requests.{GPU}", -1))
    return None


def job_pods(api, *phases: str) -> list[dict]:
    return [p for p in api.list("pods", NS, labelSelector="job-name=train")
            if not phases or p["status"].get("phase") in phases]  # fmt: skip


def test_a_waiting_job_explained_requested_approved_and_run(
    demo, worker, browser, live_server, checker
):
    api = demo.api
    admin_user = get_user_model().objects.get(username="admin")
    api.create("namespaces", {"metadata": {"name": NS}})
    ns, _ = adoption.onboard(Team.objects.get(slug="vision"), Cluster.objects.get(slug="demo"),
                             NS, admin_user)  # fmt: skip
    services.set_baseline(ns, GPU, 1, admin_user)
    wait_for(lambda: portal_quota_hard(api) == 1, timeout=60)

    # alice's Job asks for 2 GPUs: the quota refuses its pod
    pod_spec = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "cuda",
                        "resources": {"limits": {GPU: "2"}, "requests": {GPU: "2"}}}],
    }  # fmt: skip
    job = {"metadata": {"name": "train"},
           "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}}}  # fmt: skip
    api.create("jobs", job, NS)
    wait_for(
        lambda: any(e["reason"] == "FailedCreate" and "exceeded quota" in e["message"]
                    for e in api.list("events", NS)),
        timeout=30,
    )  # fmt: skip

    alice = new_page(browser, live_server)
    sign_in(alice, "alice", "alice-demo-pass")
    alice.goto("/teams/")
    alice.get_by_role("link", name="Why is a job waiting?").first.click()
    alice.wait_for_load_state()
    card = alice.locator('li[data-name="train"]')
    assert card.get_attribute("data-cause") == "quota"
    said = text(alice, 'li[data-name="train"]')
    assert f"exceeded quota: {settings.QUOTA_NAME}" in said, said
    assert f"requested: requests.{GPU}=2" in said and f"limited: requests.{GPU}=1" in said
    checker.check(alice, "why is my job waiting")
    card.get_by_role("link", name=f"Request 1 more {GPU}").click()
    alice.wait_for_load_state()
    assert alice.get_by_label("Amount").input_value() == "1"
    assert alice.get_by_label("Resource").input_value() == GPU
    assert alice.locator("#id_namespace option:checked").inner_text().startswith(f"demo/{NS}")
    assert "train waits for 1 more" in alice.get_by_label("Justification").input_value()
    checker.check(alice, "request form prefilled")
    alice.get_by_role("button", name="Submit request").click()
    alice.wait_for_load_state()
    assert "Request submitted" in text(alice), text(alice)[:500]
    pk = alice.url.rstrip("/").rsplit("/", 1)[1]

    admin = new_page(browser, live_server)
    sign_in(admin, "admin", "admin-demo-pass")
    admin.goto("/admin-queue/")
    admin.locator(f'li[aria-labelledby="q-{pk}"]').get_by_role("button", name="Approve").click()
    admin.wait_for_load_state()
    assert "Approved" in text(admin), text(admin)[:500]

    # The worker raises the quota; the job controller's next try (its backoff reaches a
    # minute) creates the pod, kube-scheduler places it and kwok starts it.
    wait_for(lambda: portal_quota_hard(api) == 2, timeout=60)
    try:
        # kwok runs a container that names no duration to completion at once
        wait_for(lambda: job_pods(api, "Running", "Succeeded"), timeout=120)
    except AssertionError:
        pods = [(p["metadata"]["name"], p["status"]) for p in job_pods(api)]
        events = [(e["reason"], e["message"], e.get("count")) for e in api.list("events", NS)]
        raise AssertionError(f"the job's pod did not run: {pods}\n{events}") from None
    alice.goto("/teams/vision/waiting/")
    follow_live(alice, lambda: alice.locator('li[data-name="train"]').count() == 0,
                "the job no longer waiting", timeout=30)  # fmt: skip
    checker.check(alice, "nothing of the job waits")
    checker.assert_clean()
