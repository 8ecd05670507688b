"""The shipped dashboards and alert rules: valid, and naming only metrics that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from streams.observability.metrics import Metrics
from tests.shared_data import REPO_ROOT, skip_or_fail

DEPLOY = REPO_ROOT / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana").glob("*.json"))
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\btideway_[a-z0-9_]+")


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def _rule_exprs() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def _series() -> set[str]:
    return {s for m in Metrics(process=False).catalogue() for s in m.series_names()}


def test_both_dashboards_are_shipped() -> None:
    assert [p.name for p in DASHBOARDS] == ["batch.json", "stream.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_grafana_dashboard_json(path: Path) -> None:
    dashboard = orjson.loads(path.read_bytes())
    assert dashboard["uid"] and dashboard["title"].startswith("Tideway")
    assert isinstance(dashboard["schemaVersion"], int)
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"]) == ("datasource", "datasource")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] == "timeseries" and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_every_metric_a_dashboard_or_rule_names_exists() -> None:
    series = _series()
    referenced: dict[str, str] = {}
    for path in DASHBOARDS:
        for expr in _exprs(orjson.loads(path.read_bytes())):
            referenced |= {name: path.name for name in METRIC.findall(expr)}
    for expr in _rule_exprs():
        referenced |= {name: ALERTS.name for name in METRIC.findall(expr)}
    missing = {name: where for name, where in referenced.items() if name not in series}
    assert not missing, f"not in streams/observability/metrics.py: {missing}"
    assert referenced  # the regex did find the names


def test_every_metric_is_on_a_dashboard() -> None:
    shown = {name for path in DASHBOARDS
             for expr in _exprs(orjson.loads(path.read_bytes()))
             for name in METRIC.findall(expr)}
    catalogue = Metrics(process=False).catalogue()
    absent = [m.name for m in catalogue if not set(m.series_names()) & shown]
    assert not absent, f"metrics no dashboard shows: {absent}"


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        skip_or_fail("promtool is not installed (Debian package `prometheus`; .ci/run installs it)")
        raise AssertionError("unreachable")
    return binary


def test_promtool_accepts_the_alert_rules() -> None:
    done = subprocess.run([_promtool(), "check", "rules", str(ALERTS)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_fires_on_its_condition_and_not_on_a_quiet_system() -> None:
    tests = DEPLOY / "prometheus" / "alerts_test.yml"
    done = subprocess.run([_promtool(), "test", "rules", str(tests)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {case["alertname"] for t in yaml.safe_load(tests.read_text())["tests"]
              for case in t["alert_rule_test"] if case.get("exp_alerts")}
    defined = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
               for r in g["rules"]}
    assert tested == defined
