"""The emulated-cluster demo: the paper's worked examples on real packets.

`leveller demo` builds a one-switch testbed, starts the SDN app, a controller
per policy run and an agent per host, runs emulated training jobs, measures R
from their iteration logs and writes a table, JSON and timeline plots.
Pure parts: scenario (what runs where), measure (R from log lines), results
(tables, JSON); the rest drives processes (cluster, live, orchestrate, plots).
"""
