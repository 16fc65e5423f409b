"""scripts/server.py (make run / make stop) and scripts/services.py (make test), run as an
operator runs them: real processes, real PostgreSQL and Redis."""

import os
import signal
import socket
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.processes import ROOT, await_log_line, closed_port

sys.path.insert(0, str(ROOT / "scripts"))
from server import era_line, group_members  # noqa: E402

from tests.service_role import service_database


def script(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def service_env(db, tmp_path) -> dict[str, str]:
    """The suite's own database and Redis indexes for a `make run`-like service."""
    return {
        "DJANGO_SETTINGS_MODULE": "settings",
        **service_database(),
        "ACCOUNTING_REDIS_URL": settings.ACCOUNTING_REDIS_URL,
        "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
    }


@pytest.mark.django_db(transaction=True)
def test_stop_ends_the_task_cluster_and_the_web_server_and_says_so_once_they_are_gone(service_env, tmp_path):
    state = tmp_path / "state"
    started = script(
        "scripts/server.py", "start", "--bind", f"127.0.0.1:{closed_port()}", "--state-dir", str(state), env=service_env
    )
    assert started.returncode == 0, started.stdout + started.stderr
    pids = {name: int((state / f"{name}.pid").read_text()) for name in ("gunicorn", "qcluster")}
    await_log_line(state / "log" / "qcluster.log", "running")  # the cluster and its workers are up
    await_log_line(state / "log" / "gunicorn.log", "Booting worker")
    assert len(group_members(pids["qcluster"])) > 1  # its sentinel, workers, monitor, pusher

    stopped = script("scripts/server.py", "stop", "--state-dir", str(state), env=service_env)

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    for name, pid in pids.items():
        assert f"stopped {name} (pid {pid}); no process of it is left" in stopped.stdout
        assert group_members(pid) == [], name
        assert not (state / f"{name}.pid").exists()
    assert "SIGKILL" not in stopped.stdout  # SIGTERM to the cluster's main process is enough
    again = script("scripts/server.py", "stop", "--state-dir", str(state), env=service_env)
    assert again.returncode == 0 and again.stdout == ""


def test_stop_kills_a_process_that_ignores_sigterm_and_removes_the_pid_file_only_after(tmp_path):
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time  # qcluster\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert stubborn.stdout.readline() == "ready\n"  # SIGTERM is ignored from here on
        (tmp_path / "qcluster.pid").write_text(str(stubborn.pid))

        stopped = script("scripts/server.py", "stop", "--state-dir", str(tmp_path), "--grace", "0.5", env={})

        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"qcluster (pid {stubborn.pid}) still running 0.5 s after SIGTERM; sending SIGKILL" in stopped.stdout
        assert f"killed qcluster (pid {stubborn.pid}); no process of it is left" in stopped.stdout
        assert stubborn.wait(timeout=10) == -signal.SIGKILL
        assert not (tmp_path / "qcluster.pid").exists()
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
            stubborn.wait()


def test_a_stale_pid_file_of_a_reused_pid_is_not_signalled(tmp_path):
    (tmp_path / "qcluster.pid").write_text(str(os.getpid()))  # this pytest process is no qcluster
    stopped = script("scripts/server.py", "stop", "--state-dir", str(tmp_path), env={})
    assert stopped.returncode == 0
    assert "qcluster was not running (stale pid file removed)" in stopped.stdout
    assert not (tmp_path / "qcluster.pid").exists()


def test_services_up_for_the_tests_creates_no_database(db):
    database = connection.settings_dict
    name = f"cuebot_acct_never_{uuid.uuid4().hex[:8]}"
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{name}"

    done = script(
        "scripts/services.py", "up", "--tests", env={"DJANGO_SETTINGS_MODULE": "settings.test", "DATABASE_URL": url}
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "creating database" not in done.stdout
    with psycopg.connect(f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/postgres") as admin:
        assert admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None


def test_start_refuses_in_one_line_a_port_another_program_listens_on(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        bind = f"127.0.0.1:{other.getsockname()[1]}"
        started = script("scripts/server.py", "start", "--bind", bind, "--state-dir", str(tmp_path), env={})
    assert started.returncode == 1
    assert started.stderr.strip() == (
        f"server: {bind} is already in use by another program; stop it, or run `make run BIND=127.0.0.1:<free port>`"
    )
    assert not (tmp_path / "gunicorn.pid").exists()


def redis_answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


PING = "import redis, sys; redis.Redis(port=int(sys.argv[1])).ping(); sys.exit(3)"


def test_with_stops_the_redis_it_started_and_passes_on_the_commands_status():
    """`make test` and CI: no Redis answers on the configured port, so one is started for the
    command and stopped after it, even though the command failed."""
    port = closed_port()
    done = script(
        "scripts/services.py",
        "with",
        "--tests",
        "--",
        sys.executable,
        "-c",
        PING,
        str(port),
        env={"DJANGO_SETTINGS_MODULE": "settings.test", "TEST_REDIS_HOST": f"127.0.0.1:{port}"},
    )

    assert done.returncode == 3, done.stdout + done.stderr  # the command ran against the Redis, then failed
    assert f"services: starting Redis on 127.0.0.1:{port} (no persistence)" in done.stdout
    assert f"services: stopping the project-local Redis (redis-{port})" in done.stdout
    assert done.stdout.rstrip().endswith("services: stopped what this run started; nothing of it is left running")
    assert not redis_answers(port)
    assert not (ROOT / ".local" / "started" / f"redis-{port}.pid").exists()


def test_with_leaves_a_server_that_already_answered_running():
    from tests.redis_topology import redis_server

    with redis_server() as running:
        done = script(
            "scripts/services.py",
            "with",
            "--tests",
            "--",
            sys.executable,
            "-c",
            PING,
            str(running.port),
            env={"DJANGO_SETTINGS_MODULE": "settings.test", "TEST_REDIS_HOST": f"127.0.0.1:{running.port}"},
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert f"services: Redis answers on 127.0.0.1:{running.port}" in done.stdout
        assert "stopping" not in done.stdout
        assert running.client().ping()


def test_with_stops_what_it_started_when_it_is_terminated_mid_command():
    """A cancelled CI job: SIGTERM to the wrapper reaches the command, and the Redis is stopped."""
    port = closed_port()
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "scripts/services.py",
            "with",
            "--tests",
            "--",
            sys.executable,
            "-c",
            "import sys, time; print('command running', flush=True); time.sleep(600)",
        ],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "settings.test", "TEST_REDIS_HOST": f"127.0.0.1:{port}"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for line in wrapper.stdout:
            if line == "command running\n":
                break
        assert redis_answers(port)
        wrapper.send_signal(signal.SIGTERM)
        rest = wrapper.stdout.read()
        assert wrapper.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
    assert f"services: stopping the project-local Redis (redis-{port})" in rest
    assert not redis_answers(port)


def test_make_runs_last_line_offers_the_maestro_era_by_name_after_the_redis_demo():
    """The demo runs the design's Redis era; its last line says how to run the one sites run."""
    assert era_line("redis").endswith("make stop && ACCOUNTING_SCHEDULER=maestro make run")
    assert era_line("maestro") == "scheduler: ACCOUNTING_SCHEDULER=maestro"
