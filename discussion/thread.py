"""What a request page needs to draw its comment thread and form."""

from __future__ import annotations

from django.urls import reverse

from mig.models import MigRequest

from . import services
from .forms import CommentForm


def context(target, form: CommentForm | None = None) -> dict:
    name = (
        "discussion:mig-request-comment"
        if isinstance(target, MigRequest)
        else "discussion:request-comment"
    )
    return {
        "comments": list(services.thread(target)),
        "comment_form": form or CommentForm(),
        "comment_action": reverse(name, args=[target.pk]),
    }
