"""The install manifests: every overlay renders with ``kubectl kustomize``, every object is
valid against the Kubernetes 1.32 schemas (the pinned ``kubernetes-validate``, strict:
unknown fields are errors), and the rendered objects keep what docs/install.md promises.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.prereqs import need_kubectl

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (ROOT / "deploy" / "overlays").iterdir() if p.is_dir())
KUBERNETES_VERSION = "1.32.0"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = "ghcr.io/example/gpu-quota-portal"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")


def render(path: Path) -> list[dict]:
    out = subprocess.run([need_kubectl(), "kustomize", str(path)], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objs: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def pod_specs(objs: list[dict]):
    for o in objs:
        if o["kind"] in WORKLOADS:
            yield o, o["spec"]["template"]["spec"]


@pytest.fixture(scope="module", params=[BASE, *OVERLAYS], ids=lambda p: p.name)
def rendered(request) -> list[dict]:
    return render(request.param)


def test_every_overlay_is_a_kustomization():
    assert [p.name for p in OVERLAYS] == ["production"]
    assert all((p / "kustomization.yaml").is_file() for p in OVERLAYS)


def test_every_object_is_valid_against_the_kubernetes_schemas(rendered):
    assert len(rendered) >= 15
    for obj in rendered:
        # strict: a field the API does not know is an error (the API server would drop it
        # or, with fieldValidation=Strict as kubectl sends it, refuse the object).
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_what_the_api_would():
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [
               {"name": "x", "image": "x:1", "resource": {}}]}}}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError, match="resource"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_all_parts_are_there(rendered):
    deployments = by_kind(rendered, "Deployment")
    assert set(deployments) == {"portal-web", "portal-worker", "portal-beat", "portal-watch"}
    assert set(by_kind(rendered, "DaemonSet")) == {"gpu-agent"}
    assert set(by_kind(rendered, "Job")) == {f"portal-migrate-{VERSION}"}
    assert "portal-web" in by_kind(rendered, "Service")
    assert rendered[0]["kind"] == "Namespace"  # applied first
    assert deployments["portal-beat"]["spec"]["replicas"] == 1
    assert deployments["portal-beat"]["spec"]["strategy"] == {"type": "Recreate"}


def test_every_container_has_resources_a_pinned_image_and_a_locked_down_context(rendered):
    for obj, pod in pod_specs(rendered):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            where = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
            res = c.get("resources", {})
            assert {"cpu", "memory"} <= set(res.get("requests", {})), where
            assert {"cpu", "memory"} <= set(res.get("limits", {})), where
            name, _, tag = c["image"].rpartition(":")
            assert name.endswith("gpu-quota-portal") and tag == VERSION, where
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert not sc.get("privileged"), where


def test_probes_say_something_true(rendered):
    deployments = by_kind(rendered, "Deployment")
    web = deployments["portal-web"]["spec"]["template"]["spec"]["containers"][0]
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    kinds = {"portal-worker": "worker", "portal-beat": "beat", "portal-watch": "watcher"}
    for name, kind in kinds.items():
        (c,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        for probe in ("startupProbe", "livenessProbe"):
            command = c[probe]["exec"]["command"]
            assert command[:4] == ["python", "-m", "portal.liveness", kind], (name, command)
            assert float(command[command.index("--max-age") + 1]) <= 180
    config = by_kind(rendered, "ConfigMap")["portal-config"]["data"]
    assert config["PORTAL_HEARTBEAT_DIR"].startswith("/tmp/")  # the emptyDir at /tmp


def test_pods_wait_for_the_migrations_of_their_release(rendered):
    (job,) = by_kind(rendered, "Job").values()
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "python", "manage.py", "migrate", "--noinput"]  # fmt: skip
    for name, d in by_kind(rendered, "Deployment").items():
        (init,) = d["spec"]["template"]["spec"]["initContainers"]
        assert "manage.py migrate --check" in init["command"][-1], name


def test_agent_daemonset_takes_part_in_the_operator_pause_protocol(rendered):
    # mig-parted pkg/mig/reconfigure/reconfigure.go waitForPodsWithNodeSelector: pods owned
    # by a DaemonSet whose nodeSelector has the key nvidia.com/gpu.deploy.client.
    pod = by_kind(rendered, "DaemonSet")["gpu-agent"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.deploy.client"] == "true"
    assert pod["terminationGracePeriodSeconds"] < 300  # mig-manager waits 5 minutes


def test_workloads_that_call_kubernetes_run_as_the_portal_service_account(rendered):
    for obj, pod in pod_specs(rendered):
        name = obj["metadata"]["name"]
        # web: the connect preflight runs there (inventory/connect.py)
        if name in ("portal-web", "portal-worker", "portal-watch"):
            assert pod["serviceAccountName"] == "gpu-quota-portal", name
        else:
            assert pod["automountServiceAccountToken"] is False, name


def test_production_serves_the_public_host_over_tls_at_the_ingress():
    objs = render(ROOT / "deploy/overlays/production")
    (ingress,) = by_kind(objs, "Ingress").values()
    (tls,) = ingress["spec"]["tls"]
    host = ingress["spec"]["rules"][0]["host"]
    assert tls["hosts"] == [host] and tls["secretName"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == "portal-web"
    config = by_kind(objs, "ConfigMap")["portal-config"]["data"]
    assert config["ALLOWED_HOSTS"] == host
    assert config["CSRF_TRUSTED_ORIGINS"] == config["PORTAL_URL"] == f"https://{host}"
    assert config["DJANGO_SETTINGS_MODULE"] == "portal.settings_production"
    agent = by_kind(objs, "DaemonSet")["gpu-agent"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in agent["containers"][0]["env"]}
    service_host = re.sub(r"^http://", "", env["PORTAL_URL"])
    assert service_host in config["PORTAL_INTERNAL_HOSTS"].split(",")


def test_a_new_release_tag_renames_the_migrations_job(tmp_path):
    """Bumping ``newTag`` in the overlay moves every image and the Job name with it."""
    overlay = tmp_path / "release"
    shutil.copytree(ROOT / "deploy/overlays/production", overlay)
    kustomization = overlay / "kustomization.yaml"
    text = kustomization.read_text().replace("../../kubernetes", os.path.relpath(BASE, overlay))
    kustomization.write_text(re.sub(r"newTag: \S+", "newTag: 0.2.0-rc1", text))
    objs = render(overlay)
    assert set(by_kind(objs, "Job")) == {"portal-migrate-0.2.0-rc1"}
    images = {c["image"] for _, pod in pod_specs(objs)
              for c in [*pod.get("initContainers", []), *pod["containers"]]}  # fmt: skip
    assert images == {f"{IMAGE}:0.2.0-rc1"}


def test_the_image_is_built_for_the_release_and_the_manifests_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG VERSION={VERSION}\n" in dockerfile
    assert "--uid 10001 --gid 10001" in dockerfile and "USER 10001" in dockerfile
    assert not re.search(r"^FROM \S+:latest", dockerfile, re.MULTILINE)
