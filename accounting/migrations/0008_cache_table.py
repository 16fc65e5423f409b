"""acct_cache: Django's database cache, where an instance has no cache Redis (the Maestro era
without CACHE_REDIS_URL, settings). One of the project's own tables, made in every era so that a
site can drop its Redis without migrating again. The columns and index are those Django's
`createcachetable` makes, which a migration cannot run (it reads CACHES as they are at the time).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounting", "0007_drift_record"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[
                "CREATE TABLE acct_cache (cache_key varchar(255) NOT NULL PRIMARY KEY, value text NOT NULL, "
                "expires timestamp with time zone NOT NULL)",
                "CREATE INDEX acct_cache_expires ON acct_cache (expires)",
            ],
            reverse_sql=["DROP TABLE acct_cache"],
        ),
    ]
