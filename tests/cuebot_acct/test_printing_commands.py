"""Commands that only print (help, a command's --help, --version) run on any settings, with no
database and no scheduler named; every command that acts still refuses an unnamed scheduler
in one line (infra.era.require_named, infra.startup.only_prints)."""

import socket

import pytest

from infra.startup import only_prints
from tests.processes import closed_port, manage

UNNAMED = {"ACCOUNTING_SCHEDULER": "", "DJANGO_DEBUG": "false"}
REFUSAL = "cuebot-acct: ACCOUNTING_SCHEDULER is not set (DEBUG is off); accepted: maestro"


@pytest.fixture
def listening_port():
    """A port that accepts TCP connections and never answers, to tell whether anyone connected."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        yield listener


def connected(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize(
    "args",
    [(), ("help",), ("help", "acct_reseed"), ("acct_reseed", "--help"), ("check", "-h"), ("--version",), ("version",)],
    ids=lambda args: " ".join(args) or "nothing",
)
def test_help_prints_without_a_scheduler_and_connects_to_no_database(args, listening_port):
    port = listening_port.getsockname()[1]
    done = manage(*args, **UNNAMED, DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/nowhere")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "cuebot-acct:" not in done.stderr
    assert not connected(listening_port)


@pytest.mark.parametrize(
    "args",
    [
        ("check",),
        ("migrate", "--check"),
        ("makemigrations", "--check", "--dry-run"),
        ("set_scheduler_managed", "help", "on"),
        ("shell", "-c", "print(1)", "--", "--help"),
    ],
    ids=" ".join,
)
def test_every_command_that_acts_still_refuses_an_unnamed_scheduler(args):
    done = manage(*args, **UNNAMED, DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(REFUSAL)


def test_makemigrations_check_runs_none_of_the_database_checks():
    """Without a database named, the accounting checks do not run; Django's own migration-history
    check still tries the database and only warns when it is away."""
    done = manage(
        "makemigrations",
        "--check",
        "--dry-run",
        ACCOUNTING_SCHEDULER="redis",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere",
    )
    assert done.returncode == 0, done.stderr
    assert "No changes detected" in done.stdout and "accounting." not in done.stderr


@pytest.mark.parametrize(
    ("argv", "prints"),
    [
        (["manage.py"], True),
        (["manage.py", "help"], True),
        (["manage.py", "migrate", "--help"], True),
        (["manage.py", "migrate"], False),
        (["manage.py", "set_scheduler_managed", "help", "on"], False),
        (["manage.py", "dbshell", "--", "-h"], False),
    ],
)
def test_only_a_printing_command_line_is_let_through(argv, prints):
    assert only_prints(argv) is prints
