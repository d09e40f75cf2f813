"""Neural-network library: modules, layers, losses, initialisers."""
