"""The gateway's core: clients, errors, retries, inventory reads and quota writes.

Everything the portal does to or reads from a cluster goes through ``KubeGateway``:
bulk reads as raw JSON pages (the typed client's model deserialisation is far too slow
for 100k objects, GPU-FACTS.md section 2), label/cordon patches, server-side apply.
Every failure surfaces as ``KubeError`` with ``permanent`` telling callers whether a
retry can help; transient failures are retried here a bounded number of times.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import urllib3
import yaml
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from inventory.models import Cluster

from . import credentials

log = logging.getLogger(__name__)

FIELD_MANAGER = "gpu-quota-portal"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
# Status codes worth retrying: throttled, server-side trouble, gateway trouble.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class KubeError(Exception):
    """A failed Kubernetes call. ``permanent`` is False when retrying may succeed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        permanent: bool = False,
        kind: str = "",
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.permanent = permanent
        self.kind = kind  # the Status' details.kind: what was not found, say
        # No answer at all (refused, reset, timed out): the cluster, not the request, failed.
        self.unreachable = unreachable

    @property
    def expired(self) -> bool:
        """A continue token or watch resourceVersion too old (410 Gone): relist."""
        return self.status == 410

    @classmethod
    def from_api_exception(cls, err: ApiException) -> KubeError:
        reason, message, kind = err.reason or "", "", ""
        body = err.body.decode() if isinstance(err.body, bytes) else err.body
        if body:
            try:
                payload = json.loads(body)
                message = payload.get("message", "")
                reason = payload.get("reason", reason)
                kind = str((payload.get("details") or {}).get("kind") or "")
            except (ValueError, AttributeError):
                message = str(body)[:500]
        status = err.status or None
        text = f"HTTP {status} {reason}: {message}".strip().rstrip(":")
        permanent = status is not None and status not in TRANSIENT_STATUS and status != 410
        return cls(text, status=status, reason=reason, permanent=permanent, kind=kind)


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    remaining: int | None


def build_api_client(cluster: Cluster) -> client.ApiClient:
    """An ApiClient for the cluster's configured credentials (see :mod:`.credentials`)."""
    method = cluster.auth_method
    try:
        if method == Cluster.AuthMethod.KUBECONFIG:
            problem = credentials.file_problem(cluster.kubeconfig_path)
            if problem:
                raise credentials.CredentialError(problem)
            cfg = client.Configuration()
            config.load_kube_config(
                config_file=cluster.kubeconfig_path,
                context=cluster.kubeconfig_context or None,
                client_configuration=cfg,
                persist_config=False,
            )
        elif method == Cluster.AuthMethod.IN_CLUSTER:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
        elif method == Cluster.AuthMethod.TOKEN:
            problem = credentials.url_problem(cluster.api_url)
            if problem:
                raise credentials.CredentialError(problem)
            cfg = client.Configuration(host=cluster.api_url.rstrip("/"))
            token = cluster.bearer_token
            if cluster.bearer_token_file:
                token = credentials.read_token(cluster.bearer_token_file)
            cfg.api_key = {"authorization": f"Bearer {token}"}
            cfg.verify_ssl = cluster.verify_tls
            if cluster.ca_cert:
                cfg.ssl_ca_cert = _ca_file(cluster)
        else:
            raise KubeError(f"Unknown auth method {method!r}", permanent=True)
    except credentials.CredentialError as err:
        raise KubeError(f"Cannot load credentials: {err}", permanent=True) from None
    except yaml.YAMLError:
        # Not the error's text: it quotes the line of the file it stopped at.
        raise KubeError("Cannot load credentials: the kubeconfig is not valid YAML.",
                        permanent=True) from None  # fmt: skip
    except (ConfigException, OSError, TypeError, ValueError) as err:
        raise KubeError(f"Cannot load credentials: {err}", permanent=True) from err
    # A header value with a line break would fail in http.client with the value (the
    # token) in its message, on every call: refuse it here, once, without quoting it.
    for value in (cfg.api_key or {}).values():
        if not credentials.TOKEN.fullmatch(str(value).removeprefix("Bearer ")):
            raise KubeError("Cannot load credentials: the token is not one line of visible "
                            "ASCII characters.", permanent=True)  # fmt: skip
    # Retries happen in KubeGateway._call, where they are bounded and logged.
    cfg.retries = False
    return client.ApiClient(cfg)


# One ApiClient per cluster and set of credentials, per process, reused by every
# gateway: parsing a kubeconfig and a TLS handshake per task cost more CPU than the task's
# own calls (measured under bench/quota_bench.py). A rewritten kubeconfig or token file (a
# rotated token) changes the key, so it is read afresh; the oldest clients are closed.
_CLIENTS: OrderedDict[tuple, client.ApiClient] = OrderedDict()
_CLIENTS_MAX = 16
_CLIENTS_LOCK = threading.Lock()


