"""The request pages' world (tests/discussion/conftest.py) serves the progress tests too."""

from tests.discussion.conftest import world  # noqa: F401
