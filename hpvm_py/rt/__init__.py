"""Runtime: memory tracker, executor, streaming, worker pool, compile cache, devices."""
