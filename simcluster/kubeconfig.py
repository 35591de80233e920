"""kubeconfig files pointing at a running simulator (for kubectl and the official client)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def kubeconfig_dict(
    server: str, token: str | None = None, name: str = "simcluster", ca_pem: str = ""
) -> dict:
    """A kubeconfig with cluster ``simcluster`` and a user and (current) context ``name``."""
    user: dict[str, str] = {"token": token} if token else {}
    cluster = "simcluster"
    entry: dict[str, str] = {"server": server}
    if ca_pem:
        entry["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": cluster, "cluster": entry}],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {"name": name, "context": {"cluster": cluster, "user": name, "namespace": "default"}}
        ],
        "current-context": name,
    }


def write_kubeconfig(
    path: str | os.PathLike[str],
    server: str,
    token: str | None = None,
    name: str = "simcluster",
    ca_pem: str = "",
) -> Path:
    """Write the kubeconfig (mode 0600, like kubectl does) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server, token, name, ca_pem), sort_keys=False)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return p
