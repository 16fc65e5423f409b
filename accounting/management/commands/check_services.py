from django.conf import settings

from accounting.management.commands._writes import DeclaredCommand
from infra.startup import check_services, redact, redis_urls, servers_line
from infra.writes import mode_line
from shows.attach import check_cuebot_schema


class Command(DeclaredCommand):
    help = (
        "Check that PostgreSQL and every Redis this instance uses answer (none in the Maestro era without a "
        "Redis URL), then say which servers it uses for what; one line and exit 1 if one does not answer."
    )
    writes = ()

    def handle(self, *args, **options) -> None:
        check_services()
        check_cuebot_schema()
        self.stdout.write(f"PostgreSQL ok: {redact(settings.DATABASE_URL)}")
        for setting, url in redis_urls().items():
            self.stdout.write(f"Redis ok ({setting}): {redact(url)}")
        self.stdout.write(servers_line())
        self.stdout.write(mode_line())
