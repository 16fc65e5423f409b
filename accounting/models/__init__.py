"""The accounting tables, `proc`, `host_local`, and the service's own records.

The first are Cuebot's (unmanaged, with the conventions of shows.models: `id` on
pk_<table>, foreign keys on pk_<model>, other fields named as their columns, centicores
in every int_*cores* column). ApiToken and Instance are the project's own tables,
created by its own migration, never in one with Cuebot's; so is DriftRecord, the drift check's
memory of when each drifted row was first seen (written by accounting.reconcile.drift_history).
"""

import hashlib

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

# The usage report's records, in a module of their own: Django finds an app's models here.
from accounting.models.usage import (  # noqa: F401
    SubscriptionTerm,
    UsageAboveSize,
    UsageOpenRun,
    UsageRolledDay,
    UsageRollup,
    UsageWatermark,
)
from infra import permissions
from shows.models import (
    Alloc,
    CuebotTable,
    Dept,
    Folder,
    Frame,
    Host,
    Job,
    Layer,
    Show,
    big_integer,
    created_now,
    flag,
    integer,
    readable_labels,
    text_pk,
    tier,
)

# What accounting.limits.changes checks for the services, on the fields too, so every model form
# (the admin's included) refuses other values before saving. -1 means unlimited only for a
# folder's maxima; Cuebot compares every other limit as a number (docs/cuebot-schema.md).
UNLIMITED_OR_MORE = {"validators": [MinValueValidator(-1, "Use -1 for unlimited, or a value of 0 or more.")]}
LIMIT = {"validators": [MinValueValidator(0, "Use a value of 0 or more (-1 is not unlimited here).")]}


@readable_labels
class Subscription(CuebotTable):
    id = text_pk("pk_subscription")
    alloc = models.ForeignKey(Alloc, on_delete=models.PROTECT, db_column="pk_alloc")
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    int_size = big_integer(0, **LIMIT)
    int_burst = big_integer(0, **LIMIT)
    int_cores = integer(0)
    int_gpus = integer(0)
    float_tier = tier()

    class Meta(CuebotTable.Meta):
        db_table = "subscription"
        constraints = [models.UniqueConstraint(fields=["show", "alloc"], name="c_subscription_uk")]

    def __str__(self) -> str:
        return f"{self.show} / {self.alloc}"


@readable_labels
class FolderResource(CuebotTable):
    """Created by Cuebot's trigger when its folder is inserted (pk_folder_resource = pk_folder)."""

    id = text_pk("pk_folder_resource")
    # Not unique in Cuebot's schema, although its trigger creates exactly one per folder.
    folder = models.ForeignKey(Folder, on_delete=models.DO_NOTHING, db_column="pk_folder", related_name="resources")
    int_cores = integer(0)
    int_min_cores = integer(0, **LIMIT)
    int_max_cores = integer(-1, **UNLIMITED_OR_MORE)
    int_gpus = integer(0)
    int_min_gpus = integer(0, **LIMIT)
    int_max_gpus = integer(-1, **UNLIMITED_OR_MORE)
    float_tier = tier()

    class Meta(CuebotTable.Meta):
        db_table = "folder_resource"

    def __str__(self) -> str:
        return f"{self.folder.show} / {self.folder}"


@readable_labels
class JobResource(CuebotTable):
    """Created by Cuebot's trigger when its job is inserted (pk_job_resource = pk_job)."""

    id = text_pk("pk_job_resource")
    job = models.OneToOneField(Job, on_delete=models.DO_NOTHING, db_column="pk_job", related_name="resource")
    int_cores = big_integer(0)
    int_gpus = integer(0)
    int_min_cores = integer(100)
    int_max_cores = integer(10000, **LIMIT)
    int_min_gpus = integer(0)
    int_max_gpus = integer(100, **LIMIT)
    int_priority = integer(1, **LIMIT)
    int_local_cores = integer(0)
    int_local_gpus = integer(0)
    float_tier = tier()

    class Meta(CuebotTable.Meta):
        db_table = "job_resource"

    def __str__(self) -> str:
        return f"{self.job.show} / {self.job}"


