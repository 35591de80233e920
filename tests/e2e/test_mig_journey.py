"""Journey 2 (issue #12 section 4): a MIG layout drawn, requested, approved, run to the end.

alice opens the MIG request form, types a layout the GPU cannot hold (the live check
lists the error), then two 3g.40gb instances: static/js/mig-layout.js draws them on the
GPU. She submits; the admin opens the request, keeps the preselected (top-ranked) node
and approves with eviction; a real Celery worker drives the run against the simulated
GPU Operator and mig-manager, and the request page shows every step done.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.browser import follow_live, new_page, sign_in, text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PRODUCT = "A100-80GB"


def test_mig_layout_requested_approved_and_run(demo, worker, browser, live_server, checker):
    alice = new_page(browser, live_server)
    sign_in(alice, "alice", "alice-demo-pass")
    alice.goto("/mig/requests/new/")
    alice.get_by_label("Product").select_option(PRODUCT)
    profiles = alice.locator(f'fieldset[data-product="{PRODUCT}"]')
    assert profiles.is_visible()
    checker.check(alice, "MIG request form")

    # Three 3g.40gb instances do not fit on one A100: the live check says so.
    profiles.locator('input[data-profile="3g.40gb"]').fill("3")
    errors = alice.locator("[data-mig-errors] .error-list li")
    errors.first.wait_for()
    assert "3g.40gb" in errors.first.inner_text() or "fit" in errors.first.inner_text()
    checker.check(alice, "MIG layout that does not fit")

    # Two do: the slice diagram draws them.
    profiles.locator('input[data-profile="3g.40gb"]').fill("2")
    drawing = alice.locator("[data-mig-drawing] figure.mig-gpu")
    drawing.wait_for()
    alice.locator("[data-mig-errors] .error-list").wait_for(state="detached")
    assert drawing.locator('[data-profile="3g.40gb"]').count() == 2
    alice.get_by_label("Justification").fill("Two isolated inference servers.")
    checker.check(alice, "MIG layout drawn")
    alice.get_by_role("button", name="Submit request").click()
    alice.wait_for_load_state()
    match = re.search(r"/mig/requests/([0-9a-f-]{36})/$", alice.url)
    assert match, f"not on the MIG request page: {alice.url}\n{text(alice)}"
    url = f"/mig/requests/{match[1]}/"
    assert "MIG request submitted" in text(alice)
    checker.check(alice, "MIG request pending")

    # The admin approves on the node the proposals rank first (the form preselects it).
    admin = new_page(browser, live_server)
    sign_in(admin, "admin", "admin-demo-pass")
    admin.goto(url)
    preselected = admin.locator("tr[data-preselected]").get_attribute("data-proposal")
    node_select = admin.locator("form[aria-label='Approve MIG request'] select[name=node]")
    chosen = node_select.locator("option:checked").inner_text()
    assert preselected and preselected in chosen, (preselected, chosen)
    checker.check(admin, "MIG proposals")
    admin.get_by_label("evict GPU pods", exact=False).check()
    admin.get_by_role("button", name="Approve and reconfigure").click()
    admin.wait_for_load_state()
    assert admin.url.endswith(url), admin.url

    # Followed to the end on alice's page: every coordinator step done.
    alice.goto(url)
    badges = alice.locator("table.mig-steps tbody .badge")
    follow_live(
        alice,
        lambda: (
            "succeeded" in alice.locator(".page-head .badge").first.inner_text()
            or "failed" in alice.locator(".page-head .badge").first.inner_text()
        ),
        "the MIG run's end",
        timeout=45,
    )
    status = alice.locator(".page-head .badge").first.inner_text()
    assert "succeeded" in status, text(alice)
    states = [b.inner_text().strip() for b in badges.all()]
    assert states and set(states) == {"done"}, states
    assert preselected in text(alice)
    checker.check(alice, "MIG run done")
    checker.assert_clean()
