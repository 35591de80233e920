"""Sign-in that cannot be guessed (issue #11 section 1, docs/security.md "Sign-in").

Every password-checking path (the sign-in page, the Django admin's, the API token
endpoint) counts failures per account and per client address and locks out at the limit,
before the password hasher runs; ``X-Forwarded-For`` counts only behind trusted proxies; a
bearer token sent along changes nothing; lockouts and unlocks are in the audit trail.
These run the real thing: django-axes with the portal's settings, real PostgreSQL and Redis.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.hashers import MD5PasswordHasher
from django.test import RequestFactory
from django.utils import timezone

from portal.models import ApiToken
from portal.signin import client_ip
from quotas.models import AuditEvent

pytestmark = pytest.mark.django_db

LIMIT = settings.AXES_FAILURE_LIMIT
COOL_OFF = settings.AXES_COOLOFF_TIME
TOKEN = "/api/v1/auth/token/"


@pytest.fixture(autouse=True)
def _address_limit_as_the_accounts(settings):
    """The tests below check the lockout's mechanics per account and per address with one
    limit; the address's own, higher default is tested at the end of the file."""
    settings.SIGNIN_ADDRESS_FAILURE_LIMIT = LIMIT


def login_page(client, username, password, path="/login/", **extra):
    return client.post(path, {"username": username, "password": password}, **extra)


def token(api, username, password, **extra):
    return api.post(TOKEN, {"username": username, "password": password}, format="json", **extra)


def assert_locked_page(r):
    assert r.status_code == 429
    assert 0 < int(r["Retry-After"]) <= COOL_OFF.total_seconds()
    body = r.content.decode()
    assert "Too many failed sign-in attempts" in body and "Try again in 15 minutes" in body


# -- the findings -------------------------------------------------------------------------


def test_login_page_refuses_the_right_password_after_repeated_failures(client, researcher):
    """Found: 20 wrong passwords, then the right one worked."""
    for i in range(20):
        r = login_page(client, "rob", f"wrong-{i}")
        assert r.status_code == (200 if i < LIMIT - 1 else 429)
    r = login_page(client, "rob", "pw-researcher-1")
    assert_locked_page(r)
    assert "_auth_user_id" not in client.session
    # After the cool-off the right password works again.
    with time_machine.travel(timezone.now() + COOL_OFF + timedelta(seconds=5)):
        r = login_page(client, "rob", "pw-researcher-1")
        assert r.status_code == 302 and client.session["_auth_user_id"] == str(researcher.pk)


def test_admin_login_locks_out_too(client, admin_user):
    for i in range(20):
        login_page(client, "alice-admin", f"wrong-{i}", path="/admin/login/")
    r = login_page(client, "alice-admin", "pw-admin-1", path="/admin/login/")
    assert_locked_page(r)
    assert "_auth_user_id" not in client.session


def test_token_endpoint_locks_out_with_429_json_and_retry_after(anon_api, researcher):
    for i in range(LIMIT - 1):
        assert token(anon_api, "rob", f"wrong-{i}").status_code == 401
    r = token(anon_api, "rob", "wrong-last")
    assert r.status_code == 429
    r = token(anon_api, "rob", "pw-researcher-1")
    assert r.status_code == 429 and r["Content-Type"] == "application/json"
    data = r.json()
    assert "Try again in 15 minutes" in data["detail"]
    assert int(r["Retry-After"]) == data["retry_after"] <= COOL_OFF.total_seconds()
    assert not ApiToken.objects.filter(user=researcher).exists()


