"""What a release gave back, shared by the release path and its publishers (neither imports the other)."""

from enum import StrEnum
from typing import NamedTuple


class Branch(StrEnum):
    LOCAL = "local"
    SCHEDULER = "scheduler"
    CUEBOT = "cuebot"


class Release(NamedTuple):
    """What one release gave back. Cores in both units: PG's centicores and Redis's cores.

    A named tuple, not a frozen dataclass: a batch builds one per proc on the release path,
    and a tuple is built in much less time (bench/release_micro.py; docs/benchmarks.md,
    "Figures behind the release path's comments").

    folder_id, dept_id, point_show_id and job_state come from the proc's job, read in the
    releasing statement: None when the job row is gone. The point is (the job's department,
    the job's show), as Cuebot counts it. A killed job is FINISHED before its procs go.
    """

    proc_id: str
    host_id: str
    show_id: str
    alloc_id: str
    folder_id: str | None
    job_id: str
    layer_id: str
    dept_id: str | None
    point_show_id: str | None
    job_state: str | None  # the job's str_state at the release (FINISHED for a killed job)
    cores_centicores: int
    cores: int
    gpus: int
    memory: int  # KB
    gpu_memory: int  # KB
    branch: Branch

    @property
    def job_gone(self) -> bool:
        return self.folder_id is None

    @property
    def job_finished(self) -> bool:
        return self.job_state == "FINISHED"


# The fields that name a release's keys (show_id to point_show_id, adjacent in Release): summing a
# batch per key slices them out of each release at once, not field by field.
KEY_IDS = slice(Release._fields.index("show_id"), Release._fields.index("point_show_id") + 1)
