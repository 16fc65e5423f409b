"""What a release takes off Cuebot's accounting tables: the plan of its writes and the sums.

Pure arithmetic over the releases the releasing statement returned: which rows are decremented
(summed per key, in centicores) and which are recounted from SUM(proc) instead (a show settling
after its switch back to Cuebot). No cursor here: accounting.release.transport sends the writes.
"""

from collections import defaultdict
from dataclasses import dataclass

from accounting.reconcile.recompute import inserted_below
from accounting.release.eras import Counting
from accounting.release.rows import INSERTED_BY, PROC_ID, SHOW_ID
from accounting.release.statements import ADJUSTMENTS
from accounting.release.types import Branch, Release

# Bound once: a member looked up on its class per release costs a batch a loop's worth of time
# (bench/release_micro.py; docs/benchmarks.md, "Figures behind the release path's comments").
_LOCAL, _SCHEDULER, _CUEBOT = Branch.LOCAL, Branch.SCHEDULER, Branch.CUEBOT


@dataclass(frozen=True)
class WritePlan:
    """What a release writes in PostgreSQL after its releasing statement, from the rows that
    statement returned (before any lock: from the read): the accounting-table rows of its local
    and Cuebot-counted procs, decremented, or recounted from SUM(proc) where recounts() says
    so; and whatever its era sends in the transaction (of `releases`)."""

    releases: list[Release]
    in_pg: list[Release]  # local and Cuebot-counted: the accounting tables' writes
    settling: list[str]  # the shows of its Cuebot-counted procs settling after a switch back, sorted
    counted: frozenset[str]  # the procs of those shows their switch-back recompute counted

    def recounts(self, r: Release) -> bool:
        """Whether a release's rows are recounted from SUM(proc) rather than decremented: a
        Cuebot-counted proc of a settling show that its switch-back recompute did not count.

        A settling show may hold procs its rows never counted (bookings made on the old flag):
        decrementing would take them below the truth. A proc the switch-back recompute counted
        is decremented as usual: its rows hold it, whatever else they miss."""
        return r.branch is _CUEBOT and r.show_id in self.settling and r.proc_id not in self.counted


def plan_writes(*, rows: list[tuple], releases: list[Release], counting: Counting) -> WritePlan:
    """The plan of the writes after the releasing statement of `rows` (made into `releases`)."""
    in_pg = [r for r in releases if r.branch is not _SCHEDULER]
    settling = sorted({r.show_id for r in in_pg if r.branch is _CUEBOT and r.show_id in counting.settling})
    counted = _counted_at_switch_back(rows, counting) if settling else frozenset()
    return WritePlan(releases=releases, in_pg=in_pg, settling=settling, counted=counted)


def _counted_at_switch_back(rows: list[tuple], counting: Counting) -> frozenset[str]:
    """The procs of settling shows that their switch-back recompute counted: inserted below the
    xid horizon it recorded (accounting.reconcile.recompute.inserted_below), by the xmin the
    releasing statement returns (inserted_by)."""
    below = counting.counted_below
    return frozenset(
        row[PROC_ID]
        for row in rows
        if row[SHOW_ID] in below and inserted_below(xmin=row[INSERTED_BY], horizon=below[row[SHOW_ID]])
    )


# Two amounts at a time, positionally: a batch of 100 adds 500 times, and the form with its
# amounts as *args and a keyword offset costs a batch about twice as long (bench/release_micro.py;
# docs/benchmarks.md, "Figures behind the release path's comments").
def _add(totals: list[int], first: int, second: int, at: int = 0) -> None:
    totals[at] += first
    totals[at + 1] += second


def decrements(plan: WritePlan) -> tuple[dict[str, dict[tuple, list[int]]], dict[str, set[tuple]]]:
    """Per table, the amounts to take off (give back, for host_local) per row's key, summed over
    the releases, in the adjustment's amounts' order; and per table the keys of the rows
    recounted instead (a settling show's)."""
    sums: dict[str, dict[tuple, list[int]]] = {a.table: defaultdict(lambda: [0, 0, 0, 0]) for a in ADJUSTMENTS}
    recounted: dict[str, set[tuple]] = defaultdict(set)
    layer, job, subscription = sums["layer_resource"], sums["job_resource"], sums["subscription"]
    folder, point, host_local = sums["folder_resource"], sums["point"], sums["host_local"]
    for r in plan.in_pg:
        cores, gpus = r.cores_centicores, r.gpus
        if r.branch is _LOCAL:
            _add(layer[(r.layer_id,)], cores, gpus)
            # Counting rules of accounting.reconcile.recompute: local procs only in their layer and in
            # the job's int_local_*; their amounts go back to the job's reservation too.
            _add(job[(r.job_id,)], cores, gpus, 2)
            totals = host_local[(r.host_id, r.job_id)]
            _add(totals, cores, r.memory)
            _add(totals, gpus, r.gpu_memory, 2)
            continue
        if plan.settling and plan.recounts(r):
            recounted["subscription"].add((r.show_id, r.alloc_id))
            recounted["layer_resource"].add((r.layer_id,))
            recounted["job_resource"].add((r.job_id,))
            if not r.job_gone:
                recounted["folder_resource"].add((r.folder_id,))
                recounted["point"].add((r.dept_id, r.point_show_id))
            continue
        _add(layer[(r.layer_id,)], cores, gpus)
        _add(job[(r.job_id,)], cores, gpus)
        _add(subscription[(r.show_id, r.alloc_id)], cores, gpus)
        if not r.job_gone:
            _add(folder[(r.folder_id,)], cores, gpus)
            _add(point[(r.dept_id, r.point_show_id)], cores, gpus)
    return sums, recounted
