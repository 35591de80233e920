"""Tables sort (issue #12, "tables have no sorting").

- the node list is paginated, so it sorts on the server: ``?sort=-gpus``, the header links
  keep the filter and flip the direction, and an unknown column is said, not a 500;
- unpaginated tables (``data-sortable``: clusters, showback, idle, team usage, MIG nodes)
  sort in the browser (static/js/table-sort.js): headless Chromium presses a header and reads
  the rows and ``aria-sort``.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from tests.factories import make_cluster, make_node
from tests.portal.test_csp import _chromium, _playwright, _session_cookie

GPU_COUNTS = {"n-a": 4, "n-b": 8, "n-c": 2}


@pytest.fixture
def fleet(db):
    cluster = make_cluster("sort-a")
    for name, gpus in GPU_COUNTS.items():
        make_node(cluster, name, gpus=gpus)
    make_node(make_cluster("sort-b"), "n-d", gpus=1, product="Tesla-V100-SXM2-16GB")
    return cluster


def _names(html: str) -> list[str]:
    return re.findall(r'<th scope="row" class="nowrap"><a href="[^"]+">([^<]+)</a>', html)


@pytest.mark.django_db
def test_the_node_list_sorts_on_the_server_and_keeps_the_filter(client, researcher, fleet):
    client.force_login(researcher)
    html = client.get("/nodes/", {"sort": "-gpus", "cluster": "sort-a"}).content.decode()
    assert _names(html) == ["n-b", "n-a", "n-c"]
    assert 'aria-sort="descending"' in html
    # The GPUs header now flips to ascending; the others start ascending; both keep the
    # cluster filter and go back to page 1.
    assert 'href="?sort=gpus&amp;cluster=sort-a"' in html
    assert 'href="?sort=product&amp;cluster=sort-a"' in html
    assert _names(client.get("/nodes/", {"sort": "gpus"}).content.decode()) == [
        "n-d", "n-c", "n-a", "n-b",
    ]  # fmt: skip
    assert _names(client.get("/nodes/").content.decode()) == ["n-a", "n-b", "n-c", "n-d"]


@pytest.mark.django_db
def test_an_unknown_sort_column_is_said_not_a_500(client, researcher, fleet):
    client.force_login(researcher)
    response = client.get("/nodes/", {"sort": "password"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Sort: unknown column &#x27;password&#x27;" in html
    assert "Sorted by cluster and name instead" in html
    assert _names(html) == ["n-a", "n-b", "n-c", "n-d"]


@pytest.mark.django_db(transaction=True)
def test_a_sortable_table_sorts_in_the_browser(live_server, fleet):
    sync_playwright, chromium = _playwright(), _chromium()
    admin = get_user_model().objects.create_user("sorter", is_staff=True)
    cookie = _session_cookie(live_server, admin)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_context().new_page()
            page.context.add_cookies([cookie])
            page.goto(live_server.url + "/clusters/", wait_until="load")
            table = page.locator("table[data-sortable]")

            def column(n: int) -> list[str]:
                return [t.strip() for t in table.locator(f"tbody tr > :nth-child({n})")
                        .all_inner_texts()]  # fmt: skip

            gpus = table.locator("thead th", has_text="GPUs").last
            gpus.locator("button").click()
            ascending = column(6)
            gpus.locator("button").click()
            descending = column(6)
            state = gpus.get_attribute("aria-sort")
        finally:
            browser.close()
    assert ascending == ["1", "14"] and descending == ["14", "1"], (ascending, descending)
    assert state == "descending"