def _credentials_key(cluster: Cluster) -> tuple:
    files = [cluster.bearer_token_file]
    if cluster.auth_method == Cluster.AuthMethod.KUBECONFIG:
        files.append(cluster.kubeconfig_path)
    stamps = []
    for name in files:
        try:
            stamps.append(os.stat(name).st_mtime_ns if name else None)
        except OSError:
            stamps.append(None)
    return (
        os.getpid(), cluster.pk, cluster.auth_method, cluster.kubeconfig_path,
        cluster.kubeconfig_context, cluster.api_url, cluster.bearer_token,
        cluster.bearer_token_file, cluster.ca_cert, cluster.verify_tls, tuple(stamps),
    )  # fmt: skip


def shared_api_client(cluster: Cluster) -> client.ApiClient:
    """This process's ApiClient for the cluster's current credentials (see above)."""
    key = _credentials_key(cluster)
    with _CLIENTS_LOCK:
        api = _CLIENTS.get(key)
        if api is not None:
            _CLIENTS.move_to_end(key)
            return api
    api = build_api_client(cluster)
    with _CLIENTS_LOCK:
        _CLIENTS[key] = api
        while len(_CLIENTS) > _CLIENTS_MAX:
            _, oldest = _CLIENTS.popitem(last=False)
            oldest.close()
    return api


def _ca_file(cluster: Cluster) -> str:
    directory = Path(tempfile.gettempdir()) / "portal-ca"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{cluster.pk}.pem"
    path.write_text(cluster.ca_cert)
    return str(path)


