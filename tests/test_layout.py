"""The layout's promise that no module imports itself back through others (an import circle) is
held by import-linter's `acyclic_siblings` contract in .importlinter, which `make test` runs: these
tests hold that contract to every package of the project, and show the same contract breaking on
a circle."""

import configparser
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contracts() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config


def names(value: str) -> set[str]:
    return {line.strip() for line in value.splitlines() if line.strip()}


def test_the_no_circles_contract_covers_every_package_of_the_project():
    config = contracts()
    circles = config["importlinter:contract:no-circles"]
    assert circles["type"] == "acyclic_siblings"
    assert names(circles["ancestors"]) == names(config["importlinter"]["root_packages"])
    assert int(circles["depth"]) >= 10


def test_the_contract_breaks_on_a_circle(tmp_path):
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import circled.b\n")
    (package / "b.py").write_text("import circled.c\n")
    (package / "c.py").write_text("import circled.a\n")
    circles = contracts()["importlinter:contract:no-circles"]
    (tmp_path / ".importlinter").write_text(  # lists one item a line, as import-linter reads them
        f"[importlinter]\nroot_packages =\n    circled\n\n[importlinter:contract:no-circles]\nname = {circles['name']}\n"
        f"type = {circles['type']}\nancestors =\n    circled\ndepth = {circles['depth']}\n"
    )
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout and ".c -> .a" in done.stdout
