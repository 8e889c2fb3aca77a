"""`leveller experiment chaos`: the demo's pair under `leveller` while OVS, the SDN app, the controller,
agents or controllers on etcd are killed and restarted on a schedule.

Pure: check (schedule and verdicts). run drives the runs and the faults, ha the etcd members and
their faults, wire the DSCP marks seen on the wire; table and plot show the results.
"""
