"""Cuebot's tables and trigger behaviour, as SQL, for databases this project builds itself.

Used by the migration that creates the mirrored tables (OPENCUE_TABLES=create) and by the
tests that stand up a database shaped like a site's before attaching to it.
"""

import re
from pathlib import Path

_HERE = Path(__file__).resolve().parent

TABLES_SQL = (_HERE / "tables.sql").read_text()
TRIGGERS_SQL = (_HERE / "triggers.sql").read_text()
# Cuebot's history tables and the trigger that writes frame_history (migration shows/0002).
HISTORY_SQL = (_HERE / "history.sql").read_text()
HISTORY_TABLES = ("frame_history", "job_history", "config")

# Every table above, children first: the order a DROP must follow.
TABLES = (
    *HISTORY_TABLES,
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
HISTORY_FUNCTIONS = tuple(re.findall(r"^CREATE FUNCTION (\w+)\(", HISTORY_SQL, flags=re.MULTILINE))
# The frame's trigger goes first: the table stays, the history goes.
HISTORY_DROP_SQL = (
    "DROP TRIGGER IF EXISTS frame_history_open ON frame;\n"
    + "".join(f"DROP TABLE IF EXISTS {table};\n" for table in HISTORY_TABLES)
    + "".join(f"DROP FUNCTION IF EXISTS {function};\n" for function in HISTORY_FUNCTIONS)
)
