"""Search and tuning: the simulator-driven search, the tuning database, where candidates are
scored (serial, worker processes, Dask), value checks on sampled workgroups,
the schedules whose pins hipcc honours, and the tuning benchmarks."""
