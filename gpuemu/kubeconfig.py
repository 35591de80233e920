"""A :class:`devstack.kubeapi.KubeAPI` from a kubeconfig file (its current context).

Supports what ``devstack/controlplane.py`` and ordinary clusters write: ``server``,
``certificate-authority`` / ``-data`` (or ``insecure-skip-tls-verify``),
``client-certificate`` / ``client-key`` (``-data`` too) and ``token``. Embedded data is
written to a private temporary directory, since ``requests`` wants file paths.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from devstack.kubeapi import KubeAPI


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"kubeconfig: no {what} named {name!r}")


def api_from_kubeconfig(path: str | Path, context: str = "") -> KubeAPI:
    """An API client for ``context`` (default: the current one) of the kubeconfig at ``path``."""
    path = Path(path)
    doc = yaml.safe_load(path.read_text()) or {}
    ctx = _named(doc.get("contexts"), context or doc.get("current-context", ""), "context")
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster")
    user = _named(doc.get("users"), ctx.get("user", ""), "user")
    tmp = Path(tempfile.mkdtemp(prefix="gpuemu-kubeconfig-"))
    atexit.register(shutil.rmtree, tmp, True)

    def file_of(key: str) -> str:
        src = cluster if key == "certificate-authority" else user
        if src.get(f"{key}-data"):
            out = tmp / key
            out.write_bytes(base64.b64decode(src[f"{key}-data"]))
            os.chmod(out, 0o600)
            return str(out)
        if src.get(key):
            ref = Path(src[key])
            return str(ref if ref.is_absolute() else path.parent / ref)
        return ""

    ca = file_of("certificate-authority")
    cert, key = file_of("client-certificate"), file_of("client-key")
    api = KubeAPI(
        cluster["server"],
        ca or tmp / "none",
        cert=(cert, key) if cert and key else None,
        token=str(user.get("token") or ""),
    )
    if not ca:
        # insecure-skip-tls-verify, or the system's trust store
        api.session.verify = not cluster.get("insecure-skip-tls-verify", False)
    return api
