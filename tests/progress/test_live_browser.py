"""A quota request page updates itself while its apply runs and stops polling at the end:
headless Chromium (Debian ``chromium``, driven by ``playwright``) against the live server,
the apply run for real by ``quotas.apply.run_operation`` against the simulated cluster,
from the test, while the page is open. Screenshots go to
``$TEST_ARTIFACTS/progress/`` (default ``.data/test-artifacts/progress/``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from inventory.sync import sync_cluster
from quotas import services
from quotas.apply import run_operation
from quotas.models import QuotaRequest
from tests.inventory.test_sync import node_body
from tests.portal.test_csp import RECORD_VIOLATIONS, _chromium, _playwright, _session_cookie
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def _artifacts() -> Path:
    base = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / ".data" / "test-artifacts")
    folder = base / "progress"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _in_thread(fn, *args):
    """ORM work while playwright's sync API holds an event loop in this thread."""
    out: dict = {}

    def run():
        from django.db import connection

        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.fixture
def approved(sim_api, sim_cluster):
    """An approved request of alice's team whose apply is queued (no worker runs it)."""
    sim_api.create_node(node_body("gpu-0"))
    sim_api.create_namespace({"metadata": {"name": "vision"}})
    assert sync_cluster(sim_cluster).status == "succeeded"
    alice, admin = make_user("alice"), make_user("root", staff=True)
    team = make_team("vision", members=[alice])
    ns = make_namespace(team, sim_cluster, "vision")
    req = services.submit(
        alice,
        services.RequestData(team=team, namespace=ns, resource="nvidia.com/gpu", amount=2,
                             justification="Training the vision model."),
    )  # fmt: skip
    req = services.approve(req, admin)
    return {"req": req, "op": req.operations.get(), "alice": alice, "core": sim_api}


def test_page_follows_the_apply_live_and_stops_polling(approved, live_server):
    sync_playwright, chromium = _playwright(), _chromium()
    req = approved["req"]
    page_url = live_server.url + reverse("quotas:request", args=[req.pk])
    fragment = reverse("discussion:request-progress", args=[req.pk])
    cookie = _session_cookie(live_server, approved["alice"])
    shots = _artifacts()
    polls: list[str] = []
    # No ORM call in this thread below: playwright's sync API runs an event loop here.
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_cookies([cookie])
            context.add_init_script(RECORD_VIOLATIONS)
            page = context.new_page()
            page.on("request", lambda r: polls.append(r.url) if fragment in r.url else None)
            page.goto(page_url, wait_until="load")
            region = page.locator("#request-progress")
            assert region.get_attribute("data-status") == "approved"
            assert region.get_attribute("hx-trigger") == "every 2s"
            page.screenshot(path=str(shots / "1-applying.png"), full_page=True)
            page.wait_for_function(f"() => performance.getEntriesByType('resource')"
                                   f".some(e => e.name.includes('{fragment}'))",
                                   timeout=10_000)  # fmt: skip
            assert polls, "the page does not poll its progress fragment"

            # the worker's job, done from the test: apply the quota to the cluster
            assert _in_thread(run_operation, approved["op"].pk) == "succeeded"

            page.wait_for_selector('#request-progress[data-status="applied"]', timeout=10_000)
            region = page.locator("#request-progress")
            assert region.get_attribute("hx-get") is None
            assert "quota applied" in region.inner_text()
            # the header's status badge follows (swapped out of band)
            assert page.locator("#request-status").inner_text().strip().endswith("applied")
            page.screenshot(path=str(shots / "2-applied.png"), full_page=True)
            stopped_at = len(polls)
            page.wait_for_timeout(5_000)  # two and a half polling periods
            assert len(polls) == stopped_at, "polling went on after the work ended"
            violations = page.evaluate("window.__csp")
            context.close()
        finally:
            browser.close()
    assert violations == []
    assert _in_thread(lambda: QuotaRequest.objects.get(pk=req.pk).status) == "applied"
    quota = approved["core"].read_namespaced_resource_quota(settings.QUOTA_NAME, "vision")
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "2"
