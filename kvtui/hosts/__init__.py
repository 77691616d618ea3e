"""I/O layer: reaching hosts (SSH, this machine, the simulated demo host). Not part of the pure core."""
