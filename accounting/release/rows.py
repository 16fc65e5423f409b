"""The row a releasing statement (or the read before any lock) returns, and the Release made of it.

Every SELECT list of the release path is rendered from ROW_SOURCES, so a column's place in
the row is its place there; Release is that row with cores converted and the branch added.
"""

from accounting.live.units import cores_from_centicores
from accounting.release.types import Branch, Release

# Each column: its Cuebot table (PROC, HOST or JOB: the proc's, its host's, its job's) and
# column there. Release's fields in Release's order, but for `cores` (Redis's unit, converted
# from cores_centicores) and `branch` (its show's owner's), then what the path reads and
# Release does not keep.
PROC, HOST, JOB = "proc", "host", "job"
ROW_SOURCES = {
    "proc_id": (PROC, "pk_proc"),
    "host_id": (PROC, "pk_host"),
    "show_id": (PROC, "pk_show"),
    "alloc_id": (HOST, "pk_alloc"),
    "folder_id": (JOB, "pk_folder"),
    "job_id": (PROC, "pk_job"),
    "layer_id": (PROC, "pk_layer"),
    "dept_id": (JOB, "pk_dept"),
    "point_show_id": (JOB, "pk_show"),
    "job_state": (JOB, "str_state"),
    "cores_centicores": (PROC, "int_cores_reserved"),
    "gpus": (PROC, "int_gpus_reserved"),
    "memory": (PROC, "int_mem_reserved"),
    "gpu_memory": (PROC, "int_gpu_mem_reserved"),
    "is_local": (PROC, "b_local"),
    "inserted_by": (PROC, "xmin::text::bigint"),  # the inserting transaction (decrements.plan_writes)
}
ROW = tuple(ROW_SOURCES)
PROC_ID, SHOW_ID, CORES_CENTICORES, IS_LOCAL, INSERTED_BY = (
    ROW.index(name) for name in ("proc_id", "show_id", "cores_centicores", "is_local", "inserted_by")
)
# A Release is the row up to IS_LOCAL with cores put in after cores_centicores and the branch at
# the end (release_from_row): said once here, and refused at import if Release's fields move.
_BEFORE_CORES, _AFTER_CORES = slice(0, CORES_CENTICORES + 1), slice(CORES_CENTICORES + 1, IS_LOCAL)
if Release._fields != (*ROW[_BEFORE_CORES], "cores", *ROW[_AFTER_CORES], "branch"):
    raise TypeError(f"accounting.release.rows: ROW_SOURCES no longer lines up with Release's fields {Release._fields}")


def select_list(*, proc: str, host: str, job: str, named: dict[str, str] | None = None) -> str:
    """ROW's columns in order, each `<alias>.<column> AS <name>` with the alias the statement gives
    its proc, host and job; `named` gives a column an earlier CTE of the statement already returned."""
    aliases, named = {PROC: proc, HOST: host, JOB: job}, named or {}
    return ", ".join(
        f"{named.get(name) or aliases[table] + '.' + column} AS {name}" for name, (table, column) in ROW_SOURCES.items()
    )


def show_ids_of(rows: list[tuple]) -> set[str]:
    """The shows of the rows whose procs are not local (a local proc's counting does not depend
    on its show's owner): what the era is asked who counts."""
    return {row[SHOW_ID] for row in rows if not row[IS_LOCAL]}


# Two micro-optimisations of a path that builds a Release per proc of a batch: the tuple built
# straight from the row's fields, and the enum member bound once rather than looked up on its
# class per row. bench/release_micro.py measures both; the figures: docs/benchmarks.md,
# "Figures behind the release path's comments".
_new_release = tuple.__new__
_LOCAL = Branch.LOCAL


def branch_of(row: tuple, *, branches: dict[str, Branch]) -> Branch:
    """A row's branch: local by its proc, else its show's owner's (`branches`, per show)."""
    return _LOCAL if row[IS_LOCAL] else branches[row[SHOW_ID]]


def release_from_row(row: tuple, *, branch: Branch) -> Release:
    """The row's Release: its fields in order (ROW_SOURCES), but for cores in Redis's unit and the branch."""
    return _new_release(
        Release, (*row[_BEFORE_CORES], cores_from_centicores(row[CORES_CENTICORES]), *row[_AFTER_CORES], branch)
    )


def releases_from_rows(
    rows: list[tuple], *, branches: dict[str, Branch], read: dict[str, tuple] | None = None
) -> list[Release]:
    """The releases the releasing statement returned. A row equal to the one the read before
    any lock returned (`read`: proc id -> (row, Release)), with the same owner, is that read's
    Release (a batch builds each once)."""
    read = read or {}
    releases = []
    for row in rows:
        seen, branch = read.get(row[PROC_ID]), branch_of(row, branches=branches)
        if seen is not None and seen[0] == row and seen[1].branch is branch:
            releases.append(seen[1])
        else:
            releases.append(release_from_row(row, branch=branch))
    return releases
