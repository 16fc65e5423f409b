"""The farm simulator: the scheduler's bookings and Cuebot's releases under load and faults, in
each of OpenCue's three eras, with the invariants that must hold (docs/simulator.md).

Kept out of the service's packages: it imports `accounting`, `shows` and `cuebot_acct` to play
both sides against them, and they never import it (.importlinter). It is a Django app only so
that Django finds its commands, `simulate_farm` and `seed_demo_farm`. `runner.run` plays any
era (`eras.redis`, `eras.notify`, `eras.maestro`) through the interface of `era`; the workers
are in `workers`, by era and role.
"""
