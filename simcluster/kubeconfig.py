"""kubeconfig files pointing at a running simulator (for kubectl and the official client)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def kubeconfig_dict(server: str, token: str | None = None, name: str = "simcluster") -> dict:
    """A kubeconfig with one cluster, user and context named ``name`` (current-context)."""
    user: dict[str, str] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
        ],
        "current-context": name,
    }


def write_kubeconfig(
    path: str | os.PathLike[str], server: str, token: str | None = None, name: str = "simcluster"
) -> Path:
    """Write the kubeconfig (mode 0600, like kubectl does) and return its path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server, token, name), sort_keys=False)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return p
