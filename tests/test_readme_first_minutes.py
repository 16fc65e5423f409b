"""The README's "The first five minutes", run as a newcomer runs it (issue 22).

The commands are read from README.md and the Makefile themselves, so neither can drift from
what is tested: `make run`'s recipe brings the service up (on a database, Redis indexes and a
port of the test's own, pid files and logs in a directory of its own), then every command of
the section's first block runs in one bash session, in order, with the environment a newcomer
has (the configured URLs and nothing of the suite's). Only the README's port is replaced. The
"Everyday commands" block names placeholders (SHOW, ALLOC), so each of its lines is parsed by
its command's own parser instead of run.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

import psycopg
import pytest
import redis
from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.db import connection
from psycopg import sql

from tests.processes import ROOT, await_log_line, closed_port

sys.path.insert(0, str(ROOT / "scripts"))
from server import group_members  # noqa: E402

README_PORT = "127.0.0.1:8000"
SECTION = re.search(r"^## The first five minutes\n(.*?)^## ", (ROOT / "README.md").read_text(), re.S | re.M).group(1)
FIRST_MINUTES, EVERYDAY = re.findall(r"```sh\n(.*?)```", SECTION, re.S)


def recipe(target: str) -> list[str]:
    """The Makefile's recipe lines for `target`, as make would run them."""
    makefile = (ROOT / "Makefile").read_text()
    body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    return [line.strip() for line in body.splitlines()]


def shell_commands(block: str) -> list[str]:
    """The block's commands, one per complete shell command (a quoted string may span lines):
    a line joins the next until bash reads the lines so far as complete."""
    commands, pending = [], ""
    for line in block.splitlines():
        pending += line + "\n"
        if subprocess.run(["bash", "-n"], input=pending, capture_output=True, text=True).returncode == 0:
            if pending.strip():
                commands.append(pending.rstrip("\n"))
            pending = ""
    assert not pending, f"an unfinished command at the end of the block:\n{pending}"
    return commands


def newcomer_environment(*, database_url: str) -> dict[str, str]:
    """A fresh shell's variables plus the configuration a newcomer sets: none of the suite's
    (DJANGO_SETTINGS_MODULE=settings.test above all)."""
    shell = {
        name: os.environ[name] for name in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER") if name in os.environ
    }
    return {
        **shell,
        "DATABASE_URL": database_url,
        "ACCOUNTING_REDIS_URL": settings.ACCOUNTING_REDIS_URL,
        "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
    }


def run_in_bash(commands: list[str], *, env: dict[str, str], out: Path) -> list[tuple[str, int, str, str]]:
    """Every command in one bash session (variables carry over, as in a terminal), each one's
    status, stdout and stderr kept apart. pipefail, so `X=$(cmd | tail -1)` fails with cmd."""
    script = ["set -o pipefail"]
    for number, command in enumerate(commands):
        script.append(f"{{ {command}\n}} >{out}/{number}.out 2>{out}/{number}.err; echo $? >{out}/{number}.status")
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return [
        (
            command,
            int((out / f"{n}.status").read_text()),
            (out / f"{n}.out").read_text(),
            (out / f"{n}.err").read_text(),
        )
        for n, command in enumerate(commands)
    ]


def server_connection(dbname: str = "postgres") -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**{**params, "dbname": dbname}, autocommit=True)


@pytest.fixture
def own_database(request) -> str:
    """A database name of this test's own, absent before (`make run` creates it) and dropped after."""
    name = f"test_{settings.DATABASES['default']['NAME']}_first_minutes"[:63]
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with server_connection() as admin:
        admin.execute(drop)  # left by a run that was killed
    yield name
    with server_connection() as admin:
        admin.execute(drop)


