"""Lists: consistent pagination, continue tokens, resourceVersion and resourceVersionMatch.

Real sources followed (kubernetes/kubernetes, v1.32):
``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`` GetList (snapshots at the
token's revision, ``remainingItemCount``, "specifying resource version is not allowed when
using continue"), ``staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go``
(interpretListError, handleCompactedErrorForPaging), ``staging/src/k8s.io/apiserver/pkg/
storage/continue.go`` (token format and errors), ``staging/src/k8s.io/apiserver/pkg/
storage/cacher/cacher.go`` shouldDelegateList and ``watch_cache.go`` (the 3 s wait, the 504
with Retry-After), ``staging/src/k8s.io/apiserver/pkg/storage/errors.go``
NewTooLargeResourceVersionError, ``staging/src/k8s.io/apimachinery/pkg/apis/meta/
internalversion/validation/validation.go`` ValidateListOptions and
``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/status.go``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from simcluster import SimCluster

from .helpers import Kubectl

INCONSISTENT = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)


def get(sim: SimCluster, path: str, **query: Any) -> tuple[int, Any, dict[str, Any]]:
    """(status, headers, decoded body) of a GET, errors included."""
    url = sim.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {sim.token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def names(body: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in body["items"]]


def token_payload(token: str) -> dict[str, Any]:
    assert "=" not in token  # base64.RawURLEncoding: no padding
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def make_token(**payload: Any) -> str:
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# ------------------------------------------------------------------ pagination
def test_pages_are_a_snapshot_at_the_first_pages_version(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    first = v1.list_node(limit=4)
    rv = first.metadata.resource_version
    seen = [n.metadata.name for n in first.items]
    assert first.metadata.remaining_item_count == 13 - 4
    # after the first page: create, change and delete nodes that sort after it
    v1.create_node({"metadata": {"name": "zz-new"}})
    v1.patch_node("v100-02", {"metadata": {"labels": {"late": "yes"}}})
    v1.delete_node("l40s-01")
    token = first.metadata._continue
    old: dict[str, Any] = {}
    while token:
        page = v1.list_node(limit=4, _continue=token)
        assert page.metadata.resource_version == rv
        for n in page.items:
            old[n.metadata.name] = n
        seen += [n.metadata.name for n in page.items]
        token = page.metadata._continue
        if token:
            assert page.metadata.remaining_item_count == 13 - len(seen)
    assert len(seen) == 13 and "zz-new" not in seen and "l40s-01" in seen
    assert "late" not in old["v100-02"].metadata.labels  # as it was at rv
    assert int(old["v100-02"].metadata.resource_version) <= int(rv)
    # a new list sees today's state
    now = [n.metadata.name for n in v1.list_node().items]
    assert "zz-new" in now and "l40s-01" not in now


def test_snapshot_with_selector_and_namespace(sim: SimCluster, v1: client.CoreV1Api) -> None:
    first = v1.list_namespaced_pod("ml-vision", limit=1, field_selector="status.phase=Running")
    rv = first.metadata.resource_version
    assert first.metadata.remaining_item_count is None  # never with selectors
    names_then = {p.metadata.name for p in v1.list_namespaced_pod("ml-vision").items}
    victim = sorted(
        p.metadata.name
        for p in v1.list_namespaced_pod("ml-vision", field_selector="status.phase=Running").items
    )[-1]
    sim.set_pod_phase("ml-vision", victim, "Succeeded")
    seen = [p.metadata.name for p in first.items]
    token = first.metadata._continue
    while token:
        page = v1.list_namespaced_pod(
            "ml-vision", limit=1, _continue=token, field_selector="status.phase=Running"
        )
        assert page.metadata.resource_version == rv
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert victim in seen  # still Running as of rv
    assert set(seen) <= names_then


def test_continue_token_format(v1: client.CoreV1Api) -> None:
    page = v1.list_namespaced_pod("ml-vision", limit=1)
    data = token_payload(page.metadata._continue)
    assert data["v"] == "meta.k8s.io/v1" and data["rv"] == int(page.metadata.resource_version)
    # the key after the last item, relative to the list's prefix (/registry/pods/ml-vision/)
    assert data["start"] == page.items[0].metadata.name + "\x00"
    page = v1.list_pod_for_all_namespaces(limit=1)
    item = page.items[0].metadata
    assert token_payload(page.metadata._continue)["start"] == f"{item.namespace}/{item.name}\x00"


def test_keys_are_listed_in_etcd_order(sim: SimCluster, v1: client.CoreV1Api) -> None:
    for ns in ("team", "team-a"):
        v1.create_namespace({"metadata": {"name": ns}})
        v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    got = [
        (c.metadata.namespace, c.metadata.name)
        for c in v1.list_config_map_for_all_namespaces().items
        if c.metadata.namespace.startswith("team")
    ]
    # "/registry/configmaps/team-a/cm" < "/registry/configmaps/team/cm": '-' < '/'
    assert got == [("team-a", "cm"), ("team", "cm")]


# -------------------------------------------------------------------- expiry
def test_expired_token_answers_410_with_a_fresh_token(sim: SimCluster) -> None:
    code, _, body = get(sim, "/api/v1/nodes", limit=5)
    token = body["metadata"]["continue"]
    sim.continue_ttl = 0.0
    code, _, st = get(sim, "/api/v1/nodes", limit=5, **{"continue": token})
    assert code == 410 and st["reason"] == "Expired" and st["message"] == INCONSISTENT
    assert "details" not in st
    fresh = st["metadata"]["continue"]
    assert token_payload(fresh) == {
        "v": "meta.k8s.io/v1",
        "rv": -1,
        "start": body["items"][-1]["metadata"]["name"] + "\x00",
    }
    sim.continue_ttl = 300.0
    sim.create("nodes", {"metadata": {"name": "zz-after"}})
    code, _, rest = get(sim, "/api/v1/nodes", limit=100, **{"continue": fresh})
    assert code == 200
    # continues after the same key, but at the latest resourceVersion
    assert int(rest["metadata"]["resourceVersion"]) > int(body["metadata"]["resourceVersion"])
    assert names(rest)[-1] == "zz-after" and names(rest)[0] > names(body)[-1]


def test_fault_and_compaction_expire_tokens(sim: SimCluster) -> None:
    _, _, body = get(sim, "/api/v1/nodes", limit=2)
    token = body["metadata"]["continue"]
    sim.faults.update(expire_continue=True, expire_continue_count=1)
    code, _, st = get(sim, "/api/v1/nodes", limit=2, **{"continue": token})
    assert code == 410 and st["metadata"]["continue"]
    assert get(sim, "/api/v1/nodes", limit=2, **{"continue": token})[0] == 200
    sim.faults.reset()
    sim.create("nodes", {"metadata": {"name": "zz-x"}})
    sim.compact_history()  # the stand-in for etcd compaction
    code, _, st = get(sim, "/api/v1/nodes", limit=2, **{"continue": token})
    assert code == 410 and st["message"] == INCONSISTENT


V1 = "meta.k8s.io/v1"
BAD_TOKENS = [
    ("!!!", "illegal base64 data at input byte 0"),
    ("abcde", "illegal base64 data at input byte 4"),
    (
        make_token(v="meta.k8s.io/v2", rv=5, start="a"),
        "server does not recognize this encoded version meta.k8s.io/v2",
    ),
    (
        make_token(v=V1, rv=0, start="a"),
        "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
    ),
    (make_token(v=V1, rv=5, start=""), "encoded start key empty (version meta.k8s.io/v1)"),
    (make_token(v=V1, rv=5, start="../secrets/x"), "../secrets/x"),
    (
        make_token(v=V1, rv="5", start="a"),
        "json: cannot unmarshal string into Go struct field continueToken.rv of type int64",
    ),
    (
        base64.urlsafe_b64encode(b"{nope").rstrip(b"=").decode(),
        "invalid character 'n' looking for beginning of object key string",
    ),
]


@pytest.mark.parametrize(("token", "message"), BAD_TOKENS)
def test_bad_continue_tokens(sim: SimCluster, token: str, message: str) -> None:
    code, _, st = get(sim, "/api/v1/nodes", limit=2, **{"continue": token})
    assert code == 400 and st["reason"] == "BadRequest"
    assert st["message"] == f"invalid continue token: continue key is not valid: {message}"


def test_continue_with_resource_version(sim: SimCluster) -> None:
    _, _, body = get(sim, "/api/v1/nodes", limit=2)
    q = {"continue": body["metadata"]["continue"], "resourceVersion": "5"}
    code, _, st = get(sim, "/api/v1/nodes", limit=2, **q)
    assert (code, st["message"]) == (
        400,
        "specifying resource version is not allowed when using continue",
    )
    q["resourceVersion"] = "0"  # allowed (ignored)
    assert get(sim, "/api/v1/nodes", limit=2, **q)[0] == 200


# ------------------------------------------------------ resourceVersion(Match)
RVM = "resourceVersionMatch"
BAD_OPTIONS = [
    (
        {RVM: "Exact"},
        f"{RVM}: Forbidden: {RVM} is forbidden unless resourceVersion is provided",
    ),
    (
        {RVM: "Exact", "resourceVersion": "0"},
        f'{RVM}: Forbidden: {RVM} "exact" is forbidden for resourceVersion "0"',
    ),
    (
        {RVM: "foo", "resourceVersion": "3"},
        f'{RVM}: Unsupported value: "foo": supported values: "Exact", "NotOlderThan", ""',
    ),
    (
        {"sendInitialEvents": "true"},
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
    ),
]


@pytest.mark.parametrize(("query", "message"), BAD_OPTIONS)
def test_list_options_validation(sim: SimCluster, query: dict[str, str], message: str) -> None:
    code, _, st = get(sim, "/api/v1/nodes", **query)
    assert code == 422 and st["reason"] == "Invalid"
    assert st["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'
    assert st["details"]["kind"] == "ListOptions" and st["details"]["group"] == "meta.k8s.io"
    assert st["details"]["causes"][0]["field"] == message.split(":")[0]


def test_match_with_continue_is_invalid(sim: SimCluster) -> None:
    _, _, body = get(sim, "/api/v1/nodes", limit=2)
    q = {"continue": body["metadata"]["continue"], "resourceVersion": "1"}
    code, _, st = get(sim, "/api/v1/nodes", resourceVersionMatch="NotOlderThan", **q)
    assert code == 422
    assert st["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden when continue is provided"
    )


def test_resource_version_zero_ignores_limit(sim: SimCluster) -> None:
    code, _, body = get(sim, "/api/v1/nodes", limit=2, resourceVersion="0")
    assert code == 200 and len(body["items"]) == 13 and "continue" not in body["metadata"]


def test_exact_and_legacy_lists_as_of_an_older_version(
    sim: SimCluster, v1: client.CoreV1Api
) -> None:
    rv = v1.list_node(limit=1).metadata.resource_version
    v1.patch_node("a100-01", {"metadata": {"labels": {"after": "1"}}})
    v1.delete_node("cpu-00")
    v1.create_node({"metadata": {"name": "aa-new"}})
    for q in ({"resourceVersionMatch": "Exact"}, {"limit": "100"}):
        code, _, body = get(sim, "/api/v1/nodes", resourceVersion=rv, **q)
        assert code == 200 and body["metadata"]["resourceVersion"] == rv
        got = {n["metadata"]["name"]: n for n in body["items"]}
        assert "cpu-00" in got and "aa-new" not in got and len(got) == 13
        assert "after" not in got["a100-01"]["metadata"]["labels"]
    # NotOlderThan (and the default without limit) is served from the cache: today's state
    code, _, body = get(sim, "/api/v1/nodes", resourceVersion=rv)
    assert "aa-new" in names(body) and int(body["metadata"]["resourceVersion"]) > int(rv)
    sim.compact_history()
    code, _, st = get(sim, "/api/v1/nodes", resourceVersion=rv, resourceVersionMatch="Exact")
    assert (code, st["reason"], st["message"]) == (
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    )


def test_resource_version_ahead(sim: SimCluster) -> None:
    ahead = str(sim.store.rv + 1000)
    # etcd at an exact future revision: the raw etcd error, a 500 without a reason
    code, _, st = get(sim, "/api/v1/nodes", resourceVersion=ahead, resourceVersionMatch="Exact")
    assert code == 500 and "reason" not in st
    assert st["message"] == "etcdserver: mvcc: required revision is a future revision"
    # NotOlderThan with limit: etcd's latest revision is too old, no wait, no Retry-After
    code, headers, st = get(
        sim, "/api/v1/nodes", resourceVersion=ahead, resourceVersionMatch="NotOlderThan", limit=5
    )
    assert (code, st["reason"]) == (504, "Timeout") and headers.get("Retry-After") is None
    assert st["message"] == f"Timeout: Too large resource version: {ahead}, current: {sim.store.rv}"
    assert st["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    }
    # from the cache: waits 3 s for the version, then 504 with Retry-After: 1
    t0 = time.monotonic()
    code, headers, st = get(sim, "/api/v1/nodes", resourceVersion=ahead)
    assert time.monotonic() - t0 >= 2.9
    assert code == 504 and headers.get("Retry-After") == "1"
    assert st["details"]["retryAfterSeconds"] == 1


def test_cache_waits_for_a_version_that_arrives(sim: SimCluster) -> None:
    want = sim.store.rv + 1
    timer = threading.Timer(0.3, lambda: sim.create("nodes", {"metadata": {"name": "late"}}))
    timer.start()
    code, _, body = get(sim, "/api/v1/nodes", resourceVersion=str(want))
    timer.join()
    assert code == 200 and "late" in names(body)
    assert int(body["metadata"]["resourceVersion"]) >= want


def test_unparsable_resource_version_and_limit(sim: SimCluster) -> None:
    msg = 'resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax'
    # v1.36 validates list options before the watch cache is asked (delegator.go): a 400
    # either way (the referee's list-bad-resource-version; v1.32 answered 500 here)
    code, _, st = get(sim, "/api/v1/nodes", resourceVersion="abc")
    assert (code, st["reason"], st["message"]) == (
        400,
        "BadRequest",
        f"invalid resource version: {msg}",
    )
    code, _, st = get(sim, "/api/v1/nodes", resourceVersion="abc", limit=3)  # etcd
    assert (code, st["reason"], st["message"]) == (
        400,
        "BadRequest",
        f"invalid resource version: {msg}",
    )
    code, _, st = get(sim, "/api/v1/nodes", limit="x")
    assert (code, st["message"]) == (400, 'strconv.ParseInt: parsing "x": invalid syntax')


def test_kubectl_chunked_list(sim: SimCluster, kubectl: Kubectl) -> None:
    """kubectl pages with --chunk-size and follows continue tokens to the end."""
    r = kubectl("get", "pods", "-A", "--chunk-size=3", "-o", "name", "-v=6")
    assert len(r.stdout.split()) == len(sim.list("pods"))
    assert r.stderr.count("continue=") >= 2  # several pages were fetched


@pytest.mark.parametrize("seed", range(12))
def test_snapshot_matches_a_model(seed: int) -> None:
    """Random writes between pages never show in a paginated list (selectors, namespaces)."""
    import random

    from simcluster.resources import RT

    rng = random.Random(seed)  # noqa: S311 - a reproducible test, not a secret
    sim = SimCluster.from_fleet({"namespaces": [{"name": n} for n in ("a", "a-b", "b")]})
    rt, spaces, cms = RT["configmaps"], ("a", "a-b", "b"), [f"cm-{i:02d}" for i in range(30)]

    try:

        def labels() -> dict[str, str]:
            return {"v": str(rng.randint(0, 2))}

        for _ in range(20):
            ns, name = rng.choice(spaces), rng.choice(cms)
            if sim.store.get("configmaps", ns, name) is None:
                sim.create(
                    "configmaps", {"metadata": {"name": name, "namespace": ns, "labels": labels()}}
                )
        ns_req = rng.choice([None, "a", "a-b"])
        params = {"limit": str(rng.randint(1, 5))}
        selector = rng.choice([None, "v=0", "v!=1"])
        if selector:
            params["labelSelector"] = selector
        then = sim.list("configmaps", ns_req)
        out = json.loads(sim.op_list(rt, ns_req, params, "/api/v1/configmaps"))
        got, token = list(out["items"]), out["metadata"].get("continue")
        while token:
            for _ in range(rng.randint(0, 6)):
                ns, name = rng.choice(spaces), rng.choice(cms)
                if sim.store.get("configmaps", ns, name) is None:
                    sim.create("configmaps", {"metadata": {"name": name, "namespace": ns}})
                elif rng.random() < 0.5:
                    patch = json.dumps({"metadata": {"labels": labels()}}).encode()
                    sim.op_patch(rt, ns, name, "", patch, "application/merge-patch+json", {}, "x")
                else:
                    sim.op_delete(rt, ns, name, None, {})
            page = json.loads(sim.op_list(rt, ns_req, {**params, "continue": token}, "/x"))
            assert page["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
            got += page["items"]
            token = page["metadata"].get("continue")
            if token and not selector:
                assert page["metadata"]["remainingItemCount"] == len(then) - len(got)

        def selected(o: dict[str, Any]) -> bool:
            v = (o["metadata"].get("labels") or {}).get("v")
            return selector is None or (v == "0" if selector == "v=0" else v != "1")

        assert got == [o for o in then if selected(o)]
    finally:
        sim.stop()
