"""The farm simulator: scheduler bookings and Cuebot releases under load and faults.

Kept out of the service's packages: it imports `accounting`, `shows` and `cuebot_acct` to play
both sides against them, and they never import it (.importlinter). It is a Django app only so
that Django finds its commands, `simulate_farm` and `seed_demo_farm`.

`runner.run_simulation` is the entry point (`notify_era.run_notify_simulation` for the NOTIFY
era, `maestro_era.run_maestro_simulation` for the Maestro era: its threads are `maestro_workers`,
their shared state `maestro_run`, and Cuebot's own statements, Maestro's booking chunk and
Cuebot's release, `maestro_cuebot`). The modules: `farm_builder` (farms as Cuebot writes them, with COPY: the demo farm, the
benches' and the tests'), `farm` (the simulated farm), `faults` (when each fault fires),
`workers` (bookers, releasers, the reconciler and the operator; each injects the faults due at
its own point, there is no fault thread),
`reconcile` (its calls into the service's reseeds and the reference design's reseed),
`pg_truth` and `invariants` (what must hold, counted apart from the service), `processes` (a
private Redis and the web server a run may start) and `report` (what was counted).
"""
