"""Developer bootstrap: ``make demo`` and ``make test`` without installing Postgres or Redis.

The package only uses the standard library and psutil at import time, so it can run before
Django is importable (the Django project is only ever run as child processes).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """Where the embedded services keep their state: ``$DATA_DIR`` or ``<repo>/.data``."""
    value = os.environ.get("DATA_DIR")
    return Path(value).resolve() if value else REPO_ROOT / ".data"
