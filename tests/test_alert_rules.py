"""The Prometheus rules (deploy/prometheus/): valid for promtool, each alert unit-tested firing and
quiet, the recording rules unit-tested, on metrics this service exports, with a runbook section
that exists; grouped by era, so that every alert a site on current OpenCue loads can fire there.

promtool comes from Debian's `prometheus` package; `make test` installs it
(scripts/services.py up --tests), so a missing promtool fails here rather than skipping.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from accounting.usage.gauges import NAMES as READ_AT_SCRAPE
from infra import metrics  # noqa: F401 - registers every metric the rules may name
from tests.test_docs_links import anchors

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "deploy" / "prometheus"
# Every era's, then the main-branch eras' (the Rust scheduler: NOTIFY and Redis), then the Redis era's.
EVERY_ERA = RULES_DIR / "cuebot-acct.rules.yml"
RULE_FILES = (EVERY_ERA, RULES_DIR / "cuebot-acct.scheduler.rules.yml", RULES_DIR / "cuebot-acct.redis.rules.yml")
RULE_TESTS = RULES_DIR / "cuebot-acct.rules.test.yml"
# The metrics only the main-branch eras set (docs/runbook.md): an alert on one of them never fires on Maestro.
MAIN_BRANCH_ONLY = {
    "cuebot_redis_publish_misconfigured",
    "cuebot_acct_release_publish_failures_total",
    "cuebot_acct_release_clamped_total",
    "cuebot_acct_limit_publish_failures_total",
    "cuebot_acct_reseed_skipped_total",
    "cuebot_acct_drift_fields",
    "cuebot_acct_drift_last_check_timestamp_seconds",
    "cuebot_acct_switch_seed_failures_total",
}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, (
        "promtool is missing: `make test` installs it (scripts/services.py up --tests, Debian's prometheus package)"
    )
    return path


def run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda path: path.name)
def test_promtool_check_rules_accepts_the_rules(promtool, rules):
    done = run(promtool, "check", "rules", rules.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names(rules)) + len(recorded_names(rules))} rules found" in done.stdout


def test_promtool_test_rules_passes(promtool):
    done = run(promtool, "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    loaded = re.findall(r"^  - (\S+)$", RULE_TESTS.read_text(), re.M)
    assert loaded == [path.name for path in RULE_FILES]


def alert_names(*files: Path) -> list[str]:
    return [name for path in files or RULE_FILES for name in re.findall(r"^\s*- alert: (\w+)$", path.read_text(), re.M)]


def recorded_names(*files: Path) -> list[str]:
    return [
        name for path in files or RULE_FILES for name in re.findall(r"^\s*- record: (\S+)$", path.read_text(), re.M)
    ]


def unit_tests() -> list[tuple[str, bool]]:
    """(alertname, whether it is expected to fire) of every alert_rule_test case."""
    cases = re.split(r"^\s*- eval_time:", RULE_TESTS.read_text(), flags=re.M)[1:]
    found = []
    for case in cases:
        if "alertname:" not in case:
            continue  # a recording rule's promql_expr_test
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


def test_every_recording_rule_is_evaluated_by_a_unit_test():
    tested = RULE_TESTS.read_text()
    for name in recorded_names():
        assert re.search(rf"^\s+- expr: .*\b{re.escape(name)}\b", tested, re.M), name


def test_every_alert_links_its_own_runbook_section():
    for rules in RULE_FILES:
        runbooks = dict(re.findall(r"- alert: (\w+)$.*?runbook: (\S+)$", rules.read_text(), re.M | re.S))
        assert set(runbooks) == set(alert_names(rules))
        for name, link in runbooks.items():
            path, anchor = link.split("#")
            assert (ROOT / path).is_file(), link
            assert anchor == name.lower() and anchor in anchors(ROOT / path), link


def exported() -> set[str]:
    """Every metric name /metrics may carry: the processes' and the gauges read at scrape time."""
    exposition = generate_latest().decode()
    names = set(re.findall(r"^# TYPE (\w+) ", exposition, re.M)) | set(READ_AT_SCRAPE)
    return names | {f"{name}_total" for name in names}  # counters are exposed with _total


def metric_names(text: str) -> set[str]:
    """The series a rule file names: the service's metrics and the recorded ones (level:metric:operations)."""
    return set(re.findall(r"(?<![\w:])((?:\w+:)?cuebot_\w+(?::\w+)?)", text))


def test_the_rules_name_only_metrics_the_service_exports_or_the_rules_record():
    named = {name for rules in RULE_FILES for name in metric_names(rules.read_text())}
    assert named, "no metric found in the rules"
    assert named <= exported() | set(recorded_names()), named - exported() - set(recorded_names())


def test_a_maestro_site_loads_only_alerts_that_can_fire_there():
    """cuebot-acct.rules.yml, all a site on current OpenCue loads, names no metric that only the
    main-branch eras set; the other two files hold every alert on those."""
    every_era = metric_names(EVERY_ERA.read_text())
    assert not every_era & MAIN_BRANCH_ONLY, every_era & MAIN_BRANCH_ONLY
    elsewhere = {name for rules in RULE_FILES[1:] for name in metric_names(rules.read_text())}
    assert elsewhere == MAIN_BRANCH_ONLY


def test_the_first_hour_names_the_alerts_a_maestro_site_loads():
    """docs/attaching.md's step 6 says what `promtool check rules` finds in the file a Maestro site
    loads, and names each of its alerts."""
    step = re.search(
        r"^6\. \*\*Load the alerts\*\*.*?(?=^7\. )", (ROOT / "docs" / "attaching.md").read_text(), re.M | re.S
    )
    text = step.group(0)
    alerts, recorded = alert_names(EVERY_ERA), recorded_names(EVERY_ERA)
    assert f"finds {len(alerts) + len(recorded)} rules): {len(alerts)} alerts" in " ".join(text.split())
    assert f"the {len(recorded)} recording rules" in " ".join(text.split())
    assert set(re.findall(r"`(Cuebot\w+)`", text)) == set(alerts)
