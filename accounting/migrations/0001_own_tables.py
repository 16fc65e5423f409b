"""The project's own tables: API tokens and the fleet register. Never Cuebot's."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(blank=True, max_length=100)),
                ("key_hash", models.CharField(editable=False, max_length=64, unique=True)),
                (
                    "prefix",
                    models.CharField(editable=False, help_text="First characters, to tell tokens apart.", max_length=8),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "API token",
                "db_table": "acct_api_token",
            },
        ),
        migrations.CreateModel(
            name="Instance",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("host", models.CharField(max_length=255)),
                ("pid", models.IntegerField()),
                ("role", models.CharField(choices=[("web", "Web"), ("tasks", "Tasks")], max_length=8)),
                ("publishes_to_redis", models.BooleanField()),
                ("version", models.CharField(max_length=40)),
                ("started_at", models.DateTimeField()),
                ("last_seen", models.DateTimeField(db_index=True)),
            ],
            options={
                "db_table": "acct_instance",
                "constraints": [
                    models.UniqueConstraint(fields=("host", "pid", "role"), name="acct_instance_host_pid_role_uniq")
                ],
            },
        ),
    ]
