"""Run the project's own commands as a separate process, as an operator would."""
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(*args: str, settings: str = "settings", **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)
