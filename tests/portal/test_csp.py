"""Every page satisfies the Content-Security-Policy (issue #11, section 5).

The demo fleet is seeded (``seed_demo``: teams, requests, grants, MIG, telemetry), then
headless Chromium (Debian package ``chromium``, driven by ``playwright``) loads every page
as an admin and as a member, and counts ``securitypolicyviolation`` events: an inline
script, ``style=""`` or ``on*=`` handler left in a template would be one. The page list is
checked against the URLconf, so a new page must be added here.
"""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import get_resolver, resolve
from django.utils import timezone

from tests.prereqs import SKIPPED, need

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "chromium"
# Page routes a browser does not GET as a page (POST-only actions, CSV, sign-out).
NOT_PAGES = {
    "quotas:request-approve", "quotas:request-reject", "quotas:foreign-adopt",
    "quotas:foreign-keep", "quotas:audit-export", "quotas:request-export",
    "mig:request-approve", "mig:request-reject",
    "mig:request-revert", "telemetry:showback-csv", "telemetry:showback-classes-csv",
    "inventory:cluster-preflight", "inventory:cluster-sync", "token-revoke", "logout",
}  # fmt: skip
PAGE_NAMESPACES = {"quotas", "mig", "nodelabels", "telemetry", "inventory", ""}
# Notifications and webhooks (issue #12 section 2): POST-only actions and the redirect.
NOT_PAGES |= {"notices:read-all", "notices:open", "notices:webhook-test",
              "notices:delivery-retry"}  # fmt: skip
