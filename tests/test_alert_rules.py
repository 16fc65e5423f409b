"""The Prometheus alert rules (deploy/prometheus/): valid for promtool, each alert unit-tested
firing and quiet, on metrics this service exports, with a runbook section that exists.

promtool comes from Debian's `prometheus` package; `make test` installs it
(scripts/services.py up --tests), so a missing promtool fails here rather than skipping.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from cuebot_acct import metrics  # noqa: F401 - registers every metric the rules may name
from tests.test_docs_links import anchors

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "cuebot-acct.rules.yml"
RULE_TESTS = RULES_DIR / "cuebot-acct.rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, (
        "promtool is missing: `make test` installs it (scripts/services.py up --tests, Debian's prometheus package)"
    )
    return path


def run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60)


def test_promtool_check_rules_accepts_the_rules(promtool):
    done = run(promtool, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_promtool_test_rules_passes(promtool):
    done = run(promtool, "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def alert_names() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)$", RULES.read_text(), re.M)


def unit_tests() -> list[tuple[str, bool]]:
    """(alertname, whether it is expected to fire) of every alert_rule_test case."""
    cases = re.split(r"^\s*- eval_time:", RULE_TESTS.read_text(), flags=re.M)[1:]
    found = []
    for case in cases:
        name = re.search(r"alertname: (\w+)", case).group(1)
        quiet = re.search(r"exp_alerts: \[\]", case.split("alertname:")[1]) is not None
        found.append((name, not quiet))
    return found


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not():
    cases = unit_tests()
    for name in alert_names():
        assert (name, True) in cases, f"{name} is never tested firing"
        assert (name, False) in cases, f"{name} is never tested quiet"
    assert {name for name, _ in cases} == set(alert_names())


def test_every_alert_links_its_own_runbook_section():
    runbooks = dict(re.findall(r"- alert: (\w+)$.*?runbook: (\S+)$", RULES.read_text(), re.M | re.S))
    assert set(runbooks) == set(alert_names())
    for name, link in runbooks.items():
        path, anchor = link.split("#")
        assert (ROOT / path).is_file(), link
        assert anchor == name.lower() and anchor in anchors(ROOT / path), link


def test_the_rules_name_only_metrics_the_service_exports():
    exposition = generate_latest().decode()
    exported = set(re.findall(r"^# TYPE (\w+) ", exposition, re.M))
    exported |= {f"{name}_total" for name in exported}  # counters are exposed with _total
    named = set(re.findall(r"\b(cuebot_\w+)\b", RULES.read_text()))
    assert named, "no metric found in the rules"
    assert named <= exported, named - exported
