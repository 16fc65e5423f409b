"""Prometheus metrics of this service, exposed at /metrics.

When PROMETHEUS_MULTIPROC_DIR is set (make run sets it), gunicorn workers and the task
cluster write to it and /metrics aggregates them all.
"""
import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY

# A metric created at import writes its file there at once, so the directory must exist
# before any command (migrate included) imports this module.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


# --- Show ownership: switch seeding, the publish guardrail, recalculate_subs ---
from prometheus_client import Counter, Gauge  # noqa: E402

SWITCH_SEED_FAILURES = Counter(
    "cuebot_acct_switch_seed_failures",
    "Seedings of a show's Redis keys after a switch to the scheduler that failed (each is retried).",
)
# Every process evaluates the same fleet-wide check, so the most recent value is the truth.
PUBLISH_MISCONFIGURED = Gauge(
    "cuebot_redis_publish_misconfigured",
    "1 while scheduler-managed shows exist and some live instance does not publish releases to Redis.",
    multiprocess_mode="mostrecent",
)
RECALCULATE_SUBS_ROWS = Counter(
    "cuebot_acct_recalculate_subs_rows",
    "Subscription rows of Cuebot-managed shows corrected by recalculate_subs.",
)
RECALCULATE_SUBS_SKIPPED = Counter(
    "cuebot_acct_recalculate_subs_skipped",
    "recalculate_subs runs skipped because another instance held the lock.",
)
