"""quotas/wait_estimate.py: an estimated wait from grants and how long pods ran, or why
there is none (pure; the waiting page's own test reads it through the API)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from quotas.wait_estimate import MIN_RUNS, estimate, expected_end

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
H = 3600.0


def test_a_pod_is_expected_to_run_the_median_residual_of_longer_runs():
    runs = [1 * H, 2 * H, 4 * H, 8 * H, 10 * H]
    # Started 3 h ago: runs that lasted longer had 1, 5 and 7 h left; the median is 5 h.
    assert expected_end(NOW - timedelta(hours=3), runs, NOW) == NOW + timedelta(hours=5)
    # Just started: the median of all runs.
    assert expected_end(NOW, runs, NOW) == NOW + timedelta(hours=4)
    # Longer than any recorded run: no expected end.
    assert expected_end(NOW - timedelta(hours=11), runs, NOW) is None


def test_the_first_time_enough_is_free_counting_what_is_free_now():
    runs = [2 * H] * MIN_RUNS
    holders = [(4, NOW - timedelta(hours=1)), (4, NOW - timedelta(minutes=30))]
    # 2 free now; the first pod frees 4 in 1 h: 6 >= 5.
    est = estimate(5, 2, holders, runs, [], NOW, "H100")
    assert est.at == NOW + timedelta(hours=1)
    assert "2026-12-04 13:00 UTC (in 1 h)" in est.text
    assert f"{MIN_RUNS} GPU pods of H100 ended in the last 30 days, after a median of 2 h" in (
        est.text
    )
    # 9 needed: both pods must end.
    assert estimate(9, 2, holders, runs, [], NOW, "H100").at == NOW + timedelta(hours=1, minutes=30)
    # More than all of it: no estimate, said.
    none = estimate(11, 2, holders, runs, [], NOW, "H100")
    assert none.at is None and none.text.startswith("No estimated wait: even when")


def test_grants_that_start_add_and_grants_that_end_take_away():
    tomorrow, later = NOW + timedelta(days=1), NOW + timedelta(days=2)
    est = estimate(4, 2, [], [], [(tomorrow, 2)], NOW, "ml-vision")
    assert (est.at, est.text.endswith("when a grant of the team begins.")) == (tomorrow, True)
    # A grant ending before the pod frees its GPUs cancels them out.
    holders = [(2, NOW)]
    runs = [3 * 24 * H] * MIN_RUNS  # pods of it run 3 days
    est = estimate(4, 2, holders, runs, [(tomorrow, 2), (NOW + timedelta(hours=1), -2)], NOW, "x")
    assert est.at == NOW + timedelta(days=3)
    # Events in the past are not events.
    assert estimate(4, 2, [], [], [(NOW - timedelta(hours=1), 2)], NOW, "x").at is None
    assert estimate(4, 2, [], [], [(later, 1)], NOW, "x").at is None


def test_too_little_history_is_no_estimate_and_says_how_much_there_is():
    est = estimate(4, 0, [(8, NOW)], [H] * (MIN_RUNS - 1), [], NOW, "H100")
    assert est.at is None
    assert est.text.startswith(f"No estimated wait: {MIN_RUNS - 1} pods of H100 ended")
    assert f"an estimate needs {MIN_RUNS}" in est.text
    assert "1 pod of" in estimate(4, 0, [(8, NOW)], [H], [], NOW, "H100").text
    # Room now is no wait.
    assert estimate(4, 4, [], [], [], NOW, "H100").at == NOW


def test_nothing_held_and_no_grant_coming_says_nothing_will_free_them():
    est = estimate(4, 0, [], [H] * MIN_RUNS, [], NOW, "H100", "ml-vision")
    assert est.at is None
    assert est.text.startswith("No estimated wait: no pod of ml-vision holds any now")
