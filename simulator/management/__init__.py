"""simulate_farm and seed_demo_farm: the commands Django finds in the simulator app."""
