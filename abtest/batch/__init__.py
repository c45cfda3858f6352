"""One pod batch: generator, watch timestamps, acceptance checks, cleanup."""
