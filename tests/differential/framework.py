"""The referee: one request, two API servers, one verdict.

A :class:`Case` is a request (method, path, query, body, content type, ``Accept``, identity)
plus what to compare. :func:`check` sends it to the real kube-apiserver and to the simulator,
reduces each answer to its *facts* (the HTTP status; for a ``Status`` body its ``status``,
``reason``, ``message``, ``code`` and ``details``; the response fields and headers the case
names; whatever its ``extract`` computes), normalises what legitimately differs between two
clusters (uids, resourceVersions, creation and deletion timestamps, managedFields times;
generated name suffixes, counters and server versions through the case's own ``scrub``
patterns or ``extract``) and asserts that both sides agree.

Identities: ``admin`` (the cluster admin: the real server's client certificate, the
simulator's admin token), ``portal`` (a TokenRequest token of the ServiceAccount
``gpu-quota-portal/gpu-quota-portal`` with the RBAC of ``deploy/kubernetes/rbac.yaml``),
``nobody`` (``default/default``: authenticated, no role beyond the bootstrap ones) and
``stranger`` (a bearer token no authenticator accepts).

A case whose difference is known and listed in docs/simcluster.md ("Differences from the real
API server") names its row (``known="R3"``): it becomes ``xfail(strict=True)``, so it fails
the suite the day the simulator is fixed and the row should go.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

PORTAL = ("gpu-quota-portal", "gpu-quota-portal")
NOBODY = ("default", "default")
DOCS = "docs/simcluster.md, 'Differences from the real API server (the referee's list)'"
JSON = "application/json"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


# ------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Request:
    """One HTTP request. ``body``: a dict (sent as JSON), str or bytes (sent as is)."""

    method: str
    path: str
    body: Any = None
    params: dict[str, Any] | None = None
    content_type: str = ""
    accept: str = JSON
    identity: str = "admin"
    headers: dict[str, str] | None = None


def get(path: str, **kw: Any) -> Request:
    return Request("GET", path, **kw)


def post(path: str, body: Any, **kw: Any) -> Request:
    return Request("POST", path, body, **kw)


def put(path: str, body: Any, **kw: Any) -> Request:
    return Request("PUT", path, body, **kw)


def patch(path: str, body: Any, content_type: str = MERGE, **kw: Any) -> Request:
    return Request("PATCH", path, body, content_type=content_type, **kw)


def apply(path: str, body: Any, manager: str = "gpu-quota-portal", force: bool = True, **kw: Any):
    params = {"fieldManager": manager, **({"force": "true"} if force else {})}
    params.update(kw.pop("params", None) or {})
    return Request("PATCH", path, body, params=params, content_type=APPLY, **kw)


def delete(path: str, body: Any = None, **kw: Any) -> Request:
    return Request("DELETE", path, body, **kw)


@dataclass
class Answer:
    """A server's answer: status, headers, the raw body, the JSON body (or None), and for a
    watch the events it streamed."""

    status: int
    headers: requests.structures.CaseInsensitiveDict
    raw: bytes
    body: Any
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_status(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("kind") == "Status"


class SetupFailed(RuntimeError):
    pass


# ------------------------------------------------------------------------------ servers


class Server:
    """One API server as the referee talks to it, with a session per identity."""

    def __init__(
        self, name: str, url: str, *, verify: Any, admin: dict[str, Any], tokens, kubeconfig=None
    ):
        self.name = name
        self.url = url.rstrip("/")
        self.kubeconfig: Path | None = kubeconfig  # the admin's, for kubectl
        self._verify = verify
        self._admin = admin
        self._tokens: Callable[[str, str], str] = tokens
        self._sessions: dict[str, requests.Session] = {}

    def session(self, identity: str) -> requests.Session:
        if identity not in self._sessions:
            s = requests.Session()
            s.trust_env = False
            s.verify = self._verify
            if identity == "stranger":  # a bearer token no authenticator knows
                s.headers["Authorization"] = "Bearer not-a-token"
            elif identity == "admin":
                if "cert" in self._admin:
                    s.cert = self._admin["cert"]
                if "token" in self._admin:
                    s.headers["Authorization"] = f"Bearer {self._admin['token']}"
            else:
                ns, name = {"portal": PORTAL, "nobody": NOBODY}[identity]
                s.headers["Authorization"] = f"Bearer {self._tokens(ns, name)}"
            self._sessions[identity] = s
        return self._sessions[identity]

    def send(self, req: Request, timeout: float = 30.0) -> Answer:
        headers = {"Accept": req.accept, **(req.headers or {})}
        data = req.body
        if data is not None:
            if not isinstance(data, (bytes, str)):
                data = json.dumps(data)
            headers["Content-Type"] = req.content_type or JSON
        watching = str((req.params or {}).get("watch", "")).lower() in ("1", "true")
        resp = self.session(req.identity).request(
            req.method,
            self.url + req.path,
            params=req.params,
            data=data,
            headers=headers,
            timeout=timeout,
            stream=watching,
        )
        events: list[dict[str, Any]] = []
        if watching and resp.status_code == 200:
            lines = [line for line in resp.iter_lines() if line.strip()]
            events = [json.loads(line) for line in lines]
            raw = b"\n".join(lines)
        else:
            raw = resp.content
        body = None
        if raw and "json" in resp.headers.get("Content-Type", ""):
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        return Answer(resp.status_code, resp.headers, raw, body, events)

    def call(self, req: Request, ok: Iterable[int] = ()) -> Answer:
        """Send ``req`` and insist on success (setup steps)."""
        answer = self.send(req)
        if answer.status >= 400 and answer.status not in set(ok):
            raise SetupFailed(
                f"{self.name}: {req.method} {req.path}: {answer.status} {answer.raw[:400]!r}"
            )
        return answer

    def wait(self, req: Request, until: Callable[[Answer], Any], timeout: float = 20.0) -> Answer:
        """Repeat ``req`` until ``until(answer)`` is truthy (a controller caught up)."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.send(req)
            if until(answer):
                return answer
            if time.monotonic() > deadline:
                raise SetupFailed(
                    f"{self.name}: {req.method} {req.path} never satisfied the wait "
                    f"({answer.status} {answer.raw[:300]!r})"
                )
            time.sleep(0.05)

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()


