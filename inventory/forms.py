"""The connect/edit form of a cluster (admins). Credential rules live in ``connect.py``
(through ``Cluster.clean``), shared with the API and the admin."""

from __future__ import annotations

import re

from django import forms

from .models import MAX_PREFLIGHT_NAMESPACES, Cluster


class NamespaceListField(forms.CharField):
    """Namespace names separated by commas, spaces or new lines -> a sorted list."""

    widget = forms.Textarea(attrs={"rows": 2})

    def to_python(self, value):
        text = super().to_python(value) or ""
        return sorted({n for n in re.split(r"[\s,]+", text) if n})

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list) else value


class ClusterForm(forms.ModelForm):
    bearer_token = forms.CharField(
        required=False,
        max_length=4096,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Never shown again. When editing, leave empty to keep the stored token.",
    )
    api_url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", label="API server URL"
    )
    preflight_namespaces = NamespaceListField(
        required=False,
        label="Namespaces to manage",
        help_text="Checked for existing GPU quotas and LimitRanges, besides the team "
        f"namespaces already on this cluster (at most {MAX_PREFLIGHT_NAMESPACES}).",
    )
    save_anyway = forms.BooleanField(
        required=False,
        label="Save anyway",
        help_text="Save although the preflight found errors (recorded in the audit trail).",
    )

    class Meta:
        model = Cluster
        fields = [
            "slug", "name", "description", "auth_method", "kubeconfig_path",
            "kubeconfig_context", "api_url", "bearer_token", "bearer_token_file", "ca_cert",
            "verify_tls", "sync_enabled", "preflight_namespaces",
        ]  # fmt: skip
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "ca_cert": forms.Textarea(attrs={"rows": 4}),
        }
        labels = {
            "slug": "Slug (in URLs and commands)",
            "auth_method": "How the portal authenticates",
            "ca_cert": "CA certificate (PEM)",
            "verify_tls": "Verify the API server's TLS certificate",
            "sync_enabled": "Sync inventory from this cluster",
        }
        help_texts = {
            "kubeconfig_path": "An absolute path the portal's web and worker processes can read.",
            "kubeconfig_context": "Empty: the kubeconfig's current-context.",
            "bearer_token_file": "A mounted secret; preferred to a token stored in the database.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = self.instance.pk is not None and not self.instance._state.adding
        self.stored_token = self.instance.bearer_token if self.editing else ""
        if self.editing:
            self.fields["slug"].disabled = True

    def clean_bearer_token(self):
        token = self.cleaned_data.get("bearer_token", "")
        return token or self.stored_token

    def clean(self):
        data = super().clean()
        typed = bool(self.data.get(self.add_prefix("bearer_token")))
        method = data.get("auth_method")
        if method != Cluster.AuthMethod.TOKEN or (data.get("bearer_token_file") and not typed):
            data["bearer_token"] = ""  # no unused secret stays in the database
        return data
