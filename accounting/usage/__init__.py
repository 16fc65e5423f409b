"""The accounting over time: Cuebot's subscriptions (booked against size and burst) and its
allocations' cores, as gauges read at each scrape of /metrics (gauges.py says why that way); and
the usage report, exact, from Cuebot's own history of runs (report.py, docs/usage.md)."""
