"""The label set form. It only parses text into labels and a selector; the rules (label
syntax, reserved prefixes, conflicts) live in ``nodelabels.models`` / ``services``, whose
field errors the views put back on the form."""

from __future__ import annotations

from django import forms

from inventory.models import Cluster, Node, base_product
from quotas.forms import PortalForm

from .models import LabelSet


def _split(text: str) -> list[str]:
    return [part.strip() for line in text.splitlines() for part in line.split(",") if part.strip()]


class LabelSetForm(PortalForm):
    NAMES, PRODUCT = "names", "product"

    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), empty_label="Choose a cluster")
    name = forms.CharField(max_length=100)
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), max_length=2000
    )
    labels = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="One key=value per line, e.g. example.org/gpu-type=a100-80gb. Keys under "
        "nvidia.com/, kubernetes.io/ and k8s.io/ belong to GPU Feature Discovery and the "
        "kubelet and are refused.",
    )
    selector = forms.ChoiceField(
        label="Select nodes",
        choices=[(NAMES, "By name"), (PRODUCT, "By GPU product")],
        widget=forms.RadioSelect,
        initial=PRODUCT,
    )
    node_names = forms.CharField(
        required=False,
        label="Node names",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="One per line (or comma-separated); used when selecting by name.",
    )
    gpu_product = forms.ChoiceField(
        required=False,
        label="GPU product",
        help_text="Every present and future node of this product (GFD nvidia.com/gpu.product, "
        "time-slicing suffix ignored); used when selecting by product.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, instance: LabelSet | None = None, **kwargs):
        if instance is not None:
            kwargs.setdefault("initial", self.initial_for(instance))
        super().__init__(*args, **kwargs)
        products = sorted(
            {base_product(p) for p in Node.objects.present().gpu().values_list(
                "gpu_product", flat=True).distinct()}
        )  # fmt: skip
        if instance is not None and instance.gpu_product and instance.gpu_product not in products:
            products.append(instance.gpu_product)
        self.fields["gpu_product"].choices = [("", "Choose a product")] + [(p, p) for p in products]
        if instance is not None:
            self.fields["cluster"].disabled = True
            self.fields["cluster"].help_text = "A label set stays on its cluster."

    @staticmethod
    def initial_for(label_set: LabelSet) -> dict:
        return {
            "cluster": label_set.cluster_id,
            "name": label_set.name,
            "description": label_set.description,
            "labels": "\n".join(f"{k}={v}" for k, v in label_set.labels.items()),
            "selector": LabelSetForm.PRODUCT if label_set.gpu_product else LabelSetForm.NAMES,
            "node_names": "\n".join(label_set.node_names),
            "gpu_product": label_set.gpu_product,
            "enabled": label_set.enabled,
        }

    def clean_labels(self) -> dict[str, str]:
        labels: dict[str, str] = {}
        for line in self.cleaned_data["labels"].splitlines():
            line = line.strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"'{line}': write each label as key=value.")
            key = key.strip()
            if key in labels:
                raise forms.ValidationError(f"'{key}' is given twice.")
            labels[key] = value.strip()
        return labels

    def domain_fields(self) -> dict:
        """The cleaned data as ``services.create_label_set`` / ``update_label_set`` take it."""
        d = self.cleaned_data
        by_product = d["selector"] == self.PRODUCT
        fields = {
            "name": d["name"],
            "description": d["description"],
            "labels": d["labels"],
            "node_names": [] if by_product else _split(d["node_names"]),
            "gpu_product": d["gpu_product"] if by_product else "",
            "enabled": d["enabled"],
        }
        if not self.fields["cluster"].disabled:
            fields["cluster"] = d["cluster"]
        return fields

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """Selector errors belong on the input the admin used."""
        if "node_names" in errors and self.cleaned_data.get("selector") == self.PRODUCT:
            errors = {**errors, "gpu_product": errors.pop("node_names")}
        super().add_service_errors(errors)
