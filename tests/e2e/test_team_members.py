"""Journey 4 (issue #12 section 4): a team manager adds a member and changes a role.

bob (manager of vision in the demo) opens /teams/vision/members/, tries someone who has
no account (the form says so, nothing changes), adds carol as a member, then makes alice
a manager with her row's role form. Each page passes axe-core with no horizontal overflow
at 1280 and 390 px (the member rows stack at phone width).
"""

from __future__ import annotations

import pytest

from tests.e2e.browser import new_page, sign_in, text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
URL = "/teams/vision/members/"


def _row(page, username: str):
    return page.locator("tr.member-row").filter(has=page.locator(f"code:text-is('{username}')"))


def test_manager_adds_a_member_and_changes_a_role(demo, browser, live_server, checker):
    bob = new_page(browser, live_server)
    sign_in(bob, "bob", "bob-demo-pass")
    bob.goto(URL)
    assert _row(bob, "carol").count() == 0
    checker.check(bob, "team members")

    add = bob.locator("form").filter(has=bob.get_by_role("button", name="Add to"))
    add.get_by_label("Username or e-mail").fill("nobody-here")
    add.get_by_role("button", name="Add to").click()
    bob.wait_for_load_state()
    assert "Nothing was saved" in text(bob, "[role=alert]")
    assert bob.locator(".field-error").count() >= 1
    checker.check(bob, "add member error")

    add = bob.locator("form").filter(has=bob.get_by_role("button", name="Add to"))
    add.get_by_label("Username or e-mail").fill("carol")
    add.get_by_label("Role").select_option("member")
    add.get_by_role("button", name="Add to").click()
    bob.wait_for_load_state()
    assert "Added carol to" in text(bob), text(bob)
    assert "member" in _row(bob, "carol").locator(".member-row__role").inner_text()
    checker.check(bob, "member added")

    alice = _row(bob, "alice")
    alice.get_by_role("combobox", name="Role of alice").select_option("manager")
    alice.get_by_role("button", name="Set role").click()
    bob.wait_for_load_state()
    assert "alice is now a manager of" in text(bob), text(bob)
    assert "manager" in _row(bob, "alice").locator(".member-row__role").inner_text()
    checker.check(bob, "role changed")
    checker.assert_clean()
