"""The README's configuration table names every environment variable the code reads."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("settings", "cuebot_acct", "accounting", "shows", "scripts")
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


def configuration_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]


def test_the_scan_finds_what_settings_read():
    assert {"DATABASE_URL", "ACCOUNTING_REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"} <= variables_the_code_reads()


def test_every_variable_the_code_reads_is_in_the_readme_configuration_table():
    section = configuration_section()
    missing = sorted(name for name in variables_the_code_reads() if f"`{name}`" not in section)
    assert missing == []
