"""A small REST client for arranging a cluster as its administrator (tests, demo, harness).

It speaks plain JSON over HTTPS with the admin's client certificate: resources are named by
their plural (``"nodes"``, ``"resourcequotas"``, ``"clusterqueues"``) and found through the
server's discovery documents, as kubectl does. It is not the portal's gateway (that is
``inventory/k8s``, the official client with the portal's own ServiceAccount token); this one
only sets the scene and reads it back for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
FIELD_MANAGER = "gpu-portal-devstack"


class KubeError(RuntimeError):
    """A non-2xx answer: ``status`` (HTTP code), ``reason`` and ``message`` of the Status."""

    def __init__(self, status: int, body: Any, method: str = "", path: str = ""):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = self.body.get("reason", "")
        self.message = self.body.get("message", "")
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1", "apps/v1"
    name: str  # plural
    kind: str
    namespaced: bool

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.name}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


class KubeAPI:
    """An admin connection to one API server (client certificate or bearer token)."""

    def __init__(
        self,
        server: str,
        ca_file: str | Path,
        *,
        cert: tuple[str, str] | None = None,
        token: str = "",
        timeout: float = 30.0,
    ):
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        # Not the environment's CA bundle or proxies: requests lets REQUESTS_CA_BUNDLE win
        # over a session's own ``verify``.
        self.session.trust_env = False
        self.session.verify = str(ca_file)
        if cert:
            self.session.cert = (str(cert[0]), str(cert[1]))
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._resources: dict[str, Resource] = {}
        self._by_kind: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- raw requests
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
        ok: Iterable[int] = (),
    ) -> Any:
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            headers["Content-Type"] = content_type
        resp = self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers=headers,
            timeout=self.timeout,
        )
        if resp.status_code >= 400 and resp.status_code not in set(ok):
            try:
                payload = resp.json()
            except ValueError:
                payload = resp.text
            raise KubeError(resp.status_code, payload, method, path)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    # ------------------------------------------------------------------- discovery
    def resource(self, name: str, group_version: str = "") -> Resource:
        """A resource by plural name (``clusterqueues``), optionally ``group/version``."""
        key = f"{group_version}/{name}" if group_version else name
        with self._lock:
            if key not in self._resources:
                self._discover()
            if key not in self._resources:
                self._discover(force=True)
        if key not in self._resources:
            raise KeyError(f"the server serves no resource {key!r}")
        return self._resources[key]

    def resource_for(self, api_version: str, kind: str) -> Resource:
        with self._lock:
            if (api_version, kind) not in self._by_kind:
                self._discover(force=True)
        try:
            return self._by_kind[(api_version, kind)]
        except KeyError:
            raise KeyError(f"the server serves no {kind} in {api_version}") from None

    def _discover(self, force: bool = False) -> None:
        if self._resources and not force:
            return
        versions = ["v1"]
        groups = self.request("GET", "/apis")
        for group in groups.get("groups", []):
            preferred = group["preferredVersion"]["groupVersion"]
            versions.append(preferred)
            versions += [
                v["groupVersion"] for v in group["versions"] if v["groupVersion"] != preferred
            ]
        for gv in versions:
            path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
            try:
                doc = self.request("GET", path)
            except KubeError:
                continue
            for item in doc.get("resources", []):
                if "/" in item["name"]:
                    continue
                res = Resource(gv, item["name"], item["kind"], item["namespaced"])
                self._resources.setdefault(item["name"], res)  # preferred version first
                self._resources[f"{gv}/{item['name']}"] = res
                self._by_kind.setdefault((gv, item["kind"]), res)

    # --------------------------------------------------------------------- objects
    def get(self, resource: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.request("GET", self.resource(resource).path(namespace, name))

    def get_or_none(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """:meth:`get`, or None when the object does not exist (404)."""
        try:
            return self.get(resource, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, resource: str, namespace: str | None = None, **params: Any
    ) -> list[dict[str, Any]]:
        res = self.resource(resource)
        items: list[dict[str, Any]] = []
        query = dict(params, limit=500)
        while True:
            page = self.request("GET", res.path(namespace or ""), params=query)
            items += page.get("items", [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = token

    def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        res = self.resource(resource)
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or ""
        if res.namespaced and not ns:
            ns = "default"
        body = dict(obj)
        body.setdefault("apiVersion", res.group_version)
        body.setdefault("kind", res.kind)
        return self.request("POST", res.path(ns), body)

    def patch(
        self,
        resource: str,
        name: str,
        body: dict[str, Any],
        namespace: str = "",
        *,
        subresource: str = "",
        content_type: str = MERGE,
    ) -> dict[str, Any]:
        path = self.resource(resource).path(namespace, name, subresource)
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, resource: str, name: str, namespace: str = "", **params: Any) -> Any:
        path = self.resource(resource).path(namespace, name)
        return self.request("DELETE", path, params=params or None, ok=(404,))

    def apply(self, obj: dict[str, Any], *, subresource: str = "") -> dict[str, Any]:
        """Server-side apply of one object, created when missing (kubectl apply --server-side)."""
        res = self.resource_for(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        path = res.path(meta.get("namespace", "") if res.namespaced else "", meta["name"])
        if subresource:
            path += f"/{subresource}"
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        return self.request("PATCH", path, obj, params=params, content_type=APPLY)

    def apply_documents(self, docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply each object of a manifest (``kind: List`` is unpacked), in order."""
        out = []
        for doc in docs:
            if not doc:
                continue
            if doc.get("kind", "").endswith("List") and "items" in doc:
                out += self.apply_documents(doc["items"])
                continue
            out.append(self.apply(doc))
        return out

    def apply_file(self, path: str | Path) -> list[dict[str, Any]]:
        return self.apply_documents(yaml.safe_load_all(Path(path).read_text()))

    def issue_token(
        self,
        namespace: str,
        name: str,
        expiration_s: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A ServiceAccount token from the TokenRequest API (``kubectl create token``)."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_s}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        return self.request("POST", path, body)["status"]["token"]

    def list_with_version(
        self, resource: str, namespace: str | None = None, **params: Any
    ) -> tuple[list[dict[str, Any]], str]:
        """(items, the list's resourceVersion): the start of a list-then-watch."""
        res = self.resource(resource)
        page = self.request("GET", res.path(namespace or ""), params=params or None)
        return page.get("items", []), page["metadata"]["resourceVersion"]

    def watch(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        timeout_s: int = 300,
        **params: Any,
    ) -> Iterable[dict[str, Any]]:
        """Watch events ({"type", "object"}) from ``resource_version`` until the server ends it.

        A 410 Gone (``type: ERROR`` with code 410) is yielded like any event: the caller
        relists. Bookmarks are asked for and yielded.
        """
        res = self.resource(resource)
        query = dict(
            params,
            watch="true",
            allowWatchBookmarks="true",
            timeoutSeconds=timeout_s,
        )
        if resource_version:
            query["resourceVersion"] = resource_version
        with self.session.get(
            self.server + res.path(namespace or ""),
            params=query,
            stream=True,
            timeout=(self.timeout, timeout_s + 30),
        ) as resp:
            if resp.status_code >= 400:
                raise KubeError(resp.status_code, resp.text, "WATCH", res.path(namespace or ""))
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)

    def close(self) -> None:
        self.session.close()


def wait_for(
    check: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll ``check`` until it returns a truthy value (returned); TimeoutError after ``timeout``.

    Exceptions raised by ``check`` count as 'not yet' and the last one is chained.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not within {timeout:.0f} s: {what or check}") from last_exc
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)
