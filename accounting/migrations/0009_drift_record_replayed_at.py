"""A drift record states the replay time of the standby it was read from (CUEBOT_DATABASE_URL):
a nullable column, NULL for records read live, so the migration writes no row and reverses."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0008_cache_table"),
    ]

    operations = [
        migrations.AddField(
            model_name="driftrecord",
            name="replayed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
