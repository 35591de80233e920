"""Fixtures of the browser journeys: one Chromium per module, the demo seeded per test.

The demo (``seed_demo`` against the simulated demo fleet, as ``make demo`` runs it) is
seeded for each test: ``live_server`` needs pytest-django's transactional database, which
is emptied after every test, so a module-wide seed would be gone for the second test. The
modules keep to one or two journeys each.

Playwright's sync API keeps an asyncio loop open in this thread, where Django refuses ORM
calls (SynchronousOnlyOperation) unless ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set: the browser
fixture sets it while it runs, as Django's documentation advises for such environments
(no coroutine touches the database here; the live server answers from its own thread).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from tests.e2e import browser as e2e

ROOT = Path(__file__).resolve().parents[2]
DEMO_FLEET = ROOT / "simcluster" / "fleets" / "demo.yaml"
# The demo's GPU Operator with short delays (the demo's mount delay is 3 s): a MIG run
# takes a couple of seconds. The worker's MIG_CONFIG_MOUNT_SECONDS is a little longer.
FAST_OPERATOR = {"configMountDelay": 0.3, "devicePluginRestart": 0.1, "clientPauseTimeout": 60}
MIG_WORKER_ENV = {"MIG_POLL_SECONDS": "0.2", "MIG_CONFIG_MOUNT_SECONDS": "0.5"}


@pytest.fixture(scope="session")
def axe_js() -> str:
    return e2e.axe_source()


@pytest.fixture(scope="module")
def browser():
    api = e2e.sync_playwright()
    executable = e2e.chromium()
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with api() as p:
            chromium = p.chromium.launch(executable_path=executable, headless=True)
            yield chromium
            chromium.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Remember each phase's report on the test item (the checker's teardown reads it)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def checker(request, axe_js, browser):
    """The page checks of this test; screenshots in .data/test-artifacts/e2e/<test>/.

    After a failed journey, every open page is screenshot as ``failed-<n>.png`` and the
    page problems found before the failure are printed; the test's contexts are closed.
    """
    name = request.node.name.removeprefix("test_")
    checker = e2e.Checker(name, axe_js)
    yield checker
    report = getattr(request.node, "rep_call", None)
    pages = [page for context in browser.contexts for page in context.pages]
    if report is not None and report.failed:
        for n, page in enumerate(pages, 1):
            try:
                page.screenshot(path=str(checker.folder / f"failed-{n}.png"), full_page=True)
            except Exception as err:  # a crashed page: the failure itself says more
                print(f"no screenshot of {page.url}: {err}")
        if checker.problems and not checker.asserted:
            print("Page problems before the failure:\n" + "\n".join(checker.problems))
    for context in browser.contexts:
        context.close()


@pytest.fixture
def demo(browser, transactional_db, tmp_path, settings):
    """The demo fleet in the simulator, ``seed_demo`` run against it; yields the sim
    (``sim.admin_kubeconfig_path``: the cluster admin's kubeconfig)."""
    from tests import kubesim

    fleet = yaml.safe_load(DEMO_FLEET.read_text())
    fleet["gpuOperator"] = {**fleet["gpuOperator"], **FAST_OPERATOR}
    sim = kubesim.start(fleet, tmp_path, mig_step_s=0.05)
    settings.DATA_DIR = tmp_path
    try:
        call_command("seed_demo", kubeconfig=str(sim.kubeconfig_path), stdout=io.StringIO())
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def worker(demo, start_worker):
    """A real Celery worker on the test database: applies quotas and runs MIG steps."""
    return start_worker(**MIG_WORKER_ENV)