@dataclass
class Pair:
    real: Server
    sim: Server
    workdir: Path
    extras: dict[str, Any] = field(default_factory=dict)

    def both(self) -> tuple[Server, Server]:
        return self.real, self.sim

    def prepare(self, steps: Sequence[Step]) -> None:
        """Run setup steps on both servers (a module's scene)."""
        for server in self.both():
            for step in steps:
                if isinstance(step, Request):
                    server.call(step)
                else:
                    step(server)


# ------------------------------------------------------------------------------ cases

Step = Request | Callable[[Server], Any]


@dataclass
class Case:
    """One comparison.

    ``request``: the Request, or ``f(server) -> Request | Answer`` for a request built from
    earlier answers on the same server (a continue token, a resourceVersion). ``setup``:
    steps run on both servers first (Requests sent as given and required to succeed, or
    callables of the server). ``fields``: dotted paths into the JSON body to compare
    (``metadata.labels``, ``items[].metadata.name``, ``spec.hard``). ``headers``: response
    headers to compare. ``extract(answer, server)``: more facts. ``scrub``: regexes replaced
    by ``<>`` in every compared string. ``known``: the docs row of a documented difference.
    """

    id: str
    request: Request | Callable[[Server], Any]
    setup: Sequence[Step] = ()
    fields: Sequence[str] = ()
    headers: Sequence[str] = ()
    extract: Callable[[Answer, Server], dict[str, Any]] | None = None
    scrub: Sequence[str] = ()
    known: str = ""
    why: str = ""


def params(cases: Sequence[Case]) -> list[Any]:
    """``pytest.param`` per case; a documented difference is a strict xfail naming its row."""
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    assert not dupes, f"duplicate case ids: {sorted(dupes)}"
    out = []
    for case in cases:
        marks = ()
        if case.known:
            reason = f"known difference {case.known} ({DOCS}): {case.why}".rstrip(": ")
            marks = (pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason),)
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def run(case: Case, server: Server) -> Answer:
    for step in case.setup:
        if isinstance(step, Request):
            server.call(step)
        else:
            step(server)
    if isinstance(case.request, Request):
        return server.send(case.request)
    result = case.request(server)
    return server.send(result) if isinstance(result, Request) else result


