"""The NOTIFY era's operator: cap changes through the limit services, which the scheduler
model hears live."""

import random

from accounting.limits.changes import set_folder_limits, set_job_limits, set_subscription_limits
from accounting.models import FolderResource, JobResource, Subscription
from shows.models import Show
from simulator.workers.notify.play import NotifyPlay, work


def operator(run: NotifyPlay, index: int) -> None:
    """Cap changes through the services, the five caps the scheduler hears live."""
    rng = random.Random(run.options.seed * 300 + index)
    work(run, where="operator", step=lambda: change_a_cap(run, rng=rng), pause=0.3)


def change_a_cap(run: NotifyPlay, *, rng: random.Random) -> None:
    """A cap of a scheduler-managed show (Cuebot-managed shows' caps are not sent)."""
    shows = list(Show.objects.filter(pk__in=run.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
    kind = rng.choice(["sub", "folder", "job"])
    if kind == "sub":
        sub = rng.choice(list(Subscription.objects.filter(show_id__in=shows)))
        burst = rng.randint(20, 400)
        set_subscription_limits(subscription=sub, burst=burst * 100)
        run.caps_expected[("sub", f"{sub.show_id}:{sub.alloc_id}")]["burst"] = burst
    elif kind == "folder":
        fr = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=shows)))
        cores, gpus = rng.choice([-1, rng.randint(5, 200)]), rng.choice([-1, rng.randint(1, 8)])
        set_folder_limits(folder_resource=fr, max_cores=cores if cores < 0 else cores * 100, max_gpus=gpus)
        run.caps_expected[("folder", fr.folder_id)].update(max_cores=cores, max_gpus=gpus)
    else:
        jr = rng.choice(list(JobResource.objects.filter(job__show_id__in=shows, job__str_state="PENDING")))
        cores, gpus = rng.randint(2, 100), rng.randint(0, 4)
        set_job_limits(job_resource=jr, max_cores=cores * 100, max_gpus=gpus)
        run.caps_expected[("job", jr.job_id)].update(max_cores=cores, max_gpus=gpus)
    run.stats.cap_changes += 1
