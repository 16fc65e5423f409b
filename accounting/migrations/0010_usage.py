"""The usage report's own tables (accounting.models): subscription terms over time, the daily rollups of Cuebot's runs, their watermark and the open runs they watch."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0009_drift_record_replayed_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageRolledDay",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField(unique=True)),
                ("lo", models.BigIntegerField()),
                ("hi", models.BigIntegerField()),
                ("rolled_at", models.DateTimeField()),
            ],
            options={
                "db_table": "acct_usage_rolled_day",
            },
        ),
        migrations.CreateModel(
            name="UsageWatermark",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("stopped_by", models.BigIntegerField()),
            ],
            options={
                "db_table": "acct_usage_watermark",
            },
        ),
        migrations.CreateModel(
            name="SubscriptionTerm",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("subscription_id", models.TextField()),
                ("show_id", models.TextField()),
                ("alloc_id", models.TextField()),
                ("show_name", models.TextField()),
                ("alloc_name", models.TextField()),
                ("int_size", models.BigIntegerField(help_text="Centicores.")),
                ("int_burst", models.BigIntegerField(help_text="Centicores.")),
                ("valid_from", models.DateTimeField()),
                ("valid_until", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": "acct_subscription_term",
                "indexes": [models.Index(fields=["show_id", "alloc_id", "valid_from"], name="acct_sub_term_pair")],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("valid_until", None)),
                        fields=("subscription_id",),
                        name="acct_sub_term_one_current",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsageAboveSize",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("show_id", models.TextField()),
                ("alloc_id", models.TextField(null=True)),
                ("centicore_seconds", models.BigIntegerField()),
            ],
            options={
                "db_table": "acct_usage_above_size",
                "indexes": [models.Index(fields=["day"], name="acct_usage_above_size_day")],
            },
        ),
        migrations.CreateModel(
            name="UsageOpenRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("run_id", models.TextField(help_text="frame_history.pk_frame_history")),
            ],
            options={
                "db_table": "acct_usage_open_run",
                "indexes": [models.Index(fields=["day"], name="acct_usage_open_run_day")],
            },
        ),
        migrations.CreateModel(
            name="UsageRollup",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("show_id", models.TextField()),
                ("alloc_id", models.TextField(null=True)),
                ("facility_id", models.TextField()),
                ("dept_id", models.TextField()),
                ("user", models.TextField()),
                ("shot", models.TextField()),
                ("outcome", models.CharField(max_length=9)),
                ("centicore_seconds", models.BigIntegerField()),
                ("gpu_seconds", models.BigIntegerField()),
            ],
            options={
                "db_table": "acct_usage_rollup",
                "indexes": [models.Index(fields=["day"], name="acct_usage_rollup_day")],
            },
        ),
    ]
