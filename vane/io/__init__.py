"""Sources and sinks: resolving input files, writing output files, committing atomically."""
