"""OpenAPI documents, Tables, discovery categories, event field selectors and kubectl.

Real sources followed (kubernetes/kubernetes, v1.32): ``staging/src/k8s.io/kube-openapi/pkg/
handler3/handler.go`` and ``pkg/handler/handler.go`` (vendored; v2 protobuf as kube-openapi
v0.0.0-20260317 and gnostic-models v0.7.0 make it), ``staging/src/
k8s.io/kube-aggregator/pkg/controllers/openapiv3/aggregator/aggregator.go``,
``staging/src/k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go``,
``staging/src/k8s.io/kubectl/pkg/cmd/apply/patcher.go``, ``staging/src/k8s.io/kubectl/pkg/
explain/v2/templates/plaintext.tmpl``, ``pkg/printers/internalversion/printers.go`` and
``pkg/registry/core/event/strategy.go`` (``ToSelectableFields``).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

from simcluster import SimCluster

from .helpers import Kubectl


def _get(
    sim: SimCluster, path: str, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    u = urlsplit(sim.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {sim.token}", **(headers or {})})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, resp.headers, body


def test_v3_discovery_and_group_version_documents(sim: SimCluster) -> None:
    code, headers, body = _get(sim, "/openapi/v3")
    assert code == 200
    assert headers["Content-Type"] == "text/plain; charset=utf-8"  # sniffed, as ServeContent
    paths = json.loads(body)["paths"]
    assert {"api/v1", "apis/policy/v1", "apis/scheduling.k8s.io/v1"} <= set(paths)
    url = paths["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=")
    code, headers, body = _get(sim, url)
    assert code == 200
    assert headers["Content-Type"] == "application/json"
    assert headers["Cache-Control"] == "public, immutable"
    assert headers["Etag"] == f'"{url.split("hash=")[1]}"'
    assert headers["Expires"]
    doc = json.loads(body)
    schemas = doc["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["items"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}
    ]
    taints = schemas["io.k8s.api.core.v1.NodeSpec"]["properties"]["taints"]
    assert "x-kubernetes-patch-strategy" not in taints
    assert taints["x-kubernetes-list-type"] == "atomic"
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "Pod", "version": "v1"}
    names = [p["name"] for p in patch["parameters"]]
    assert names == ["dryRun", "fieldManager", "fieldValidation", "force"]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    # only what the simulator serves
    assert "/api/v1/namespaces/{namespace}/persistentvolumeclaims" not in doc["paths"]


def test_v3_caching(sim: SimCluster) -> None:
    _, _, body = _get(sim, "/openapi/v3")
    url = json.loads(body)["paths"]["api/v1"]["serverRelativeURL"]
    _, headers, _ = _get(sim, url)
    code, _, body = _get(sim, url, {"If-None-Match": headers["Etag"]})
    assert code == 304 and body == b""
    code, headers, _ = _get(sim, "/openapi/v3/api/v1?hash=0123")
    assert code == 301 and headers["Location"] == url
    code, headers, _ = _get(sim, "/openapi/v3/api/v1")
    assert code == 200 and headers["Cache-Control"] == "no-cache, private"
    code, _, _ = _get(
        sim,
        "/openapi/v3/api/v1",
        {"Accept": "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"},
    )
    assert code == 406
    code, _, _ = _get(sim, "/openapi/v3/apis/storage.k8s.io/v1")
    assert code == 404


def test_v2_json_and_protobuf(sim: SimCluster) -> None:
    """JSON, or gnostic protobuf of the same document with the same ETag, as kube-openapi's
    handler answers (kubectl's client-side validation of a ``kind: List`` asks for protobuf
    only; the referee, tests/differential/test_openapi.py, compares both with a real server)."""
    from simcluster.openapi_proto import MEDIA_TYPE, encode

    code, headers, body = _get(sim, "/openapi/v2", {"Accept": "application/json"})
    assert code == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["swagger"] == "2.0"
    quota = doc["definitions"]["io.k8s.api.core.v1.ResourceQuota"]
    assert (
        quota["properties"]["spec"]["$ref"] == "#/definitions/io.k8s.api.core.v1.ResourceQuotaSpec"
    )
    assert "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets" in doc["paths"]
    code, pb_headers, pb = _get(
        sim, "/openapi/v2", {"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    )
    assert code == 200 and pb_headers["Content-Type"] == MEDIA_TYPE
    assert pb == encode(doc) and pb_headers["Etag"] == headers["Etag"]
    assert pb_headers.get_all("Vary") == ["Accept-Encoding", "Accept"]
    code, _, body = _get(sim, "/openapi/v2", {"Accept": "text/html"})
    assert code == 406 and body == b""


def _table(api: client.ApiClient, path: str) -> dict[str, Any]:
    resp = api.call_api(
        path,
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    return json.loads(resp.data)


def test_wide_columns(api: client.ApiClient) -> None:
    nodes = _table(api, "/api/v1/nodes")
    cols = [(c["name"], c["priority"]) for c in nodes["columnDefinitions"]]
    assert cols == [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ]
    row = next(r for r in nodes["rows"] if r["cells"][0] == "a100-00")
    assert row["cells"][1] == "Ready" and row["cells"][6] == "<none>"
    assert row["cells"][7] == "Ubuntu 22.04.4 LTS"
    pods = _table(api, "/api/v1/namespaces/ml-vision/pods")
    assert [c["name"] for c in pods["columnDefinitions"] if c["priority"] == 1] == [
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    done = next(r for r in pods["rows"] if r["cells"][0] == "vision-eval-done")
    # STATUS is the terminated container's reason; the row condition keeps the phase
    assert done["cells"][2] == "Completed"
    assert done["conditions"][0]["reason"] == "Succeeded"


def test_categories_in_discovery(api: client.ApiClient) -> None:
    resp = api.call_api("/api/v1", "GET", auth_settings=["BearerToken"], _preload_content=False)
    resources = {r["name"]: r for r in json.loads(resp.data)["resources"]}
    assert resources["pods"]["categories"] == ["all"]
    assert resources["services"]["categories"] == ["all"]
    assert "categories" not in resources["configmaps"]


def _node_event(v1: client.CoreV1Api, reason: str, message: str) -> str:
    """A Warning Event from the kubelet about node a100-00; returns the node's uid."""
    uid = v1.read_node("a100-00").metadata.uid
    ev = {
        "metadata": {"name": "a100-00.1"},
        "involvedObject": {"kind": "Node", "name": "a100-00", "uid": uid},
        "reason": reason,
        "type": "Warning",
        "message": message,
        "source": {"component": "kubelet"},
    }
    v1.create_namespaced_event("default", ev)
    return uid


