"""`leveller experiment recovery`: cumulative vs windowed vs decayed R after an unmanaged flow on the
live testbed (run); the simulated side is leveller.bench.recovery."""
