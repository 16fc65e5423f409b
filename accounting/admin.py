"""Where Django's admin autodiscovery looks: the model admins live with the other operator
faces (accounting.operators) and register themselves when imported here, the farm's
Cuebot tables (shows' models) included, so that shows imports nothing of accounting."""

from accounting.operators import accounting_admin, farm_admin, procs_admin, service_admin  # noqa: F401
