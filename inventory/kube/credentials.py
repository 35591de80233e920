"""Where a cluster's credentials may come from, and reading a token file.

An admin names files (a kubeconfig, a bearer token file) and a URL; the portal's processes
read the files and send what they hold to that URL. Unchecked, an admin form reads any file
of the host (``/proc/self/environ``, the metrics token, the portal's own ServiceAccount
token) and sends it as a Bearer header anywhere, plain http included (#24, finding 1). So:

- a file must lie below one of ``CLUSTER_CREDENTIAL_DIRS`` once resolved (no ``..`` or
  symlink leaves them; Kubernetes' Secret volumes link ``token -> ..data/token`` inside the
  mount, which stays inside);
- a token file holds one token: one line of visible ASCII (a header value cannot hold a
  line break: ``http.client`` refuses it with the value in the message);
- ``api_url`` is https, or http for a host named in ``CLUSTER_HTTP_HOSTS``;
- no message built here quotes what a file holds, so neither a page nor a log line can.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.conf import settings

# A bearer token is one HTTP header token68 or JWT: visible ASCII without spaces. 16 KiB
# is above any Kubernetes token (projected ServiceAccount JWTs are about 1 KiB).
TOKEN = re.compile(r"[\x21-\x7e]+")
MAX_TOKEN_BYTES = 16 * 1024


class CredentialError(ValueError):
    """A credential file or URL the portal refuses; the message never quotes a file."""


def allowed_dirs() -> list[Path]:
    return [Path(d).resolve() for d in settings.CLUSTER_CREDENTIAL_DIRS if d]


def file_problem(path: str) -> str | None:
    """Why the portal will not read ``path`` as a credential, or None when it may."""
    p = Path(path)
    if not p.is_absolute():
        return "Give an absolute path (the portal's working directory is not yours)."
    dirs = allowed_dirs()
    real = p.resolve()
    if not any(real.is_relative_to(d) for d in dirs):
        where = ", ".join(str(d) for d in dirs) or "none (CLUSTER_CREDENTIAL_DIRS is empty)"
        return (
            f"{path} is outside the directories the portal reads credentials from ({where}); "
            "mount the file there or add its directory to CLUSTER_CREDENTIAL_DIRS."
        )
    if not real.is_file():
        return f"No file at {path} (as seen by the portal's processes)."
    if not os.access(real, os.R_OK):
        return f"{path} exists but the portal cannot read it."
    return None


def read_token(path: str) -> str:
    """The one token ``path`` holds; :class:`CredentialError` otherwise."""
    problem = file_problem(path)
    if problem:
        raise CredentialError(problem)
    try:
        with open(Path(path).resolve(), "rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as err:
        raise CredentialError(f"Cannot read {path}: {err.strerror}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise CredentialError(f"{path} is larger than a token ({MAX_TOKEN_BYTES} bytes at most).")
    text = raw.strip()
    if not text:
        raise CredentialError(f"{path} is empty: it should hold one token.")
    lines = len(text.splitlines())
    if lines > 1:
        raise CredentialError(f"{path} holds {lines} lines: a token file holds one token.")
    if not TOKEN.fullmatch(text.decode("latin-1")):
        raise CredentialError(
            f"{path} does not hold a token (one word of visible ASCII characters)."
        )
    return text.decode("ascii")


# An API server URL: a host name or IPv4 address, an optional port (1-65535) and path. No
# user-info (the token is the credential), no white space. The OpenAPI schema states the
# same pattern (inventory/api.py), so what the schema allows is what is accepted (#24).
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252}[A-Za-z0-9])?"
_PORT = (
    r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
    r"|[1-9][0-9]{0,3}))?"
)
_REST = r"(?:[/?#][^\s\x00]*)?"


def api_url_pattern() -> str:
    """The URLs a token may be sent to: https, or http to a host in CLUSTER_HTTP_HOSTS."""
    http = [re.escape(host) for host in sorted(settings.CLUSTER_HTTP_HOSTS) if host]
    schemes = f"https://{_HOST}" + (f"|http://(?:{'|'.join(http)})" if http else "")
    return f"^(?:{schemes}){_PORT}{_REST}$"


def url_problem(url: str) -> str | None:
    """Why the portal will not send a token to ``url``, or None when it may."""
    if re.fullmatch(api_url_pattern(), url):
        return None
    if url.startswith("http://"):
        host = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
        if host.lower() not in {h.lower() for h in settings.CLUSTER_HTTP_HOSTS}:
            return (
                "Use an https:// URL: the token would travel in clear text (an operator may "
                f"allow http for a test cluster's host in CLUSTER_HTTP_HOSTS; {host} is not)."
            )
    return (
        "Use an https:// URL of the API server: a host name or IPv4 address, an optional "
        "port (1-65535) and path; no user name or white space."
    )
