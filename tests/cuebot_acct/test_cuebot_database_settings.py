"""Which alias Cuebot's tables are read through, as the settings make it from CUEBOT_DATABASE_URL:
the service's own (one connection, one transaction, as before) unless the URL names another
database; and writes with it apart refused before anything runs (accounting.E006)."""

import json
import subprocess
import sys

from tests.processes import ROOT, closed_port, manage

REPORT = """
import importlib, json, os, sys
import settings
found = []
for case in json.loads(sys.stdin.read()):
    os.environ.pop("CUEBOT_DATABASE_URL", None)
    os.environ.update(case)
    importlib.reload(settings)
    cuebot = settings.DATABASES.get("cuebot")
    found.append({
        "alias": settings.CUEBOT_DATABASE_ALIAS,
        "databases": sorted(settings.DATABASES),
        "cuebot": cuebot and [cuebot["HOST"], cuebot["PORT"], cuebot["NAME"], cuebot["ENGINE"], cuebot["OPTIONS"]["options"]],
    })
print(json.dumps(found))
"""
OWN = "postgres://acct@own.example:5432/acct"
CASES = [
    {"DATABASE_URL": OWN},
    {"DATABASE_URL": OWN, "CUEBOT_DATABASE_URL": ""},
    # The same database under another role is the same database: one connection still.
    {"DATABASE_URL": OWN, "CUEBOT_DATABASE_URL": "postgres://reader@own.example:5432/acct"},
    {"DATABASE_URL": OWN, "CUEBOT_DATABASE_URL": "postgres://reader@standby.example:5433/cuebot"},
]


def read() -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        cwd=ROOT,
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "ACCOUNTING_SCHEDULER": "maestro", "CUEBOT_SCHEMA": "cue"},
    )
    return json.loads(done.stdout)


def test_cuebot_tables_are_read_through_the_services_own_alias_unless_the_url_names_another_database():
    unset, empty, same, standby = read()
    for case in (unset, empty, same):
        assert case == {"alias": "default", "databases": ["default"], "cuebot": None}
    assert standby == {
        "alias": "cuebot",
        "databases": ["cuebot", "default"],
        "cuebot": ["standby.example", 5433, "cuebot", "infra.postgresql", "-c search_path=cue"],
    }


def test_writes_on_with_cuebot_tables_apart_are_refused_by_the_check_with_its_id():
    done = manage(
        "check",
        "--database",
        "default",
        ACCOUNTING_SCHEDULER="maestro",
        ACCOUNTING_WRITES="on",
        OPENCUE_TABLES="existing",
        CUEBOT_DATABASE_URL=f"postgres://observer@127.0.0.1:{closed_port()}/cuebot",
    )
    (said,) = [line for line in done.stderr.splitlines() if "accounting.E006" in line]
    assert done.returncode == 1 and "ACCOUNTING_WRITES is on but CUEBOT_DATABASE_URL" in said