@readable_labels
class LayerResource(CuebotTable):
    """Created by Cuebot's trigger when its layer is inserted (pk_layer_resource = pk_layer)."""

    id = text_pk("pk_layer_resource")
    layer = models.OneToOneField(Layer, on_delete=models.DO_NOTHING, db_column="pk_layer", related_name="resource")
    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, db_column="pk_job")
    int_cores = big_integer(0)
    int_gpus = integer(0)

    class Meta(CuebotTable.Meta):
        db_table = "layer_resource"

    def __str__(self) -> str:
        return f"{self.job.show} / {self.job} / {self.layer}"


@readable_labels
class Point(CuebotTable):
    id = text_pk("pk_point")
    dept = models.ForeignKey(Dept, on_delete=models.PROTECT, db_column="pk_dept")
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    int_cores = integer(0)
    int_gpus = integer(0)
    int_min_cores = integer(0, **LIMIT)
    int_min_gpus = integer(0, **LIMIT)
    b_managed = flag(False)
    float_tier = tier()
    ts_updated = created_now()

    class Meta(CuebotTable.Meta):
        db_table = "point"
        constraints = [models.UniqueConstraint(fields=["show", "dept"], name="c_point_pk_show_dept")]

    def __str__(self) -> str:
        return f"{self.show} / {self.dept}"


@readable_labels
class HostLocal(CuebotTable):
    """A host reserved for one job (local dispatch): its own maxima and idle amounts."""

    id = text_pk("pk_host_local")
    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, db_column="pk_job")
    host = models.ForeignKey(Host, on_delete=models.DO_NOTHING, db_column="pk_host")
    str_type = models.CharField(max_length=36)
    int_cores_max = integer(100)
    int_cores_idle = integer(100)
    int_mem_max = big_integer(0)
    int_mem_idle = big_integer(0)
    int_gpus_max = integer(0)
    int_gpus_idle = integer(0)
    int_gpu_mem_max = big_integer(0)
    int_gpu_mem_idle = big_integer(0)
    int_threads = integer(1)
    b_active = flag(True)
    float_tier = tier()

    class Meta(CuebotTable.Meta):
        db_table = "host_local"
        verbose_name = "local reservation"
        constraints = [models.UniqueConstraint(fields=["host", "job"], name="i_host_local_unique")]

    def __str__(self) -> str:
        return f"{self.host} / {self.job}"


@readable_labels
class Proc(CuebotTable):
    """A booking: canonical for what is reserved. Allocation comes from the host."""

    id = text_pk("pk_proc")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, db_column="pk_host")
    # Cuebot gives these no foreign-key constraints: a proc can outlive its job row.
    job = models.ForeignKey(Job, null=True, on_delete=models.DO_NOTHING, db_column="pk_job", db_constraint=False)
    show = models.ForeignKey(Show, null=True, on_delete=models.DO_NOTHING, db_column="pk_show", db_constraint=False)
    layer = models.ForeignKey(Layer, null=True, on_delete=models.DO_NOTHING, db_column="pk_layer", db_constraint=False)
    frame = models.OneToOneField(Frame, null=True, blank=True, on_delete=models.DO_NOTHING, db_column="pk_frame")
    int_cores_reserved = models.BigIntegerField()
    int_gpus_reserved = integer(0)
    int_mem_reserved = models.BigIntegerField()
    int_gpu_mem_reserved = big_integer(0)
    b_local = flag(False)
    b_unbooked = flag(False)
    ts_booked = created_now()
    ts_ping = created_now()

    class Meta(CuebotTable.Meta):
        db_table = "proc"

    def __str__(self) -> str:
        # Cuebot gives proc no foreign key to job: the job row may be gone. A list that joined
        # the job has it (None where gone); alone, the name is looked up, never the row.
        if Proc.job.is_cached(self):
            job = self.job.str_name if self.job else None
        else:
            job = Job.objects.filter(pk=self.job_id).values_list("str_name", flat=True).first()
        return f"{self.host} / {job or 'job gone'}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@readable_labels
