"""deploy/monitoring/prometheus-rules.yaml: promtool's checks and unit tests (a series that
fires and one that does not for every alert), and the conventions every alert keeps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.prereqs import need

from .conftest import alerts, prometheus_rule, records

UNIT_TESTS = Path(__file__).with_name("rules-test.yaml")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [need("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_check_rules(rules_file):
    result = _promtool("check", "rules", str(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts()) + len(records())} rules found" in result.stdout


def test_promtool_unit_tests_pass(rules_file, tmp_path):
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [str(rules_file)]
    path = tmp_path / "rules-test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_unit_tests_cover_every_alert_firing_and_not():
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert firing == set(alerts()) == quiet


def test_a_broken_rule_is_caught(tmp_path):
    """promtool really checks: a rule with a wrong expression fails."""
    bad = tmp_path / "bad.yaml"
    rule = {"alert": "Broken", "expr": "max without (instance (portal_cluster_stale)"}
    bad.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [rule]}]}))
    assert _promtool("check", "rules", str(bad)).returncode != 0


def test_every_alert_has_for_severity_summary_and_description():
    assert prometheus_rule()["apiVersion"] == "monitoring.coreos.com/v1"
    assert prometheus_rule()["kind"] == "PrometheusRule"
    for name, rule in alerts().items():
        assert rule.get("for"), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert {"summary", "description"} <= set(rule["annotations"]), name
        # Each description states a figure: a value or a query into the series.
        assert "{{" in rule["annotations"]["description"], name


def test_the_prometheus_rule_matches_the_operator_crd_schema():
    """Validated against the PrometheusRule CRD's openAPIV3Schema (vendored from
    prometheus-operator, see crds/), as the API server would on apply."""
    import jsonschema

    crd = yaml.safe_load(Path(__file__).with_name("crds").joinpath(
        "monitoring.coreos.com_prometheusrules.yaml").read_text())  # fmt: skip
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _python_patterns(version["schema"]["openAPIV3Schema"])
    jsonschema.validate(prometheus_rule(), schema)
    broken = prometheus_rule()
    broken["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError as err:
        assert "ten minutes" in str(err)
    else:
        raise AssertionError("the schema accepted a bad duration")


def _python_patterns(node):
    """The CRD's patterns are Go RE2: ``^(?i)...`` puts the flag after ``^``, which
    Python's re refuses; ``(?i)^...`` means the same."""
    if isinstance(node, dict):
        out = {k: _python_patterns(v) for k, v in node.items()}
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"].removeprefix("^(?i)")
        return out
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node
