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
    # The model's rule (check_api_url: https, or http for CLUSTER_HTTP_HOSTS), as in the API.
    api_url = forms.CharField(required=False, max_length=500, label="API server URL")
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


class SelectorField(forms.CharField):
    """Node label matches, one ``key=value`` per line -> a dict (the model checks the
    names and values: ``GpuClass.clean``)."""

    widget = forms.Textarea(attrs={"rows": 3, "spellcheck": "false"})

    def to_python(self, value):
        text = super().to_python(value) or ""
        selector: dict[str, str] = {}
        for n, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            key, sep, val = line.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(f"Line {n}: write a label as key=value.")
            if key.strip() in selector:
                raise forms.ValidationError(f"Line {n}: {key.strip()} is given twice.")
            selector[key.strip()] = val.strip()
        return selector

    def prepare_value(self, value):
        if isinstance(value, dict):
            return "\n".join(f"{k}={v}" for k, v in value.items())
        return value


class GpuClassForm(forms.Form):
    """Define (cluster and slug too) or edit (name, selector, weight) a GPU class."""

    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.order_by("name"), to_field_name="slug", empty_label=None
    )
    slug = forms.SlugField(
        max_length=63,
        help_text="A DNS-style name, fixed once the class exists (used in the API and in "
        "Kueue ResourceFlavor names).",
    )
    name = forms.CharField(max_length=100, label="Display name")
    selector = SelectorField(
        label="Node labels",
        help_text="The nodes of the class: every label must match, one key=value per line, "
        "e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.",
    )
    weight = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=4,
        help_text="Optional weight or price per GPU-hour (showback).",
    )  # fmt: skip

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing:  # cluster and slug are fixed once the class exists
            del self.fields["cluster"], self.fields["slug"]

    def clean_selector(self):
        selector = self.cleaned_data["selector"]
        if not selector:
            raise forms.ValidationError("Give at least one node label.")
        return selector

    def add_model_errors(self, exc) -> None:
        """``GpuClass.full_clean``'s errors on the fields they name (others on the form)."""
        for field, errors in exc.message_dict.items():
            self.add_error(field if field in self.fields else None, errors)
