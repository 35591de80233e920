"""The production settings behind a real gunicorn, as the kubelet, the agents and browsers
meet them (portal/middleware.py, portal/settings_production.py).

Requests are sent with http.client so the Host header is exactly what each client sends:
the kubelet's probes carry ``Host: <pod IP>:<port>`` and ``User-Agent: kube-probe/1.32``
(kubernetes/kubernetes pkg/probe/http/request.go: the host is the pod IP unless the probe
sets a Host header; the user agent is ``kube-probe/<major>.<minor>``); node agents post to
the in-cluster Service name over plain HTTP; browsers come through the ingress, which
terminates TLS and sends ``X-Forwarded-Proto: https``.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from telemetry import tokens
from tests.conftest import _database_url_for_current_db
from tests.factories import make_cluster, make_node, make_pod
from tests.telemetry.test_ingest import report
from tests.webserver import free_port, serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = "gpu-portal.example.org"
SERVICE = "portal-web.gpu-quota-portal.svc"
PROBE_UA = "kube-probe/1.32"


def _web_command(port: int, tmp_path: Path) -> list[str]:
    """The web container's command from deploy/kubernetes/web.yaml, bound to loopback.

    In the pod the peer is the ingress controller or a node, never loopback, so gunicorn
    trusts no forwarded header itself (its forwarded_allow_ips default is loopback) and
    only Django's SECURE_PROXY_SSL_HEADER decides. Here the peer is loopback, so the test
    names a documentation address instead, to meet the same gunicorn as the pod does.
    """
    docs = yaml.safe_load_all((ROOT / "deploy/kubernetes/web.yaml").read_text())
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    cmd = list(container["command"])
    assert cmd[:2] == ["gunicorn", "portal.wsgi"], cmd
    cmd[cmd.index("--bind") + 1] = f"127.0.0.1:{port}"
    cmd[cmd.index("--workers") + 1] = "1"
    cmd[cmd.index("--worker-tmp-dir") + 1] = str(tmp_path)
    return [*cmd, "--forwarded-allow-ips", "192.0.2.1"]


@pytest.fixture
def gunicorn(tmp_path, settings):
    """gunicorn with portal.settings_production on the test database and Redis."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "ALLOWED_HOSTS")}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings_production",
        SECRET_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS=PUBLIC,
        DATABASE_URL=_database_url_for_current_db(),
        REDIS_URL=settings.REDIS_URL,
        DB_CONN_MAX_AGE="0",
    )
    with serving(_web_command(port, tmp_path), env, port, tmp_path / "gunicorn.log"):
        yield port


def send(port, method, path, host, body=None, **headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        hdrs = {"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}}
        if payload is not None:
            hdrs["Content-Type"] = "application/json"
        # skip_host: http.client must not add a Host of its own.
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in hdrs.items():
            conn.putheader(name, value)
        if payload is not None:
            conn.putheader("Content-Length", str(len(payload)))
        conn.endheaders(payload)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_kubelet_probes_answer_with_the_pod_ip_as_host(gunicorn):
    for path in ("/healthz", "/readyz"):
        status, _, body = send(gunicorn, "GET", path, f"10.244.3.17:{gunicorn}",
                               User_Agent=PROBE_UA, Accept="*/*")  # fmt: skip
        assert status == 200, (path, body)
        assert json.loads(body)["status"] == "ok"
    # The same paths on an IPv6 pod address, and on the public host over plain HTTP.
    assert send(gunicorn, "GET", "/healthz", f"[fd00::17]:{gunicorn}")[0] == 200
    assert send(gunicorn, "GET", "/readyz", PUBLIC)[0] == 200
    # /metrics by pod IP (Prometheus pod discovery) needs its token, and says so: not a 400.
    assert send(gunicorn, "GET", "/metrics", f"10.244.3.17:{gunicorn}")[0] == 401
    # Anything else on a pod IP is still refused as an unknown host.
    assert send(gunicorn, "GET", "/api/v1/", f"10.244.3.17:{gunicorn}")[0] == 400


def test_agents_post_to_the_service_over_plain_http(gunicorn):
    node = make_node(make_cluster("lab"), "a100-00")
    make_pod(node, "train-0", namespace="ml")  # the reports' processes run in it
    _, raw = tokens.issue(node)
    path = "/api/v1/agent/reports/"
    now = datetime.now(UTC)
    body = report("a100-00", now - timedelta(seconds=30), gpus=2)
    later = report("a100-00", now, gpus=2)
    status, headers, text = send(gunicorn, "POST", path, SERVICE, body,
                                 Authorization=f"Bearer {raw}")  # fmt: skip
    assert status == 202, text
    assert "Strict-Transport-Security" not in headers
    status, _, text = send(gunicorn, "POST", path, f"{SERVICE}.cluster.local", body,
                           Authorization="Bearer gqa_not-a-token")  # fmt: skip
    assert status == 401, text
    # A forged X-Forwarded-Proto changes nothing on the in-cluster host (no proxy there).
    status, headers, _ = send(gunicorn, "POST", path, SERVICE, later, X_Forwarded_Proto="https",
                              Authorization=f"Bearer {raw}")  # fmt: skip
    assert status == 202 and "Strict-Transport-Security" not in headers
    # The in-cluster host serves the agent API only.
    status, _, text = send(gunicorn, "GET", "/", SERVICE)
    assert status == 404, text
    assert send(gunicorn, "GET", "/admin/login/", SERVICE)[0] == 404


def test_public_host_keeps_https_redirect_hsts_and_host_validation(gunicorn):
    status, headers, _ = send(gunicorn, "GET", "/login/?next=/", PUBLIC)
    assert status == 301
    assert headers["Location"] == f"https://{PUBLIC}/login/?next=/"
    # The agent path is exempt from Django's redirect for the in-cluster host only.
    status, headers, _ = send(gunicorn, "POST", "/api/v1/agent/reports/", PUBLIC, {})
    assert status == 301
    assert headers["Location"] == f"https://{PUBLIC}/api/v1/agent/reports/"
    # Through the ingress (TLS terminated, X-Forwarded-Proto: https): served, with HSTS
    # (secure cookies are settings that `check --deploy` verifies, tests/portal).
    status, headers, body = send(gunicorn, "GET", "/api/v1/clusters/", PUBLIC,
                                 X_Forwarded_Proto="https", Accept="application/json")  # fmt: skip
    assert status == 401, body
    assert headers["Strict-Transport-Security"] == ("max-age=31536000; includeSubDomains; preload")
    # Unknown hosts are refused, over http and https alike.
    assert send(gunicorn, "GET", "/login/", "evil.example.com")[0] == 400
    assert send(gunicorn, "GET", "/login/", "evil.example.com", X_Forwarded_Proto="https")[0] == 400
    assert send(gunicorn, "POST", "/api/v1/agent/reports/", "evil.example.com", {})[0] == 400
