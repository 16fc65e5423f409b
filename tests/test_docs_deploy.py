"""docs/deploy.md deploys a current-OpenCue site by itself, and what it says holds (issue 55).

Each kind of claim that once did not hold has its test here, so that the next one fails: the
grants are the ones the checks verify; the environment file passes `check --deploy`; the install
runs the database checks; the units pass `systemd-analyze verify`; the scrape target is one the
web unit answers; the alert timings any page states are the rule file's; and what writes on
schedules is what the schedules make.
"""

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from accounting.tasks import SCHEDULES
from shows.attach import grant_statements
from tests.pages import DOCS, DOCUMENTS, ROOT, section, split_fenced, words
from tests.test_alert_rules import RULE_FILES

DEPLOY = DOCS / "deploy.md"
PROSE_BUDGET = 1500


def deploy_text() -> str:
    return DEPLOY.read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", deploy_text(), re.S)


def environment_file() -> dict[str, str]:
    (block,) = [block for block in blocks("sh") if "DATABASE_URL=" in block]
    return dict(re.findall(r"^([A-Z][A-Z0-9_]+)=(\S+)", block, re.M))


def units() -> dict[str, str]:
    """Each unit file the page writes out, by its path."""
    return {re.match(r"# (\S+)\n", body).group(1): body for body in blocks("ini")}


def test_the_page_is_at_most_1500_words_of_prose():
    prose, _ = split_fenced(deploy_text())
    assert words(prose) <= PROSE_BUDGET


def test_the_page_needs_no_other_page_to_deploy():
    """Its links lead only to what comes after a deployment (upgrading) or to files it names."""
    links = re.findall(r"\]\(([^)#]+)", deploy_text())
    assert set(links) <= {"upgrading.md"}, links


def test_the_grants_are_the_ones_the_checks_verify_with_connect_and_the_schema():
    granted = [
        [" ".join(s.split()) + ";" for s in block.split(";") if s.strip().startswith("GRANT")]
        for block in blocks("sql")
    ]
    observer, writer = granted
    assert observer[0] == "GRANT CONNECT ON DATABASE cuebot TO cuebot_acct;"
    assert observer[1:] == grant_statements(role="cuebot_acct", writes=False)
    assert writer == grant_statements(role="cuebot_acct")
    assert "CREATE SCHEMA cuebot_acct AUTHORIZATION cuebot_acct;" in blocks("sql")[0]
    assert environment_file()["OWN_TABLES_SCHEMA"] == "cuebot_acct"


def test_check_deploy_is_clean_with_the_environment_file_as_written():
    written = environment_file()
    assert written["ACCOUNTING_SCHEDULER"] == "maestro" and "ACCOUNTING_WRITES" not in written
    written["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)  # the placeholder, filled as the page says
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **written},
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "System check identified no issues (0 silenced)."), done.stderr


def test_the_install_runs_the_database_checks():
    """Django runs the checks tagged `database` (Cuebot's tables, their columns, the grants) only for
    a command that names the database: a `check --deploy` alone would call a site clean unchecked."""
    install = section(deploy_text(), "## 4. The database side")
    checks = re.findall(r"^acct check\b.*$", install, re.M)
    assert checks == ["acct check --deploy --database default"]
    # benchmarks.md records what past runs of the settings checks said, not how to check a site.
    for page in (page for page in DOCUMENTS if page.name != "benchmarks.md"):
        for line in re.findall(r"`[^`\n]*\bcheck --deploy\b[^`\n]*`", page.read_text()):
            assert "--database default" in line, (page.name, line)


@pytest.fixture
def unit_root(tmp_path) -> Path:
    """A root for `systemd-analyze --root`: the page's units, the system's own units, and the
    programs and file they name."""
    for path, body in units().items():
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_text(body)
    (tmp_path / "usr/lib/systemd").mkdir(parents=True)
    (tmp_path / "usr/lib/systemd/system").symlink_to("/lib/systemd/system")
    for body in units().values():
        program = Path(re.search(r"^ExecStart=(\S+)", body, re.M).group(1))
        (tmp_path / program.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / program.relative_to("/")).write_text("#!/bin/sh\n")
        (tmp_path / program.relative_to("/")).chmod(0o755)
    (tmp_path / "etc/cuebot-acct").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/cuebot-acct/env").write_text("")
    return tmp_path


