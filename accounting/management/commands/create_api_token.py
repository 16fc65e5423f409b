from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounting.auth import issue_token


class Command(BaseCommand):
    help = "Create an API bearer token for USERNAME and print it once, alone on the last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to tell this token apart in the admin.")

    def handle(self, *args, username: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}; create one with `manage.py createsuperuser`", returncode=2)
        raw = issue_token(user=user, name=name)
        self.stdout.write(f"Token for {username} (shown once; only its hash is stored):")
        self.stdout.write(raw)
