"""Every benchmark, each reachable as ``python -m t4lib bench NAME``. The library measures
nothing by itself: its modules are imported here, never the other way round."""
