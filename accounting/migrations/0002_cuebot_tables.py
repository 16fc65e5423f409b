"""Django's view of Cuebot's accounting tables, proc and host_local: state only.

The models are unmanaged; the tables come from shows 0001 (OPENCUE_TABLES=create) or
are a site's own (OPENCUE_TABLES=existing).
"""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

import shows.models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounting", "0001_own_tables"),
        ("shows", "0001_cuebot_tables"),
    ]

    operations = [
        migrations.CreateModel(
            name="FolderResource",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_folder_resource",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_cores", models.IntegerField(db_default=0, default=0)),
                (
                    "int_min_cores",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                (
                    "int_max_cores",
                    models.IntegerField(
                        db_default=-1,
                        default=-1,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
                (
                    "int_min_gpus",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                (
                    "int_max_gpus",
                    models.IntegerField(
                        db_default=-1,
                        default=-1,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("float_tier", models.DecimalField(db_default=0, decimal_places=2, default=0, max_digits=16)),
            ],
            options={
                "db_table": "folder_resource",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="HostLocal",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_host_local",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_type", models.CharField(max_length=36)),
                ("int_cores_max", models.IntegerField(db_default=100, default=100)),
                ("int_cores_idle", models.IntegerField(db_default=100, default=100)),
                ("int_mem_max", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem_idle", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus_max", models.IntegerField(db_default=0, default=0)),
                ("int_gpus_idle", models.IntegerField(db_default=0, default=0)),
                ("int_gpu_mem_max", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpu_mem_idle", models.BigIntegerField(db_default=0, default=0)),
                ("int_threads", models.IntegerField(db_default=1, default=1)),
                ("b_active", models.BooleanField(db_default=True, default=True)),
                ("float_tier", models.DecimalField(db_default=0, decimal_places=2, default=0, max_digits=16)),
            ],
            options={
                "verbose_name": "local reservation",
                "db_table": "host_local",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="JobResource",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_job_resource",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_cores", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
                ("int_min_cores", models.IntegerField(db_default=100, default=100)),
                (
                    "int_max_cores",
                    models.IntegerField(
                        db_default=10000,
                        default=10000,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("int_min_gpus", models.IntegerField(db_default=0, default=0)),
                (
                    "int_max_gpus",
                    models.IntegerField(
                        db_default=100,
                        default=100,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                (
                    "int_priority",
                    models.IntegerField(
                        db_default=1,
                        default=1,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("int_local_cores", models.IntegerField(db_default=0, default=0)),
                ("int_local_gpus", models.IntegerField(db_default=0, default=0)),
                ("float_tier", models.DecimalField(db_default=0, decimal_places=2, default=0, max_digits=16)),
            ],
            options={
                "db_table": "job_resource",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="LayerResource",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_layer_resource",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_cores", models.BigIntegerField(db_default=0, default=0)),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
            ],
            options={
                "db_table": "layer_resource",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Point",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_point",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_cores", models.IntegerField(db_default=0, default=0)),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
                (
                    "int_min_cores",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                (
                    "int_min_gpus",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("b_managed", models.BooleanField(db_default=False, default=False)),
                ("float_tier", models.DecimalField(db_default=0, decimal_places=2, default=0, max_digits=16)),
                (
                    "ts_updated",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), default=django.utils.timezone.now
                    ),
                ),
            ],
            options={
                "db_table": "point",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Proc",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_proc",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("int_cores_reserved", models.BigIntegerField()),
                ("int_gpus_reserved", models.IntegerField(db_default=0, default=0)),
                ("int_mem_reserved", models.BigIntegerField()),
                ("int_gpu_mem_reserved", models.BigIntegerField(db_default=0, default=0)),
                ("b_local", models.BooleanField(db_default=False, default=False)),
                ("b_unbooked", models.BooleanField(db_default=False, default=False)),
                (
                    "ts_booked",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), default=django.utils.timezone.now
                    ),
                ),
                (
                    "ts_ping",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), default=django.utils.timezone.now
                    ),
                ),
            ],
            options={
                "db_table": "proc",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Subscription",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_subscription",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "int_size",
                    models.BigIntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                (
                    "int_burst",
                    models.BigIntegerField(
                        db_default=0,
                        default=0,
                        validators=[
                            django.core.validators.MinValueValidator(
                                -1, "Use -1 for unlimited, or a value of 0 or more."
                            )
                        ],
                    ),
                ),
                ("int_cores", models.IntegerField(db_default=0, default=0)),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
                ("float_tier", models.DecimalField(db_default=0, decimal_places=2, default=0, max_digits=16)),
            ],
            options={
                "db_table": "subscription",
                "abstract": False,
                "managed": False,
            },
        ),
    ]
