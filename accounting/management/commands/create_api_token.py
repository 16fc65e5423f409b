import argparse

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from accounting.management.commands._writes import DeclaredCommand
from accounting.operators.auth import grant_permissions, issue_token
from infra.permissions import DECLARED


def _permission(text: str) -> str:
    codename = text.removeprefix("accounting.")
    if codename not in {c for c, _ in DECLARED}:
        raise argparse.ArgumentTypeError(f"unknown permission {text!r}; one of: " + ", ".join(c for c, _ in DECLARED))
    return f"accounting.{codename}"


class Command(DeclaredCommand):
    help = (
        "Create an API bearer token for USERNAME and print it once, alone on the last line. The token "
        "may do what its user's permissions allow (a superuser: everything); --grant adds some first."
    )
    writes = ()  # the service's own table

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to tell this token apart in the admin.")
        parser.add_argument(
            "--grant",
            action="append",
            default=[],
            type=_permission,
            metavar="PERMISSION",
            help="Give the user this permission first; repeatable. One of: "
            + ", ".join(c for c, _ in DECLARED)
            + " (with or without the app label, as a 403 answer spells it: accounting.release_proc).",
        )

    def handle(self, *args, username: str, name: str, grant: list[str], **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}; create one with `manage.py createsuperuser`", returncode=2)
        grant_permissions(user=user, permissions=grant)
        raw = issue_token(user=user, name=name)
        self.stdout.write(f"Token for {username} (shown once; only its hash is stored):")
        self.stdout.write(raw)