class GatewayCore:
    """Plumbing, inventory reads and quota writes of :class:`inventory.kube.KubeGateway`.
    Construct per task; cheap (the ApiClient and its connections are shared, see
    :func:`shared_api_client`)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        retries: int = 2,
        backoff: float = 0.5,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> None:
        """``deadline``: seconds from now after which no call starts or waits any more
        (each call's timeout and the retries' sleeps are cut to what is left): an attempt
        of an operation ends within its time even when the cluster does not answer."""
        self.cluster = cluster
        self.api_client = shared_api_client(cluster)
        self.core = client.CoreV1Api(self.api_client)
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout if timeout is not None else settings.KUBE_REQUEST_TIMEOUT
        self.deadline_s = deadline
        self.deadline = None if deadline is None else time.monotonic() + deadline

    def close(self) -> None:
        """Nothing to release: the ApiClient is shared by this process's gateways."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------

    def _left(self) -> float | None:
        """Seconds left before the deadline (None without one); past it, a KubeError."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise KubeError(f"The API server did not answer within {self.deadline_s:g} s",
                            unreachable=True)  # fmt: skip
        return left

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        wanted = kwargs.get("_request_timeout", self.timeout)
        attempt = 0
        while True:
            left = self._left()
            if left is not None and isinstance(wanted, int | float):
                kwargs["_request_timeout"] = min(wanted, left)
            else:
                kwargs["_request_timeout"] = wanted
            try:
                return fn(*args, **kwargs)
            except ApiException as err:
                error = KubeError.from_api_exception(err)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                error = KubeError(f"Cannot reach the API server: {err}", unreachable=True)
            if error.permanent or error.expired or attempt >= self.retries:
                raise error
            attempt += 1
            delay = self.backoff * 2 ** (attempt - 1)
            left = self._left()
            if left is not None and delay >= left:
                raise error
            log.warning("%s: %s; retry %d in %.1fs", self.cluster.slug, error, attempt, delay)
            time.sleep(delay)

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._call(fn, *args, _preload_content=False, **kwargs)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    # -- reads --------------------------------------------------------------------------

    def version(self) -> str:
        info = self._json(client.VersionApi(self.api_client).get_code)
        return str(info.get("gitVersion", ""))

    def whoami(self) -> dict[str, Any]:
        """The identity the API server sees for our credentials (SelfSubjectReview).

        Every authenticated user may ask (bootstrap role ``system:basic-user``). Returns
        ``status.userInfo``: ``username``, ``uid``, ``groups``, ``extra``.
        """
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        api = client.AuthenticationV1Api(self.api_client)
        review = self._json(api.create_self_subject_review, body)
        return (review.get("status") or {}).get("userInfo") or {}

    def list_pages(
        self,
        kind: str,
        *,
        limit: int = 500,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Iterator[ListPage]:
        """Yield raw pages of ``nodes``, ``pods`` or ``resourcequotas`` (all namespaces)
        until the list ends.

        A 410 on a continue token propagates as ``KubeError(expired)``: the caller decides
        whether to restart the list (a half-read list is not a consistent snapshot).
        """
        fn = {
            "nodes": self.core.list_node,
            "pods": self.core.list_pod_for_all_namespaces,
            "resourcequotas": self.core.list_resource_quota_for_all_namespaces,
        }[kind]
        params: dict[str, Any] = {}
        if field_selector:
            params["field_selector"] = field_selector
        if label_selector:
            params["label_selector"] = label_selector
        return self._paged(fn, limit=limit, **params)

    def _paged(
        self, fn: Callable[..., Any], *, limit: int = 500, **params: Any
    ) -> Iterator[ListPage]:
        """Every page of one list call (``fn`` of the typed client), continue token to token."""
        token: str | None = None
        while True:
            page_params = dict(params, limit=limit)
            if token:
                page_params["_continue"] = token
            body = self._json(fn, **page_params)
            meta = body.get("metadata") or {}
            token = meta.get("continue") or None
            yield ListPage(
                items=body.get("items") or [],
                resource_version=meta.get("resourceVersion", ""),
                continue_token=token,
                remaining=meta.get("remainingItemCount"),
            )
            if not token:
                return

    def list_resource_version(self, kind: str, *, label_selector: str | None = None) -> str:
        """The current resourceVersion of a list (one item asked for): where a watch starts."""
        page = next(self.list_pages(kind, limit=1, label_selector=label_selector))
        return page.resource_version

    def watch(
        self,
        kind: str,
        resource_version: str,
        *,
        timeout_seconds: int = 60,
        namespace: str = "",
        field_selector: str = "",
        label_selector: str = "",
        read_timeout: float | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (event type, raw object) of ``nodes``, ``pods`` or ``resourcequotas``
        (all namespaces, or ``namespace``'s) changes after ``resource_version``.

        Ends when the server closes the stream (``timeout_seconds``). An ERROR event with
        410 Gone (the version is too old) raises ``KubeError(expired)``: relist, then
        watch again. Bookmarks are passed through so callers can advance their version.
        ``read_timeout`` bounds the wait for each chunk (default: the stream's end + 10 s).
        """
        quotas = (
            (self.core.list_namespaced_resource_quota, (namespace,))
            if namespace
            else (self.core.list_resource_quota_for_all_namespaces, ())
        )
        fn, args = {
            "nodes": (self.core.list_node, ()),
            "pods": (self.core.list_pod_for_all_namespaces, ()),
            "resourcequotas": quotas,
        }[kind]
        selectors = {
            key: value
            for key, value in (
                ("field_selector", field_selector),
                ("label_selector", label_selector),
            )
            if value
        }
        try:
            response = fn(
                *args,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                _request_timeout=(self.timeout, read_timeout or timeout_seconds + 10),
                **selectors,
            )
        except ApiException as err:
            raise KubeError.from_api_exception(err) from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise KubeError(f"Cannot reach the API server: {err}") from err
        try:
            for line in iter_resp_lines(response):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    code = obj.get("code")
                    raise KubeError(
                        f"watch error: {obj.get('message', obj)}",
                        status=code,
                        reason=obj.get("reason", ""),
                        permanent=False,
                    )
                yield event.get("type", ""), obj
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise KubeError(f"watch stream broken: {err}") from err
        finally:
            response.release_conn()

    def get_node(self, name: str) -> dict[str, Any]:
        return self._json(self.core.read_node, name)

    def get_resource_quota(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(self.core.read_namespaced_resource_quota, name, namespace)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def await_resource_quota(
        self, quota: dict[str, Any], done: Callable[[dict[str, Any]], bool], seconds: float
    ) -> dict[str, Any]:
        """Watch one ResourceQuota from ``quota``'s resourceVersion until ``done(quota)``
        holds or ``seconds`` pass; returns the last version seen.

        The quota controller copies a new ``spec.hard`` to ``status.hard`` within
        milliseconds of the update (kubernetes ``pkg/controller/resourcequota``: an update
        whose hard limits changed goes to its priority queue), so a watch ends the wait at
        once where polling waits out its interval. A stream that fails or times out gives
        back what was seen: the caller decides what an unconfirmed quota means.
        """
        deadline = time.monotonic() + seconds
        while not done(quota) and (left := deadline - time.monotonic()) > 0:
            meta = quota.get("metadata") or {}
            try:
                for kind, obj in self.watch(
                    "resourcequotas", meta.get("resourceVersion", ""),
                    timeout_seconds=max(1, math.ceil(left)), namespace=meta.get("namespace", ""),
                    field_selector=f"metadata.name={meta.get('name', '')}", read_timeout=left,
                ):  # fmt: skip
                    if kind in ("ADDED", "MODIFIED"):
                        quota = obj
                        if done(quota):
                            return quota
                    if time.monotonic() >= deadline:
                        return quota
            except KubeError:
                return quota
        return quota

    # -- writes -------------------------------------------------------------------------

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> dict[str, Any]:
        """Set labels (value None removes one) with a JSON merge patch."""
        body = {"metadata": {"labels": labels}}
        return self._json(self.core.patch_node, name, body, _content_type=MERGE_PATCH)

    def set_unschedulable(self, name: str, unschedulable: bool) -> dict[str, Any]:
        """Cordon (True) or uncordon (False) a node."""
        body = {"spec": {"unschedulable": unschedulable or None}}
        return self._json(self.core.patch_node, name, body, _content_type=MERGE_PATCH)

    def apply_resource_quota(
        self,
        namespace: str,
        name: str,
        hard: dict[str, int | str],
        *,
        labels: dict[str, str] | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        """Server-side apply a ResourceQuota; fields other managers own stay untouched."""
        body = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"hard": {key: str(value) for key, value in hard.items()}},
        }
        return self._json(
            self.core.patch_namespaced_resource_quota,
            name,
            namespace,
            body,
            field_manager=field_manager,
            force=True,
            _content_type=APPLY_PATCH,
        )
