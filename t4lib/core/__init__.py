"""The ground floor: the kernel build cache, hardware facts, telemetry, the timing harness and
results with their provenance. Imports nothing else of t4lib."""
