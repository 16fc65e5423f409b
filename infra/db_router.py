"""Who may create Cuebot's tables: the project's migration in `create` mode, nobody otherwise.

Two Django mechanisms together keep a site's database Cuebot's own:
- every model of a Cuebot table is unmanaged (shows.models.CuebotTable), so no
  migration operation Django derives from a model ever emits DDL for them;
- the one migration that does create them (shows 0001) runs its SQL with the hint
  `cuebot_tables`, and this router refuses that hint when OPENCUE_TABLES=existing.
  Django then records the migration as applied without running it, and the project's
  own tables, in migrations of their own, are created as usual.

It also reads Cuebot's models through Cuebot's alias (infra.cuebot_database): `default`
unless CUEBOT_DATABASE_URL names another database, a standby say, where no migration ever runs.
Every unmanaged model of the project is one of Cuebot's tables (shows.models.CuebotTable).
"""

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from infra.cuebot_database import cuebot_database

CUEBOT_TABLES_HINT = "cuebot_tables"


class CuebotTablesRouter:
    def db_for_read(self, model, **hints) -> str | None:
        return None if model._meta.managed else cuebot_database()

    def db_for_write(self, model, **hints) -> str | None:
        # Only an observer has an alias apart, so a write there is refused by the standby, never
        # sent to the service's own database, which holds no Cuebot table.
        return None if model._meta.managed else cuebot_database()

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool | None:
        if db != DEFAULT_DB_ALIAS:
            return False  # Cuebot's database apart is Cuebot's own (a standby takes no DDL anyway)
        if hints.get(CUEBOT_TABLES_HINT):
            return settings.OPENCUE_TABLES == "create" and cuebot_database() == DEFAULT_DB_ALIAS
        return None