@pytest.fixture
def made_run(own_database, tmp_path):
    """`make run`'s recipe, line by line, on the test's database, Redis indexes and port, with
    its pid files and logs in a directory of its own; yields (bind, environment). The service
    is stopped afterwards, whatever the test's outcome."""
    params = connection.get_connection_params()
    url = f"postgres://{params['user']}@{params.get('host') or '127.0.0.1'}:{params.get('port') or 5432}/{own_database}"
    env, state, bind = newcomer_environment(database_url=url), tmp_path / "state", f"127.0.0.1:{closed_port()}"
    era = re.search(r"^DEMO_ERA := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    lines = [
        line.replace("$(DEMO_ERA)", era)
        .replace("$$", "$")
        .replace("$(PY)", ".venv/bin/python")
        .replace("$(BIND)", bind)
        for line in recipe("services") + recipe("run")
    ]
    assert lines[-1].startswith(f"{era.replace('$$', '$')} .venv/bin/python scripts/server.py start"), lines
    lines[-1] += f" --state-dir {state}"  # never the .local/ pid files of a `make run` in this tree
    try:
        for line in lines:
            done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        await_log_line(state / "log" / "gunicorn.log", "Booting worker")
        yield bind, env
    finally:
        stopped = subprocess.run(
            [sys.executable, "scripts/server.py", "stop", "--state-dir", str(state)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        left = {pid: group_members(pid) for pid in (int(p.read_text()) for p in state.glob("*.pid"))}
        for pid, members in left.items():
            if members:
                os.killpg(pid, signal.SIGKILL)
        assert stopped.returncode == 0 and not any(left.values()), stopped.stdout + stopped.stderr


def subscription_cores() -> dict[str, int]:
    """Each subscription key's booked cores in the service's accounting Redis."""
    with redis.Redis.from_url(settings.ACCOUNTING_REDIS_URL, decode_responses=True) as client:
        return {key: int(client.hget(key, "int_cores") or 0) for key in client.scan_iter("acct:sub:*")}


@pytest.mark.slow
@pytest.mark.superuser  # `make run` seeds the demo farm as the database's owner, as a newcomer does
def test_the_first_five_minutes_run_as_written_against_make_runs_service(made_run, own_database, tmp_path):
    bind, env = made_run
    commands = shell_commands(FIRST_MINUTES.replace(README_PORT, bind))
    out = tmp_path / "out"
    out.mkdir()
    with psycopg.connect(env["DATABASE_URL"]) as db:
        procs_before = db.execute("SELECT count(*) FROM proc").fetchone()[0]
        idle_before = dict(db.execute("SELECT pk_host, int_cores_idle FROM host").fetchall())
    redis_before = subscription_cores()

    ran = run_in_bash(commands, env=env, out=out)

    for command, status, stdout, stderr in ran:
        assert status == 0, f"{command}\nexited {status}\n{stdout}{stderr}"
    said = {
        word: stdout
        for word in ("createsuperuser", "curl", "acct_drift")
        for command, _, stdout, _ in ran
        if word in command
    }
    assert "Superuser created successfully." in said["createsuperuser"]
    release = json.loads(said["curl"])
    assert release["branch"] == "scheduler"  # demo01 is scheduler-managed: Redis hears the release
    assert release["names"]["show"] == "demo01"
    assert all(release["names"][kind] not in (None, "gone") for kind in ("alloc", "folder", "job", "layer", "dept"))
    assert "1 show(s)" in said["acct_drift"] and ", 0 drifted" in said["acct_drift"]
    with psycopg.connect(env["DATABASE_URL"]) as db:
        assert db.execute("SELECT count(*) FROM proc WHERE pk_proc = %s", [release["proc_id"]]).fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM proc").fetchone() == (procs_before - 1,)
        idle_after = db.execute("SELECT int_cores_idle FROM host WHERE pk_host = %s", [release["host_id"]]).fetchone()[
            0
        ]
    assert idle_after == idle_before[release["host_id"]] + release["cores_centicores"]  # the host has its cores back
    subscription = f"acct:sub:{release['show_id']}:{release['alloc_id']}"
    assert (release["cores"], subscription_cores()[subscription]) == (
        1,
        redis_before[subscription] - 1,
    )  # "one core less"
    # The pages the section's text sends a newcomer to next.
    prose = re.sub(r"```.*?```", "", SECTION, flags=re.S)
    paths = re.findall(rf"http://{README_PORT}(/\S*?)[)`,\s]", prose) + re.findall(r"`(/\w+)`", prose)
    assert {"/admin/", "/api/v1/docs", "/metrics", "/healthz"} <= set(paths), paths
    for path in paths:
        with urlopen(f"http://{bind}{path}", timeout=30) as answer:
            assert answer.status == 200, path


def everyday_lines() -> list[tuple[str, list[str]]]:
    """(command, arguments) per line of the block: comments dropped, [optional] parts kept,
    `a|b` alternatives each on a line of its own."""
    lines = []
    for line in EVERYDAY.splitlines():
        words = shlex.split(line.split("#")[0].replace("[", " ").replace("]", " "))
        assert words[0] == "manage.py", line
        options = [[]]
        for word in words[2:]:
            options = [done + [choice] for done in options for choice in word.split("|")]
        lines += [(words[1], arguments) for arguments in options]
    return lines


@pytest.mark.parametrize("line", everyday_lines(), ids=lambda line: " ".join([line[0], *line[1]]))
def test_every_everyday_command_exists_and_takes_what_the_readme_shows(line, capsys):
    name, arguments = line
    assert name in get_commands(), f"no management command {name!r}"
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--help"])
    assert exited.value.code == 0 and f"usage: manage.py {name}" in capsys.readouterr().out
    parser.allow_abbrev = False  # an option the README spells must be the option, not a prefix of one
    parser.parse_args(arguments)  # a CommandError names an option or argument it does not take
