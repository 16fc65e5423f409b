"""Every module asks the era object (infra.era), never the settings it is derived from.

ACCOUNTING_SCHEDULER is parsed once into infra.era.Era; a direct read of the two booleans
the settings derived from it, or of the functions that came before the object, is a second
vocabulary for the same question, and fails here wherever it appears outside the era module.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("accounting", "shows", "cuebot_acct", "infra", "settings", "simulator", "bench", "scripts", "tests")
TOP_FILES = ("manage.py", "gunicorn.conf.py")
DIRECT_READS = re.compile(
    r"\.\s*ACCOUNTING_(?:REDIS|NOTIFY)_ENABLED\b"  # settings.X, a fixture's alias.X
    r"|\bACCOUNTING_(?:REDIS|NOTIFY)_ENABLED\s*=(?!=)"  # override_settings(X=...)
    r"|getattr\([^)]*ACCOUNTING_(?:REDIS|NOTIFY)_ENABLED"
    r"|\bschedulers\.|\b(?:cuebot_acct|infra)\.schedulers\b|\bimport schedulers\b"
    r"|\bcuebot_owns_every_show\(|\bsend\.enabled\(|_send\.enabled\("
)
# The era module, its test and the settings, which still map the old switches of earlier
# deployments to a name.
ALLOWED = {"infra/era.py", "tests/infra/test_era.py", "tests/test_era_reads.py"}
ALLOWED_TREES = ("settings/",)


def direct_reads(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if DIRECT_READS.search(line)]


def source_files() -> list[str]:
    found = [ROOT / name for name in TOP_FILES]
    found += [path for tree in TREES for path in (ROOT / tree).rglob("*") if path.suffix in (".py", ".html")]
    return sorted(str(path.relative_to(ROOT)) for path in found if path.is_file())


def test_the_pattern_catches_each_old_way_of_asking_and_not_the_object():
    old = [
        "if settings.ACCOUNTING_REDIS_ENABLED:",
        "maestro_era.ACCOUNTING_NOTIFY_ENABLED = True",
        "with override_settings(ACCOUNTING_REDIS_ENABLED=False):",
        'getattr(settings, "ACCOUNTING_NOTIFY_ENABLED")',
        "from infra.schedulers import cuebot_owns_every_show",
        "name = schedulers.current()",
        "if notify_send.enabled():",
        "maestro = cuebot_owns_every_show()",
    ]
    new = [
        "if era().keeps_redis:",
        "maestro = era().cuebot_owns_every_show",
        'settings.ACCOUNTING_SCHEDULER = "maestro"',
        "The NOTIFY era (ACCOUNTING_NOTIFY_ENABLED on in earlier deployments) hears five caps live",
    ]
    assert direct_reads("\n".join(old + new)) == old


def test_no_module_reads_the_derived_settings_outside_the_era_object():
    offenders = {
        name: reads
        for name in source_files()
        if name not in ALLOWED and not name.startswith(ALLOWED_TREES)
        if (reads := direct_reads((ROOT / name).read_text()))
    }
    assert offenders == {}, "ask infra.era.era() instead"
