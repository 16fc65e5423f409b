"""Prometheus metrics of this service, exposed at /metrics.

When PROMETHEUS_MULTIPROC_DIR is set (make run sets it), gunicorn workers and the task
cluster write to it and /metrics aggregates them all.
"""
import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


# --- Reconciliation (reseed, limit publishing, bootstrap) ---
from prometheus_client import Counter, Histogram  # noqa: E402

RESEED_SKIPPED = Counter(
    "cuebot_acct_reseed_skipped_total",
    "Booked-counter reseed cycles given up after the acct:seq compare-and-swap kept missing.",
    ["scope"],
)
RESEED_CAS_MISSES = Counter(
    "cuebot_acct_reseed_cas_misses_total",
    "Booked-counter reseed attempts whose compare-and-swap found acct:seq changed.",
)
RESEED_SECONDS = Histogram(
    "cuebot_acct_reseed_seconds",
    "Wall time of a reseed, by kind (booked, limits).",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
LIMIT_PUBLISH_FAILURES = Counter(
    "cuebot_acct_limit_publish_failures_total",
    "Limit changes committed in PostgreSQL whose Redis write failed (healed by the limit reseed).",
)
BOOTSTRAPS = Counter(
    "cuebot_acct_bootstrap_total",
    "Times an empty accounting Redis was detected and rebuilt.",
)
