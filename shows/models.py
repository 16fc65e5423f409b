"""The farm as OpenCue's Cuebot database stores it (docs/cuebot-schema.md).

These tables belong to Cuebot, so every model here is unmanaged (`CuebotTable`): Django
never creates, alters or drops them. With OPENCUE_TABLES=create the project's migration
creates them from Cuebot's DDL (shows/cuebot_schema/), triggers included; with
OPENCUE_TABLES=existing they are a site's own, and the system check accounting.E001
verifies that every column a model names is there with a compatible type.

A model names only the columns the project reads or writes (plus those an INSERT must
give); Cuebot's other columns keep their database defaults.

Naming: the primary key field is `id` on column pk_<table>; a foreign key `show` sits
on column pk_show (so `proc.show_id` is the text UUID); every other field carries its
column's name. Cores are centicores (1 core = 100) everywhere in PostgreSQL.
"""

import re
import uuid

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

TYPE_PREFIX = re.compile(r"^(str|b|int|ts|float)_")
# OpenCue's abbreviations, as an operator reads them.
LABEL_WORDS = {"alloc": "allocation", "dept": "department", "gpu": "GPU", "gpus": "GPUs"}


def readable_labels(model: type[models.Model]) -> type[models.Model]:
    """Admin and form labels without OpenCue's type prefixes or abbreviations:
    b_scheduler_managed reads "scheduler managed", alloc "allocation", int_min_gpus "min
    GPUs". Column names stay exact; migrations record only an explicit verbose_name, so this
    changes no migration."""
    for field in model._meta.fields:
        if field.verbose_name == field.name.replace("_", " "):
            words = TYPE_PREFIX.sub("", field.name).split("_")
            field.verbose_name = " ".join(LABEL_WORDS.get(word, word) for word in words)
    return model


def new_pk() -> str:
    return str(uuid.uuid4())


def text_pk(column: str) -> models.CharField:
    return models.CharField(primary_key=True, max_length=36, db_column=column, default=new_pk, editable=False)


def flag(value: bool) -> models.BooleanField:
    return models.BooleanField(default=value, db_default=value)


def integer(value: int, **options) -> models.IntegerField:
    return models.IntegerField(default=value, db_default=value, **options)


def big_integer(value: int, **options) -> models.BigIntegerField:
    return models.BigIntegerField(default=value, db_default=value, **options)


def tier() -> models.DecimalField:
    return models.DecimalField(max_digits=16, decimal_places=2, default=0, db_default=0)


def created_now() -> models.DateTimeField:
    return models.DateTimeField(default=timezone.now, db_default=Now())


class CuebotTable(models.Model):
    class Meta:
        abstract = True
        managed = False


