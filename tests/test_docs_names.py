"""What the pages name is what the code has (issue 47): every `manage.py` command and option, every
UPPER_CASE setting, every alert and every `cuebot_*` metric a page names exists; the old switches
are named only as the old switches; every count written in the operator's pages is counted from
the code; and the pages an operator of a current-OpenCue site reads stay a ten-minute read.

Each check reads every page (README.md and docs/*.md) as it stands, so the next stale name fails
here rather than in an operator's terminal.
"""

import re
import shlex
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import get_commands, load_command_class

from tests.pages import DOCS, DOCUMENTS, OPERATOR_PAGES, ROOT, section, split_fenced, words
from tests.test_alert_rules import EVERY_ERA, alert_names, exported, recorded_names
from tests.test_docs_configuration import variables_the_code_reads

CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A command line in a code span: a command's name, then an option or a placeholder (`acct_reseed
# --show NAME`, `set_scheduler_managed SHOW on|off`); `manage.py NAME …` wherever it is written.
COMMAND_SPAN = re.compile(r"^([a-z]+(?:_[a-z]+)+) (?=-|[A-Z]+\b)(.*)$")
MANAGE_PY = re.compile(r"\bmanage\.py ([a-z_]+)([^\n`#|;)]*)")
UPPER_NAME = re.compile(r"(?<![\w.$/-])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")
ALERT = re.compile(r"\bCuebot(?:Acct|Redis)[A-Z]\w*")
METRIC = re.compile(r"(?<![\w:./-])((?:\w+:)?cuebot_(?:acct|redis)_(?:\w|\{[\w,]+\}(?=_))+(?::\w+)?)")
OLD_SWITCHES = ("ACCOUNTING_REDIS_ENABLED", "ACCOUNTING_NOTIFY_ENABLED")

# UPPER_CASE names pages may write that are neither this service's settings nor its code's names:
# other programs' variables, SQL, Django's own settings the service does not set.
NOT_OURS = {
    "GF_PATHS_PROVISIONING": "Grafana's container image's",
    "PGOPTIONS": "libpq's",
    "DJANGO_SUPERUSER_PASSWORD": "Django's createsuperuser's",
    "DJANGO_SETTINGS_MODULE": "Django's, set by manage.py",
    "ATOMIC_REQUESTS": "a key of Django's DATABASES",
    "CONN_HEALTH_CHECKS": "a key of Django's DATABASES",
    "OPT_NON_STR_KEYS": "orjson's",
    "DISABLE_HISTORY": "a key of Cuebot's config table",
}


def page_text(page: Path) -> str:
    return page.read_text()


def command_lines() -> list[tuple[str, str, str]]:
    """(page, command, the rest of its line) for every command a page names."""
    found = []
    for page in DOCUMENTS:
        text = page_text(page)
        for name, rest in MANAGE_PY.findall(text):
            found.append((page.name, name, rest))
        prose, _ = split_fenced(text)
        for span in CODE_SPAN.findall(prose):
            match = COMMAND_SPAN.match(span)
            if match and match.group(1) in get_commands():
                found.append((page.name, match.group(1), match.group(2)))
    return found


def options_of(rest: str) -> list[str]:
    """The --options a command line spells (`[--show NAME]` and `--max-cores N` alike)."""
    try:
        tokens = shlex.split(rest.replace("[", " ").replace("]", " "))
    except ValueError:  # an unbalanced quote in prose around the command
        tokens = rest.split()
    return [token.split("=")[0] for token in tokens if re.match(r"^--[a-z]", token)]


def test_the_command_scan_finds_the_commands_the_pages_name():
    named = {name for _, name, _ in command_lines()}
    assert {"acct_drift", "acct_reseed", "set_scheduler_managed", "setup_schedules", "check_services"} <= named


@pytest.mark.parametrize(("page", "name", "rest"), command_lines(), ids=lambda value: str(value)[:40])
def test_every_command_a_page_names_exists_and_takes_its_options(page, name, rest):
    assert name in get_commands(), f"{page} names `manage.py {name}`: no such command"
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    known = {option for action in parser._actions for option in action.option_strings}
    unknown = [option for option in options_of(rest) if option not in known]
    assert unknown == [], f"{page}: `{name}` takes no {unknown}"