PAGE_NAMESPACES |= {"notices"}
# Request comment threads and live progress (discussion/): the comment forms are POST-only;
# the progress fragments are GET routes, visited below like pages.
NOT_PAGES |= {"discussion:request-comment", "discussion:mig-request-comment"}
PAGE_NAMESPACES |= {"discussion"}
# Single sign-on (portal/sso/, mozilla-django-oidc's routes): a redirect to the provider,
# its callback and a POST sign-out, all 404 while it is off (as here); tests/sso/ loads the
# sign-in page with its button and the pages after it in Chromium with the CSP recorder.
NOT_PAGES |= {"oidc_authentication_init", "oidc_authentication_callback", "oidc_logout"}
# The bookings feed (issue #25): iCalendar text for calendar apps, not a page.
NOT_PAGES |= {"quotas:calendar-ics"}

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI || "inline"} ` +
                    `${e.sourceFile || ""}:${e.lineNumber}`);
});
"""


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        SKIPPED.add("playwright (pip install -r requirements-dev.txt)")
        pytest.skip("the playwright package is not installed (requirements-dev.txt)")
    return sync_playwright


def _chromium() -> str:
    path = shutil.which(CHROMIUM) or (
        "/usr/bin/chromium" if shutil.which("/usr/bin/chromium") else None
    )
    return path or need(CHROMIUM)


@pytest.fixture
def demo(tmp_path, settings):
    from tests import kubesim

    sim = kubesim.start("simcluster/fleets/demo.yaml", tmp_path)
    settings.DATA_DIR = tmp_path
    call_command("seed_demo", kubeconfig=str(sim.kubeconfig_path))
    _telemetry()
    _mig_and_labels()
    yield
    sim.stop()


def _telemetry() -> None:
    """Agent state and an idle hour on a few GPUs, so telemetry pages draw their charts."""
    from inventory.models import Node
    from tests.telemetry.telebuilders import fill_1h, fill_5m, make_telemetry

    now = timezone.now()
    for node in Node.objects.filter(gpu_count__gt=0).order_by("name")[:3]:
        for g in make_telemetry(node, min(node.gpu_count, 2)):
            fill_5m(g, now - timedelta(hours=3), now, 5)
            fill_1h(g, now - timedelta(hours=30), now, 40)


def _mig_and_labels() -> None:
    """A pending MIG request of alice's team and a label set (seed_demo makes neither)."""
    from inventory.models import Node
    from mig.models import MigRequest
    from nodelabels.models import LabelSet
    from quotas.models import TeamNamespace

    ns = TeamNamespace.objects.select_related("team", "cluster").get(name="ml-vision")
    node = Node.objects.filter(cluster=ns.cluster, mig_capable=True).first()
    MigRequest.objects.create(
        team=ns.team, namespace=ns, cluster=ns.cluster, product="A100-80GB",
        layout={"3g.40gb": 1, "1g.10gb": 4}, gpus=1, requested_node=node,
        justification="Notebooks for the course.",
        requested_by=get_user_model().objects.get(username="alice"),
    )  # fmt: skip
    LabelSet.objects.create(cluster=ns.cluster, name="Team pool", labels={"pool": "vision"},
                            node_names=[node.name] if node else [])  # fmt: skip


def _pages(user) -> list[str]:
    """One URL per page route, with objects the user can open."""
    from inventory.models import Cluster, Node
    from mig.models import MigRequest
    from nodelabels.models import LabelSet
    from portal.models import ApiToken
    from quotas.models import ForeignQuota, Grant, QuotaRequest, Team, TeamNamespace
    from quotas.scoping import visible_to

    node = Node.objects.filter(gpu_count__gt=0, mig_capable=True).first() or Node.objects.first()
    cluster = Cluster.objects.first()
    team = visible_to(Team.objects.all(), user, "pk").order_by("slug").first()
    ns = visible_to(TeamNamespace.objects.all(), user).first()
    req = visible_to(QuotaRequest.objects.all(), user).order_by("-created_at").first()
    pending = visible_to(QuotaRequest.objects.filter(status="pending"), user).first() or req
    grant = visible_to(Grant.objects.all(), user, "namespace__team").first()
    fq = ForeignQuota.objects.filter(namespace=ns).first()
    mig = visible_to(MigRequest.objects.all(), user).first()
    labels = LabelSet.objects.first()
    token, _ = ApiToken.issue(user, "csp-test")
    pages = [
        "/", "/nodes/", f"/nodes/{node.pk}/", "/clusters/", f"/clusters/{cluster.slug}/",
        "/teams/", "/requests/", "/requests/new/", f"/requests/{req.pk}/",
        f"/requests/{pending.pk}/cancel/", f"/grants/{grant.pk}/renew/",
        f"/grants/{grant.pk}/release/", f"/namespaces/{ns.pk}/", "/account/",
        "/account/notifications/", "/mig/", f"/mig/nodes/{node.pk}/", "/mig/requests/",
        "/mig/requests/new/", "/telemetry/", f"/telemetry/teams/{team.slug}/",
        "/api/docs/", "/nodes/00000000-0000-0000-0000-000000000000/",  # the 404 page
        "/gpu-classes/",
        f"/account/tokens/{token.pk}/revoke/",
    ]  # fmt: skip
    # Team members (issue #12 section 1): the list; the removal confirmation (a member
    # who is no manager gets its 403 page).
    member = team.memberships.select_related("user").order_by("user__username").first()
    pages += [f"/teams/{team.slug}/members/", f"/teams/{team.slug}/waiting/"]
    if member is not None:
        pages.append(f"/teams/{team.slug}/members/{member.user.get_username()}/remove/")
    if mig is not None:
        pages += [f"/mig/requests/{mig.pk}/", f"/mig/requests/{mig.pk}/cancel/"]
        pages.append(f"/mig/requests/{mig.pk}/progress/")  # its live fragment
    pages.append(f"/requests/{req.pk}/progress/")  # a quota request's live fragment
    if user.is_staff:
        pages += [
            "/admin-queue/", "/capacity/", "/audit/", "/namespaces/new/",
            f"/namespaces/{ns.pk}/confirm-lowering/", "/node-labels/", "/node-labels/new/",
            "/telemetry/idle/", "/telemetry/health/", "/telemetry/showback/",
            "/connect-cluster/", f"/clusters/{cluster.slug}/edit/",
            "/admin/", "/admin/quotas/quotarequest/", "/admin/inventory/cluster/add/",
            f"/admin/quotas/quotarequest/{req.pk}/change/",
        ]  # fmt: skip
        if labels is not None:
            pages += [f"/node-labels/{labels.pk}/edit/", f"/node-labels/{labels.pk}/delete/"]
        from inventory.models import GpuClass

        gpu_class = GpuClass.objects.order_by("name").first()
        pages += ["/gpu-classes/new/", f"/gpu-classes/{gpu_class.pk}/edit/",
                  f"/gpu-classes/{gpu_class.pk}/delete/"]  # fmt: skip
        if fq is not None:
            pages.append(f"/namespaces/{ns.pk}/quotas/{fq.pk}/remove/")
    else:
        pages.append("/admin-queue/")  # the 403 page
    # The capacity calendar and the bookings feed's pages (issue #25 section 1).
    from quotas.models import CalendarFeed

    CalendarFeed.issue(user)
    pages += ["/calendar/", "/calendar/?view=hour", "/calendar/feed/", "/calendar/feed/revoke/"]
    # Idle grants (issue #25 section 2): policies and reclaims, a warning's answer page (a
    # member who is no manager gets its 403 page).
    from quotas import reclaim as rules
    from quotas.models import GrantReclaim, ReclaimPolicy

    warning = GrantReclaim.objects.filter(namespace=ns).first()
    if warning is None:
        policy, _ = ReclaimPolicy.objects.get_or_create(cluster=ns.cluster, gpu_class=None)
        basis = {"hours": 24, "held_now": 4, "busy_peak": 0}
        finding = rules.Finding(ns, None, "nvidia.com/gpu", 8, 4, basis)
        warning = rules.warn(policy, finding)
    pages += ["/telemetry/reclaim/", "/telemetry/reclaim/?show=all",
              f"/reclaims/{warning.pk}/still-needed/"]  # fmt: skip
    # Notifications (issue #12 section 2): everyone's list; the webhook pages (staff).
    pages.append("/notifications/")
    if user.is_staff:
        from notices.models import Webhook

        hook = Webhook.objects.first() or Webhook.objects.create(
            name="CSP check", url="https://hooks.example.org/portal", secret="csp"
        )
        pages += ["/admin-webhooks/", "/admin-webhooks/new/", f"/admin-webhooks/{hook.pk}/edit/",
                  f"/admin-webhooks/{hook.pk}/delete/"]  # fmt: skip
    return pages


def _page_routes() -> set[str]:
    names = set()

    def walk(patterns, ns="", prefix=""):
        for p in patterns:
            route = prefix + str(p.pattern)
            if route.startswith("api/"):  # the REST API: JSON, not pages
                continue
            if hasattr(p, "url_patterns"):
                walk(p.url_patterns, p.namespace or ns, route)
            elif p.name and ns in PAGE_NAMESPACES:
                names.add(f"{ns}:{p.name}" if ns else p.name)

    walk(get_resolver().url_patterns)
    return names - NOT_PAGES - {"healthz", "readyz", "metrics", "schema", "api-docs"}


def _route(url: str) -> str:
    match = resolve(url.split("?")[0])
    return f"{match.namespace}:{match.url_name}" if match.namespace else match.url_name


def _session_cookie(live_server, user) -> dict:
    client = Client()
    client.force_login(user)
    value = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    return {"name": django_settings.SESSION_COOKIE_NAME, "value": value, "url": live_server.url}


def _visit(browser, live_server, urls: list[str], cookie: dict | None) -> dict[str, list[str]]:
    context = browser.new_context()
    if cookie:
        context.add_cookies([cookie])
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if "Content Security" in m.text else None)
    found: dict[str, list[str]] = {}
    for url in urls:
        console.clear()
        response = page.goto(live_server.url + url, wait_until="load")
        page.wait_for_timeout(100)  # deferred scripts' work (charts, MIG drawing)
        assert response is not None, url
        assert response.status < 500, (url, response.status)
        if url != "/login/":  # signed in: the page itself, not the sign-in form
            assert "/login/" not in page.url and "/admin/login/" not in page.url, (url, page.url)
        header = response.header_value("content-security-policy") or ""
        assert "script-src 'self'" in header and "unsafe-inline" not in header, (url, header)
        violations = page.evaluate("window.__csp") + console
        if violations:
            found[url] = violations
    context.close()
    return found


def _recorder_sees_an_inline_style(browser, live_server) -> bool:
    """The counting works: a style="" attribute added to a page is reported."""
    context = browser.new_context()
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    page.goto(live_server.url + "/login/", wait_until="load")
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<i style=\"color:red\">x</i>')")
    page.wait_for_timeout(200)
    seen = page.evaluate("window.__csp")
    context.close()
    return any("style-src" in v for v in seen)


def test_every_page_satisfies_the_csp(demo, live_server):
    sync_playwright = _playwright()
    chromium = _chromium()
    users = get_user_model().objects
    admin, member = users.get(username="admin"), users.get(username="alice")
    admin_pages, member_pages = _pages(admin), _pages(member)
    seen = {_route(u) for u in admin_pages + member_pages + ["/login/"]}
    assert not _page_routes() - seen, f"pages not visited: {sorted(_page_routes() - seen)}"
    admin_cookie, member_cookie = (_session_cookie(live_server, u) for u in (admin, member))
    # No ORM call below: playwright's sync API runs an event loop in this thread.
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            assert _recorder_sees_an_inline_style(browser, live_server)
            found = _visit(browser, live_server, ["/login/"], None)
            found |= _visit(browser, live_server, admin_pages, admin_cookie)
            member_found = _visit(browser, live_server, member_pages, member_cookie)
            found |= {f"{u} (member)": v for u, v in member_found.items()}
        finally:
            browser.close()
    assert found == {}, found


def test_favicon_ico_is_the_portals_icon_not_a_404(client):
    resp = client.get("/favicon.ico")
    assert resp.status_code == 301 and resp["Location"].endswith("img/favicon.svg")
