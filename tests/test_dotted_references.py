"""A dotted reference in a comment or a docstring of the project's modules
(`accounting.operators.names.key_labels`) names something that exists: the module imports and the
rest is found on it. A name moved or renamed without its mentions fails here, not in a reader's
search. `settings.NAME` is Django's settings object, not the `settings` package, and is left to
tests/test_docs_configuration.py. Django's own dotted names for an app's things count too: a check's
id (`accounting.W002`), a model's label (`accounting.Instance`), a permission
(`accounting.release_proc`)."""

import ast
import dataclasses
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

from django.apps import apps
from django.db.models import Model

from infra.permissions import DECLARED

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounting", "shows", "cuebot_acct", "infra", "simulator")
REFERENCE = re.compile(rf"(?<![\w./]){'(?:' + '|'.join(PACKAGES) + ')'}(?:\.[A-Za-z_]\w*)+")
CHECK_ID = re.compile(r"\w+\.[CEIW]\d{3}")
# Names that read like a module's but are not Python's: Cuebot's own settings (opencue.properties).
CUEBOTS = {"accounting.notify.enabled"}


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every module, class and function docstring."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    found.append((first.lineno, first.value.value))
    return found


def _member(owner: object, name: str) -> object:
    """`name` on `owner`, counting a dataclass's fields and a model's fields, which a class does
    not carry as attributes until an instance is made."""
    if hasattr(owner, name):
        return getattr(owner, name)
    if isinstance(owner, type):
        if dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}:
            return name
        if issubclass(owner, Model) and name in {f.name for f in owner._meta.get_fields()}:
            return name
    raise AttributeError(name)


def djangos(reference: str) -> bool:
    """A check's id, a model's label or a permission of an installed app."""
    app, _, name = reference.partition(".")
    if CHECK_ID.fullmatch(reference) or (app == "accounting" and name in {codename for codename, _ in DECLARED}):
        return True
    try:
        return apps.get_model(app, name) is not None
    except (LookupError, ValueError):
        return False


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def resolves(reference: str) -> bool:
    """The longest importable prefix, then each remaining part found on what came before."""
    if reference in CUEBOTS or djangos(reference):
        return True
    parts = reference.split(".")
    if _is_module(reference):
        return True  # found without importing it: an entry point like cuebot_acct.wsgi starts the service
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                found = _member(found, name)
        except AttributeError:
            return False
        return True
    return False


def references() -> list[tuple[str, int, str]]:
    return [
        (str(path.relative_to(ROOT)), line, reference)
        for path in modules()
        for line, text in comments_and_docstrings(path.read_text())
        for reference in REFERENCE.findall(text)
    ]


def test_the_scan_finds_the_references_it_should():
    found = REFERENCE.findall(
        "see accounting.live.units.cores_from_centicores. and tests/accounting/x.py, not a.accounting.b"
    )
    assert found == ["accounting.live.units.cores_from_centicores"]
    assert resolves("accounting.live.units.cores_from_centicores")
    assert not resolves("accounting.operators.names.no_such_name")
    assert not resolves("accounting.no_such_module")


def test_every_dotted_reference_in_a_comment_or_docstring_resolves():
    found = references()
    assert len(found) > 50  # the scan reads the tree
    unresolved = [f"{path}:{line}: {reference}" for path, line, reference in found if not resolves(reference)]
    assert unresolved == []