def names_of_the_code() -> set[str]:
    """Module-level UPPER_CASE names the service's code defines (constants a page may cite)."""
    found = set()
    for directory in ("accounting", "cuebot_acct", "infra", "shows", "settings", "simulator", "bench", "scripts"):
        for path in (ROOT / directory).rglob("*.py"):
            found.update(re.findall(r"^([A-Z][A-Z0-9_]+)\s*(?::[^=\n]*)?=", path.read_text(), re.M))
    return found


def upper_names() -> list[tuple[str, str]]:
    """(page, name) for every UPPER_CASE name in a page's code spans, code blocks and `NAME=`s."""
    found = []
    for page in DOCUMENTS:
        prose, code = split_fenced(page_text(page))
        for span in CODE_SPAN.findall(prose):
            found += [(page.name, name) for name in UPPER_NAME.findall(span)]
        found += [(page.name, name) for name in re.findall(r"^\s*#?\s*([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)=", code, re.M)]
    return sorted(set(found))


def test_every_setting_a_page_names_is_read_by_the_code():
    # The old switches are read by name (settings: infra.era.OLD_SWITCHES, "if name in os.environ").
    read, ours = variables_the_code_reads() | set(OLD_SWITCHES), names_of_the_code()
    unknown = [
        f"{page}: {name}"
        for page, name in upper_names()
        if name not in read and name not in ours and not hasattr(settings, name) and name not in NOT_OURS
    ]
    assert unknown == [], "names no code reads (a renamed or removed setting?)"


