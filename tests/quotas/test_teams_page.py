"""The teams page pages through teams: an admin sees every team, 20 per page, and what a
page costs does not grow with the number of teams (make bench-pages: 400 teams on one page
took 2 s)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.views.teams import TEAMS_PER_PAGE
from tests.factories import make_cluster
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db


def teams(n: int, cluster, start: int = 0) -> None:
    for i in range(start, start + n):
        make_namespace(make_team(f"team-{i:03d}"), cluster, f"ns-{i:03d}")


def queries(client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_an_admin_pages_through_every_team_at_a_cost_that_does_not_grow(client):
    cluster = make_cluster()
    client.force_login(make_user("root", staff=True))
    teams(3, cluster)
    few, _ = queries(client, "/teams/")
    teams(TEAMS_PER_PAGE + 2, cluster, start=3)  # now 25 teams: two pages
    many, first = queries(client, "/teams/")
    assert many == few
    assert "25 teams; showing 1\u201320." in first and "Page 1 of 2" in first
    assert 'id="team-team-000"' in first and 'id="team-team-019"' in first
    assert 'id="team-team-020"' not in first
    _, second = queries(client, "/teams/?page=2")
    assert 'id="team-team-024"' in second and 'id="team-team-000"' not in second
    assert "Page 2 of 2" in second


def test_a_member_sees_only_their_teams_and_no_pages(client):
    cluster = make_cluster()
    alice = make_user("alice")
    make_namespace(make_team("vision", members=[alice]), cluster, "ml-vision")
    teams(TEAMS_PER_PAGE + 2, cluster)
    client.force_login(alice)
    _, html = queries(client, "/teams/")
    assert 'id="team-vision"' in html and 'id="team-team-000"' not in html
    assert "Page 1 of" not in html
