"""The operator rights, as Django permissions, so a site grants them with groups.

A release client gets only RELEASE_PROCS; a reader (a dashboard, a script that watches drift)
only VIEW_ACCOUNTING; operators get the rest. The API's token
authentication and the admin check the same names (`user.has_perm`). They are declared on
ApiToken's Meta only because Django attaches permissions to a model; they are about the
whole service, not about tokens.
"""

RELEASE_PROCS = "accounting.release_proc"
CHANGE_LIMITS = "accounting.change_limits"
CHANGE_OWNERSHIP = "accounting.change_ownership"
RESEED_REDIS = "accounting.reseed_redis"
REPAIR_TABLES = "accounting.repair_tables"
VIEW_ACCOUNTING = "accounting.view_accounting"

DECLARED = [
    ("release_proc", "Can release procs (give their cores back)"),
    ("change_limits", "Can change subscription, folder, job and point limits"),
    ("change_ownership", "Can move shows between Cuebot and the scheduler"),
    ("reseed_redis", "Can rebuild Redis from PostgreSQL"),
    ("repair_tables", "Can recompute Cuebot's accounting tables from SUM(proc)"),
    ("view_accounting", "Can read shows, drift and locks through the API"),
]
