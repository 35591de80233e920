"""deploy/monitoring/: the optional Service + ServiceMonitor for the agent's /metrics.

The ServiceMonitor is validated against the ServiceMonitor CRD's OpenAPI v3 schema from
prometheus-operator (vendored in tests/deploy/crds/, source path and version in its header),
strictly: an unknown field is an error, as with ``kubectl apply`` (fieldValidation=Strict).
The CRD's CEL rules (``x-kubernetes-validations``) are not evaluated here.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.prereqs import need_kubectl

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
CRD = Path(__file__).resolve().parent / "crds" / "monitoring.coreos.com_servicemonitors.yaml"
DAEMONSET = ROOT / "deploy" / "kubernetes" / "agent-daemonset.yaml"
KUBERNETES_VERSION = "1.32.0"


def _strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object that lists its
    properties (and does not preserve unknown fields), the way the API server prunes or,
    with strict field validation, refuses unknown fields."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    return doc


@pytest.fixture(scope="module")
def validator(crd) -> jsonschema.Draft4Validator:
    assert crd["spec"]["group"] == "monitoring.coreos.com"
    assert crd["spec"]["names"]["kind"] == "ServiceMonitor"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    schema = _strict(v1["schema"]["openAPIV3Schema"])
    # metadata is ObjectMeta, checked by the API server itself: only require it is an object.
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    out = subprocess.run([need_kubectl(), "kustomize", str(MONITORING)], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _files() -> dict[str, dict[str, Any]]:
    docs = [
        d
        for p in sorted(MONITORING.glob("agent-*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
    ]
    return {d["kind"]: d for d in docs if d}


def test_the_crd_is_the_vendored_upstream_file():
    head = CRD.read_text().splitlines()[:5]
    assert "prometheus-operator/prometheus-operator" in head[0]
    assert "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" in head[1]
    assert "0.93.0" in head[3]


def test_servicemonitor_is_valid_against_the_crd_schema(validator):
    sm = _files()["ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    errors = sorted(validator.iter_errors(sm), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def test_rendered_objects_are_valid(rendered, validator):
    kinds = sorted(o["kind"] for o in rendered)
    assert kinds == ["Service", "ServiceMonitor"]
    for obj in rendered:
        if obj["kind"] == "ServiceMonitor":
            assert not list(validator.iter_errors(obj))
            assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpu-quota-portal"
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("spec", "endpoints", 0, "honourLabels"), True, "honourLabels"),  # a typo
        (("spec", "endpoints", 0, "interval"), "15 seconds", "15 seconds"),  # not a Duration
        (("spec", "endpoints", 0, "scheme"), "ftp", "ftp"),  # not in the enum
        (("spec", "selector", "matchLabels"), "component=gpu-agent", "component=gpu-agent"),
    ],
)
def test_the_schema_refuses_what_the_api_would(validator, path, value, needle):
    sm = copy.deepcopy(_files()["ServiceMonitor"])
    target = sm
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = list(validator.iter_errors(sm))
    assert errors and any(needle in e.message for e in errors), [e.message for e in errors]


def test_servicemonitor_finds_the_agent_pods_metrics_port():
    files = _files()
    sm, svc = files["ServiceMonitor"], files["Service"]
    ds = next(d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d["kind"] == "DaemonSet")
    template = ds["spec"]["template"]
    pod_labels = template["metadata"]["labels"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p for p in container["ports"]}
    # The Service selects the agent pods; the ServiceMonitor selects the Service.
    assert svc["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    (endpoint,) = sm["spec"]["endpoints"]
    (svc_port,) = svc["spec"]["ports"]
    assert endpoint["port"] == svc_port["name"] == "metrics"
    assert svc_port["targetPort"] == "metrics" and ports["metrics"]["containerPort"] == 9400
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    # The annotations (for annotation-based discovery) say the same port and path.
    annotations = template["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ports["metrics"]["containerPort"]),
        "prometheus.io/path": endpoint["path"],
    }
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPU_AGENT_METRICS_PORT"] == "9400"


def test_the_default_install_has_no_servicemonitor():
    base = (ROOT / "deploy" / "kubernetes" / "kustomization.yaml").read_text()
    assert "monitoring" not in yaml.safe_load(base)["resources"]
    for path in (ROOT / "deploy" / "kubernetes").glob("*.yaml"):
        assert "kind: ServiceMonitor" not in path.read_text(), path
