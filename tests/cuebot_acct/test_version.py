"""The service's version, on every face a site reads it from (the command line, /healthz, /metrics,
the admin's pages), is the one infra.__version__ holds and the build puts in the package."""

import re
import tomllib
from pathlib import Path

import pytest
from django.test import Client

import infra
from infra.metrics import render
from tests.processes import manage

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_build_takes_its_version_from_the_one_the_code_reads():
    project = PYPROJECT["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "infra.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", infra.__version__)


def test_the_changelog_names_the_version_first():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.findall(r"^## \[([^\]]+)\]", changelog, re.M)[0] == infra.__version__


def test_the_console_command_is_the_one_manage_py_runs():
    module, function = PYPROJECT["project"]["scripts"]["cuebot-acct"].split(":")
    assert (module, function) == ("cuebot_acct.cli", "main")
    assert "from cuebot_acct.cli import main" in (ROOT / "manage.py").read_text()


@pytest.mark.parametrize("args", [("--version",), ("version",), ("migrate", "--version")], ids=" ".join)
def test_the_command_line_prints_the_services_version_not_djangos(args):
    done = manage(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cuebot-acct {infra.__version__} (Django ")


def test_healthz_says_the_version(db):
    assert Client().get("/healthz").json()["version"] == infra.__version__


def test_metrics_carry_build_info_with_the_version(db):
    body = Client().get("/metrics").content.decode()
    assert f'cuebot_acct_build_info{{version="{infra.__version__}"}} 1.0' in body.splitlines()


def test_build_info_is_one_series_from_a_multiprocess_directory_too(monkeypatch, tmp_path):
    """Under gunicorn (PROMETHEUS_MULTIPROC_DIR) /metrics adds up every process's files; the build
    info comes from the process answering, once, never from a file an older version left."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    body = render()[0].decode()
    assert [line for line in body.splitlines() if line.startswith("cuebot_acct_build_info")] == [
        f'cuebot_acct_build_info{{version="{infra.__version__}"}} 1.0'
    ]


def test_the_admins_footer_names_the_version(admin_client, client):
    footer = f'<p class="service-version">cuebot-acct {infra.__version__}</p>'
    assert footer in admin_client.get("/admin/").content.decode()
    assert footer in client.get("/admin/login/").content.decode()  # before signing in too


def test_the_wheel_holds_every_file_the_code_reads_beside_its_modules():
    """Templates, Cuebot's SQL, the Lua scripts: each file of the packages that is not a module
    matches a package-data pattern of pyproject.toml, so `pip install` of the wheel has it."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["*"]
    suffixes = {pattern.rsplit("*", 1)[1] for pattern in patterns}
    packages = [include.rstrip("*") for include in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]]
    files = [
        path.relative_to(ROOT)
        for package in packages
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py"
    ]
    assert files and [str(path) for path in files if path.suffix not in suffixes] == []
