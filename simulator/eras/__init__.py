"""One module per era, each an `simulator.era.EraSimulation` that the one runner plays."""
