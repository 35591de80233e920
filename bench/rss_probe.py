"""Peak RSS of one process doing what a worker or a web process does at fleet size
(issue #23 section 5), run in a fresh process so the figure is its own:

    python bench/rss_probe.py refresh          # the beat's telemetry.summary.refresh_all()
    python bench/rss_probe.py pages URL...     # a web process serving these pages (admin)

``DATABASE_URL`` names the bench's database. Prints one JSON object: ``peak_rss_mb`` (the
process's VmHWM), ``baseline_mb`` (after django.setup(), before the work) and
``seconds``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import peak_rss_mb  # noqa: E402


def main() -> int:
    mode, urls = sys.argv[1], sys.argv[2:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from telemetry import summary

    baseline = peak_rss_mb()
    started = time.perf_counter()
    if mode == "refresh":
        result = summary.refresh_all()
        if any(isinstance(v, str) for v in result.values()):
            raise SystemExit(f"the figures were not computed: {result}")
    elif mode == "pages":
        client = Client()
        client.force_login(get_user_model().objects.filter(is_staff=True).first())
        for url in urls:
            status = client.get(url).status_code
            if status != 200:
                raise SystemExit(f"{url} answered {status}")
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - started
    print(json.dumps({"peak_rss_mb": peak_rss_mb(), "baseline_mb": baseline, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
