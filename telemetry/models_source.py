"""Where a cluster's GPU telemetry comes from (issue #13 section 1).

By default the portal's own node agents (``agent``: reports posted to the portal and stored
as 5-minute points). A cluster with a :class:`PrometheusSource` row reads dcgm-exporter's
metrics from the Prometheus that already scrapes it instead (telemetry/promsource.py).

Secrets never live in the database: ``secret_env`` names an environment prefix, and the
portal reads ``<PREFIX>_TOKEN`` (a bearer token) or ``<PREFIX>_USERNAME`` and
``<PREFIX>_PASSWORD`` (basic auth), each also as ``<PREFIX>_..._FILE`` (a mounted secret).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models

from inventory.models import Cluster

PREFIX_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,62}$")
LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # a Prometheus label name


class PrometheusSource(models.Model):
    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="prometheus")
    # Not a URLField: in-cluster names such as http://prometheus-operated:9090 have no dot,
    # which Django's URL validator refuses; clean() checks the scheme and host instead.
    url = models.CharField(
        max_length=500,
        help_text="Prometheus (or Thanos/Mimir query) base URL, e.g. http://prometheus:9090",
    )
    # One Prometheus often serves several clusters: the label that tells them apart.
    cluster_label = models.CharField(
        max_length=100,
        blank=True,
        help_text="e.g. cluster; empty: this Prometheus sees one cluster",
    )
    cluster_value = models.CharField(
        max_length=200, blank=True, help_text="the label's value for this cluster; empty: its slug"
    )
    secret_env = models.CharField(
        max_length=63, blank=True,
        help_text="environment prefix of the credentials (PREFIX_TOKEN, or PREFIX_USERNAME "
        "and PREFIX_PASSWORD; each also as _FILE); empty: no authentication",
    )  # fmt: skip
    ca_file = models.CharField(
        max_length=500, blank=True, help_text="CA bundle to verify its TLS certificate"
    )
    timeout_seconds = models.FloatField(default=10.0)
    # deploy/monitoring/prometheus-rules.yaml records each GPU's 5-minute mean activity;
    # reading those is ~20x cheaper than the raw samples, but they only exist from the
    # moment the rules run (or where promtool backfilled them).
    recorded_activity = models.BooleanField(
        default=False,
        help_text="read the recorded 5-minute means (portal:dcgm_gpu_util:avg5m, "
        "portal:dcgm_gr_engine_active:avg5m from deploy/monitoring/prometheus-rules.yaml) "
        "instead of raw samples; turn on once they cover the history you need",
    )
    enabled = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"Prometheus {self.url} for {self.cluster}"

    def clean(self) -> None:
        errors = {}
        parts = urlsplit(self.url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            errors["url"] = "An http:// or https:// URL with a host (and no query)."
        if self.cluster_label and not LABEL_RE.fullmatch(self.cluster_label):
            errors["cluster_label"] = "A Prometheus label name: letters, digits, underscores."
        if self.secret_env and not PREFIX_RE.fullmatch(self.secret_env):
            errors["secret_env"] = "An environment prefix: capitals, digits, underscores."
        if not 0.5 <= (self.timeout_seconds or 0) <= 60:
            errors["timeout_seconds"] = "Between 0.5 and 60 seconds."
        if errors:
            raise ValidationError(errors)

    @property
    def selector_value(self) -> str:
        return self.cluster_value or self.cluster.slug
