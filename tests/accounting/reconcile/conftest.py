"""What the reconcile tests share: a job killed as OpenCue kills one, its procs still running."""

import pytest

from accounting.reconcile.reseed import seed_show
from shows.models import Job
from tests.service_role import as_cuebot


def kill(job) -> None:
    """What OpenCue does first when a job is killed: FINISHED, its name freed, procs still running."""
    with as_cuebot():
        Job.objects.filter(pk=job.pk).update(str_state="FINISHED", str_visible_name=None)


@pytest.fixture
def killed_job(farm, seeded_redis):
    """A scheduler-managed show seeded in Redis, one job running and one with ten procs
    (fractional cores and GPUs among them) killed but not yet released."""
    farm.add_proc(cores=400, gpus=1)
    job, layer = farm.add_job()
    procs = [farm.add_proc(cores=150 if i % 2 else 200, gpus=int(i % 4 == 0), layer=layer) for i in range(10)]
    seed_show(show_id=farm.show.id)
    kill(job)
    return job, layer, procs