@readable_labels
class Facility(CuebotTable):
    id = text_pk("pk_facility")
    str_name = models.CharField(max_length=36)

    class Meta(CuebotTable.Meta):
        db_table = "facility"
        verbose_name_plural = "facilities"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Alloc(CuebotTable):
    id = text_pk("pk_alloc")
    str_name = models.CharField(max_length=36, unique=True)
    facility = models.ForeignKey(Facility, on_delete=models.PROTECT, db_column="pk_facility")
    str_tag = models.CharField(max_length=24, null=True, blank=True)
    b_default = flag(False)
    b_billable = flag(True)
    b_enabled = models.BooleanField(null=True, default=True, db_default=True)

    class Meta(CuebotTable.Meta):
        db_table = "alloc"
        verbose_name = "allocation"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Show(CuebotTable):
    id = text_pk("pk_show")
    # Not unique in Cuebot's schema: Cuebot keeps show names unique in its own code.
    str_name = models.CharField(max_length=512)
    b_active = flag(True)
    b_paused = flag(False)
    b_booking_enabled = flag(True)
    b_dispatch_enabled = flag(True)
    int_default_min_cores = integer(100)
    int_default_max_cores = integer(10000)
    int_default_min_gpus = integer(100)
    int_default_max_gpus = integer(100000)
    # True: the Rust scheduler owns this show's accounting and releases go to Redis.
    b_scheduler_managed = flag(False)

    class Meta(CuebotTable.Meta):
        db_table = "show"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Dept(CuebotTable):
    id = text_pk("pk_dept")
    str_name = models.CharField(max_length=36)
    b_default = flag(False)

    class Meta(CuebotTable.Meta):
        db_table = "dept"
        verbose_name = "department"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Folder(CuebotTable):
    """Inserting one makes Cuebot's trigger create its folder_resource row."""

    id = text_pk("pk_folder")
    # Cuebot gives this column no foreign-key constraint.
    parent_folder = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DO_NOTHING, db_column="pk_parent_folder", db_constraint=False
    )
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    dept = models.ForeignKey(Dept, on_delete=models.PROTECT, db_column="pk_dept")
    str_name = models.CharField(max_length=36)
    int_priority = big_integer(1)
    # Cuebot's insert trigger sets it for a folder without a parent.
    b_default = flag(False)
    int_job_min_cores = integer(-1)
    int_job_max_cores = integer(-1)
    int_job_priority = integer(-1)

    class Meta(CuebotTable.Meta):
        db_table = "folder"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Job(CuebotTable):
    """Inserting one makes Cuebot's trigger create its job_resource row.

    `str_name` repeats across a show's history; the live job of a name is the one whose
    `str_visible_name` equals it (Cuebot clears it when the job finishes).
    """

    id = text_pk("pk_job")
    folder = models.ForeignKey(Folder, on_delete=models.PROTECT, db_column="pk_folder")
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    dept = models.ForeignKey(Dept, on_delete=models.PROTECT, db_column="pk_dept")
    facility = models.ForeignKey(Facility, on_delete=models.PROTECT, db_column="pk_facility")
    str_name = models.CharField(max_length=255)
    str_visible_name = models.CharField(max_length=255, null=True, blank=True, unique=True)
    str_shot = models.CharField(max_length=64)
    str_user = models.CharField(max_length=32)
    str_state = models.CharField(max_length=16)
    b_paused = flag(False)
    int_min_cores = integer(100)
    int_max_cores = integer(20000)
    int_min_gpus = integer(0)
    int_max_gpus = integer(100000)
    ts_started = created_now()

    class Meta(CuebotTable.Meta):
        db_table = "job"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Layer(CuebotTable):
    """Inserting one makes Cuebot's trigger create its layer_resource row."""

    id = text_pk("pk_layer")
    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, db_column="pk_job")
    str_name = models.CharField(max_length=256)
    str_cmd = models.CharField(max_length=4000)
    str_range = models.CharField(max_length=4000)
    str_type = models.CharField(max_length=16)
    int_cores_min = big_integer(100)
    int_cores_max = integer(0)
    int_gpus_min = big_integer(0)
    int_gpus_max = big_integer(0)
    int_mem_min = big_integer(4194304)

    class Meta(CuebotTable.Meta):
        db_table = "layer"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Frame(CuebotTable):
    """A running frame is what a proc is booked for (proc.pk_frame references it)."""

    id = text_pk("pk_frame")
    layer = models.ForeignKey(Layer, on_delete=models.DO_NOTHING, db_column="pk_layer")
    job = models.ForeignKey(Job, on_delete=models.DO_NOTHING, db_column="pk_job")
    str_name = models.CharField(max_length=256)
    str_state = models.CharField(max_length=24)
    int_number = models.BigIntegerField()
    int_layer_order = models.IntegerField()
    int_cores = integer(0)
    str_host = models.CharField(max_length=256, null=True, blank=True)

    class Meta(CuebotTable.Meta):
        db_table = "frame"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Host(CuebotTable):
    id = text_pk("pk_host")
    alloc = models.ForeignKey(Alloc, on_delete=models.PROTECT, db_column="pk_alloc")
    str_name = models.CharField(max_length=45, unique=True)
    str_lock_state = models.CharField(max_length=36)
    int_cores = big_integer(0)
    int_cores_idle = big_integer(0)
    int_mem = big_integer(0)
    int_mem_idle = big_integer(0)
    int_gpus = big_integer(0)
    int_gpus_idle = big_integer(0)
    int_gpu_mem = big_integer(0)
    int_gpu_mem_idle = big_integer(0)

    class Meta(CuebotTable.Meta):
        db_table = "host"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class HostStat(CuebotTable):
    """What the host last reported; Cuebot keeps one per host (deleted with it by trigger)."""

    id = text_pk("pk_host_stat")
    host = models.OneToOneField(Host, on_delete=models.DO_NOTHING, db_column="pk_host", related_name="stat")
    int_mem_total = big_integer(0)
    int_mem_free = big_integer(0)
    str_state = models.CharField(max_length=32, default="UP", db_default="UP")

    class Meta(CuebotTable.Meta):
        db_table = "host_stat"
        verbose_name = "host status"
        verbose_name_plural = "host statuses"


# Cuebot's history (V1, V11, V13): written by Cuebot's triggers, never by this project on a
# site, read by the usage report (accounting.usage). Epochs are whole seconds in INT columns.


class Config(CuebotTable):
    """Cuebot's settings table; a DISABLE_HISTORY key switches the history off."""

    id = text_pk("pk_config")
    str_key = models.CharField(max_length=36, unique=True)

    class Meta(CuebotTable.Meta):
        db_table = "config"


class JobHistory(CuebotTable):
    """A job as it was: written when the job is inserted, its core time when it finishes."""

    id = models.CharField(primary_key=True, max_length=36, db_column="pk_job")
    show = models.ForeignKey(Show, on_delete=models.DO_NOTHING, db_column="pk_show")
    facility = models.ForeignKey(Facility, on_delete=models.DO_NOTHING, db_column="pk_facility")
    dept = models.ForeignKey(Dept, on_delete=models.DO_NOTHING, db_column="pk_dept")
    str_name = models.CharField(max_length=512)
    str_shot = models.CharField(max_length=64)
    str_user = models.CharField(max_length=36)
    int_core_time_success = big_integer(0)
    int_core_time_fail = big_integer(0)
    int_ts_started = models.IntegerField()
    int_ts_stopped = integer(0)

    class Meta(CuebotTable.Meta):
        db_table = "job_history"


class FrameHistory(CuebotTable):
    """One run of a frame: opened when the frame starts running, closed (int_ts_stopped) when it stops."""

    id = models.CharField(primary_key=True, max_length=36, db_column="pk_frame_history", default=new_pk)
    pk_frame = models.CharField(max_length=36)
    pk_layer = models.CharField(max_length=36)
    job = models.ForeignKey(JobHistory, on_delete=models.DO_NOTHING, db_column="pk_job")
    alloc = models.ForeignKey(Alloc, on_delete=models.DO_NOTHING, db_column="pk_alloc", null=True)
    str_name = models.CharField(max_length=256)
    str_state = models.CharField(max_length=24)
    int_cores = integer(100)
    int_gpus = integer(0)
    int_mem_reserved = big_integer(0)
    int_mem_max_used = big_integer(0)
    int_exit_status = models.SmallIntegerField(default=-1, db_default=-1)
    int_ts_started = models.IntegerField()
    int_ts_stopped = integer(0)

    class Meta(CuebotTable.Meta):
        db_table = "frame_history"
