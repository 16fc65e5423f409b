"""Cuebot's tables and trigger behaviour, as SQL, for databases this project builds itself.

Used by the migration that creates the mirrored tables (OPENCUE_TABLES=create) and by the
tests that stand up a database shaped like a site's before attaching to it.
"""

import re
from pathlib import Path

_HERE = Path(__file__).resolve().parent

TABLES_SQL = (_HERE / "tables.sql").read_text()
TRIGGERS_SQL = (_HERE / "triggers.sql").read_text()

# Every table above, children first: the order a DROP must follow.
TABLES = (
    "proc",
    "frame",
    "host_local",
    "host_stat",
    "host",
    "point",
    "layer_resource",
    "layer",
    "job_resource",
    "job",
    "folder_resource",
    "folder",
    "dept",
    "subscription",
    "alloc",
    "facility",
    "show",
)
FUNCTIONS = tuple(re.findall(r"^CREATE FUNCTION (\w+)\(", TRIGGERS_SQL, flags=re.MULTILINE))
DROP_SQL = "".join(f"DROP TABLE IF EXISTS {table};\n" for table in TABLES) + "".join(
    f"DROP FUNCTION IF EXISTS {function};\n" for function in FUNCTIONS
)
