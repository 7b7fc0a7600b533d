"""What every layer shares: settings, logging, source locations, the compile cache, counters."""
