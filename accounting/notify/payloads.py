"""The notification payloads, byte for byte as Cuebot's AccountingNotifier writes them.

Compact JSON, keys in Cuebot's order, ids as PostgreSQL holds them, amounts in the
scheduler's units: cores converted once by accounting.live.units (truncated toward zero,
-1 verbatim), GPUs verbatim. The scheduler parses show/alloc/folder/job as UUIDs, cores as
i64 and GPUs as i32, ignores the other fields, and drops (with a WARN) what it cannot parse.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass

from accounting.live.units import UNLIMITED, cores_from_centicores

RELEASE = "acct_release"
LIMIT_CHANGE = "acct_limit_change"
CHANNELS = (RELEASE, LIMIT_CHANGE)


def _compact(fields: dict) -> str:
    return json.dumps(fields, separators=(",", ":"))


@dataclass(frozen=True)
class ReleasedAmount:
    """One released proc as the scheduler hears it: its keys and what it gave back.

    cores is the proc's reservation already converted to cores (per proc), gpus verbatim.
    """

    show_id: str
    alloc_id: str
    folder_id: str
    job_id: str
    layer_id: str
    dept_id: str
    cores: int
    gpus: int

    @property
    def key(self) -> tuple[str, ...]:
        return (self.show_id, self.alloc_id, self.folder_id, self.job_id, self.layer_id, self.dept_id)


def release_payload(*, key: tuple[str, ...], cores: int, gpus: int) -> str:
    show, alloc, folder, job, layer, dept = key
    return _compact(
        {
            "show": show,
            "alloc": alloc,
            "folder": folder,
            "job": job,
            "layer": layer,
            "dept": dept,
            "cores": -cores,
            "gpus": -gpus,
        }
    )


def release_payloads(*, released: Iterable[ReleasedAmount]) -> list[str]:
    """One payload per distinct key, amounts summed over the procs that share it.

    PostgreSQL folds identical (channel, payload) pairs sent in one transaction into one
    delivery, so two procs of one layer on one allocation with equal reservations, released
    in one batch, would be heard as one. Summing per key (of amounts already converted per
    proc, so the sum is exactly what per-proc notifications would add up to) gives each key
    one payload: nothing to fold, and a single release's payload is Cuebot's own.
    """
    sums: dict[tuple[str, ...], list[int]] = {}
    for r in released:
        totals = sums.setdefault(r.key, [0, 0])
        totals[0] += r.cores
        totals[1] += r.gpus
    return [release_payload(key=key, cores=cores, gpus=gpus) for key, (cores, gpus) in sums.items()]


def _cap_cores(centicores: int) -> int:
    # Cuebot sends any negative cap as -1 (unlimited), the rest in whole cores.
    return UNLIMITED if centicores < 0 else cores_from_centicores(centicores)


def subscription_burst_payload(*, show_id: str, alloc_id: str, burst_centicores: int) -> str:
    return _compact(
        {"vertex": "sub", "show": show_id, "alloc": alloc_id, "burst": cores_from_centicores(burst_centicores)}
    )


def max_cores_payload(*, vertex: str, id: str, max_centicores: int) -> str:
    """vertex: "folder" or "job"."""
    return _compact({"vertex": vertex, "id": id, "max_cores": _cap_cores(max_centicores)})


def max_gpus_payload(*, vertex: str, id: str, max_gpus: int) -> str:
    return _compact({"vertex": vertex, "id": id, "max_gpus": max_gpus})
