"""The farm as OpenCue's Cuebot database stores it (see shared/docs/opencue-schema.md).

Naming: the primary key field is `id` on column pk_<table>; a foreign key `show` sits
on column pk_show (so `proc.show_id` is the text UUID); every other field carries its
column's name. Defaults are database defaults as well as Python ones, so a row
inserted by another program that omits a column gets the value OpenCue would give it.
Cores are centicores (1 core = 100) everywhere in PostgreSQL.
"""
import re
import uuid

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone


TYPE_PREFIX = re.compile(r"^(str|b|int|ts|float)_")


def readable_labels(model: type[models.Model]) -> type[models.Model]:
    """Admin and form labels without OpenCue's type prefixes: b_scheduler_managed reads
    "scheduler managed", str_name "name". Column names stay exact; migrations record only
    an explicit verbose_name, so this changes no migration."""
    for field in model._meta.fields:
        if field.verbose_name == field.name.replace("_", " "):
            field.verbose_name = TYPE_PREFIX.sub("", field.name).replace("_", " ")
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


@readable_labels
class Facility(models.Model):
    id = text_pk("pk_facility")
    str_name = models.CharField(max_length=36, unique=True)

    class Meta:
        db_table = "facility"
        verbose_name_plural = "facilities"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Alloc(models.Model):
    id = text_pk("pk_alloc")
    str_name = models.CharField(max_length=36, unique=True)
    facility = models.ForeignKey(Facility, on_delete=models.PROTECT, db_column="pk_facility")
    str_tag = models.CharField(max_length=24)
    b_default = flag(False)
    b_billable = flag(True)
    b_enabled = flag(True)

    class Meta:
        db_table = "alloc"
        verbose_name = "allocation"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Show(models.Model):
    id = text_pk("pk_show")
    str_name = models.CharField(max_length=512, unique=True)
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

    class Meta:
        db_table = "show"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Dept(models.Model):
    id = text_pk("pk_dept")
    str_name = models.CharField(max_length=36, unique=True)
    b_default = flag(False)

    class Meta:
        db_table = "dept"
        verbose_name = "department"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Folder(models.Model):
    id = text_pk("pk_folder")
    # The schema document gives this column no foreign-key constraint.
    parent_folder = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DO_NOTHING, db_column="pk_parent_folder", db_constraint=False
    )
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    dept = models.ForeignKey(Dept, on_delete=models.PROTECT, db_column="pk_dept")
    str_name = models.CharField(max_length=36)
    int_priority = big_integer(1)
    b_default = flag(False)
    int_job_min_cores = integer(-1)
    int_job_max_cores = integer(-1)
    int_job_priority = integer(-1)

    class Meta:
        db_table = "folder"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Job(models.Model):
    id = text_pk("pk_job")
    folder = models.ForeignKey(Folder, on_delete=models.PROTECT, db_column="pk_folder")
    show = models.ForeignKey(Show, on_delete=models.PROTECT, db_column="pk_show")
    dept = models.ForeignKey(Dept, on_delete=models.PROTECT, db_column="pk_dept")
    facility = models.ForeignKey(Facility, on_delete=models.PROTECT, db_column="pk_facility")
    str_name = models.CharField(max_length=255, unique=True)
    str_shot = models.CharField(max_length=64)
    str_user = models.CharField(max_length=32)
    str_state = models.CharField(max_length=16, db_index=True)
    b_paused = flag(False)
    int_min_cores = integer(100)
    int_max_cores = integer(20000)
    int_min_gpus = integer(0)
    int_max_gpus = integer(100000)
    ts_started = created_now()

    class Meta:
        db_table = "job"

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Layer(models.Model):
    id = text_pk("pk_layer")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, db_column="pk_job")
    str_name = models.CharField(max_length=256)
    str_type = models.CharField(max_length=16)
    int_cores_min = big_integer(100)
    int_cores_max = integer(0)
    int_gpus_min = big_integer(0)
    int_gpus_max = big_integer(0)
    int_mem_min = models.BigIntegerField()

    class Meta:
        db_table = "layer"
        constraints = [models.UniqueConstraint(fields=["job", "str_name"], name="layer_job_name_uniq")]

    def __str__(self) -> str:
        return self.str_name


@readable_labels
class Host(models.Model):
    id = text_pk("pk_host")
    alloc = models.ForeignKey(Alloc, on_delete=models.PROTECT, db_column="pk_alloc")
    str_name = models.CharField(max_length=45, unique=True)
    str_lock_state = models.CharField(max_length=36)
    int_cores = models.BigIntegerField()
    int_cores_idle = models.BigIntegerField()
    int_mem = models.BigIntegerField()
    int_mem_idle = models.BigIntegerField()
    int_gpus = big_integer(0)
    int_gpus_idle = big_integer(0)
    int_gpu_mem = big_integer(0)
    int_gpu_mem_idle = big_integer(0)

    class Meta:
        db_table = "host"

    def __str__(self) -> str:
        return self.str_name