def units(text: str) -> list[str]:
    """A page's paragraphs and table rows (a row is read alone: it is its own statement)."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        rows = [line for line in lines if line.lstrip().startswith("|")]
        found += rows
        rest = "\n".join(line for line in lines if not line.lstrip().startswith("|"))
        if rest.strip():
            found.append(rest)
    return found


def test_the_old_switches_are_named_only_as_the_old_switches():
    """ACCOUNTING_REDIS_ENABLED and ACCOUNTING_NOTIFY_ENABLED still work, as earlier deployments set
    them; a page that names one elsewhere tells a reader to set what ACCOUNTING_SCHEDULER replaced."""
    stale = [
        f"{page.name}: {' '.join(unit.split())[:120]}"
        for page in DOCUMENTS
        for unit in units(page_text(page))
        if any(name in unit for name in OLD_SWITCHES) and "old switch" not in unit
    ]
    assert stale == []


def alert_mentions() -> list[tuple[str, str]]:
    return sorted({(page.name, name) for page in DOCUMENTS for name in ALERT.findall(page_text(page))})


def test_every_alert_a_page_names_is_a_rule():
    rules = set(alert_names())
    unknown = [f"{page}: {name}" for page, name in alert_mentions() if name not in rules]
    assert alert_mentions() and unknown == []


def test_every_runbook_section_is_an_alert_and_every_alert_has_one():
    sections = {
        name: page
        for page in (DOCS / "runbook.md", DOCS / "runbook-main-branch.md")
        for name in re.findall(r"^## (Cuebot\w+)$", page_text(page), re.M)
    }
    assert set(sections) == set(alert_names())
    every_era = set(alert_names(EVERY_ERA))
    assert {name for name, page in sections.items() if page.name == "runbook.md"} == every_era


def expanded(name: str) -> list[str]:
    """`a_{b,c}_d` as a_b_d and a_c_d."""
    brace = re.search(r"\{([\w,]+)\}", name)
    if not brace:
        return [name]
    return [n for choice in brace.group(1).split(",") for n in expanded(name.replace(brace.group(0), choice, 1))]


def metric_mentions() -> list[tuple[str, str]]:
    found = set()
    for page in DOCUMENTS:
        for mention in METRIC.findall(page_text(page)):
            found.update((page.name, name) for name in expanded(mention.rstrip("_")))
    return sorted(found)


def test_every_metric_a_page_names_is_exported_or_recorded():
    known = exported() | set(recorded_names())
    prefixes = {name.rsplit("_", 1)[0] for name in known}
    unknown = [f"{page}: {name}" for page, name in metric_mentions() if name not in known and name not in prefixes]
    assert metric_mentions() and unknown == []


# Counts written in the operator's pages: a number (in words or digits; "one" is too often an
# article to read as one) then up to three words, then what it counts. Each must be one COUNTS computes from the code, or a fact of OpenCue's.
NUMBER = r"(?:\d[\d,]*|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty)"
COUNTED = re.compile(
    rf"\b({NUMBER})\s+((?:[\w'’-]+\s+){{0,3}}?)(alerts?|rules|recording rules|tables|privileges|grants|panels|rows|schedules|commands|metrics|series)\b",
    re.I,
)
WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
# Counts that are not this code's: OpenCue's five accounting tables (subscription, layer_resource,
# job_resource, folder_resource, point), and the README's section on `make run` and `make test`.
NOT_COUNTED_FROM_CODE = {"five tables", "five accounting tables", "two commands"}


# What a count of each names, on these pages: the rule file a current-OpenCue site loads.
COUNTS = {
    "rules": lambda: len(alert_names(EVERY_ERA)) + len(recorded_names(EVERY_ERA)),
    "alerts": lambda: len(alert_names(EVERY_ERA)),
    "recording rules": lambda: len(recorded_names(EVERY_ERA)),
}


def as_number(text: str) -> int:
    return WORDS.index(text.lower()) if text.lower() in WORDS else int(text.replace(",", ""))


def counts_written() -> list[tuple[str, str, int, str]]:
    """(page, the phrase, the number, what it counts) for every count in the operator's pages' prose."""
    found = []
    for page in OPERATOR_PAGES:
        prose, _ = split_fenced(page_text(page))
        for match in COUNTED.finditer(" ".join(prose.split())):
            phrase = " ".join(match.group(0).split())
            found.append((page.name, phrase, as_number(match.group(1)), match.group(3).lower()))
    return found


def test_every_count_in_the_operators_pages_is_counted_from_the_code():
    for page, phrase, number, counted in counts_written():
        if phrase.lower() in NOT_COUNTED_FROM_CODE:
            continue
        assert counted in COUNTS, f"{page}: {phrase!r}: a count no test derives; derive it in COUNTS or drop it"
        assert number == COUNTS[counted](), f"{page}: {phrase!r}, but the code has {COUNTS[counted]()}"


# The ten minutes: the README's first screen, the page that deploys (deploy.md) and the runbook of
# the alerts a Maestro site loads, read at about 250 words a minute.
TEN_MINUTES = 2500


def ten_minute_path() -> dict[str, int]:
    return {
        "README.md, the first screen": words(page_text(ROOT / "README.md").split("\n## ", 1)[0]),
        **{f"{name}.md": words(page_text(DOCS / f"{name}.md")) for name in ("deploy", "runbook")},
    }


def test_a_current_opencue_site_reads_what_it_needs_in_ten_minutes():
    path = ten_minute_path()
    assert sum(path.values()) <= TEN_MINUTES, path


# What the README's first screen says (issue 47): what the service does on current OpenCue and on
# the main-branch builds, who calls the release API in each, and what the drift check costs.
FIRST_SCREEN = (
    "**On current OpenCue**",
    "**On OpenCue's main-branch builds**",
    "On current OpenCue nothing calls its release API",
    "a release client on Cuebot's side calls",
    "**What the drift check costs a production database**",
    "`statement_timeout`",
)


def test_the_readmes_first_screen_says_what_a_site_needs_first():
    first_screen = page_text(ROOT / "README.md").split("\n## ", 1)[0]
    assert [said for said in FIRST_SCREEN if said not in first_screen] == []


# On the pages a current-OpenCue site reads, what is said of Redis, of publishing and of the release
# API's callers holds in some eras only: each such sentence names the era it is about.
ERA_BOUND = re.compile(r"Redis|publish|release client|release API")
ERA_NAMED = ("main-branch", "Redis era", "NOTIFY", "no Redis", "current OpenCue", "Maestro")


def test_what_the_maestro_path_says_of_redis_and_releases_names_its_era():
    path = {
        "README.md": page_text(ROOT / "README.md").split("\n## Two commands", 1)[0],
        "attaching.md": section(page_text(DOCS / "attaching.md"), "## A first hour at a current-OpenCue site"),
        **{f"{name}.md": page_text(DOCS / f"{name}.md") for name in ("deploy", "production", "runbook", "grafana")},
    }
    unbound = [
        f"{page}: {sentence[:120]}"
        for page, text in path.items()
        for unit in units(split_fenced(text)[0])
        for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z*`(])", " ".join(unit.split()))
        if ERA_BOUND.search(sentence) and not any(era in sentence for era in ERA_NAMED)
    ]
    assert unbound == []