def test_rotating_x_forwarded_for_does_not_escape_the_lockout(anon_api, researcher):
    """Found: the token endpoint's throttle was keyed on X-Forwarded-For."""
    for i in range(LIMIT):
        token(anon_api, f"guess-{i}", "pw", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
    r = token(anon_api, "rob", "pw-researcher-1", HTTP_X_FORWARDED_FOR="203.0.113.99")
    assert r.status_code == 429  # locked by address: REMOTE_ADDR, not the header


def test_rotating_x_forwarded_for_does_not_escape_the_token_rate(anon_api, researcher):
    rate = int(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["token"].split("/")[0])
    for i in range(rate):
        r = token(anon_api, "rob", "pw-researcher-1", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
        assert r.status_code == 201
    r = token(anon_api, "rob", "pw-researcher-1", HTTP_X_FORWARDED_FOR="203.0.113.1")
    assert r.status_code == 429 and int(r["Retry-After"]) > 0


def test_a_bearer_token_does_not_change_who_is_throttled(researcher_api, admin_user):
    """Found: any valid bearer token skipped the throttle, so a member could guess an
    admin's password at will and get an admin token."""
    for i in range(LIMIT):
        token(researcher_api, "alice-admin", f"guess-{i}")
    r = token(researcher_api, "alice-admin", "pw-admin-1")
    assert r.status_code == 429
    assert not ApiToken.objects.filter(user=admin_user).exists()


def test_the_bearer_does_not_count_for_the_token_rate(researcher_api, researcher):
    rate = int(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["token"].split("/")[0])
    for _ in range(rate):
        assert token(researcher_api, "rob", "pw-researcher-1").status_code == 201
    assert token(researcher_api, "rob", "pw-researcher-1").status_code == 429


def test_the_password_checked_is_the_bodys_account_not_the_bearers(researcher_api, admin_user):
    r = token(researcher_api, "alice-admin", "pw-researcher-1")  # rob's password, admin's name
    assert r.status_code == 401
    r = token(researcher_api, "alice-admin", "pw-admin-1")
    assert r.status_code == 201
    assert ApiToken.objects.get(pk=r.json()["id"]).user == admin_user


class CountingHasher(MD5PasswordHasher):
    """The tests' fast hasher, counting how often it runs (verify or encode)."""

    algorithm = "counting_md5"
    calls = 0

    def verify(self, password, encoded):
        type(self).calls += 1
        return super().verify(password, encoded)

    def encode(self, password, salt):
        type(self).calls += 1
        return super().encode(password, salt)


def test_a_locked_out_client_is_refused_before_the_hasher_runs(settings, client, anon_api, db):
    """Found: every failure cost the hasher's ~0.6 s of CPU, so a flood starved the server."""
    from django.contrib.auth import get_user_model

    settings.PASSWORD_HASHERS = [f"{__name__}.CountingHasher"]
    get_user_model().objects.create_user("rob", "rob@example.com", "pw-researcher-1")
    for i in range(LIMIT):
        token(anon_api, "rob", f"wrong-{i}")
    CountingHasher.calls = 0
    for i in range(25):
        assert token(anon_api, "rob", f"flood-{i}").status_code == 429
        assert login_page(client, "rob", f"flood-{i}").status_code == 429
        assert login_page(client, "nobody", "x", REMOTE_ADDR="198.51.100.1").status_code in (
            200,
            429,
        )
    # Only the unknown user from the fresh address reached the hasher, until its own lockout.
    assert CountingHasher.calls == LIMIT


# -- by account and by address ------------------------------------------------------------


def test_an_account_is_locked_from_every_address(client, researcher, admin_user):
    for i in range(LIMIT):
        login_page(client, "rob", f"wrong-{i}", REMOTE_ADDR=f"198.51.100.{i}")
    assert_locked_page(login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR="203.0.113.7"))
    # Other accounts from those addresses are not locked.
    r = login_page(client, "alice-admin", "pw-admin-1", REMOTE_ADDR="198.51.100.1")
    assert r.status_code == 302


def test_an_address_is_locked_for_every_account(client, researcher):
    for i in range(LIMIT):
        login_page(client, f"guess-{i}", "pw", REMOTE_ADDR="198.51.100.5")
    assert_locked_page(login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR="198.51.100.5"))
    r = login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR="198.51.100.6")
    assert r.status_code == 302


def test_all_password_paths_share_one_count(client, anon_api, researcher):
    for i in range(LIMIT // 2):
        token(anon_api, "rob", f"wrong-api-{i}")
    for i in range(LIMIT - LIMIT // 2):
        login_page(client, "rob", f"wrong-page-{i}", path="/admin/login/")
    assert_locked_page(login_page(client, "rob", "pw-researcher-1"))


# -- the client address -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted", "remote", "xff", "expected"),
    [
        ([], "192.0.2.10", "198.51.100.1", "192.0.2.10"),  # no trusted proxy: header ignored
        (["10.0.0.0/8"], "192.0.2.10", "198.51.100.1", "192.0.2.10"),  # not from a proxy
        (["10.0.0.0/8"], "10.1.2.3", "198.51.100.1", "198.51.100.1"),
        # The client wrote the left part; the proxy appended what it saw.
        (["10.0.0.0/8"], "10.1.2.3", "6.6.6.6, 198.51.100.1", "198.51.100.1"),
        # Two proxies (a load balancer, then the ingress controller).
        (
            ["10.0.0.0/8", "192.0.2.0/24"],
            "10.1.2.3",
            "6.6.6.6, 198.51.100.1, 192.0.2.4",
            "198.51.100.1",
        ),
        (["10.0.0.0/8"], "10.1.2.3", "", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "not-an-address", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "2001:db8::1", "2001:db8::1"),
        ([], "::ffff:192.0.2.10", "", "192.0.2.10"),
        ([], "", "198.51.100.1", None),
    ],
)
def test_client_address(settings, trusted, remote, xff, expected):
    settings.TRUSTED_PROXIES = trusted
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=xff)
    assert client_ip(request) == expected


