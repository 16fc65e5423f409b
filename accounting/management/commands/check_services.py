from django.conf import settings

from accounting.management.commands._writes import DeclaredCommand
from cuebot_acct.startup import check_services, redact, redis_urls
from cuebot_acct.writes import mode_line
from shows.attach import check_cuebot_schema


class Command(DeclaredCommand):
    help = "Check that PostgreSQL and every configured Redis answer; one line and exit 1 if not."
    writes = ()

    def handle(self, *args, **options) -> None:
        check_services()
        check_cuebot_schema()
        self.stdout.write(f"PostgreSQL ok: {redact(settings.DATABASE_URL)}")
        for setting, url in redis_urls().items():
            self.stdout.write(f"Redis ok ({setting}): {redact(url)}")
        self.stdout.write(mode_line())
