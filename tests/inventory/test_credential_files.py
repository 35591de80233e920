"""A cluster's credential files and URL (#24, finding 1): an admin form cannot make the
portal read a host file outside ``CLUSTER_CREDENTIAL_DIRS`` or send a token over plain
http to a host nobody allowed, a token file holds one token, and nothing read from a file
reaches an answer, a stored error or a log line.

Before, ``bearer_token_file`` took any path (``/proc/self/environ``, the data directory's
metrics token) and ``api_url`` any URL: the trial received both files on its listener.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.conf import settings

from inventory.connect import credential_errors
from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster
from inventory.sync import sync_cluster

pytestmark = pytest.mark.django_db

URL = "/api/v1/clusters/"
SECRET = "s3cret-line-one"


def https_url(sim) -> str:
    return sim.url.replace("http://", "https://", 1)


def token_cluster(api_url: str, token_file: str | Path, **fields) -> dict:
    return {"slug": "tok", "name": "Tok", "auth_method": "token", "api_url": api_url,
            "bearer_token_file": str(token_file), **fields}  # fmt: skip


def field_error(response, field: str, status: int) -> str:
    """The message under ``field``: a file the portal may not or cannot read is one it
    does not find (404), a file that does not hold a credential a conflict (409)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert field in body, body
    return " ".join(body[field])


@pytest.mark.parametrize(
    "path",
    [
        "/proc/self/environ",
        "/etc/hostname",
        str(settings.DATA_DIR / "metrics-token"),  # the data directory is not allowed
    ],
)
def test_a_token_file_outside_the_credential_directories_is_refused(admin_api, path):
    response = admin_api.post(URL, token_cluster("https://10.0.0.1:6443", path), format="json")
    assert "outside the directories" in field_error(response, "bearer_token_file", 404)
    assert not Cluster.objects.exists()


def test_no_link_or_dotdot_leaves_the_directories(admin_api, tmp_path):
    link = tmp_path / "token"
    link.symlink_to("/etc/hostname")
    escape = f"{tmp_path}/../../../../../../etc/hostname"
    for path in (link, escape):
        response = admin_api.post(URL, token_cluster("https://10.0.0.1", path), format="json")
        assert "outside the directories" in field_error(response, "bearer_token_file", 404)


def test_a_kubeconfig_outside_the_directories_is_refused_and_bad_yaml_is_not_quoted(
    admin_api, tmp_path
):
    data = {"slug": "kc", "name": "Kc", "auth_method": "kubeconfig"}
    response = admin_api.post(URL, {**data, "kubeconfig_path": "/etc/passwd"}, format="json")
    assert "outside the directories" in field_error(response, "kubeconfig_path", 404)
    bad = tmp_path / "kc"
    bad.write_text(f"apiVersion: v1\nusers: [{{token: {SECRET}\n")
    response = admin_api.post(URL, {**data, "kubeconfig_path": str(bad)}, format="json")
    message = field_error(response, "kubeconfig_path", 409)
    assert "not valid YAML" in message
    assert SECRET not in response.content.decode()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (f"{SECRET}\nsecond-token\n", "holds 2 lines"),
        ("\n\n", "empty"),
        (f"Bearer {SECRET}", "does not hold a token"),
        ("tökén", "does not hold a token"),
    ],
)
def test_a_token_file_holds_one_token(admin_api, tmp_path, content, says):
    path = tmp_path / "token"
    path.write_text(content)
    response = admin_api.post(URL, token_cluster("https://10.0.0.1", path), format="json")
    assert says in field_error(response, "bearer_token_file", 409)
    assert SECRET not in response.content.decode()


def test_a_token_file_in_the_directories_connects(sim, admin_api, tmp_path):
    path = tmp_path / "token"
    path.write_text(sim.portal_token + "\n")  # a trailing newline, as `kubectl create token`
    response = admin_api.post(
        URL, token_cluster(https_url(sim), path, ca_cert=sim.ca_pem), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["preflight_status"] in ("ok", "warning")


def test_http_only_for_a_host_the_operator_allowed(settings):
    cluster = Cluster(slug="x", auth_method="token", bearer_token="t", verify_tls=False,
                      api_url="http://127.0.0.1:8080")  # fmt: skip

    def api_url_error() -> str:
        return credential_errors(cluster)["api_url"].message

    # Unticking TLS verification no longer allows http: the token would travel in clear.
    assert "CLUSTER_HTTP_HOSTS" in api_url_error()
    settings.CLUSTER_HTTP_HOSTS = ["127.0.0.1"]
    assert "api_url" not in credential_errors(cluster)
    cluster.api_url = "http://evil.example.org/"
    assert "evil.example.org is not" in api_url_error()
    for refused in ("ftp://127.0.0.1/", "https://user@host/", "https://host:65536/", "https://"):
        cluster.api_url = refused
        assert "https://" in api_url_error(), refused


def test_a_stored_cluster_is_held_to_the_same_rules_without_quoting_its_file(sim, tmp_path, caplog):
    """A row saved before the rules (or a file rewritten since): the gateway refuses it,
    the sync fails with the reason, and neither its error nor the log holds the file."""
    path = tmp_path / "token"
    path.write_text(f"{sim.portal_token}\n{SECRET}\n")
    cluster = Cluster.objects.create(
        slug="tok", name="Tok", auth_method="token", api_url=https_url(sim),
        bearer_token_file=str(path), ca_cert=sim.ca_pem,
    )  # fmt: skip
    with caplog.at_level(logging.DEBUG):
        run = sync_cluster(cluster, trigger="manual")
    assert run.status == "failed"
    assert "holds 2 lines" in run.error
    cluster.refresh_from_db()
    assert "holds 2 lines" in cluster.last_error
    for text in (run.error, caplog.text):
        assert SECRET not in text and sim.portal_token not in text

    Cluster.objects.filter(pk=cluster.pk).update(bearer_token_file="/proc/self/environ")
    cluster.refresh_from_db()
    with pytest.raises(KubeError, match="outside the directories") as err:
        KubeGateway(cluster)
    assert err.value.permanent

    Cluster.objects.filter(pk=cluster.pk).update(
        bearer_token_file="",
        bearer_token=sim.portal_token,
        api_url="http://" + sim.url.split("://", 1)[1],
    )
    cluster.refresh_from_db()
    with pytest.raises(KubeError, match="https://"):
        KubeGateway(cluster)
