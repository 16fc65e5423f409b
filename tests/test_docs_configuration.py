"""docs/configuration.md's table names every environment variable the code reads, and names no other."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("settings", "cuebot_acct", "infra", "accounting", "shows", "scripts")
READS = re.compile(
    r"""(?:env\.\w+\(|os\.environ\.get\(|os\.environ\.setdefault\(|os\.environ\[|os\.getenv\()\s*["']([A-Z][A-Z0-9_]+)["']"""
)
# Django's own variable, set by manage.py and wsgi.py rather than by an operator.
NOT_CONFIGURATION = {"DJANGO_SETTINGS_MODULE"}


def variables_the_code_reads() -> set[str]:
    names = set()
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            names.update(READS.findall(path.read_text()))
    return names - NOT_CONFIGURATION


def configuration_table() -> str:
    return (ROOT / "docs" / "configuration.md").read_text()


def test_the_scan_finds_what_settings_read():
    assert {"DATABASE_URL", "ACCOUNTING_REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"} <= variables_the_code_reads()


def test_every_variable_the_code_reads_is_in_the_configuration_table():
    table = configuration_table()
    missing = sorted(name for name in variables_the_code_reads() if f"`{name}`" not in table)
    assert missing == []


def test_every_variable_of_the_table_is_one_the_code_reads():
    rows = re.findall(r"^\| (`[A-Z].*?) \|", configuration_table(), re.M)
    named = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row)}
    # The old switches are read by name from a tuple (settings: "if name in os.environ").
    old_switches = set(re.findall(r'"(ACCOUNTING_\w+_ENABLED)"', (ROOT / "settings" / "__init__.py").read_text()))
    assert named - variables_the_code_reads() - old_switches == set()
