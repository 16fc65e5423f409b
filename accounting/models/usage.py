"""The usage report's own records: subscriptions' terms over time and the daily rollups of Cuebot's history."""

from django.db import models


class SubscriptionTerm(models.Model):
    """A subscription's size and burst as the service saw them, from the check that first saw
    these values to the check that saw them change, or the subscription gone (`valid_until`,
    NULL while they hold). Cuebot keeps only the current values; the usage report's promise
    is size x time over these rows, and unknown before a subscription's first row. Named by
    value, as DriftRecord is: rows outlive renames and deleted subscriptions."""

    subscription_id = models.TextField()
    show_id = models.TextField()
    alloc_id = models.TextField()
    show_name = models.TextField()
    alloc_name = models.TextField()
    int_size = models.BigIntegerField(help_text="Centicores.")
    int_burst = models.BigIntegerField(help_text="Centicores.")
    valid_from = models.DateTimeField()
    valid_until = models.DateTimeField(null=True)

    class Meta:
        db_table = "acct_subscription_term"
        indexes = [models.Index(fields=["show_id", "alloc_id", "valid_from"], name="acct_sub_term_pair")]
        constraints = [
            models.UniqueConstraint(
                fields=["subscription_id"], condition=models.Q(valid_until=None), name="acct_sub_term_one_current"
            )
        ]

    def __str__(self) -> str:
        return f"{self.show_name} / {self.alloc_name}: size {self.int_size} from {self.valid_from:%Y-%m-%d %H:%M}"


class UsageRollup(models.Model):
    """One site day's closed runs, summed per show, allocation, facility, department, user, shot
    and outcome (succeeded or failed): centicore-seconds and GPU-seconds clipped to the day.
    Runs that were still open when the day was rolled up are added when they close."""

    day = models.DateField()
    show_id = models.TextField()
    alloc_id = models.TextField(null=True)
    facility_id = models.TextField()
    dept_id = models.TextField()
    user = models.TextField()
    shot = models.TextField()
    outcome = models.CharField(max_length=9)
    centicore_seconds = models.BigIntegerField()
    gpu_seconds = models.BigIntegerField()

    class Meta:
        db_table = "acct_usage_rollup"
        indexes = [models.Index(fields=["day"], name="acct_usage_rollup_day")]


class UsageAboveSize(models.Model):
    """One site day's centicore-seconds above size per subscription (show and allocation), from
    every run that met the day, open ones to the day's end."""

    day = models.DateField()
    show_id = models.TextField()
    alloc_id = models.TextField(null=True)
    centicore_seconds = models.BigIntegerField()

    class Meta:
        db_table = "acct_usage_above_size"
        indexes = [models.Index(fields=["day"], name="acct_usage_above_size_day")]


class UsageRolledDay(models.Model):
    """A site day whose runs are in the rollups, with its edges in epoch seconds."""

    day = models.DateField(unique=True)
    lo = models.BigIntegerField()
    hi = models.BigIntegerField()
    rolled_at = models.DateTimeField()

    class Meta:
        db_table = "acct_usage_rolled_day"


class UsageWatermark(models.Model):
    """The rollups hold every run that stopped at or before `stopped_by` (epoch seconds) and met a
    rolled day: one row."""

    stopped_by = models.BigIntegerField()

    class Meta:
        db_table = "acct_usage_watermark"


class UsageOpenRun(models.Model):
    """A run still open when its day's time above size was rolled up (counted to the day's end):
    watched until it closes, for Cuebot deletes an open run (exit status 299), and then the day's
    time above size is recomputed without it."""

    day = models.DateField()
    run_id = models.TextField(help_text="frame_history.pk_frame_history")

    class Meta:
        db_table = "acct_usage_open_run"
        indexes = [models.Index(fields=["day"], name="acct_usage_open_run_day")]
