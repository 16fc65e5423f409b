"""Cuebot's history tables (frame_history, job_history, config) and the trigger that writes a
frame's runs, for databases the project builds (OPENCUE_TABLES=create): the RunSQL carries the
`cuebot_tables` hint, as shows/0001's does, so on a site's database (existing) it is recorded
without running. The CreateModel operations emit no DDL (unmanaged models).
"""

from django.db import migrations, models

import shows.models
from infra.db_router import CUEBOT_TABLES_HINT
from shows.cuebot_schema import HISTORY_DROP_SQL, HISTORY_SQL


class Migration(migrations.Migration):
    dependencies = [
        ("shows", "0001_cuebot_tables"),
    ]

    operations = [
        migrations.RunSQL(HISTORY_SQL, reverse_sql=HISTORY_DROP_SQL, hints={CUEBOT_TABLES_HINT: True}),
        migrations.CreateModel(
            name="Config",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_config",
                        default=shows.models.new_pk,
                        editable=False,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("str_key", models.CharField(max_length=36, unique=True)),
            ],
            options={
                "db_table": "config",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="FrameHistory",
            fields=[
                (
                    "id",
                    models.CharField(
                        db_column="pk_frame_history",
                        default=shows.models.new_pk,
                        max_length=36,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("pk_frame", models.CharField(max_length=36)),
                ("pk_layer", models.CharField(max_length=36)),
                ("str_name", models.CharField(max_length=256)),
                ("str_state", models.CharField(max_length=24)),
                ("int_cores", models.IntegerField(db_default=100, default=100)),
                ("int_gpus", models.IntegerField(db_default=0, default=0)),
                ("int_mem_reserved", models.BigIntegerField(db_default=0, default=0)),
                ("int_mem_max_used", models.BigIntegerField(db_default=0, default=0)),
                ("int_exit_status", models.SmallIntegerField(db_default=-1, default=-1)),
                ("int_ts_started", models.IntegerField()),
                ("int_ts_stopped", models.IntegerField(db_default=0, default=0)),
            ],
            options={
                "db_table": "frame_history",
                "abstract": False,
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="JobHistory",
            fields=[
                ("id", models.CharField(db_column="pk_job", max_length=36, primary_key=True, serialize=False)),
                ("str_name", models.CharField(max_length=512)),
                ("str_shot", models.CharField(max_length=64)),
                ("str_user", models.CharField(max_length=36)),
                ("int_core_time_success", models.BigIntegerField(db_default=0, default=0)),
                ("int_core_time_fail", models.BigIntegerField(db_default=0, default=0)),
                ("int_ts_started", models.IntegerField()),
                ("int_ts_stopped", models.IntegerField(db_default=0, default=0)),
            ],
            options={
                "db_table": "job_history",
                "abstract": False,
                "managed": False,
            },
        ),
    ]
