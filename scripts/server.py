#!/usr/bin/env python
"""Start or stop the web server (gunicorn) and the task cluster (qcluster) in the background.

Pid files and logs live under .local/ (or --state-dir). `start` refuses to start a second
copy. Each process leads a process group of its own (its workers are in it); `stop` sends
SIGTERM to the group's leader only (django-q2's cluster deadlocks when every process of
the group gets it at once, and gunicorn's master stops its workers itself), waits until the
whole group is gone, and only then says so and removes the pid file. A group still there
after --grace seconds is killed (SIGKILL); one that even that does not end is reported, its
pid file kept, and the exit status is 1.
"""

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
from infra.serving import gunicorn_args  # noqa: E402  (no Django: the command line only)

PROCESSES = ("gunicorn", "qcluster")
KILL_WAIT_SECONDS = 5


def pidfile(state: Path, name: str) -> Path:
    return state / f"{name}.pid"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a process, None if there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[2])


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat and stat[0] != "Z" and stat[1] == pgid:
                members.append(int(entry.name))
    return members


def is_ours(pid: int, name: str) -> bool:
    """The pid is still the process we started (a pid file can outlive it and the pid be reused)."""
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return False


def running(state: Path, name: str) -> int | None:
    """The pid (= process group) recorded for `name` if anything of that group still runs."""
    try:
        pid = int(pidfile(state, name).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    stat = _stat(pid)
    if stat is not None and stat[0] != "Z" and not is_ours(pid, name):
        return None  # the pid now belongs to another program
    return pid if group_members(pid) else None


def spawn(state: Path, name: str, command: list[str]) -> None:
    if running(state, name):
        print(f"server: {name} already running (pid {running(state, name)})")
        return
    log_path = state / "log" / f"{name}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pidfile(state, name).write_text(str(process.pid))
    try:
        process.wait(timeout=2)  # a process that fails at start exits at once
    except subprocess.TimeoutExpired:
        print(f"server: {name} started (pid {process.pid}), log in {log_path}")
        return
    sys.exit(f"server: {name} exited at start; see {log_path}:\n" + log_path.read_text()[-2000:])


def gunicorn_command(bind: str) -> list[str]:
    """The deployed web server; bench/release.py measures this very command."""
    return [str(BIN / "gunicorn"), *gunicorn_args(bind=bind)]


def demo_secret_key(state: Path) -> str:
    """The demo's own secret key, made once and kept in the state directory (never the
    published development key, which the served processes refuse)."""
    path = state / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def port_taken(bind: str) -> bool:
    """Whether something else already listens on `bind` (host:port): gunicorn would die on it
    a few seconds after start, while the URL kept answering with that other program."""
    host, _, port = bind.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        try:
            probe.bind((host.strip("[]"), int(port)))
        except OSError:
            return True
    return False


def start(state: Path, bind: str) -> None:
    if not running(state, "gunicorn") and port_taken(bind):
        sys.exit(
            f"server: {bind} is already in use by another program; stop it, or run `make run BIND=127.0.0.1:<free port>`"
        )
    (state / "log").mkdir(parents=True, exist_ok=True)
    if not os.environ.get("DJANGO_SECRET_KEY"):
        os.environ["DJANGO_SECRET_KEY"] = demo_secret_key(state)
    metrics_dir = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(state / "metrics")))
    if not any(running(state, name) for name in PROCESSES):
        shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    spawn(state, "gunicorn", gunicorn_command(bind))
    spawn(state, "qcluster", [str(BIN / "python"), "manage.py", "qcluster"])
    print(f"cuebot-acct is running: http://{bind}/api/v1/docs  http://{bind}/admin/  http://{bind}/metrics")
    era = os.environ.get("ACCOUNTING_SCHEDULER", "")
    if era == "redis":
        print(
            "the demo runs the design's Redis era (ACCOUNTING_SCHEDULER=redis), which OpenCue never released; "
            "a site on OpenCue v1.34.20 or later sets ACCOUNTING_SCHEDULER=maestro"
        )
    else:
        print(f"scheduler: ACCOUNTING_SCHEDULER={era}")


def wait_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_one(state: Path, name: str, grace: float) -> bool:
    """True once nothing of `name`'s process group runs (the pid file is removed then)."""
    pid = running(state, name)
    if pid is None:
        if pidfile(state, name).exists():
            print(f"server: {name} was not running (stale pid file removed)")
        pidfile(state, name).unlink(missing_ok=True)
        return True
    stat = _stat(pid)
    try:
        if stat is not None and stat[0] != "Z":
            os.kill(pid, signal.SIGTERM)
        else:  # the leader is gone, its children are not: nothing left to deadlock
            os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    how = "stopped"
    if not wait_gone(pid, grace):
        print(
            f"server: {name} (pid {pid}) still running {grace:g} s after SIGTERM; sending SIGKILL to its process group"
        )
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        how = "killed"
        if not wait_gone(pid, KILL_WAIT_SECONDS):
            left = ", ".join(map(str, group_members(pid)))
            print(f"server: {name} is STILL RUNNING (pids {left}); pid file {pidfile(state, name)} kept")
            return False
    pidfile(state, name).unlink(missing_ok=True)
    print(f"server: {how} {name} (pid {pid}); no process of it is left")
    return True


def stop(state: Path, grace: float) -> None:
    # The task cluster first: the web server keeps answering while it drains.
    results = [stop_one(state, name, grace) for name in reversed(PROCESSES)]
    if not all(results):
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--bind", default="127.0.0.1:8000", help="gunicorn's address (default: %(default)s)")
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".local", help="where pid files and logs are kept (default: .local/)"
    )
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds to wait after SIGTERM before SIGKILL (default: %(default)s)"
    )
    arguments = parser.parse_args()
    if arguments.action == "start":
        start(arguments.state_dir, arguments.bind)
    else:
        stop(arguments.state_dir, arguments.grace)