def test_systemd_analyze_verify_passes_both_units_without_a_word(unit_root):
    assert set(units()) == {
        "/etc/systemd/system/cuebot-acct-web.service",
        "/etc/systemd/system/cuebot-acct-tasks.service",
    }
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian's systemd package)"
    done = subprocess.run([analyze, f"--root={unit_root}", "verify", *units()], capture_output=True, text=True)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_systemd_analyze_verify_would_catch_a_unit_that_runs_nothing(unit_root):
    (unit_root / "opt/cuebot-acct/bin/gunicorn").unlink()
    done = subprocess.run(
        ["systemd-analyze", f"--root={unit_root}", "verify", "/etc/systemd/system/cuebot-acct-web.service"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "is not executable" in done.stderr


def scrape_targets() -> list[tuple[str, str]]:
    """(page, host:port) of every Prometheus target written in a page."""
    found = []
    for page in DOCUMENTS:
        for targets in re.findall(r"targets: \[([^\]]*)\]", page.read_text()):
            found += [(page.name, target) for target in re.findall(r'"([^"]+)"', targets)]
    return found


def test_every_scrape_target_is_one_the_web_unit_as_written_answers():
    """The unit's --bind must listen where Prometheus connects, and Django answers 400 to a Host
    that DJANGO_ALLOWED_HOSTS does not list."""
    web = units()["/etc/systemd/system/cuebot-acct-web.service"]
    bind_host, bind_port = re.search(r"--bind (\S+):(\d+)", web).groups()
    allowed = environment_file()["DJANGO_ALLOWED_HOSTS"].split(",")
    assert scrape_targets()
    for page, target in scrape_targets():
        host, port = target.rsplit(":", 1)
        assert port == bind_port, (page, target)
        assert bind_host in ("0.0.0.0", host), (page, target, bind_host)
        assert host in allowed, (page, target, allowed)


SCRAPE = """
import django, sys
django.setup()
from django.test import Client
for host in sys.argv[1:]:
    print(Client().get("/metrics", HTTP_HOST=host).status_code)
"""


@pytest.mark.django_db(transaction=True)
def test_the_scrape_answers_200_over_plain_http_with_the_environment_file_as_written():
    """The service as the environment file sets it (DJANGO_HTTPS=true redirects plain HTTP, but not
    /metrics), in a process of its own, on this suite's database: Prometheus's request for the page's
    target is answered, one for a name the file does not list is not."""
    (page, target), *_ = scrape_targets()
    database = connection.settings_dict
    written = {
        **environment_file(),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        "OWN_TABLES_SCHEMA": "",
        "PROMETHEUS_MULTIPROC_DIR": "",
        "DJANGO_SETTINGS_MODULE": "settings",
    }
    stranger = "cuebot-acct-1.example.com:" + target.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-c", SCRAPE, target, stranger],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **written},
        capture_output=True,
        text=True,
    )
    assert done.stdout.split() == ["200", "400"], done.stderr


def fires_after_minutes() -> dict[str, float]:
    """For each alert that waits on an age: minutes from the last event to the alert firing, from
    its rule (the age its expression compares, plus its `for`)."""
    rule = re.compile(r"- alert: (\w+)\n\s+expr: (.+)\n(?:\s+for: (\d+)m\n)?")
    found = {}
    for path in RULE_FILES:
        for name, expression, waited in rule.findall(path.read_text()):
            age = re.search(r"(?:time\(\) - .*|_age_seconds\)?) > (\d+)$", expression.strip())
            if age:
                found[name] = int(age.group(1)) / 60 + int(waited or 0)
    return found


# "`CuebotAcctX` fires after 20 minutes", "CuebotAcctX](…) fires past 10 minutes"
STATED = re.compile(r"(CuebotAcct\w+)`?\]?(?:\([^)]*\))? fires (?:after|past|within) (\d+) minutes")


def test_every_alert_timing_a_page_states_is_the_rule_files():
    timings = fires_after_minutes()
    assert {"CuebotAcctCuebotTablesCheckStale", "CuebotAcctTaskClusterDown"} <= set(timings)
    stated = []
    for page in DOCUMENTS:
        prose = " ".join(split_fenced(page.read_text())[0].split())
        stated += [(page.name, name, int(minutes)) for name, minutes in STATED.findall(prose)]
        for name in re.findall(r"^## (CuebotAcct\w+)$", page.read_text(), re.M):
            what = re.search(r"\*\*What\*\*:(.*?)\*\*Check\*\*", section(page.read_text(), f"## {name}"), re.S)
            stated += [(page.name, name, int(m)) for m in re.findall(r"for (?:over )?(\d+) minutes", what.group(1))]
    assert ("runbook.md", "CuebotAcctCuebotTablesCheckStale", 20) in stated
    wrong = [
        (page, name, said, timings[name]) for page, name, said in stated if name in timings and said != timings[name]
    ]
    assert wrong == []


def test_what_writes_on_schedules_is_what_the_page_says(maestro_era):
    """Writes on is not only repairs when asked: it adds schedules, each named with its interval."""
    maestro_era.ACCOUNTING_WRITES = False
    off = {spec.name for spec in SCHEDULES if spec.unwanted_because() is None}
    maestro_era.ACCOUNTING_WRITES = True
    added = [spec for spec in SCHEDULES if spec.unwanted_because() is None and spec.name not in off]
    assert added
    repair = " ".join(section(deploy_text(), "## 9. Letting it repair (optional)").split())
    for spec in added:
        assert f"adds `{spec.name}` every {spec.every} minutes" in repair
