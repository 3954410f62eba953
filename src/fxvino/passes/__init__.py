"""FX graph passes over the captured ATen graphs, before partitioning."""
