"""Production refuses to start insecure or blind, in one line and with an exit status a
supervisor sees (issue 21)."""

import os
import subprocess
import sys

from django.conf import settings

from tests.processes import closed_port

ROOT = settings.BASE_DIR
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**BASE_ENV, "DJANGO_SETTINGS_MODULE": "settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_web_worker_refuses_the_development_key_with_gunicorns_boot_error_status():
    done = run(["-c", "import cuebot_acct.wsgi"])
    assert done.returncode == 3  # gunicorn's WORKER_BOOT_ERROR: its arbiter stops instead of rebooting workers
    assert done.stderr.strip().splitlines() == [
        "cuebot-acct: DJANGO_SECRET_KEY is not set: refusing to serve with the development key while DEBUG is off; "
        "set a long random DJANGO_SECRET_KEY (`make run` keeps one in .local/secret_key)"
    ]


def test_a_web_worker_that_cannot_reach_postgresql_says_so_in_one_line_and_stops_gunicorn():
    url = f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere"
    done = run(["-c", "import cuebot_acct.wsgi"], DJANGO_SECRET_KEY="k" * 50, DATABASE_URL=url)
    assert done.returncode == 3
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"cuebot-acct: cannot reach PostgreSQL at {url}")


def test_the_task_cluster_refuses_at_once_in_one_line():
    url = f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere"
    done = run(["manage.py", "qcluster"], DJANGO_SECRET_KEY="k" * 50, DATABASE_URL=url)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"cuebot-acct: cannot reach PostgreSQL at {url}")
    done = run(["manage.py", "qcluster"])
    assert done.returncode == 1 and "DJANGO_SECRET_KEY is not set" in done.stderr


def test_check_deploy_is_clean_with_the_production_settings_the_docs_describe():
    done = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        DJANGO_SECRET_KEY="k" * 20 + "-Zq9" * 10,
        DJANGO_ALLOWED_HOSTS="cuebot-acct.example.com",
        DJANGO_HTTPS="true",
    )
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout


def test_gunicorn_refuses_in_its_master_before_any_worker_boots():
    """Not 162 worker boots a minute, and not gunicorn's own traceback when two workers fail
    together: cuebot_acct.gunicorn_conf checks once, before binding, in one line, status 1."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import server  # scripts/server.py: the deployed gunicorn command

    url = f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere"
    done = subprocess.run(
        server.gunicorn_command(f"127.0.0.1:{closed_port()}"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**BASE_ENV, "DJANGO_SETTINGS_MODULE": "settings", "DJANGO_SECRET_KEY": "k" * 50, "DATABASE_URL": url},
    )
    assert done.returncode == 1
    ours = [line for line in done.stderr.splitlines() if line.startswith("cuebot-acct: ")]
    assert len(ours) == 1 and ours[0].startswith(f"cuebot-acct: cannot reach PostgreSQL at {url}")
    assert "Booting worker" not in done.stderr and "Traceback" not in done.stderr
