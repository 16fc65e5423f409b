"""The farm simulator: scheduler bookings and Cuebot releases under load and faults.

`manage.py simulate_farm` runs it; `runner.run_simulation` is the entry point. The
modules: `farm` (the simulated farm in PostgreSQL), `faults` (when each fault fires),
`workers` (bookers, releasers, reconciler, operator, chaos), `invariants` (what must
hold) and `report` (what was counted).
"""