def check(case: Case, pair: Pair) -> None:
    """Run ``case`` on both servers and assert that their facts agree."""
    real_answer = run(case, pair.real)
    sim_answer = run(case, pair.sim)
    real, sim = facts(case, real_answer, pair.real), facts(case, sim_answer, pair.sim)
    assert sim == real, _explain(case, real, sim)


def _explain(case: Case, real: dict[str, Any], sim: dict[str, Any]) -> str:
    lines = [f"{case.id}: the simulator differs from the real API server"]
    for key in sorted(set(real) | set(sim)):
        if real.get(key, "<absent>") != sim.get(key, "<absent>"):
            lines.append(f"  {key}:")
            lines.append(f"    real: {json.dumps(real.get(key, '<absent>'), sort_keys=True)}")
            lines.append(f"    sim:  {json.dumps(sim.get(key, '<absent>'), sort_keys=True)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ facts

# What two clusters legitimately disagree on: identities and clocks of objects.
_VOLATILE = {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"}


def facts(case: Case, answer: Answer, server: Server) -> dict[str, Any]:
    out: dict[str, Any] = {"status": answer.status}
    if answer.is_status:
        body = answer.body
        for key in ("status", "reason", "message", "code"):
            out[f"Status.{key}"] = body.get(key)
        if body.get("details") is not None:
            out["Status.details"] = body["details"]
    body = answer.body
    for path in case.fields:
        out[path] = pick(body, path)
    for name in case.headers:
        out[f"header {name}"] = answer.headers.get(name)
    if case.extract is not None:
        out.update(case.extract(answer, server))
    return normalise(out, case.scrub)


def pick(obj: Any, path: str) -> Any:
    """``a.b[].c`` → the value(s) at that path; ``<absent>`` where there is none."""
    parts = re.findall(r"[^.\[\]]+|\[\]", path)
    return _pick(obj, parts)


def _pick(obj: Any, parts: list[str]) -> Any:
    if not parts:
        return copy.deepcopy(obj)
    head, rest = parts[0], parts[1:]
    if head == "[]":
        return [_pick(item, rest) for item in obj] if isinstance(obj, list) else "<absent>"
    if isinstance(obj, dict) and head in obj:
        return _pick(obj[head], rest)
    if isinstance(obj, list) and head.isdigit() and int(head) < len(obj):
        return _pick(obj[int(head)], rest)
    return "<absent>"


def normalise(value: Any, scrub: Sequence[str] = (), key: str = "") -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _VOLATILE:
                out[k] = "<volatile>"
            elif k == "time" and key == "managedFields[]":
                out[k] = "<time>"
            else:
                out[k] = normalise(v, scrub, f"{k}[]" if isinstance(v, list) else k)
        return out
    if isinstance(value, list):
        return [normalise(v, scrub, key) for v in value]
    if isinstance(value, str):
        for pattern in scrub:
            value = re.sub(pattern, "<>", value)
        return value
    return value


# ------------------------------------------------------------------------------ helpers


def kubectl(server: Server, *args: str, stdin: str | None = None) -> Answer:
    """Run the real kubectl as the admin of ``server``; the Answer's ``status`` is its exit
    code and its body ``{"stdout", "stderr"}`` (HOME and the cache are per server)."""
    from tests.prereqs import need_kubectl

    binary = need_kubectl()
    assert server.kubeconfig is not None, f"{server.name} has no kubeconfig"
    home = server.kubeconfig.parent / f"kubectl-home-{server.name}"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "")}
    result = subprocess.run(
        [binary, "--kubeconfig", str(server.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    body = {"stdout": result.stdout, "stderr": result.stderr}
    headers = requests.structures.CaseInsensitiveDict()
    return Answer(result.returncode, headers, result.stdout.encode(), body)


def ns_path(namespace: str, resource: str, name: str = "", group: str = "") -> str:
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{namespace}/{resource}"
    return f"{path}/{name}" if name else path


def wait(req: Request, until: Callable[[Answer], Any], timeout: float = 20.0):
    """A setup step that polls ``req`` until ``until(answer)`` holds on that server."""

    def step(server: Server) -> Answer:
        return server.wait(req, until, timeout)

    return step