class ApiToken(models.Model):
    """A bearer token for the API. Only its SHA-256 is stored; the raw value is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="First characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "acct_api_token"
        verbose_name = "API token"
        permissions = list(
            permissions.DECLARED
        )  # a copy: the declared list is typed list[tuple[str, str]], Meta wants str | lazy text

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


@readable_labels
class Instance(models.Model):
    """A running web or task process, as it last reported itself (see accounting.ownership.fleet).

    The publish invariant is fleet-wide: one process that does not publish releases to
    Redis makes the scheduler over-count. Records are refreshed every 30 s; one that has
    not been refreshed for two minutes belongs to a process that is gone.
    """

    class Role(models.TextChoices):
        WEB = "web"
        TASKS = "tasks"

    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    role = models.CharField(max_length=8, choices=Role.choices)
    publishes_to_redis = models.BooleanField()
    publishes_notify = models.BooleanField(default=False)
    version = models.CharField(max_length=40)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "acct_instance"
        constraints = [models.UniqueConstraint(fields=["host", "pid", "role"], name="acct_instance_host_pid_role_uniq")]

    def __str__(self) -> str:
        return f"{self.role} {self.host}:{self.pid}"

    @property
    def eras(self) -> frozenset[str]:
        """How this process tells the scheduler of releases: "redis", "notify", both or neither."""
        return frozenset(
            era for era, on in (("redis", self.publishes_to_redis), ("notify", self.publishes_notify)) if on
        )


class DriftRecord(models.Model):
    """A row the periodic drift check found drifted, from the first check that saw it to the last.

    One per drifted row of Cuebot's five tables (against SUM(proc)) or field of the accounting
    Redis (against PostgreSQL): the check writes it when it first sees the row drifted, keeps
    `first_seen` while every later check sees it drifted (writing only a difference that
    changed), and deletes it at the first check that finds it back at its sum. Rows of Cuebot's are named by value, not by foreign key: this is
    the project's own table, and no constraint of it may reach into Cuebot's schema.
    """

    class Source(models.TextChoices):
        CUEBOT_TABLES = "cuebot_tables", "Cuebot's tables against SUM(proc)"
        REDIS = "redis", "Redis against PostgreSQL"

    source = models.CharField(max_length=16, choices=Source.choices)
    # Which row, stable from check to check: "<table> <pk> (<columns>)" or "<Redis key> <field>".
    identity = models.TextField()
    show_id = models.TextField()
    show_name = models.TextField(help_text="The show's name at the last check.")
    # Cuebot's tables: the row as every face names it (show / allocation, job / layer, ...); Redis:
    # the key, which the faces name (accounting.operators.names.key_labels).
    subject = models.TextField()
    detail = models.TextField(help_text="The table and its columns compared, or the Redis field.")
    # Stored minus true (Redis minus PostgreSQL) as the last check read it; NULL where the row holds no such value.
    cores_difference = models.BigIntegerField(null=True, help_text="Centicores.")
    gpus_difference = models.BigIntegerField(null=True)
    difference = models.TextField(help_text='In words, as the faces say it: "4.00 cores high".')
    first_seen = models.DateTimeField()
    # Where Cuebot's tables were read from a standby: its last replayed transaction at that first
    # check, so the record says which past state of the primary held the drift. NULL: read live.
    replayed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "acct_drift_record"
        constraints = [models.UniqueConstraint(fields=["source", "identity"], name="acct_drift_record_source_identity")]

    def __str__(self) -> str:
        return f"{self.subject} {self.detail}: {self.difference} since {self.first_seen:%Y-%m-%d %H:%M} UTC"