def test_x_forwarded_for_is_honoured_behind_a_trusted_proxy(settings, client, researcher):
    settings.TRUSTED_PROXIES = ["127.0.0.1"]  # the test client's REMOTE_ADDR
    for i in range(LIMIT):
        login_page(client, f"guess-{i}", "pw", HTTP_X_FORWARDED_FOR=f"6.6.6.{i}, 198.51.100.5")
    locked = login_page(client, "rob", "pw-researcher-1", HTTP_X_FORWARDED_FOR="198.51.100.5")
    assert_locked_page(locked)
    r = login_page(client, "rob", "pw-researcher-1", HTTP_X_FORWARDED_FOR="198.51.100.6")
    assert r.status_code == 302
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"198.51.100.5"}


def test_a_bad_trusted_proxies_entry_fails_the_system_check(settings):
    from portal.signin.checks import trusted_proxies_check

    settings.TRUSTED_PROXIES = ["10.0.0.0/8", "ingress"]
    errors = trusted_proxies_check(None)
    assert [e.id for e in errors] == ["signin.E001"] and "'ingress'" in errors[0].msg


# -- audit and unlock ---------------------------------------------------------------------


def test_a_lockout_is_audited_once(client, researcher):
    for i in range(LIMIT + 5):
        login_page(client, "rob", f"wrong-{i}", REMOTE_ADDR="198.51.100.9")
    event = AuditEvent.objects.get(action="auth.locked_out")
    assert event.actor is None and event.actor_name == "system" and event.team is None
    assert event.after["username"] == "rob" and event.after["ip_address"] == "198.51.100.9"
    assert event.after["locked_by"] == ["account", "address"]
    assert event.after["failures"] == LIMIT
    assert "15 minutes" in event.note and "'rob'" in event.note


def test_an_admin_unlocks_from_the_django_admin(client, researcher, admin_user):
    for i in range(LIMIT):
        login_page(client, "rob", f"wrong-{i}", REMOTE_ADDR="198.51.100.9")
    assert login_page(client, "rob", "pw-researcher-1").status_code == 429
    staff = client_class_login(admin_user)
    page = staff.get("/admin/axes/accessattempt/?q=rob")
    assert page.status_code == 200 and "Unlock" in page.content.decode()
    pks = list(AccessAttempt.objects.filter(username="rob").values_list("pk", flat=True))
    r = staff.post(
        "/admin/axes/accessattempt/",
        {"action": "unlock_selected", "_selected_action": pks},
    )
    assert r.status_code == 302
    assert not AccessAttempt.objects.filter(username="rob").exists()
    event = AuditEvent.objects.get(action="auth.unlocked")
    assert event.actor == admin_user and event.before["username"] == "rob"
    assert login_page(client, "rob", "pw-researcher-1").status_code == 302


def client_class_login(user):
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


# -- an office behind one address (#24 finding 10) ------------------------------------------


def test_an_offices_typos_do_not_lock_out_its_address_but_a_flood_does(
    client, researcher, settings
):
    """Before, 10 failures from one address (anyone's, behind one NAT) locked it out."""
    from quotas.models import AuditEvent

    settings.SIGNIN_ADDRESS_FAILURE_LIMIT = 4 * LIMIT
    office = "198.51.100.77"
    for i in range(2 * LIMIT):  # twenty colleagues, one typo each
        assert login_page(client, f"colleague-{i}", "typo", REMOTE_ADDR=office).status_code == 200
    assert login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR=office).status_code == 302
    client.logout()
    # One account is still bounded at its own limit, from that address too ...
    for i in range(LIMIT):
        login_page(client, "dave", f"guess-{i}", REMOTE_ADDR=office)
    assert login_page(client, "dave", "guess-x", REMOTE_ADDR=office).status_code == 429
    # ... while the others there still sign in (30 failures from the address, limit 40).
    assert login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR=office).status_code == 302
    client.logout()
    # A flood reaches the address's own limit: everyone there waits.
    for i in range(LIMIT):
        login_page(client, f"flood-{i}", "x", REMOTE_ADDR=office)
    assert_locked_page(login_page(client, "rob", "pw-researcher-1", REMOTE_ADDR=office))
    locked = AuditEvent.objects.filter(action="auth.locked_out").order_by("-at")[0]
    assert locked.after["locked_by"] == ["address"]


def test_the_address_limit_defaults_above_the_accounts():
    from portal import settings as defaults  # the module: this file's fixture sets the live one

    assert defaults.SIGNIN_ADDRESS_FAILURE_LIMIT == 100 > defaults.AXES_FAILURE_LIMIT == 10
