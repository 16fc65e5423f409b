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
