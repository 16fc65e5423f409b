"""Cuebot's tables, trigger behaviour included, for a database the project owns.

The RunSQL carries the `cuebot_tables` hint: with OPENCUE_TABLES=existing the router
(infra.db_router) refuses it and Django records this migration without running it.
The CreateModel operations only tell Django about the unmanaged models; they emit no DDL.
"""

import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

import shows.models
from infra.db_router import CUEBOT_TABLES_HINT
from shows.cuebot_schema import DROP_SQL, TABLES_SQL, TRIGGERS_SQL


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.RunSQL(TABLES_SQL + TRIGGERS_SQL, reverse_sql=DROP_SQL, hints={CUEBOT_TABLES_HINT: True}),
        migrations.CreateModel(
            name="Alloc",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_alloc",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=36, unique=True)),
                ("str_tag", models.CharField(blank=True, max_length=24, null=True)),
                ("b_default", models.BooleanField(db_default=False, default=False)),
                ("b_billable", models.BooleanField(db_default=True, default=True)),
                ("b_enabled", models.BooleanField(db_default=True, default=True, null=True)),
            ],
            options={
                "verbose_name": "allocation",
                "db_table": "alloc",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Dept",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_dept",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=36)),
                ("b_default", models.BooleanField(db_default=False, default=False)),
            ],
            options={
                "verbose_name": "department",
                "db_table": "dept",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Facility",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_facility",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=36)),
            ],
            options={
                "verbose_name_plural": "facilities",
                "db_table": "facility",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Folder",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_folder",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=36)),
                ("int_priority", models.BigIntegerField(db_default=1, default=1)),
                ("b_default", models.BooleanField(db_default=False, default=False)),
                ("int_job_min_cores", models.IntegerField(db_default=-1, default=-1)),
                ("int_job_max_cores", models.IntegerField(db_default=-1, default=-1)),
                ("int_job_priority", models.IntegerField(db_default=-1, default=-1)),
            ],
            options={
                "db_table": "folder",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Frame",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_frame",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=256)),
                ("str_state", models.CharField(max_length=24)),
                ("int_number", models.BigIntegerField()),
                ("int_layer_order", models.IntegerField()),
                ("int_cores", models.IntegerField(db_default=0, default=0)),
                ("str_host", models.CharField(blank=True, max_length=256, null=True)),
            ],
            options={
                "db_table": "frame",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Host",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_host",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=45, unique=True)),
                ("str_lock_state", models.CharField(max_length=36)),
                ("int_cores", models.BigIntegerField(db_default=0, default=0)),
                ("int_cores_idle", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem_idle", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus_idle", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpu_mem", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpu_mem_idle", models.BigIntegerField(db_default=0, default=0)),
            ],
            options={
                "db_table": "host",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="HostStat",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_host_stat",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_mem_total", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem_free", models.BigIntegerField(db_default=0, default=0)),
                ("str_state", models.CharField(db_default="UP", default="UP", max_length=32)),
            ],
            options={
                "verbose_name": "host status",
                "verbose_name_plural": "host statuses",
                "db_table": "host_stat",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_job",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=255)),
                ("str_visible_name", models.CharField(blank=True, max_length=255, null=True, unique=True)),
                ("str_shot", models.CharField(max_length=64)),
                ("str_user", models.CharField(max_length=32)),
                ("str_state", models.CharField(max_length=16)),
                ("b_paused", models.BooleanField(db_default=False, default=False)),
                ("int_min_cores", models.IntegerField(db_default=100, default=100)),
                ("int_max_cores", models.IntegerField(db_default=20000, default=20000)),
                ("int_min_gpus", models.IntegerField(db_default=0, default=0)),
                ("int_max_gpus", models.IntegerField(db_default=100000, default=100000)),
                (
                    "ts_started",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), default=django.utils.timezone.now
                    ),
                ),
            ],
            options={
                "db_table": "job",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Layer",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_layer",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=256)),
                ("str_cmd", models.CharField(max_length=4000)),
                ("str_range", models.CharField(max_length=4000)),
                ("str_type", models.CharField(max_length=16)),
                ("int_cores_min", models.BigIntegerField(db_default=100, default=100)),
                ("int_cores_max", models.IntegerField(db_default=0, default=0)),
                ("int_gpus_min", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus_max", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem_min", models.BigIntegerField(db_default=4194304, default=4194304)),
            ],
            options={
                "db_table": "layer",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Show",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_show",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_name", models.CharField(max_length=512)),
                ("b_active", models.BooleanField(db_default=True, default=True)),
                ("b_paused", models.BooleanField(db_default=False, default=False)),
                ("b_booking_enabled", models.BooleanField(db_default=True, default=True)),
                ("b_dispatch_enabled", models.BooleanField(db_default=True, default=True)),
                ("int_default_min_cores", models.IntegerField(db_default=100, default=100)),
                ("int_default_max_cores", models.IntegerField(db_default=10000, default=10000)),
                ("int_default_min_gpus", models.IntegerField(db_default=100, default=100)),
                ("int_default_max_gpus", models.IntegerField(db_default=100000, default=100000)),
                ("b_scheduler_managed", models.BooleanField(db_default=False, default=False)),
            ],
            options={
                "db_table": "show",
                "abstract": False,
                "managed": False,
            },
        ),
    ]
