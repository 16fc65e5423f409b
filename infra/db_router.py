"""Who may create Cuebot's tables: the project's migration in `create` mode, nobody otherwise.

Two Django mechanisms together keep a site's database Cuebot's own:
- every model of a Cuebot table is unmanaged (shows.models.CuebotTable), so no
  migration operation Django derives from a model ever emits DDL for them;
- the one migration that does create them (shows 0001) runs its SQL with the hint
  `cuebot_tables`, and this router refuses that hint when OPENCUE_TABLES=existing.
  Django then records the migration as applied without running it, and the project's
  own tables, in migrations of their own, are created as usual.
"""

from django.conf import settings

CUEBOT_TABLES_HINT = "cuebot_tables"


class CuebotTablesRouter:
    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints) -> bool | None:
        if hints.get(CUEBOT_TABLES_HINT):
            return settings.OPENCUE_TABLES == "create"
        return None