def test_event_field_selectors(v1: client.CoreV1Api) -> None:
    uid = _node_event(v1, "Rebooted", "node rebooted")
    sel = (
        f"involvedObject.name=a100-00,involvedObject.namespace=,involvedObject.kind=Node,"
        f"involvedObject.uid={uid}"
    )
    assert [e.reason for e in v1.list_event_for_all_namespaces(field_selector=sel).items] == [
        "Rebooted"
    ]
    assert v1.list_event_for_all_namespaces(field_selector="involvedObject.kind=Pod").items == []
    assert (
        len(v1.list_event_for_all_namespaces(field_selector="source=kubelet,type=Warning").items)
        == 1
    )


# --------------------------------------------------------------------- kubectl
_POD = """apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: robotics
  labels: {app: web}
spec:
  containers:
  - name: c
    image: busybox
"""


def test_kubectl_create_validates_on_the_server(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "pod.yaml"
    f.write_text(_POD.replace("image: busybox", "image: busybox\n    resourcez: {}"))
    r = kubectl("create", "-f", str(f), ok=False)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f'Error from server (BadRequest): error when creating "{f}": Pod in version "v1" cannot '
        'be handled as a Pod: strict decoding error: unknown field "spec.containers[0].resourcez"'
    )
    f.write_text(_POD)
    assert kubectl("create", "-f", str(f)).stdout.strip() == "pod/web created"


def test_kubectl_apply_diff_and_server_side(
    kubectl: Kubectl, sim: SimCluster, tmp_path: Path
) -> None:
    f = tmp_path / "pod.yaml"
    f.write_text(_POD)
    assert kubectl("apply", "-f", str(f)).stdout.strip() == "pod/web created"
    f.write_text(_POD.replace("app: web", "app: web2"))
    r = kubectl("diff", "-f", str(f), ok=False)
    assert r.returncode == 1, r.stderr  # 1: differences found
    assert "-    app: web\n+    app: web2" in r.stdout
    assert sim.get("pods", "web", "robotics")["metadata"]["labels"] == {"app": "web"}  # dry run
    out = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f)).stdout
    assert out.strip() == "pod/web serverside-applied"
    assert sim.get("pods", "web", "robotics")["metadata"]["labels"] == {"app": "web2"}


def test_kubectl_explain(kubectl: Kubectl) -> None:
    out = kubectl("explain", "pod.spec.containers.resources").stdout
    assert out.startswith(
        "KIND:       Pod\nVERSION:    v1\n\nFIELD: resources <ResourceRequirements>"
    )
    assert "limits\t<map[string]Quantity>" in out
    assert "Limits describes the maximum amount of compute resources allowed." in out
    out = kubectl("explain", "resourcequota.spec", "--recursive").stdout
    assert "scopeSelector\t<ScopeSelector>" in out
    assert "      scopeName\t<string> -required-" in out
    out = kubectl("explain", "pdb.spec.minAvailable").stdout
    assert "GROUP:      policy" in out and "FIELD: minAvailable <IntOrString>" in out


def test_kubectl_get_all_and_wide(kubectl: Kubectl) -> None:
    out = kubectl("get", "all", "-n", "ml-vision").stdout
    assert "pod/resnet-train-0" in out
    header = kubectl("get", "nodes", "-o", "wide").stdout.splitlines()[0].split()
    assert header == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
        "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME",
    ]  # fmt: skip
    header = kubectl("get", "pods", "-A", "-o", "wide").stdout.splitlines()[0]
    assert header.split() == [
        "NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
        "NOMINATED", "NODE", "READINESS", "GATES",
    ]  # fmt: skip
    assert kubectl("get", "nodes").stdout.splitlines()[0].split() == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION",
    ]  # fmt: skip


def test_kubectl_describe(kubectl: Kubectl, v1: client.CoreV1Api) -> None:
    _node_event(v1, "NodeRebooted", "Node a100-00 has been rebooted")
    out = kubectl("describe", "node", "a100-00").stdout
    assert "Name:               a100-00" in out
    assert "NodeRebooted" in out and "Node a100-00 has been rebooted" in out
    out = kubectl("describe", "pod", "-n", "ml-vision", "resnet-train-0").stdout
    assert "Name:             resnet-train-0" in out
    assert "Events:" in out
