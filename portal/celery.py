"""The Celery application shared by the worker, beat and the web process (for enqueueing)."""

import os

from celery import Celery
from celery.beat import PersistentScheduler
from celery.signals import heartbeat_sent, worker_ready

from portal import liveness

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# -- liveness heartbeats (portal/liveness.py) -------------------------------------------


@worker_ready.connect
@heartbeat_sent.connect
def _worker_alive(**_kwargs) -> None:
    liveness.touch("worker")


class HeartbeatScheduler(PersistentScheduler):
    """The default scheduler, touching the beat heartbeat on every tick of its loop."""

    # Tick at least this often, so a quiet schedule still shows the loop is alive.
    MAX_TICK_INTERVAL = 30.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_interval = min(self.max_interval, self.MAX_TICK_INTERVAL)

    def tick(self, *args, **kwargs):
        interval = super().tick(*args, **kwargs)
        liveness.touch("beat")
        return interval


app.conf.beat_scheduler = "portal.celery:HeartbeatScheduler"
