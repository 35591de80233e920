"""The capacity calendar (issue #25 section 1): slots of limit, granted, booked and free to
grant (the one definition, quotas/capacity.py), the viewer's own rows marked, and booking
through the prefilled request form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from inventory.classes import refresh
from quotas.calendar import calendar_for, first_slot
from quotas.capacity import Capacity
from quotas.models import QuotaRequest
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 12, 7, 9, 30, tzinfo=UTC)  # a Monday, 09:30 UTC


@pytest.fixture
def world():
    with time_machine.travel(NOW, tick=False):
        cluster = make_cluster("lab")
        make_node(cluster, "a100-0", gpus=8)
        (a100,) = refresh(cluster)
        alice, bob = make_user("alice"), make_user("bob")
        vision = make_team("vision", members=[alice])
        nlp = make_team("nlp", members=[bob])
        ns_v = make_namespace(vision, cluster, "ml-vision")
        ns_n = make_namespace(nlp, cluster, "nlp-main")
        # vision holds 2 now (until day 3); nlp booked 3 from day 2 09:30 for two days
        make_grant(ns_v, 2, days=3, gpu_class=a100)
        make_grant(ns_n, 3, days=2, start_in=timedelta(days=2), gpu_class=a100)
        QuotaRequest.objects.create(
            team=vision, namespace=ns_v, resource=GPU, amount=1, requested_by=alice,
            justification="calendar test", starts_at=NOW + timedelta(days=5),
            ends_at=NOW + timedelta(days=6), gpu_class=a100,
        )  # fmt: skip
    return {"cluster": cluster, "a100": a100, "alice": alice, "bob": bob, "ns_v": ns_v}


def test_day_slots_split_reservations_and_free_is_the_one_definition(world):
    with time_machine.travel(NOW, tick=False):
        cluster, a100 = world["cluster"], world["a100"]
        start = first_slot("day", NOW)
        assert start == datetime(2026, 12, 7, tzinfo=UTC)
        slots = calendar_for(world["alice"], cluster, a100, GPU, "day", start)
        assert len(slots) == 42
        got = [(s.granted, s.booked, s.free) for s in slots[:5]]
        # day 0-1: vision's 2; day 2 (nlp's starts 09:30): 2 + 3 booked; day 3: vision's ends
        # at 09:30, nlp's 3 still booked (busiest instant: the day's start); day 4: nlp's 3
        assert got == [(2, 0, 6), (2, 0, 6), (2, 3, 3), (2, 3, 3), (0, 3, 5)]
        assert all(s.limit == 8 for s in slots)
        cap = Capacity([cluster.pk], [GPU])
        for s in slots:  # the figure approval checks, slot by slot
            assert s.free == cap.free(cluster.pk, a100, GPU, s.start, s.end).free
        assert slots[10].reserved == 0 and slots[10].free == 8


def test_the_viewer_sees_only_their_teams_rows_marked(world):
    with time_machine.travel(NOW, tick=False):
        start = first_slot("day", NOW)
        alice = calendar_for(world["alice"], world["cluster"], None, GPU, "day", start)
        assert [(m.kind, m.team, m.amount) for m in alice[0].yours] == [("granted", "vision", 2)]
        assert [(m.kind, m.team) for m in alice[5].yours] == [("pending", "vision")]
        assert all(m.team == "vision" for s in alice for m in s.yours)
        bob = calendar_for(world["bob"], world["cluster"], None, GPU, "day", start)
        assert [(m.kind, m.team, m.amount) for m in bob[2].yours] == [("booked", "nlp", 3)]
        # the figures are the fleet's, the same for both
        assert [(s.granted, s.booked, s.free) for s in alice] == [
            (s.granted, s.booked, s.free) for s in bob
        ]


def test_hour_slots_count_a_grant_from_the_hour_it_starts(world):
    with time_machine.travel(NOW, tick=False):
        start = first_slot("hour", NOW)
        assert start == datetime(2026, 12, 7, 9, tzinfo=UTC)
        slots = calendar_for(world["alice"], world["cluster"], world["a100"], GPU, "hour", start)
        assert len(slots) == 72
        booked = {s.start: s.booked for s in slots}
        nlp_start = datetime(2026, 12, 9, 9, tzinfo=UTC)  # starts 09:30 that day
        assert booked[nlp_start - timedelta(hours=1)] == 0 and booked[nlp_start] == 3


def test_the_page_marks_books_and_prefills_the_request_form(world, client):
    with time_machine.travel(NOW, tick=False):
        client.force_login(world["alice"])
        url = reverse("quotas:calendar")
        page = client.get(url, {"cluster": "lab", "gpu_class": world["a100"].slug})
        assert page.status_code == 200
        text = page.content.decode()
        assert "vision/ml-vision: 2 granted" in text and "nlp/" not in text
        cells = page.context["cells"]
        assert [c["slot"].free for c in cells[:3]] == [6, 6, 3]
        book = cells[1]["book"]  # one namespace: it books for it without asking
        assert f"namespace={world['ns_v'].pk}" in book and "starts_at=2026-12-08T00%3A00" in book
        form = client.get(book).context["form"]
        assert form.initial["starts_at"] == "2026-12-08T00:00"
        assert form.initial["ends_at"] == "2026-12-09T00:00"
        assert form.initial["duration"] == "window"
        assert str(form.initial["gpu_class"]) == str(world["a100"].pk)
        # today's slot books from now, not from a past midnight
        assert "starts_at=2026-12-07T09%3A30" in cells[0]["book"]


def test_bad_choices_are_a_400_page(world, client):
    client.force_login(world["bob"])
    url = reverse("quotas:calendar")
    assert client.get(url, {"cluster": "lab", "view": "week"}).status_code == 400
    assert client.get(url, {"cluster": "lab", "start": "1999-01-01"}).status_code == 400
    assert client.get(url, {"cluster": "lab", "gpu_class": "nope"}).status_code == 400
    assert client.get(url, {"cluster": "lab"}).status_code == 200


def test_no_cluster_is_an_empty_state(client):
    client.force_login(make_user("dora"))
    page = client.get(reverse("quotas:calendar"))
    assert page.status_code == 200 and "No clusters yet" in page.content.decode()


def test_a_member_without_a_namespace_there_gets_no_book_links(world, client):
    carol = make_user("carol")
    client.force_login(carol)
    page = client.get(reverse("quotas:calendar"), {"cluster": "lab"})
    assert page.status_code == 200
    assert all(not c["book"] for c in page.context["cells"])
    assert "no namespace on this cluster" in page.content.decode()


def test_the_api_answers_the_same_slots_and_the_bookings(world):
    from tests.conftest import api_for

    with time_machine.travel(NOW, tick=False):
        api = api_for(world["alice"])
        r = api.get("/api/v1/calendar/", {"cluster": "lab", "gpu_class": world["a100"].slug})
        assert r.status_code == 200, r.json()
        body = r.json()
        assert (body["cluster"], body["resource"], body["view"]) == ("lab", GPU, "day")
        got = [(s["granted"], s["booked"], s["free_to_grant"]) for s in body["slots"][:3]]
        assert got == [(2, 0, 6), (2, 0, 6), (2, 3, 3)]
        assert body["slots"][0]["yours"][0]["team"] == "vision"
        hours = api.get("/api/v1/calendar/", {"cluster": "lab", "view": "hour",
                                              "start": "2026-12-08"}).json()  # fmt: skip
        assert len(hours["slots"]) == 72 and hours["slots"][0]["start"] == "2026-12-08T00:00:00Z"
        assert api.get("/api/v1/calendar/", {"cluster": "nope"}).status_code == 404
        assert api.get("/api/v1/calendar/", {"cluster": "lab", "view": "x"}).status_code == 400
        assert api.get("/api/v1/calendar/").status_code == 400  # the cluster is required
        mine = api.get("/api/v1/bookings/").json()["results"]
        assert [(b["team"], b["amount"], b["state"]) for b in mine] == [("vision", 2, "active")]
        nlp = api_for(world["bob"]).get("/api/v1/bookings/").json()["results"]
        assert [(b["team"], b["amount"], b["state"]) for b in nlp] == [("nlp", 3, "booked")]


def test_the_feed_url_serves_the_teams_bookings_until_revoked(world, client):
    import icalendar

    from quotas.models import AuditEvent, CalendarFeed, Membership

    with time_machine.travel(NOW, tick=False):
        client.force_login(world["bob"])
        page = client.post(reverse("quotas:calendar-feed"))
        url = page.context["url"]
        assert url.startswith("http://testserver/calendar/feed/gpf_") and url.endswith(".ics")
        assert url not in str(list(CalendarFeed.objects.values_list()))  # only its hash kept
        anonymous = client.__class__()  # calendar apps have no session
        ics = anonymous.get(url)
        assert ics.status_code == 200 and ics["Content-Type"].startswith("text/calendar")
        events = icalendar.Calendar.from_ical(ics.content).walk("VEVENT")
        assert [(str(e["location"]), e.decoded("dtstart")) for e in events] == [
            ("lab/nlp-main", NOW + timedelta(days=2))
        ]
        assert "3 nvidia.com/gpu" in str(events[0]["summary"])
        assert CalendarFeed.objects.get().last_used_at == NOW
        # a new URL replaces the old one; revoking ends it; both audited
        second = client.post(reverse("quotas:calendar-feed")).context["url"]
        assert anonymous.get(url).status_code == 404 and anonymous.get(second).status_code == 200
        confirm = client.get(reverse("quotas:calendar-feed-revoke"))
        assert b"stop updating at once" in confirm.content
        assert anonymous.get(second).status_code == 200  # a GET changes nothing
        client.post(reverse("quotas:calendar-feed-revoke"))
        assert anonymous.get(second).status_code == 404
        actions = list(AuditEvent.objects.filter(action__startswith="calendar_feed").values_list(
            "action", flat=True).order_by("at"))  # fmt: skip
        assert actions == ["calendar_feed.issued", "calendar_feed.issued", "calendar_feed.revoked"]
        # the rows are read per request: a member who leaves the team stops seeing them
        third = client.post(reverse("quotas:calendar-feed")).context["url"]
        Membership.objects.filter(user=world["bob"]).delete()
        events = icalendar.Calendar.from_ical(anonymous.get(third).content).walk("VEVENT")
        assert events == []
        assert anonymous.get("/calendar/feed/gpf_not-a-feed.ics").status_code == 404


def test_a_booking_is_announced_once_before_it_starts(world, mailoutbox, settings, on_commit):
    from notices.models import Notification
    from quotas.models import NotificationOptOut
    from quotas.tasks import process_grant_windows

    settings.QUOTA_START_REMINDER_HOURS = 24
    world["bob"].email = "bob@example.com"
    world["bob"].save()
    nlp_start = NOW + timedelta(days=2)
    with time_machine.travel(nlp_start - timedelta(hours=25), tick=False):
        assert process_grant_windows()["starting"] == 0
    with time_machine.travel(nlp_start - timedelta(hours=23), tick=False), on_commit(execute=True):
        assert process_grant_windows()["starting"] == 1
        assert process_grant_windows()["starting"] == 0  # once
    notice = Notification.objects.get(event="starting")
    assert notice.recipient == world["bob"] and "starts in 23 h" in notice.title
    starting = [m for m in mailoutbox if "starts in" in m.subject]
    assert [m.to for m in starting] == [["bob@example.com"]]
    assert "2026-12-09 09:30 UTC" in starting[0].body
    # the e-mail follows the opt-out; the in-app notice stays
    NotificationOptOut.objects.create(user=world["bob"], kind="starting")
    from tests.quotas.builders import make_grant as grant

    with time_machine.travel(NOW, tick=False):
        grant(world["ns_v"].__class__.objects.get(name="nlp-main"), 1, days=1,
              start_in=timedelta(hours=3))  # fmt: skip
        with on_commit(execute=True):
            assert process_grant_windows()["starting"] == 1
    assert len([m for m in mailoutbox if "starts in" in m.subject]) == 1
    assert Notification.objects.filter(event="starting").count() == 2


def test_two_grants_of_a_namespace_are_one_mark(world):
    with time_machine.travel(NOW, tick=False):
        make_grant(world["ns_v"], 3, days=1)
        start = first_slot("day", NOW)
        (first, *_) = calendar_for(world["alice"], world["cluster"], None, GPU, "day", start)
        assert [(m.kind, m.namespace, m.amount) for m in first.yours] == [
            ("granted", "ml-vision", 5)
        ]
        assert first.granted == 5


def test_the_default_cluster_is_one_where_the_viewer_has_a_namespace(world, client):
    make_cluster("aaa-first-by-name")
    client.force_login(world["alice"])
    page = client.get(reverse("quotas:calendar"))
    assert page.context["cluster"].slug == "lab"
    assert "selected>ml-vision (vision)</option>" in page.content.decode()
