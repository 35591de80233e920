"""The portal's Prometheus client (telemetry/promsource.py) against a real Prometheus.

A dcgm-exporter-shaped endpoint (the metric and label names of NVIDIA/dcgm-exporter's
default counters, two clusters behind one Prometheus told apart by a ``cluster`` label) is
scraped by a real Prometheus (Debian package ``prometheus``, tests/prom.py); the client
reads it back: instant and range queries, only its own cluster's series, the bounds, the
cache, and an outage, which is a clear PrometheusUnavailable, never a crash.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from django.utils import timezone

from telemetry.models import PrometheusSource
from telemetry.promsource import (
    PromClient,
    PrometheusUnavailable,
    QueryRefused,
)
from telemetry.sources.prom import PromHistory
from tests.factories import make_cluster
from tests.prom import start_prometheus

pytestmark = pytest.mark.django_db

GPUS = [  # (cluster, Hostname, gpu, UUID, utilisation %)
    ("prod", "gpu-1", "0", "GPU-aaa", 91.0),
    ("prod", "gpu-1", "1", "GPU-bbb", 3.0),
    ("lab", "gpu-9", "0", "GPU-ccc", 50.0),
]


def _exposition() -> str:
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for cluster, host, gpu, uuid, util in GPUS:
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{cluster="{cluster}",Hostname="{host}",gpu="{gpu}",'
            f'UUID="{uuid}",modelName="NVIDIA A100-SXM4-80GB"}} {util}'
        )
    lines += [  # cluster "eng" has DCP profiling: engine activity per MIG instance
        "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="eng",Hostname="gpu-5",gpu="0",UUID="GPU-eee",'
        'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 0.02',
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="eng",Hostname="gpu-5",gpu="0",UUID="GPU-eee",'
        'GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"} 0.75',
        'DCGM_FI_DEV_GPU_UTIL{cluster="eng",Hostname="gpu-5",gpu="0",UUID="GPU-eee"} 100',
        # a newer dcgm-exporter spells the node label in lower case
        'DCGM_FI_DEV_GPU_UTIL{cluster="new",hostname="gpu-7",gpu="0",UUID="GPU-fff"} 12',
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def exporter():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = _exposition().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def prometheus(exporter, tmp_path_factory):
    prom = start_prometheus(
        tmp_path_factory.mktemp("prom"), [{"targets": [exporter], "honor_labels": True}]
    )
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=len(GPUS) + 2)
    time.sleep(2.5)  # a few scrapes, for the range query
    yield prom
    prom.stop()


def _client(prometheus, **kw) -> PromClient:
    cluster = make_cluster("prod")
    source = PrometheusSource.objects.create(
        cluster=cluster, url=prometheus.url, cluster_label="cluster", **kw
    )
    return PromClient(source)


def test_instant_query_reads_only_this_clusters_gpus(prometheus):
    client = _client(prometheus)
    series = client.instant(client.selector("DCGM_FI_DEV_GPU_UTIL"))
    got = {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in series}
    assert got == {("gpu-1", "0"): 91.0, ("gpu-1", "1"): 3.0}  # not the lab's GPU
    assert all(s.labels["cluster"] == "prod" for s in series)


def test_range_query_gives_history_at_the_step(prometheus):
    client = _client(prometheus)
    end = timezone.now()
    series = client.range(
        client.selector("DCGM_FI_DEV_GPU_UTIL", Hostname="gpu-1", gpu="0"),
        end - timedelta(minutes=5), end, timedelta(seconds=30),
    )  # fmt: skip
    assert len(series) == 1 and series[0].points
    assert {v for _, v in series[0].points} == {91.0}


def test_queries_are_bounded(prometheus):
    client = _client(prometheus)
    end = timezone.now()
    with pytest.raises(QueryRefused, match="At most 31 days"):
        client.range("up", end - timedelta(days=40), end, timedelta(hours=1))
    with pytest.raises(QueryRefused, match="end after it starts"):
        client.range("up", end, end, timedelta(hours=1))
    few = PromClient(client.source, max_series=1)
    with pytest.raises(QueryRefused, match="More than 1 series"):
        few.instant("DCGM_FI_DEV_GPU_UTIL")
    with pytest.raises(QueryRefused, match="refused the query"):
        client.instant("DCGM_FI_DEV_GPU_UTIL{")  # a PromQL syntax error: 400 from Prometheus


def test_label_values_are_quoted_not_spliced(prometheus):
    client = _client(prometheus)
    sneaky = client.selector("DCGM_FI_DEV_GPU_UTIL", Hostname='gpu-1"} or up{x="')
    assert client.instant(sneaky) == []  # one odd host name matches nothing


def test_answers_are_cached_briefly_and_an_outage_is_a_clear_error(exporter, tmp_path):
    prom = start_prometheus(tmp_path, [{"targets": [exporter], "honor_labels": True}])
    prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=len(GPUS) + 2)
    client = _client(prom, timeout_seconds=1.0)
    expr = client.selector("DCGM_FI_DEV_GPU_UTIL")
    first = client.instant(expr)
    prom.stop()
    assert client.instant(expr) == first  # within CACHE_SECONDS: no second query
    with pytest.raises(PrometheusUnavailable, match="cannot be reached"):
        client.instant(expr + " > 0")


def test_credentials_come_from_the_environment(prometheus, monkeypatch):
    client = _client(prometheus, secret_env="PROM_PROD")
    with pytest.raises(PrometheusUnavailable, match="set PROM_PROD_TOKEN"):
        client.instant("up")
    monkeypatch.setenv("PROM_PROD_TOKEN", "s3cret")  # Prometheus ignores it: no auth set
    assert client.instant(client.selector("DCGM_FI_DEV_GPU_UTIL"))


def test_bad_settings_are_refused(db):
    from django.core.exceptions import ValidationError

    source = PrometheusSource(
        cluster=make_cluster("x"), url="ftp://prom", cluster_label="bad-label",
        secret_env="lower", timeout_seconds=0,
    )  # fmt: skip
    with pytest.raises(ValidationError) as err:
        source.full_clean()
    assert set(err.value.message_dict) >= {"url", "cluster_label", "secret_env", "timeout_seconds"}


def test_admins_set_a_source_in_the_admin_and_it_is_audited(client, admin_user):
    from quotas.models import AuditEvent

    cluster = make_cluster("prod")
    client.force_login(admin_user)
    response = client.post(
        "/admin/telemetry/prometheussource/add/",
        {"cluster": cluster.pk, "url": "http://prometheus:9090", "cluster_label": "cluster",
         "cluster_value": "", "secret_env": "PROM_PROD", "ca_file": "", "timeout_seconds": "5",
         "enabled": "on"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:500]
    event = AuditEvent.objects.get(action="telemetry.source_added")
    assert (
        event.after["url"] == "http://prometheus:9090" and event.after["secret_env"] == "PROM_PROD"
    )
    bad = client.post(
        "/admin/telemetry/prometheussource/add/",
        {"cluster": make_cluster("lab").pk, "url": "http://p", "cluster_label": "no-dash",
         "timeout_seconds": "5"},
    )  # fmt: skip
    assert bad.status_code == 200 and "A Prometheus label name" in bad.content.decode()


def test_readyz_is_degraded_while_a_telemetry_prometheus_is_down(prometheus, client, admin_user):
    from tests.prom import free_port

    client.force_login(admin_user)  # the details are an admin's (or the metrics token's)
    up = _client(prometheus).source
    down = PrometheusSource.objects.create(
        cluster=make_cluster("lab"), url=f"http://127.0.0.1:{free_port()}", timeout_seconds=1
    )
    body = client.get("/readyz").json()
    assert body["status"] == "degraded"  # still 200: pages work, with a banner
    assert body["clusters"][up.cluster.slug]["telemetry_prometheus"] == "ok"
    assert "cannot be reached" in body["clusters"][down.cluster.slug]["telemetry_prometheus"]
    down.delete()
    assert client.get("/readyz").json()["clusters"][up.cluster.slug]["telemetry_prometheus"] == "ok"


def _gpu(pk: int, host: str, index: int = 0):
    """What PromHistory reads of a GpuState row: its id, index and node name."""
    return SimpleNamespace(pk=pk, index=index, node=SimpleNamespace(name=host))


def test_activity_is_engine_activity_where_there_is_some(prometheus):
    prod = PromHistory(_client(prometheus))
    assert prod.metric_name() == "DCGM_FI_DEV_GPU_UTIL"
    now = timezone.now()
    assert prod.last_hour_util([_gpu(1, "gpu-1", 0), _gpu(2, "gpu-1", 1)], now) == {
        1: 91.0, 2: 3.0,
    }  # fmt: skip
    eng_source = PrometheusSource.objects.create(
        cluster=make_cluster("eng"), url=prometheus.url, cluster_label="cluster"
    )
    eng = PromHistory(PromClient(eng_source))
    # NVML says 100 % (a kernel ran) while the instances barely work: engine activity tells.
    assert eng.metric_name() == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert eng.last_hour_util([_gpu(5, "gpu-5")], now)[5] == pytest.approx((2 + 75) / 2)


def test_both_spellings_of_the_node_label_are_read(prometheus):
    source = PrometheusSource.objects.create(
        cluster=make_cluster("new"), url=prometheus.url, cluster_label="cluster"
    )
    history = PromHistory(PromClient(source))
    assert history.last_hour_util([_gpu(7, "gpu-7")], timezone.now()) == {7: 12.0}
