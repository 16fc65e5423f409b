"""The drift check's record of each drifted row (accounting.models.DriftRecord): one of the project's own tables."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0006_repair_tables_permission"),
    ]

    operations = [
        migrations.CreateModel(
            name="DriftRecord",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("cuebot_tables", "Cuebot's tables against SUM(proc)"),
                            ("redis", "Redis against PostgreSQL"),
                        ],
                        max_length=16,
                    ),
                ),
                ("identity", models.TextField()),
                ("show_id", models.TextField()),
                ("show_name", models.TextField(help_text="The show's name at the last check.")),
                ("subject", models.TextField()),
                ("detail", models.TextField(help_text="The table and its columns compared, or the Redis field.")),
                ("cores_difference", models.BigIntegerField(help_text="Centicores.", null=True)),
                ("gpus_difference", models.BigIntegerField(null=True)),
                ("difference", models.TextField(help_text='In words, as the faces say it: "4.00 cores high".')),
                ("first_seen", models.DateTimeField()),
            ],
            options={
                "db_table": "acct_drift_record",
                "constraints": [
                    models.UniqueConstraint(fields=("source", "identity"), name="acct_drift_record_source_identity")
                ],
            },
        ),
    ]
