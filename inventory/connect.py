"""Connecting a cluster: credential checks per auth method, then preflight, then save.

Shared by the connect/edit page (``forms.py``), the API (``api.py``) and the admin (through
``Cluster.clean``), so all three refuse the same input with the same messages. Saving
runs the preflight first (``preflight.py``); a report with errors blocks the save unless
the admin says "save anyway", which the audit trail records.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from portal.validation import CONFLICT, NOT_FOUND

from .kube import credentials
from .models import Cluster
from .preflight import ERROR, STORED_FIELDS, Report, run_preflight, store

# Fields an admin may set; the credentials among them are never shown back.
CONNECT_FIELDS = [
    "slug", "name", "description", "auth_method", "kubeconfig_path", "kubeconfig_context",
    "api_url", "bearer_token", "bearer_token_file", "ca_cert", "verify_tls", "sync_enabled",
    "preflight_namespaces",
]  # fmt: skip
SECRET_FIELDS = frozenset({"bearer_token"})


# Codes of the messages below (portal.validation): a file the portal may not or cannot read
# is not found (404), a file or environment that does not serve is a conflict with what is
# there (409), a field the method needs is required (400, or 409 on a partial edit: the
# stored cluster lacks it).
REQUIRED = "required"


def _problem(message: str, code: str = "invalid") -> ValidationError:
    return ValidationError(message, code=code)


def _file_problem(path: str) -> ValidationError | None:
    problem = credentials.file_problem(path)
    if problem is None:
        return None
    return _problem(problem, NOT_FOUND if Path(path).is_absolute() else "invalid")


def _kubeconfig_errors(cluster: Cluster) -> dict[str, ValidationError]:
    if not cluster.kubeconfig_path:
        return {"kubeconfig_path": _problem("A kubeconfig path is required for this method.",
                                            REQUIRED)}  # fmt: skip
    problem = _file_problem(cluster.kubeconfig_path)
    if problem:
        return {"kubeconfig_path": problem}
    try:
        data = yaml.safe_load(Path(cluster.kubeconfig_path).read_text()) or {}
    except (OSError, UnicodeDecodeError) as err:
        return {"kubeconfig_path": _problem(f"Cannot read it as text: {type(err).__name__}.",
                                            CONFLICT)}  # fmt: skip
    except yaml.YAMLError as err:
        # Not str(err): a YAML error quotes the line it stopped at, which is the file's text.
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return {"kubeconfig_path": _problem(f"Not a kubeconfig: not valid YAML{where}.",
                                            CONFLICT)}  # fmt: skip
    if not isinstance(data, dict):
        return {"kubeconfig_path": _problem("Not a kubeconfig: expected a YAML mapping.",
                                            CONFLICT)}  # fmt: skip
    contexts = [c.get("name") for c in data.get("contexts") or [] if isinstance(c, dict)]
    wanted = cluster.kubeconfig_context or data.get("current-context") or ""
    if not wanted:
        return {"kubeconfig_context": _problem(
            "The kubeconfig has no current-context: name one.", CONFLICT)}  # fmt: skip
    if wanted not in contexts:
        known = ", ".join(str(c) for c in contexts) or "none"
        return {"kubeconfig_context": _problem(
            f"No context {wanted!r} in the kubeconfig (it has: {known}).", CONFLICT)}  # fmt: skip
    return {}


def _token_errors(cluster: Cluster) -> dict[str, ValidationError]:
    errors: dict[str, ValidationError] = {}
    if not cluster.api_url:
        errors["api_url"] = _problem("The API server URL is required for token access.", REQUIRED)
    elif problem := credentials.url_problem(cluster.api_url):
        errors["api_url"] = _problem(problem)
    if cluster.bearer_token and cluster.bearer_token_file:
        errors["bearer_token_file"] = _problem("Give a token or a token file, not both.")
    elif cluster.bearer_token_file:
        try:
            credentials.read_token(cluster.bearer_token_file)
        except credentials.CredentialError as err:
            # The file itself (where, whether readable) or what it holds.
            missing = _file_problem(cluster.bearer_token_file)
            errors["bearer_token_file"] = missing or _problem(str(err), CONFLICT)
    elif not cluster.bearer_token:
        errors["bearer_token"] = _problem("Give a bearer token or a file that holds one.", REQUIRED)
    if cluster.ca_cert:
        try:
            ssl.create_default_context(cadata=cluster.ca_cert)
        except (ssl.SSLError, ValueError, TypeError) as err:  # TypeError: non-ASCII text
            errors["ca_cert"] = _problem(f"Not a PEM CA certificate: {err}")
    return errors


def credential_errors(cluster: Cluster) -> dict[str, ValidationError]:
    """Field -> message (with its code) for credentials that cannot work, checked without
    the network."""
    method = cluster.auth_method
    if method == Cluster.AuthMethod.KUBECONFIG:
        return _kubeconfig_errors(cluster)
    if method == Cluster.AuthMethod.TOKEN:
        return _token_errors(cluster)
    if method == Cluster.AuthMethod.IN_CLUSTER and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        outside = (
            "The portal is not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset)."
        )
        return {"auth_method": _problem(outside, CONFLICT)}
    return {}


def describe(cluster: Cluster) -> dict[str, Any]:
    """The cluster's settings for the audit trail: credentials only as "set"."""
    body: dict[str, Any] = {}
    for name in CONNECT_FIELDS:
        value = getattr(cluster, name)
        body[name] = bool(value) if name in SECRET_FIELDS or name == "ca_cert" else value
    body["preflight_status"] = cluster.preflight_status
    return body


@dataclass(slots=True)
class Outcome:
    report: Report
    saved: bool


def connect(
    cluster: Cluster, *, actor, save_anyway: bool = False, before: dict | None = None
) -> Outcome:
    """Preflight, then save (errors block unless ``save_anyway``) and audit.

    ``cluster`` is validated already (``full_clean``); ``before`` is :func:`describe` of
    the stored row when editing one, None when connecting a new cluster.
    """
    from quotas import audit

    report = run_preflight(cluster)
    errors = report.status == ERROR
    if errors and not save_anyway:
        return Outcome(report, saved=False)
    store(cluster, report)
    note = ""
    if errors:
        failed = "; ".join(f.summary for f in report.findings if f.level == ERROR)
        note = f"Saved despite preflight errors: {failed}"
    with transaction.atomic():
        # An edit writes only what the admin and the preflight set, not the sync's fields.
        cluster.save(update_fields=None if before is None else CONNECT_FIELDS + STORED_FIELDS)
        action = "cluster.connect" if before is None else "cluster.update"
        audit.record(actor, action, cluster, before=before, after=describe(cluster), note=note)
    return Outcome(report, saved=True)


def rerun(cluster: Cluster, *, actor) -> Report:
    """Run the preflight of a stored cluster again and keep the result."""
    from quotas import audit

    report = run_preflight(cluster)
    before = {"preflight_status": cluster.preflight_status}
    store(cluster, report)
    with transaction.atomic():
        cluster.save(update_fields=STORED_FIELDS)
        audit.record(actor, "cluster.preflight", cluster, before=before,
                     after={"preflight_status": report.status,
                            "missing_permissions": report.missing_permissions})  # fmt: skip
    return report
