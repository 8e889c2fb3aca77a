"""Pure scheduling core: progress rate, ideal-time profiling, policies, K-level pruning, overlap.

No I/O, no clock reads, no module-level state: time is always an argument.
Callers (simulators, the live controller) import the submodules directly.
"""
