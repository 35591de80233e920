"""The comment form of the request pages; the rules are ``services.clean_body``."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from quotas.forms import PortalForm

from . import services
from .models import BODY_MAX


class CommentForm(PortalForm):
    body = forms.CharField(
        label="Comment",
        error_messages={"required": "Write a comment first."},  # as services.clean_body
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "maxlength": BODY_MAX}),
        help_text=f"Plain text, up to {BODY_MAX:,} characters. The other party is e-mailed.",
    )

    def clean_body(self) -> str:
        try:
            return services.clean_body(self.cleaned_data.get("body"))
        except ValidationError as err:
            raise ValidationError(err.message_dict["body"]) from err
