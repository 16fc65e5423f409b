"""The wheel is a working service on its own: built from the source as it stands, installed
outside the checkout, its `cuebot-acct` command checks and migrates a fresh database (Cuebot's
tables made from the SQL the wheel carries) and gunicorn serves it from the installed package,
templates and static files included, saying the package's version.

The wheel goes into a directory of its own (`pip install --target`) and runs on this suite's
interpreter, whose packages are the runtime lock's: what is tested is what the wheel carries,
not the dependencies, which requirements.txt pins.
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

import infra
from infra.serving import gunicorn_args
from tests.processes import await_log_line, closed_port
from tests.test_upgrade import server

ROOT = Path(__file__).resolve().parent.parent
# What the build reads: the packages, pyproject.toml and the README it names.
BUILT_FROM = ("accounting", "cuebot_acct", "infra", "settings", "shows", "simulator", "pyproject.toml", "README.md")


@pytest.fixture
def installed(tmp_path) -> Path:
    """The directory the wheel was installed into."""
    source = tmp_path / "source"
    for name in BUILT_FROM:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist")]
    subprocess.run(build, cwd=source, check=True, capture_output=True, timeout=120)
    (wheel,) = (tmp_path / "dist").glob("cuebot_acct-*.whl")
    assert wheel.name == f"cuebot_acct-{infra.__version__}-py3-none-any.whl"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target"]
    subprocess.run([*install, str(tmp_path / "site"), str(wheel)], check=True, capture_output=True, timeout=120)
    return tmp_path / "site"


@pytest.fixture
def scratch_database():
    name = f"{settings.DATABASES['default']['NAME']}_wheel"
    with server("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with server("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def site_env(*, site: Path, database: str) -> dict[str, str]:
    """A Maestro site's environment, the installed package alone importable of the project's code."""
    test = settings.DATABASES["default"]
    keep = {name: value for name, value in os.environ.items() if not name.endswith("_REDIS_URL")}
    return {
        **keep,
        "PYTHONPATH": str(site),
        "DJANGO_SETTINGS_MODULE": "settings",
        "DATABASE_URL": f"postgres://{test['USER']}@{test['HOST'] or '127.0.0.1'}:{test['PORT'] or 5432}/{database}",
        "ACCOUNTING_SCHEDULER": "maestro",
        "DJANGO_SECRET_KEY": "wheel-" + "k" * 50,
    }


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(errors="replace")


@pytest.mark.slow
def test_the_installed_wheel_migrates_and_serves_from_outside_the_checkout(installed, scratch_database, tmp_path):
    env, command = (
        site_env(site=installed, database=scratch_database),
        [sys.executable, installed / "bin" / "cuebot-acct"],
    )
    for args in (["check", "--database", "default"], ["migrate", "--noinput"]):
        done = subprocess.run([*command, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"cuebot-acct {' '.join(args)}: {done.stderr}"
    # Every migration and Cuebot's SQL came with the wheel: nothing of the checkout is importable here.
    assert "Applying shows.0001_cuebot_tables... OK" in done.stdout
    assert "Applying accounting.0008_cache_table... OK" in done.stdout

    bind, log = f"127.0.0.1:{closed_port()}", tmp_path / "gunicorn.log"
    with log.open("w") as written:
        gunicorn = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *gunicorn_args(bind=bind)], cwd=tmp_path, env=env, stderr=written
        )
    try:
        await_log_line(log, "web worker")  # said by a worker once it serves
        status, health = get(f"http://{bind}/healthz")
        # No task cluster runs here: /healthz names it, and the rest is up.
        checks = json.loads(health)["checks"]
        assert (status, json.loads(health)["version"], checks["postgres"]) == (503, infra.__version__, "ok")
        assert checks["task_cluster"].startswith("error: no task cluster worker has ever recorded itself")
        assert get(f"http://{bind}/static/admin/css/base.css")[0] == 200
        status, login = get(f"http://{bind}/admin/login/")
        assert status == 200 and f"cuebot-acct {infra.__version__}</p>" in login
    finally:
        gunicorn.terminate()
        gunicorn.wait(30)
