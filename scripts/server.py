#!/usr/bin/env python
"""Start or stop the web server (gunicorn) and the task cluster (qcluster) in the background.

Pid files and logs live under .local/. `start` refuses to start a second copy.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
BIN = Path(sys.executable).parent
PROCESSES = ("gunicorn", "qcluster")


def pidfile(name: str) -> Path:
    return LOCAL / f"{name}.pid"


def running(name: str) -> int | None:
    try:
        pid = int(pidfile(name).read_text().strip())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def spawn(name: str, command: list[str]) -> None:
    if running(name):
        print(f"server: {name} already running (pid {running(name)})")
        return
    log = open(LOCAL / "log" / f"{name}.log", "ab")
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pidfile(name).write_text(str(process.pid))
    time.sleep(2)
    if process.poll() is not None:
        sys.exit(f"server: {name} exited at start; see .local/log/{name}.log:\n" + (LOCAL / "log" / f"{name}.log").read_text()[-2000:])
    print(f"server: {name} started (pid {process.pid}), log in .local/log/{name}.log")


def gunicorn_command(bind: str) -> list[str]:
    """The deployed web server; bench/release.py measures this very command."""
    return [str(BIN / "gunicorn"), "cuebot_acct.wsgi", "--bind", bind, "--workers", "2", "--threads", "4"]


def start(bind: str) -> None:
    (LOCAL / "log").mkdir(parents=True, exist_ok=True)
    metrics_dir = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(LOCAL / "metrics")))
    if not any(running(name) for name in PROCESSES):
        shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    spawn("gunicorn", gunicorn_command(bind))
    spawn("qcluster", [str(BIN / "python"), "manage.py", "qcluster"])
    print(f"cuebot-acct is running: http://{bind}/api/v1/docs  http://{bind}/admin/  http://{bind}/metrics")


def stop() -> None:
    for name in PROCESSES:
        pid = running(name)
        if pid:
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):
                if running(name) is None:
                    break
                time.sleep(0.1)
            print(f"server: stopped {name} (pid {pid})")
        pidfile(name).unlink(missing_ok=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--bind", default="127.0.0.1:8000")
    arguments = parser.parse_args()
    start(arguments.bind) if arguments.action == "start" else stop()
