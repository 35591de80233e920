from django.apps import AppConfig


class DiscussionConfig(AppConfig):
    """Comment threads on requests (issue #12 section 2) and the request pages' live parts."""

    name = "discussion"
