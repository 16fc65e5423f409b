"""No function over 40 lines and no module over 400 in the service and the simulator (migrations
aside): a reader takes a function in at a glance and a module in one sitting, and a module that
grows past that holds more than one concern."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounting", "cuebot_acct", "infra", "shows", "simulator")
FUNCTION_LINES = 40
MODULE_LINES = 400


def modules() -> list[Path]:
    return sorted(
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts
    )


def too_long(source: str) -> list[str]:
    """The module itself if over MODULE_LINES, and each function (methods and nested ones too)
    over FUNCTION_LINES from its `def` to its last line."""
    found = [f"module: {len(source.splitlines())} lines"] if len(source.splitlines()) > MODULE_LINES else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > FUNCTION_LINES:
                found.append(f"{node.name}: {lines} lines")
    return found


def test_the_check_finds_a_long_function_and_a_long_module():
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    assert too_long(f"def f():\n{body}") == ["f: 41 lines"]
    assert too_long(f"def f():\n{body[: -len('    x39 = 39') - 1]}") == []
    assert too_long("x = 1\n" * (MODULE_LINES + 1)) == ["module: 401 lines"]


def test_no_function_over_40_lines_and_no_module_over_400():
    found = {str(path.relative_to(ROOT)): too_long(path.read_text()) for path in modules()}
    assert len(found) > 100  # the scan reads the tree
    assert {path: over for path, over in found.items() if over} == {}
