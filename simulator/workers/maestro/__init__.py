"""The Maestro era's threads: Maestro's bookers, this service's releasers and Cuebot's, the
operator, and the faults that stop the world; Cuebot's own statements beside them."""
