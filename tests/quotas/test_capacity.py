"""Capacity over time: temporary grants reserve only their window; ratio bounds the total."""

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.capacity import headroom, peak_reserved, timeline
from quotas.models import OvercommitPolicy
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"


@pytest.fixture
def pool(db):
    cluster = make_cluster("prod")
    make_node(cluster, "a", resources={GPU: (8, 8, 0)})
    make_node(cluster, "b", resources={GPU: (8, 6, 0)})  # 2 unhealthy: allocatable 14
    make_node(cluster, "gone", resources={GPU: (8, 8, 0)}, gone_at=timezone.now())
    ns = make_namespace(make_team("vision"), cluster)
    return cluster, ns


def test_permanent_and_temporary_grants_reserve_their_windows(pool):
    cluster, ns = pool
    now = timezone.now()
    make_grant(ns, 4)  # permanent from now
    make_grant(ns, 6, days=7)  # this week
    make_grant(ns, 3, days=7, start_in=timedelta(days=10))  # later
    week = (now, now + timedelta(days=7))
    assert peak_reserved(cluster, GPU, *week) == 10
    later = now + timedelta(days=7, hours=1)
    assert peak_reserved(cluster, GPU, later, now + timedelta(days=9)) == 4
    assert peak_reserved(cluster, GPU, now + timedelta(days=8), None) == 7
    room = headroom(cluster, GPU, *week)
    assert (room.allocatable, room.limit, room.reserved, room.free) == (14, 14, 10, 4)
    assert room.after(5) == -1


def test_back_to_back_windows_do_not_overlap(pool):
    cluster, ns = pool
    first = make_grant(ns, 14, days=2)
    assert peak_reserved(cluster, GPU, first.ends_at, first.ends_at + timedelta(days=1)) == 0


def test_ended_grants_reserve_nothing_and_ratio_scales_limit(pool):
    cluster, ns = pool
    make_grant(ns, 10, ended_at=timezone.now(), end_reason="released")
    OvercommitPolicy.objects.create(cluster=cluster, resource=GPU, ratio="1.5")
    room = headroom(cluster, GPU, timezone.now(), None)
    assert (room.reserved, room.limit) == (0, 21)


def test_timeline_per_day(pool):
    cluster, ns = pool
    make_grant(ns, 2)
    make_grant(ns, 5, days=2, start_in=timedelta(days=1, hours=-1))
    days = [reserved for _, reserved in timeline(cluster, GPU, timezone.now(), days=4)]
    assert days == [2, 7, 7, 2]
